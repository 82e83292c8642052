"""Query by key among N messages (issue 23: among 1M messages, p99 <= 20 ms), small N against large N
side by side.

In process, no Ray: a real commit log (ASYNC_FLUSH) filled through its group-commit batch writer
(`_write_batch`, what `put`'s writer runs per batch of 1,024), every message with a unique key
(UNIQ_KEY) and two KEYS (`order-<i>` and one of 100 shared `cust-<j>`). Then random lookups, as
QUERY_MESSAGE runs them off the broker's loop (`MessageStore.query_message`: index walk, then each
message read from the log and checked): by a unique key, by an order key (one match) and by a
shared customer key (maxNum 32 of N/100 matches). Also timed: the index walk alone, what indexing
adds to a write (dispatch into a fresh index, up to 200,000 records), the process's
anonymous RSS growth while filling (the index and the consume queues are files, not dicts), the
index files' disk blocks, and a restart: the index alone (reopened from its checkpoint, nothing
re-indexed), then log + index (the store's recovery from its checkpoint).

    python benchmarks/bench_index.py [--messages 1000000] [--small 10000] [--queries 2000] [--quick]
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from pathlib import Path

import psutil
from _common import print_machine, ratio_table

from namesrv.common.stats import percentile
from namesrv.protocol.message.types import MessageInner
from namesrv.store.index.index_service import IndexService
from namesrv.store.message_store import MessageStore
from namesrv.store.types import FlushDiskType

TOPIC = "IndexedTopic"
BATCH = 1024
FOREVER = 2**63 - 1


def anon_rss() -> int:
    """Anonymous resident memory (heap), without the mapped index pages the page cache holds."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) * 1024
    return psutil.Process().memory_info().rss


def fill(root: Path, n: int) -> tuple[MessageStore, float, float]:
    """A log of `n` messages; (log, seconds to fill, anonymous RSS growth in MiB)."""
    rss0 = anon_rss()
    log = MessageStore(root, FlushDiskType.ASYNC_FLUSH)
    started = time.perf_counter()
    for first in range(0, n, BATCH):
        batch = [MessageInner(TOPIC, i % 8, b"x" * 64, {"KEYS": f"order-{i} cust-{i % 100}"}, f"UNIQ{i:012d}")
                 for i in range(first, min(n, first + BATCH))]
        results = log._write_batch(batch)
        assert not any(isinstance(r, Exception) for r in results), results[:1]
    log.flush()
    log.index.flush()
    return log, time.perf_counter() - started, (anon_rss() - rss0) / 2**20


def dispatch_us(root: Path, n: int) -> float:
    """What indexing adds to a write: µs per record (a unique key and two KEYS) into a fresh index."""
    index = IndexService(root / "dispatch")
    records = [[TOPIC, i % 8, i, 1_700_000_000_000 + i, f"UNIQ{i:012d}", {"KEYS": f"order-{i} cust-{i % 100}"}, b"",
                0, 0] for i in range(n)]
    started = time.perf_counter()
    for i, fields in enumerate(records):
        index.dispatch(fields, i * 128, 128)
    spent = time.perf_counter() - started
    index.close()
    return spent / n * 1e6


def timed(fn: object, keys: list[str], max_num: int, want: int | None) -> list[float]:
    out = []
    for key in keys:
        t = time.perf_counter()
        found = fn(TOPIC, key, max_num, 0, FOREVER)  # type: ignore[operator]
        out.append(time.perf_counter() - t)
        if want is not None:
            assert len(found) == want, (key, len(found))
    return out


def measure(root: Path, n: int, queries: int) -> dict[str, float]:
    dispatch = dispatch_us(root, min(n, 200_000))
    log, fill_s, rss_mib = fill(root, n)
    rng = random.Random(n)
    picks = [rng.randrange(n) for _ in range(queries)]
    uniq = timed(log.query_message, [f"UNIQ{i:012d}" for i in picks], 32, 1)
    order = timed(log.query_message, [f"order-{i}" for i in picks], 32, 1)
    shared = timed(log.query_message, [f"cust-{i % 100}" for i in picks], 32, min(32, n // 100))
    walk = timed(lambda t, k, m, b, e: log.index.query(t, k, m, b, e), [f"order-{i}" for i in picks], 32, 1)
    blocks = sum(p.stat().st_blocks * 512 for p in (root / "index").glob("*.idx")) / 2**20
    log.close()
    t = time.perf_counter()
    IndexService(root / "index").close()
    index_open_s = time.perf_counter() - t
    t = time.perf_counter()
    again = MessageStore(root, FlushDiskType.ASYNC_FLUSH)
    reopen_s = time.perf_counter() - t
    assert not again.index.recovery.rolled_back and again.query_message(TOPIC, "order-0", 1, 0, FOREVER)
    again.close()

    def pct(xs: list[float], p: float) -> float:
        return (percentile(xs, p) or 0.0) * 1000

    return {"fill_s": fill_s, "fill_rate": n / fill_s, "rss": rss_mib, "blocks": blocks, "reopen_s": reopen_s,
            "index_open_s": index_open_s, "dispatch_us": dispatch,
            "uniq_p50": pct(uniq, 0.5), "uniq_p99": pct(uniq, 0.99), "order_p50": pct(order, 0.5),
            "order_p99": pct(order, 0.99), "shared_p50": pct(shared, 0.5), "shared_p99": pct(shared, 0.99),
            "walk_p50": pct(walk, 0.5), "walk_p99": pct(walk, 0.99)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--small", type=int, default=10_000)
    parser.add_argument("--queries", type=int, default=2_000)
    parser.add_argument("--quick", action="store_true", help="100,000 vs 1,000 messages, 500 queries")
    args = parser.parse_args()
    if args.quick:
        args.messages, args.small, args.queries = 100_000, 1_000, 500
    with tempfile.TemporaryDirectory(prefix="bench-index-") as tmp:
        print_machine(tmp)
        small = measure(Path(tmp) / "small", args.small, args.queries)
        large = measure(Path(tmp) / "large", args.messages, args.queries)
    print(f"\n== query by key: {args.messages:,} messages against {args.small:,}, {args.queries:,} random "
          f"lookups each (in process, store.query_message: index walk + message reads)")
    print(ratio_table([
        ("by unique key p50 (ms)", small["uniq_p50"], large["uniq_p50"]),
        ("by unique key p99 (ms)", small["uniq_p99"], large["uniq_p99"]),
        ("by order key p50 (ms)", small["order_p50"], large["order_p50"]),
        ("by order key p99 (ms)", small["order_p99"], large["order_p99"]),
        ("shared key, 32 of N/100, p50 (ms)", small["shared_p50"], large["shared_p50"]),
        ("shared key, 32 of N/100, p99 (ms)", small["shared_p99"], large["shared_p99"]),
        ("index walk alone p50 (ms)", small["walk_p50"], large["walk_p50"]),
        ("index walk alone p99 (ms)", small["walk_p99"], large["walk_p99"]),
        ("fill rate (msg/s, log + index)", small["fill_rate"], large["fill_rate"]),
        ("indexing per message (µs, 3 keys)", small["dispatch_us"], large["dispatch_us"]),
        ("anonymous RSS growth while filling (MiB)", small["rss"], large["rss"]),
        ("index files on disk (MiB)", small["blocks"], large["blocks"]),
        ("reopen the index alone (s)", small["index_open_s"], large["index_open_s"]),
        ("reopen log + index (s; from the store's checkpoint)", small["reopen_s"], large["reopen_s"]),
    ], f"{args.small:,} msgs", f"{args.messages:,} msgs", digits=3))


if __name__ == "__main__":
    main()
