"""Memory per queue entry of a NameServer's route tables, small vs large, side by side (issue 24).

Each scale runs in a child process of its own (so its RSS is its own): B broker groups (masters)
each register the same T topics through `RouteInfoManager.register_broker` (B x T queue entries),
then every topic's route is asked for once (so every assembled route is cached, as under a real
client load), then 20,000 random route lookups are timed. Figures per scale: RSS growth per queue
entry with the tables alone and with every route cached, the process's RSS, and route lookup
p50/p99 (no tracemalloc, so the timings stay real).

Run: `bash run.sh bench bench_route_memory [--quick]`: 30 x 10,000 vs 300 x 10,000 entries
(`--quick`: 30 x 1,000 vs 300 x 1,000).
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import subprocess
import sys
import time
from pathlib import Path

import psutil
from _common import print_machine

from namesrv.common.stats import percentile
from namesrv.protocol.models import DataVersion, TopicConfig, TopicConfigSerializeWrapper
from namesrv.routeinfo.route_info_manager import RouteInfoManager


def _rss() -> int:
    gc.collect()
    return int(psutil.Process().memory_info().rss)


def child(brokers: int, topics: int) -> dict[str, float]:
    table = {f"Topic{j:06d}": TopicConfig(topic_name=f"Topic{j:06d}", read_queue_nums=8, write_queue_nums=8)
             for j in range(topics)}
    names = list(table)
    start = _rss()
    rim = RouteInfoManager()
    for i in range(brokers):
        wrapper = TopicConfigSerializeWrapper(topic_config_table=table, data_version=DataVersion())
        rim.register_broker("C", f"10.0.{i // 250}.{i % 250 + 1}:10911", f"broker-{i:03d}", 0, "", wrapper,
                            [], None, None)
    tables = _rss()
    for name in names:
        rim.pickup_topic_route_data(name)
    routes = _rss()
    rng = random.Random(7)
    asks = [rng.choice(names) for _ in range(20_000)]
    pickup = rim.pickup_topic_route_data
    samples = []
    gc.disable()
    for name in asks:
        t0 = time.perf_counter_ns()
        pickup(name)
        samples.append(time.perf_counter_ns() - t0)
    gc.enable()
    entries = brokers * topics
    assert sum(len(m) for m in rim.topic_queue_table.values()) == entries
    return {"entries": entries, "tables_b": (tables - start) / entries, "routes_b": (routes - start) / entries,
            "rss_mib": routes / 2**20, "p50_us": (percentile(samples, 0.5) or 0) / 1000,
            "p99_us": (percentile(samples, 0.99) or 0) / 1000}


def run_child(brokers: int, topics: int) -> dict[str, float]:
    out = subprocess.run([sys.executable, str(Path(__file__)), "--child", str(brokers), str(topics)],
                         check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="1,000 topics instead of 10,000")
    parser.add_argument("--child", nargs=2, type=int, metavar=("BROKERS", "TOPICS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(*args.child)))
        return
    print_machine()
    topics = 1_000 if args.quick else 10_000
    small, large = run_child(30, topics), run_child(300, topics)
    rows = [("RSS growth per queue entry, tables only (B)", "tables_b"),
            ("RSS growth per queue entry, every route cached too (B)", "routes_b"),
            ("process RSS at the end (MiB)", "rss_mib"),
            ("route lookup, random topic, p50 (µs)", "p50_us"),
            ("route lookup, random topic, p99 (µs)", "p99_us")]
    head = f"{'figure':<58}{f'30 x {topics:,}':>16}{f'300 x {topics:,}':>18}{'large/small':>13}"
    print(head)
    print("-" * len(head))
    for label, key in rows:
        a, b = small[key], large[key]
        print(f"{label:<58}{a:>16.2f}{b:>18.2f}{b / a if a else float('nan'):>12.2f}x")
    print(f"queue entries: {int(small['entries']):,} vs {int(large['entries']):,}")


if __name__ == "__main__":
    main()
