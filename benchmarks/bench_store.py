"""The broker store's lifecycle costs (issue 23): restart time and a queue read at a random offset,
a large log vs a small one, and the longest event-loop turn while retention deletes a segment.

    bash run.sh bench bench_store [--small-mb 10] [--large-mb 1100] [--segment-mb 1024]
                                  [--queues 1000] [--quick]

Two stores in this process, on the real disk under the temp dir, written the way a broker writes
(`MessageStore.put`, group commit, ASYNC_FLUSH so the disk's fsync rate does not set the pace), with
1 KiB messages spread over `--queues` queues of one topic, in `--segment-mb` segments:
- restart after a clean close (checkpoint at the end), and after a crash (the same store reopened
  with 5,000 messages written past its last checkpoint, as a kill -9 leaves it): small vs large,
  the median of three each;
- a read of one message at a random offset of a random queue (`read_messages`, 5,000 reads per
  store after as many to warm up, the two stores read in turn): small vs large;
- retention: the large store's oldest segment deleted (forced, as above diskSpaceCleanForciblyRatio)
  by `CleanCommitLogService.run` in a worker thread while a 1 ms ticker on the event loop measures
  the longest turn; the same ticker alone for as long beforehand is the idle baseline.
`--quick`: 4 vs 40 MiB in 16 MiB segments, 1,000 queues. Targets (issue 23): restart ratio
<= 1.5, read ratio <= 1.2, longest loop turn during the clean-up <= 5 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import shutil
import tempfile
import time
from pathlib import Path
from statistics import median
from typing import Any

from _common import latency_ms, pct_ms, print_machine, ratio_table

from namesrv.common.clock import system_clock
from namesrv.protocol.message.types import MessageInner
from namesrv.store.message_store import MessageStore
from namesrv.store.retention import CleanCommitLogService, RetentionPolicy
from namesrv.store.types import FlushDiskType

TOPIC = "BenchStore"
BODY = 1024
CRASH_TAIL = 5_000
READS = 5_000


def open_store(path: Path, segment: int) -> MessageStore:
    return MessageStore(path, FlushDiskType.ASYNC_FLUSH, system_clock, segment_size=segment)


def write(store: MessageStore, n: int, queues: int, start: int = 0) -> None:
    body = b"b" * BODY

    async def go() -> None:
        for first in range(start, start + n, 1024):
            await asyncio.gather(*(store.put(MessageInner(TOPIC, i % queues, body, {"i": str(i)}))
                                   for i in range(first, min(first + 1024, start + n))))

    asyncio.run(go())


def build(path: Path, mb: int, segment: int, queues: int) -> int:
    """A store of at least `mb` MB (2**20 bytes), closed cleanly; returns its message count."""
    store = open_store(path, segment)
    n = 0
    t0 = time.perf_counter()
    while n < queues or store.size_bytes() < mb << 20:
        step = max(queues, ((mb << 20) - store.size_bytes()) // (BODY + 60) + 1)
        write(store, step, queues, start=n)
        n += step
    store.close()
    took = time.perf_counter() - t0
    print(f"  built {path.name}: {n:,} messages, {store.size_bytes() / 1e6:,.0f} MB in "
          f"{len(list((path / 'commitlog').iterdir()))} segment(s), {took:.1f} s")
    return n


CPU: dict[Path, list[float]] = {}
"""The restarting thread's CPU time per store (ms): the same figure with the shared machine's noise
(other processes taking the cores) left out."""


def restart_ms(path: Path, segment: int) -> tuple[float, MessageStore]:
    t0, c0 = time.perf_counter(), time.thread_time()
    store = open_store(path, segment)
    CPU.setdefault(path, []).append((time.thread_time() - c0) * 1000)
    return (time.perf_counter() - t0) * 1000, store


def crash_restart_ms(path: Path, segment: int, queues: int, n: int) -> float:
    store = open_store(path, segment)
    write(store, CRASH_TAIL, queues, start=n)  # past the checkpoint the open wrote nothing to
    store.flush()
    took, again = restart_ms(path, segment)  # as after a kill -9: no close, no checkpoint for the tail
    assert again.recovery.records == CRASH_TAIL, again.recovery
    again.close()
    store.close()
    return took


def random_reads(stores: list[MessageStore], queues: int, rng: random.Random) -> list[list[float]]:
    """One message read at a random offset of a random queue, taking the stores in turn (so a
    noisy moment of the machine falls on both); the first half of the reads warms up."""
    lat: list[list[float]] = [[] for _ in stores]
    for k in range(READS * 2):
        for store, out in zip(stores, lat, strict=True):
            q = rng.randrange(queues)
            offset = rng.randrange(store.min_offset(TOPIC, q), store.max_offset(TOPIC, q))
            t0 = time.perf_counter()
            got = store.read_messages(TOPIC, q, offset, 1)
            took = time.perf_counter() - t0
            assert got.messages and got.messages[0].queue_offset == offset
            if k >= READS:
                out.append(took)
    return lat


async def ticking(seconds: float | None, work: Any = None) -> tuple[list[float], Any]:
    """A 1 ms ticker's loop-turn overshoots, for `seconds` or while `work` runs in a thread."""
    gaps: list[float] = []
    stop = asyncio.Event()

    async def ticker() -> None:
        last = time.perf_counter()
        while not stop.is_set():
            await asyncio.sleep(0.001)
            now = time.perf_counter()
            gaps.append(max(0.0, now - last - 0.001))
            last = now

    task = asyncio.create_task(ticker())
    result = None
    if work is not None:
        result = await asyncio.to_thread(work)
    else:
        await asyncio.sleep(seconds or 0)
    stop.set()
    await task
    return gaps, result


