"""Does recording and collecting route snapshots stall a NameServer's request handling?

Two NameServer actors in one run, same tables (B brokers x T topics registered from the driver),
one with snapshots off and one snapshotting every `--interval` s while a collector drains it every
`--drain` s. Route-query latency (p50/p99/max) from concurrent callers on each, side by side, plus
the cost of one snapshot of that size.

    bash run.sh bench bench_snapshot [--brokers 20 --topics 2000 --seconds 8] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import threading
import time
import uuid

import ray
from _common import pct_ms, print_machine, ratio_table, ray_init

from actors.namesrv.actor import NameServerActor
from namesrv.protocol.models import TopicConfigSerializeWrapper
from namesrv.protocol.msgpack_codec import encode_body
from namesrv.routeinfo.config import NamesrvConfig
from namesrv.routeinfo.route_info_manager import RouteInfoManager
from namesrv.routeinfo.snapshot import snapshot_record_batch


def register_body(topics: list[str]) -> bytes:
    table = {t: {"topicName": t, "readQueueNums": 4, "writeQueueNums": 4, "perm": 6} for t in topics}
    return encode_body({"topicConfigSerializeWrapper": {"topicConfigTable": table,
                                                        "dataVersion": {"timestamp": 1, "counter": 1}}})


async def hammer(ns: object, topics: list[str], seconds: float, callers: int) -> list[float]:
    lat: list[float] = []
    end = time.perf_counter() + seconds

    async def caller(i: int) -> None:
        n = i
        while time.perf_counter() < end:
            t0 = time.perf_counter()
            resp = await ns.get_routeinfo_by_topic.remote(topic=topics[n % len(topics)])
            lat.append(time.perf_counter() - t0)
            assert resp.ok, resp.remark
            n += callers

    await asyncio.gather(*(caller(i) for i in range(callers)))
    return lat


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--brokers", type=int, default=20)
    ap.add_argument("--topics", type=int, default=2000, help="topics per broker (all distinct)")
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--warmup", type=float, default=1.0, help="seconds of route queries before the first measurement")
    ap.add_argument("--callers", type=int, default=4)
    ap.add_argument("--interval", type=float, default=0.5, help="snapshot interval of the snapshotting NameServer")
    ap.add_argument("--drain", type=float, default=1.0, help="collector drains every N s")
    ap.add_argument("--quick", action="store_true",
                    help="4 brokers x 500 topics, 0.5 s per measurement after 0.25 s warm-up, a snapshot every "
                         "0.2 s drained every 0.25 s")
    args = ap.parse_args()
    if args.quick:
        args.brokers, args.topics, args.seconds, args.warmup = 4, 500, 0.5, 0.25
        args.interval, args.drain = 0.2, 0.25

    ray_init(f"bench-snapshot-{uuid.uuid4().hex[:8]}")
    print_machine()
    rows = args.brokers * args.topics
    print(f"tables: {args.brokers} brokers x {args.topics} topics = {rows:,} snapshot rows per snapshot")

    # the cost of one snapshot of this size, in process
    rim = RouteInfoManager()
    for b in range(args.brokers):
        topics = [f"T{b}_{i}" for i in range(args.topics)]
        wrapper = TopicConfigSerializeWrapper.model_validate(
            {"topicConfigTable": {t: {"topicName": t, "readQueueNums": 4, "writeQueueNums": 4, "perm": 6}
                                  for t in topics},
             "dataVersion": {"timestamp": 1, "counter": 1}})
        rim.register_broker("c", f"b{b}-0", f"b{b}", 0, "", wrapper, [])
    snapshot_record_batch(rim, "warm")
    costs = []
    for _ in range(5):
        t0 = time.perf_counter()
        snapshot_record_batch(rim, "x")
        costs.append((time.perf_counter() - t0) * 1000)
    print(f"one snapshot in process: median {statistics.median(costs):.1f} ms ({rows:,} rows)")

    cls = ray.remote(NameServerActor).options(num_cpus=0)
    plain = cls.remote("plain", NamesrvConfig(snapshot_interval_ms=0, not_ready_window_ms=0,
                                              broker_channel_expired_time_ms=3_600_000))
    snap = cls.remote("snap", NamesrvConfig(snapshot_interval_ms=int(args.interval * 1000), not_ready_window_ms=0,
                                            snapshot_on_change=False, broker_channel_expired_time_ms=3_600_000))
    all_topics: list[str] = []
    for b in range(args.brokers):
        topics = [f"T{b}_{i}" for i in range(args.topics)]
        all_topics += topics
        body = register_body(topics)
        ident = {"clusterName": "c", "brokerAddr": f"b{b}-0", "brokerName": f"b{b}", "brokerId": 0}
        for ns in (plain, snap):
            assert ray.get(ns.register_broker.remote(body, **ident)).ok

    stop = threading.Event()
    drained = {"rows": 0, "rounds": 0, "ms": []}

    def collector() -> None:
        while not stop.wait(args.drain):
            t0 = time.perf_counter()
            batches = ray.get(snap.drain_snapshots.remote(take_now=False))
            drained["ms"].append((time.perf_counter() - t0) * 1000)
            drained["rows"] += sum(b.num_rows for b in batches)
            drained["rounds"] += 1

    async def run() -> tuple[list[float], list[float]]:
        await hammer(plain, all_topics, args.warmup, args.callers)
        base = await hammer(plain, all_topics, args.seconds, args.callers)
        t = threading.Thread(target=collector, daemon=True)
        t.start()
        with_snap = await hammer(snap, all_topics, args.seconds, args.callers)
        stop.set()
        t.join()
        return base, with_snap

    base, with_snap = asyncio.run(run())
    print(f"\nroute queries, {args.callers} concurrent callers, {args.seconds:g} s each")
    on = f"snapshot every {args.interval}s + drain"
    print(ratio_table([
        ("calls/s", len(base) / args.seconds, len(with_snap) / args.seconds),
        ("p50 ms", pct_ms(base, 0.5), pct_ms(with_snap, 0.5)),
        ("p99 ms", pct_ms(base, 0.99), pct_ms(with_snap, 0.99)),
        ("max ms", max(base) * 1000, max(with_snap) * 1000),
    ], "snapshots off", on))
    if drained["ms"]:
        print(f"collector: {drained['rounds']} drains, {drained['rows']:,} rows, "
              f"median drain call {statistics.median(drained['ms']):.0f} ms")
    ray.shutdown()


if __name__ == "__main__":
    main()
