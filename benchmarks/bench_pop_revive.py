"""Pop consumption in the broker: how late un-acked messages are revived, and what pop and ack cost
(issue 35: 10,000 un-acked messages revived p99 <= 100 ms after their invisible time lapses).

In process, no Ray: the broker's request processor on a real store (SYNC_FLUSH, the broker's
default) and a real pop journal (fsynced, group commit) with the system clock. N messages are sent
to 8 queues and popped 32 at a time with one invisible time, every tenth pop's messages acked as
it comes, while the revive service runs on the loop (with a probe of the loop's lag) until every
un-acked message is in the retry topic. Lateness: from a message's due time (popTime +
invisibleTime) to its copy in the retry topic being stored. Two runs, each on a store of its own:
popping as fast as the broker pops (so messages fall due at its own pop rate, a revive storm: the
copies go through the send path and cost more than the pops) and popping at `--pace` messages/s.

    python benchmarks/bench_pop_revive.py [--messages 10000] [--invisible-ms 2000] [--pace 5000] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import print_machine, pure_broker

from namesrv.broker.processor.dispatcher import BrokerProcessor
from namesrv.common.stats import percentile
from namesrv.protocol.codes import BrokerRequestCode as Code
from namesrv.protocol.message.types import MessageInner
from namesrv.remoting.command import RemotingRequest, RemotingResponse
from namesrv.remoting.pipeline import RequestContext

TOPIC, GROUP, QUEUES = "PopBench", "PopBenchGroup", 8


async def _call(p: BrokerProcessor, code: int, ext: dict[str, Any]) -> RemotingResponse:
    answer = p.process(RemotingRequest(code, {k: str(v) for k, v in ext.items()}), RequestContext())
    return answer if isinstance(answer, RemotingResponse) else await answer


PROBE_S = 0.005


async def _probe(turns: list[float], done: asyncio.Event) -> None:
    """The loop's lag: how much later than asked a 5 ms sleep ends. (A probe yielding with sleep(0)
    would keep the loop busy and take the GIL from the revive's reader thread: it measured itself.)"""
    while not done.is_set():
        t = time.perf_counter()
        await asyncio.sleep(PROBE_S)
        turns.append(max(0.0, time.perf_counter() - t - PROBE_S))


async def run(messages: int, invisible_ms: int, root: Path, pace: float = 0.0) -> dict[str, float]:
    """One run on a store of its own under `root`; `pace`: messages popped per second (0: as fast
    as the broker pops, so they fall due at its own pop rate)."""
    p = pure_broker(root, TOPIC, QUEUES, pop_journal=root / "pop.journal")
    store = p.store
    for i in range(0, messages, 64):
        await asyncio.gather(*(p.send([MessageInner(TOPIC, j % QUEUES, b"x" * 100)], TOPIC, QUEUES)
                               for j in range(i, min(i + 64, messages))))
    pop_ext = {"consumerGroup": GROUP, "topic": TOPIC, "queueId": -1, "maxMsgNums": 32,
               "invisibleTime": invisible_ms, "pollTime": 0, "bornTime": 0, "initMode": 0}
    turns: list[float] = []
    done, closed = asyncio.Event(), False
    probe = asyncio.create_task(_probe(turns, done))
    runner = asyncio.create_task(p.revive.run(lambda: closed))  # running all along, as in the broker
    started = time.perf_counter()
    popped: list[Any] = []
    acked = 0
    ack_s = 0.0
    for pops in itertools.count():
        if len(popped) >= messages:
            break
        answer = await _call(p, Code.POP_MESSAGE, pop_ext)
        if not answer.payload:
            break
        popped.extend(answer.payload.messages)
        if pops % 10 == 0:  # every tenth pop's messages acked at once (concurrently): the rest is revived
            t = time.perf_counter()
            await asyncio.gather(*(_call(p, Code.ACK_MESSAGE, {
                "consumerGroup": GROUP, "topic": TOPIC, "queueId": m.queue_id, "offset": m.queue_offset,
                "extraInfo": m.properties["POP_CK"]}) for m in answer.payload.messages))
            ack_s += time.perf_counter() - t
            acked += len(answer.payload.messages)
        if pace:
            await asyncio.sleep(max(0.0, started + len(popped) / pace - time.perf_counter()))
    pop_s = time.perf_counter() - started - ack_s
    want = len(popped) - acked
    deadline = time.monotonic() + invisible_ms / 1000 + pop_s + 60
    while p.revive.revived < want and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    closed = True
    p.revive.notify()
    await runner
    done.set()
    await probe
    p.pop_state.close()
    store.close()
    late = [float(x) for x in p.revive.lateness_ms]
    return {"pace": pace, "popped": len(popped), "pops_per_s": len(popped) / pop_s,
            "acks_per_s": acked / max(ack_s, 1e-9),
            "revived": p.revive.revived, "want": want, "p50": percentile(late, 0.5) or 0.0,
            "p99": percentile(late, 0.99) or 0.0, "max_late": max(late, default=0.0),
            "turn_max": max(turns, default=0.0) * 1000, "turn_p99": (percentile(turns, 0.99) or 0.0) * 1000}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument("--invisible-ms", type=int, default=2_000)
    parser.add_argument("--pace", type=float, default=5_000,
                        help="the paced run's pop rate, messages/s (the other run pops as fast as it can)")
    parser.add_argument("--quick", action="store_true", help="2,000 messages")
    args = parser.parse_args()
    if args.quick:
        args.messages = 2_000
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-pop-") as tmp:
        print_machine(tmp, fsync=True)
        for i, pace in enumerate((0.0, args.pace)):
            results.append(asyncio.run(run(args.messages, args.invisible_ms, Path(tmp) / str(i), pace)))
    for r in results:
        how = f"paced at {r['pace']:,.0f} msg/s" if r["pace"] else "as fast as the broker pops"
        print(f"\n== {args.messages:,} messages popped {how} ({r['popped']:,}, {r['pops_per_s']:,.0f} msg/s in pops of "
              f"32), a tenth acked ({r['acks_per_s']:,.0f} acks/s, concurrent, journal group commit)")
        print(f"revived {r['revived']:,} of {r['want']:,} into the retry topic after {args.invisible_ms} ms invisible")
        print(f"revive lateness p50 {r['p50']:.1f} ms, p99 {r['p99']:.1f} ms, max {r['max_late']:.1f} ms; "
              f"loop lag p99 {r['turn_p99']:.2f} ms, max {r['turn_max']:.1f} ms")
    burst, paced = results
    print(f"\nside by side: acks {burst['acks_per_s'] / max(burst['pops_per_s'], 1e-9):.2f}x the pop rate "
          f"(messages/s); revive lateness p99 {burst['p99'] / args.invisible_ms:.2f}x the invisible time when they "
          f"fall due at the broker's pop rate, {paced['p99'] / args.invisible_ms:.3f}x at {args.pace:,.0f} msg/s")


if __name__ == "__main__":
    main()