def clean_one_segment(path: Path, segment: int) -> dict[str, Any]:
    store = open_store(path, segment)
    cleaner = CleanCommitLogService(store, RetentionPolicy(delete_file_batch_max=1), lambda p: 0.86)
    t0 = time.perf_counter()
    busy, report = asyncio.run(ticking(None, cleaner.run))
    took = time.perf_counter() - t0
    idle, _ = asyncio.run(ticking(max(took, 0.5)))
    out = {"busy": busy, "idle": idle, "took_ms": took * 1000, "deleted": report.deleted_segments,
           "queues": len(store.queues())}
    store.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--small-mb", type=int, default=10)
    parser.add_argument("--large-mb", type=int, default=1100,
                        help="MiB; above one segment, so retention has one to delete")
    parser.add_argument("--segment-mb", type=int, default=1024)
    parser.add_argument("--queues", type=int, default=1000)
    parser.add_argument("--quick", action="store_true", help="4 MB vs 40 MB in 16 MiB segments")
    args = parser.parse_args()
    if args.quick:
        args.small_mb, args.large_mb, args.segment_mb = 4, 40, 16
    segment = args.segment_mb << 20
    root = Path(tempfile.mkdtemp(prefix="bench-store-"))
    try:
        print_machine(str(root))
        print(f"== {args.small_mb} MB vs {args.large_mb} MB of log, {args.queues} queues, {BODY} B bodies, "
              f"{args.segment_mb} MiB segments")
        small, large = root / "small", root / "large"
        counts = {p: build(p, mb, segment, args.queues) for p, mb in ((small, args.small_mb), (large, args.large_mb))}
        clean: dict[Path, list[float]] = {small: [], large: []}
        crash: dict[Path, list[float]] = {small: [], large: []}
        for _ in range(3):  # in turn, the median of three
            for p in (small, large):
                took, store = restart_ms(p, segment)
                clean[p].append(took)
                store.close()
        clean_cpu = {p: list(CPU.pop(p)) for p in (small, large)}
        for _ in range(3):
            for p in (small, large):
                crash[p].append(crash_restart_ms(p, segment, args.queues, counts[p]))
                counts[p] += CRASH_TAIL
        crash_cpu = {p: list(CPU.pop(p)) for p in (small, large)}
        opened = [open_store(p, segment) for p in (small, large)]
        read_lat = random_reads(opened, args.queues, random.Random(23))
        reads = {small: read_lat[0], large: read_lat[1]}
        for store in opened:
            store.close()
        for p in (small, large):
            print(f"  {p.name}: random read {latency_ms(reads[p])}")
        retention = clean_one_segment(large, segment)
        print(f"== retention: deleted segment(s) {retention['deleted']} of {args.segment_mb} MiB and corrected "
              f"{retention['queues']} queues in {retention['took_ms']:.1f} ms (worker thread)")
        print(f"   longest loop turn overshoot: during {max(retention['busy'], default=0) * 1000:.2f} ms, "
              f"idle {max(retention['idle'], default=0) * 1000:.2f} ms")
        print(ratio_table([
            ("restart after a clean close, median of 3 (ms)", median(clean[small]), median(clean[large])),
            ("  the same, CPU time of the restarting thread (ms)", median(clean_cpu[small]),
             median(clean_cpu[large])),
            (f"restart after a crash, {CRASH_TAIL:,} msgs past the checkpoint (ms)", median(crash[small]),
             median(crash[large])),
            ("  the same, CPU time of the restarting thread (ms)", median(crash_cpu[small]),
             median(crash_cpu[large])),
            ("random queue read p50 (us)", pct_ms(reads[small], 0.5) * 1000, pct_ms(reads[large], 0.5) * 1000),
            ("random queue read p99 (us)", pct_ms(reads[small], 0.99) * 1000, pct_ms(reads[large], 0.99) * 1000),
        ], f"{args.small_mb} MB", f"{args.large_mb} MB"))
        print(ratio_table([
            ("loop turn overshoot p99 (ms)", pct_ms(retention["idle"], 0.99), pct_ms(retention["busy"], 0.99)),
            ("loop turn overshoot max (ms)", max(retention["idle"], default=0.0) * 1000,
             max(retention["busy"], default=0.0) * 1000),
        ], "idle", "deleting a segment"))
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
