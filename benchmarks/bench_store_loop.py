"""Does a SYNC_FLUSH broker's event loop wait on fsync? (issue 22, point 8)

    bash run.sh bench bench_store_loop [--seconds 10] [--senders 16] [--quick]

One broker store in this process, as a broker runs it (no Ray, no sockets: the commit log and the
processor on one asyncio loop, the writes and fsyncs in the group-commit worker thread), on the
real disk under the temp dir. `--senders` tasks send 128-byte messages back to back through
`BrokerProcessor.send` (SYNC_FLUSH with group commit: acknowledged after the fsync covering them)
for `--seconds`. Meanwhile, on the same loop, a reader calls what a broker's loop reads from the
store every millisecond, in turn: the max offset (GET_MAX_OFFSET, pull), the log size and the queue
table (metrics), search by time, and the runtime info (GET_BROKER_RUNTIME_INFO); each call is
timed (the reader's wait). A ticker sleeping 1 ms measures the longest loop stall it sees.

Then the same reader and ticker run for `--idle-seconds` with no sender: the idle baseline, on the
same loop, disk and store contents. `--quick`: 3 s under load, then 1.5 s idle.

Printed: the machine (with the disk's fsync latency), the send rate, the reader-wait distribution
per reader and overall (target: max <= 5 ms), the ticker's longest stall, and the reader's wait
and the ticker's stall under load side by side with idle. The numbers before and after the change
are in the commit message of point 8.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _common import latency_ms, pct_ms, print_machine, pure_broker, ratio_table

from namesrv.broker.processor.dispatcher import BrokerProcessor
from namesrv.protocol.message.types import MessageInner

TOPIC = "BenchLoop"
QUEUES = 4


async def run(processor: BrokerProcessor, seconds: float, senders: int) -> dict[str, Any]:
    store = processor.store
    deadline = time.perf_counter() + seconds
    sent = 0
    waits: dict[str, list[float]] = defaultdict(list)
    stalls: list[float] = []
    now_ms = int(time.time() * 1000)
    readers: list[tuple[str, Callable[[], object]]] = [
        ("max_offset", lambda: store.max_offset(TOPIC, 0)),
        ("size_bytes", store.size_bytes),
        ("queues", store.queues),
        ("search_by_time", lambda: store.search_offset_by_timestamp(TOPIC, 1, now_ms)),
        ("runtime_info", processor.runtime_info),
    ]

    async def sender(n: int) -> None:
        nonlocal sent
        body = bytes(128)
        while time.perf_counter() < deadline:
            await processor.send([MessageInner(TOPIC, n % QUEUES, body, {"i": str(sent)})], "TBW102", QUEUES)
            sent += 1

    async def reader() -> None:
        i = 0
        while time.perf_counter() < deadline:
            name, call = readers[i % len(readers)]
            t0 = time.perf_counter()
            call()
            waits[name].append(time.perf_counter() - t0)
            i += 1
            await asyncio.sleep(0.001)

    async def ticker() -> None:
        while time.perf_counter() < deadline:
            t0 = time.perf_counter()
            await asyncio.sleep(0.001)
            stalls.append(max(0.0, time.perf_counter() - t0 - 0.001))

    started = time.perf_counter()
    await asyncio.gather(ticker(), reader(), *(sender(n) for n in range(senders)))
    elapsed = time.perf_counter() - started
    return {"sent": sent, "elapsed": elapsed, "waits": waits, "stalls": stalls, "fsyncs": store.commit_log.fsyncs}


async def load_then_idle(processor: BrokerProcessor,
                         args: argparse.Namespace) -> tuple[dict[str, Any], dict[str, Any]]:
    """The send load, then the same reader and ticker with no sender on the store it left behind."""
    loaded = await run(processor, args.seconds, args.senders)
    return loaded, await run(processor, args.idle_seconds, 0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--senders", type=int, default=16)
    parser.add_argument("--idle-seconds", type=float, default=3.0, help="then the reader alone: the baseline")
    parser.add_argument("--quick", action="store_true", help="3 s under load, 1.5 s idle")
    args = parser.parse_args()
    if args.quick:
        args.seconds, args.idle_seconds = 3.0, 1.5
    root = Path(tempfile.mkdtemp(prefix="bench-store-loop-"))
    try:
        print_machine(str(root), fsync=True)
        processor = pure_broker(root, TOPIC, QUEUES)
        result, idle = asyncio.run(load_then_idle(processor, args))
        processor.store.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    waits: dict[str, list[float]] = result["waits"]
    every = [w for ws in waits.values() for w in ws]
    print(f"\n== SYNC_FLUSH send load: {args.senders} senders, {result['elapsed']:.1f} s")
    print(f"  sent       {result['sent']:,} messages, {result['sent'] / result['elapsed']:,.0f} msg/s, "
          f"{result['fsyncs']:,} fsyncs")
    print("== reader wait on the event loop (one call each ms, in turn)")
    for name, ws in waits.items():
        print(f"  {name:15s} {latency_ms(ws)}")
    print(f"  {'all':15s} {latency_ms(every)}")
    print(f"== longest loop stall seen by a 1 ms ticker: {max(result['stalls'], default=0) * 1000:.3f} ms "
          f"({latency_ms(result['stalls'])})")
    worst = max(every, default=0.0) * 1000
    idle_every = [w for ws in idle["waits"].values() for w in ws]
    print(f"\n== under load vs idle ({idle['elapsed']:.1f} s, no sender), ms")
    print(ratio_table([
        ("reader wait p50", pct_ms(idle_every, 0.5), pct_ms(every, 0.5)),
        ("reader wait p99", pct_ms(idle_every, 0.99), pct_ms(every, 0.99)),
        ("reader wait max", max(idle_every, default=0.0) * 1000, worst),
        ("ticker stall p99", pct_ms(idle["stalls"], 0.99), pct_ms(result["stalls"], 0.99)),
        ("ticker stall max", max(idle["stalls"], default=0.0) * 1000, max(result["stalls"], default=0.0) * 1000),
    ], "idle", "under load", digits=3))
    print(f"\nlongest reader wait {worst:.3f} ms: {'within' if worst <= 5 else 'OVER'} the 5 ms target")


if __name__ == "__main__":
    main()
