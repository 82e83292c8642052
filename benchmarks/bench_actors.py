"""Benchmarks of the NameServer and broker actors on a private local Ray.

1. Route query throughput and p50/p99 latency against ONE NameServer actor with 1, 4 and 16
   concurrent callers, side by side with a no-op async actor method measured in the same run
   (rounds interleaved so background load hits both alike). Callers are asyncio tasks in the driver,
   each awaiting one call at a time. The no-op returns a prebuilt response of the same size as the
   route answer, so the ratio isolates what the NameServer itself spends per query.
2. Failure detection: from `ray.kill` of a broker until EVERY NameServer has dropped it from the
   topic's route, timestamped in the driver as each NameServer's long-poll returns; the broker is
   restarted (and awaited on every NameServer) between kills.
3. Heartbeat size and cost at 10 vs 10,000 topics: the bytes a real broker sends (stats
   `last_body_bytes` of its full registration vs its lite heartbeat, which carries no topic table),
   and the NameServer's time per BROKER_HEARTBEAT and per full REGISTER_BROKER, both as an actor
   round trip from the driver and as server-side core time (the request processor in process);
   in `_actors_heartbeats`.

Usage: PYTHONPATH=. python benchmarks/bench_actors.py [--kills 20] [--duration 2] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from textwrap import indent
from typing import Any

import ray
from _actors_heartbeats import bench_heartbeats, print_heartbeats
from _common import latency_ms, pct_ms, print_machine, ratio_table, ray_init

from actors.deployment.launcher import Deployment
from actors.deployment.spec import BrokerSpec, ClusterSpec
from namesrv.protocol.models import TopicRouteData
from namesrv.remoting.command import RemotingResponse

TOPIC = "BenchTopic"


# ---------------------------------------------------------------------------- helpers
@ray.remote(num_cpus=0)
class NoopActor:
    """An async actor whose method does nothing but hand back a prebuilt response."""

    def __init__(self, response: RemotingResponse) -> None:
        self.response = response

    async def get_routeinfo_by_topic(self, **ext: Any) -> RemotingResponse:
        return self.response

    async def ping(self) -> str:
        return "pong"


def new_deployment(data_dir: str, namesrv_count: int, brokers: list[BrokerSpec], **spec: Any) -> Deployment:
    cluster = ClusterSpec(
        namesrv_count=namesrv_count,
        brokers=brokers,
        profile="fast",
        namespace=f"bench-{uuid.uuid4().hex[:8]}",
        data_dir=data_dir,
        namesrv_port=None,  # Ray callers only: no TCP port to collide with another run on this machine
        broker_port=None,
        **spec,
    )
    return Deployment(cluster).start()


def wait_for_route(ns: Any, topic: str, predicate: Any, timeout: float) -> dict[str, Any] | None:
    """Long-poll one NameServer until predicate(route) holds; returns that route."""
    deadline = time.monotonic() + timeout
    resp = ray.get(ns.get_routeinfo_by_topic.remote(topic=topic))
    route = resp.wire_body() if resp.ok else None
    if resp.ok and predicate(route):
        return route
    held = resp.ext_fields.get("routeVersion", -1) if resp.ok else -1
    while (remaining := deadline - time.monotonic()) > 0:
        changes = ray.get(ns.listen_for_change.remote({topic: held}, remaining))
        if topic in changes:
            held, route = changes[topic].version, changes[topic].route
            if predicate(route):
                return route
    raise TimeoutError(f"route of {topic} did not reach the expected state within {timeout} s")


def broker_names(route: TopicRouteData | dict[str, Any] | None) -> set[str]:
    """Broker names of a route, as a route query (wire dict) or the long-poll (TopicRouteData) gives it."""
    if route is None:
        return set()
    if isinstance(route, TopicRouteData):
        return {b.broker_name for b in route.broker_datas}
    return {b["brokerName"] for b in route["brokerDatas"]}


# ---------------------------------------------------------------------------- 1. route queries
async def drive(handle: Any, callers: int, duration: float) -> tuple[float, list[float]]:
    """`callers` asyncio tasks, each awaiting one route query at a time for `duration` seconds."""
    latencies: list[float] = []
    stop_at = time.perf_counter() + duration

    async def caller() -> None:
        while time.perf_counter() < stop_at:
            t = time.perf_counter()
            await handle.get_routeinfo_by_topic.remote(topic=TOPIC)
            latencies.append(time.perf_counter() - t)

    t0 = time.perf_counter()
    await asyncio.gather(*(caller() for _ in range(callers)))
    return len(latencies) / (time.perf_counter() - t0), latencies


def bench_route_queries(data_dir: str, concurrency: list[int], duration: float, rounds: int) -> list[dict[str, Any]]:
    dep = new_deployment(data_dir, 1, [BrokerSpec("broker-a"), BrokerSpec("broker-b")])
    try:
        for broker in dep.brokers.values():
            ray.get(broker.create_topic.remote(TOPIC, 8, 8))
        ns = dep.namesrvs["namesrv-0"]
        route_resp = wait_until_ok(ns)
        noop = NoopActor.options(namespace=dep.spec.namespace).remote(route_resp)
        ray.get(noop.ping.remote())
        for h in (ns, noop):  # warm up both paths
            asyncio.run(drive(h, 4, min(0.5, duration)))
        rows = []
        for callers in concurrency:
            samples: dict[str, list[tuple[float, list[float]]]] = {"namesrv": [], "noop": []}
            for r in range(rounds):
                order = [("namesrv", ns), ("noop", noop)] if r % 2 == 0 else [("noop", noop), ("namesrv", ns)]
                for name, handle in order:
                    samples[name].append(asyncio.run(drive(handle, callers, duration)))
            row: dict[str, Any] = {"callers": callers}
            for name, runs in samples.items():
                lat = [x for _, lats in runs for x in lats]
                row[f"{name}_rate"] = statistics.median(rate for rate, _ in runs)
                row[f"{name}_p50_ms"] = pct_ms(lat, 0.50)
                row[f"{name}_p99_ms"] = pct_ms(lat, 0.99)
            row["ratio"] = row["namesrv_rate"] / row["noop_rate"]
            rows.append(row)
        return rows
    finally:
        dep.teardown(graceful=False)


def wait_until_ok(ns: Any, timeout: float = 15.0) -> RemotingResponse:
    route = wait_for_route(ns, TOPIC, lambda r: broker_names(r) == {"broker-a", "broker-b"}, timeout)
    assert route is not None
    resp = ray.get(ns.get_routeinfo_by_topic.remote(topic=TOPIC))
    assert resp.ok, resp
    return resp


# ---------------------------------------------------------------------------- 2. failure detection
def bench_failure_detection(data_dir: str, kills: int, namesrv_count: int) -> dict[str, Any]:
    dep = new_deployment(data_dir, namesrv_count, [BrokerSpec("broker-a"), BrokerSpec("broker-b")])
    victim = "broker-b-0"
    every: list[float] = []
    per_ns: dict[str, list[float]] = {n: [] for n in dep.namesrvs}
    rejoin: list[float] = []
    try:
        for broker in dep.brokers.values():
            ray.get(broker.create_topic.remote(TOPIC, 4, 4))
        for i in range(kills):
            if i:  # bring the victim back, timed until every NameServer routes to it again
                t_restart = time.monotonic()
                dep.restart_broker(victim)
            for ns in dep.namesrvs.values():
                wait_for_route(ns, TOPIC, lambda r: "broker-b" in broker_names(r), 30)
            if i:
                rejoin.append(time.monotonic() - t_restart)
            held = {n: ray.get(ns.get_routeinfo_by_topic.remote(topic=TOPIC)).ext_fields["routeVersion"]
                    for n, ns in dep.namesrvs.items()}
            pending = {ns.listen_for_change.remote({TOPIC: held[n]}, 30): n for n, ns in dep.namesrvs.items()}
            t0 = time.perf_counter()
            ray.kill(dep.brokers[victim], no_restart=True)
            while pending:
                ready, _ = ray.wait(list(pending), num_returns=1, timeout=30)
                if not ready:
                    raise TimeoutError(f"kill {i}: {sorted(pending.values())} never dropped {victim}")
                t = time.perf_counter() - t0
                name = pending.pop(ready[0])
                changes = ray.get(ready[0])
                if TOPIC in changes and "broker-b" not in broker_names(changes[TOPIC].route):
                    per_ns[name].append(t)
                    continue
                if TOPIC in changes:  # an unrelated change: hold the new version and listen again
                    held[name] = changes[TOPIC].version
                pending[dep.namesrvs[name].listen_for_change.remote({TOPIC: held[name]}, 30)] = name
            every.append(max(per_ns[n][-1] for n in per_ns))
        causes = {
            n: sorted({r.cause for r in ray.get(ns.get_removals.remote()) if r.broker_addr == victim})
            for n, ns in dep.namesrvs.items()
        }
        return {"every": every, "per_ns": per_ns, "rejoin": rejoin, "causes": causes}
    finally:
        dep.teardown(graceful=False)


# ---------------------------------------------------------------------------- report
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--concurrency", default="1,4,16", help="caller counts for the route benchmark")
    parser.add_argument("--duration", type=float, default=2.0, help="seconds per measurement run")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved NameServer/no-op rounds per count")
    parser.add_argument("--kills", type=int, default=20, help="broker kills for failure detection")
    parser.add_argument("--namesrvs", type=int, default=2, help="NameServers for failure detection")
    parser.add_argument("--topics", default="10,10000", help="topic counts for the heartbeat benchmark")
    parser.add_argument("--hb-reps", type=int, default=300, help="heartbeat round trips per topic count")
    parser.add_argument("--reg-reps", type=int, default=20, help="full registrations per topic count")
    parser.add_argument("--quick", action="store_true",
                        help="1 and 16 callers, 0.25 s runs, 2 kills, 10 vs 1,000 topics (a smoke run)")
    parser.add_argument("--only", choices=["routes", "failures", "heartbeats"], help="run one part only")
    parser.add_argument("--json", type=Path, help="also write the raw results here")
    args = parser.parse_args()
    if args.quick:
        args.concurrency, args.duration, args.rounds, args.kills = "1,16", 0.25, 1, 2
        args.topics, args.hb_reps, args.reg_reps = "10,1000", 20, 2

    info = print_machine()
    ray_init(f"bench-{uuid.uuid4().hex[:8]}")
    results: dict[str, Any] = {"machine": info}
    try:
        with tempfile.TemporaryDirectory(prefix="bench-actors-", ignore_cleanup_errors=True) as tmp:
            if args.only in (None, "routes"):
                counts = [int(c) for c in args.concurrency.split(",")]
                print(f"\n== 1. route queries: one NameServer actor vs a no-op async actor method "
                      f"(callers = asyncio tasks in the driver; {args.rounds} interleaved rounds x "
                      f"{args.duration:g} s, median rate)")
                rows = bench_route_queries(f"{tmp}/routes", counts, args.duration, args.rounds)
                results["routes"] = rows
                table_rows = []
                for r in rows:
                    c = r["callers"]
                    table_rows += [(f"{c} callers: calls/s", r["noop_rate"], r["namesrv_rate"]),
                                   (f"{c} callers: p50 ms", r["noop_p50_ms"], r["namesrv_p50_ms"]),
                                   (f"{c} callers: p99 ms", r["noop_p99_ms"], r["namesrv_p99_ms"])]
                print(indent(ratio_table(table_rows, "no-op actor", "NameServer"), "  "))

            if args.only in (None, "failures"):
                print(f"\n== 2. failure detection: ray.kill(broker) -> dropped from the route on every one of "
                      f"{args.namesrvs} NameServers ({args.kills} kills, driver-side long-poll timestamps)")
                fd = bench_failure_detection(f"{tmp}/failures", args.kills, args.namesrvs)
                results["failures"] = fd
                print(f"  every NameServer   {latency_ms(fd['every'])}")
                for name, vals in fd["per_ns"].items():
                    print(f"  {name:18s} {latency_ms(vals)}")
                if fd["rejoin"]:
                    print(f"  restart -> back on every NameServer  {latency_ms(fd['rejoin'])}")
                print(f"  removal causes recorded: {fd['causes']}")

            if args.only in (None, "heartbeats"):
                counts = [int(c) for c in args.topics.split(",")]
                print(f"\n== 3. heartbeats at {' vs '.join(map(str, counts))} topics")
                hb = bench_heartbeats(new_deployment, f"{tmp}/heartbeats", counts, args.hb_reps, args.reg_reps)
                results["heartbeats"] = hb
                print_heartbeats(hb)
    finally:
        ray.shutdown()
    if args.json:
        args.json.write_text(json.dumps(results, indent=1, default=str))
    print(f"\n  load average at the end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
