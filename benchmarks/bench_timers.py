"""How late timed messages are delivered, and how long the broker's event loop is held meanwhile
(issue 22, point 3: 10,000 pending timers delivered p99 <= 100 ms late, no loop turn over 5 ms).

In process, no Ray: a real commit log (ASYNC_FLUSH, so parking 10,000 is quick), the broker's
`ScheduleService` on its own event loop with the system clock, and a probe task that times every
loop turn while the service moves the timers to their real queue. Each timer's lateness is the
time from its deliver time (TIMER_OUT_MS, at 1 ms precision here) to its record in the real queue.
Side by side in one run: 100 pending timers against 10,000 (spread over the same seconds).

    python benchmarks/bench_timers.py [--timers 10000] [--spread 5] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

from _common import print_machine, ratio_table

from namesrv.broker.schedule.delivery import parse_delay_levels, transform
from namesrv.broker.schedule.service import ScheduleService
from namesrv.common.clock import system_clock
from namesrv.common.stats import percentile
from namesrv.protocol.message.types import MessageInner
from namesrv.store.message_store import MessageStore
from namesrv.store.types import FlushDiskType

TOPIC = "TimedTopic"


async def _probe(turns: list[float], done: asyncio.Event) -> None:
    while not done.is_set():
        t = time.perf_counter()
        await asyncio.sleep(0)
        turns.append(time.perf_counter() - t)


async def run(timers: int, spread_s: float, root: Path) -> dict[str, float]:
    store = MessageStore(root / "store", FlushDiskType.ASYNC_FLUSH)
    levels = parse_delay_levels()
    delivered: list[int] = []

    async def deliver(msg: MessageInner) -> None:
        await store.put(msg)
        delivered.append(system_clock())

    service = ScheduleService(store, None, system_clock, levels, deliver)
    start = system_clock() + 1_000  # the first timer one second after parking starts
    for i in range(timers):
        due = start + int(spread_s * 1000 * i / max(1, timers - 1))
        await store.put(transform(MessageInner(TOPIC, 0, b"t", {"TIMER_DELIVER_MS": str(due)}), len(levels),
                                  system_clock(), timer_precision_ms=1))
    turns: list[float] = []
    done, closed = asyncio.Event(), False
    probe = asyncio.create_task(_probe(turns, done))
    runner = asyncio.create_task(service.run(lambda: closed))
    service.notify()
    deadline = time.monotonic() + spread_s + 30
    while service.delivered < timers and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    closed = True
    service.notify()
    await runner
    done.set()
    await probe
    store.close()
    late = [float(x) for x in service.lateness_ms]
    return {"delivered": float(service.delivered), "p50": percentile(late, 0.5) or 0.0,
            "p99": percentile(late, 0.99) or 0.0, "max_late": max(late, default=0.0),
            "turn_max": max(turns, default=0.0) * 1000, "turn_p99": (percentile(turns, 0.99) or 0.0) * 1000}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timers", type=int, default=10_000)
    parser.add_argument("--spread", type=float, default=5.0, help="seconds over which the timers fall due")
    parser.add_argument("--quick", action="store_true", help="2,000 timers over 2 s")
    args = parser.parse_args()
    if args.quick:
        args.timers, args.spread = 2_000, 2.0
    with tempfile.TemporaryDirectory(prefix="bench-timers-") as tmp:
        print_machine(tmp)
        few = asyncio.run(run(100, args.spread, Path(tmp) / "few"))
        many = asyncio.run(run(args.timers, args.spread, Path(tmp) / "many"))
    print(f"\n== {args.timers:,} timers over {args.spread:g} s (all delivered: "
          f"{int(many['delivered']) == args.timers}), against 100 over the same time")
    print(ratio_table([
        ("lateness p50 (ms)", few["p50"], many["p50"]),
        ("lateness p99 (ms)", few["p99"], many["p99"]),
        ("lateness max (ms)", few["max_late"], many["max_late"]),
        ("longest loop turn (ms)", few["turn_max"], many["turn_max"]),
        ("loop turn p99 (ms)", few["turn_p99"], many["turn_p99"]),
    ], "100 timers", f"{args.timers:,} timers"))


if __name__ == "__main__":
    main()
