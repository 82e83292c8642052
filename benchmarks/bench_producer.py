"""Producer benchmark on a private local Ray: send throughput and latency, the cost of queue selection,
and how fast a broker's death reaches producers' route caches (push vs poll).

    PYTHONPATH=. python benchmarks/bench_producer.py                 # everything, ~2 min
    PYTHONPATH=. python benchmarks/bench_producer.py --skip-poll     # without the 30 s poll measurement

What runs: 2 NameServers and 3 brokers (fast timing profile, SYNC flush: a send is acknowledged after
fsync), one topic with 4 queues on every broker. Producers are ProducerActors (one process each, its
own client instance), sending sync, back to back, 128-byte bodies unless told otherwise.

1. Throughput and p50/p99 latency with 1 and 4 producers (after a warm-up per producer).
2. Queue selection (SendEngine.select_one_message_queue) timed in a tight loop in this process,
   against the 1-producer p50 send latency.
3. Route propagation after ray.kill of a broker, to every producer's cache: with route push (the
   NameServer's long-poll) and with push off and only the poll (`--poll-interval-ms`, default 30 s,
   RocketMQ's pollNameServerInterval). Times are CLOCK_MONOTONIC, shared by every process on the
   machine: the driver's time right before ray.kill against the producer's entry in
   MQClientInstance.route_updates that dropped the broker.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from typing import Any

import ray

from actors.launcher import BrokerSpec, ClusterSpec, Deployment, deploy
from actors.producer_actor import ProducerActor
from clients.admin import AdminClient
from namesrv.client.publish_info import topic_route_data_to_publish_info
from namesrv.client.send_engine import SendEngine, SendPolicy
from namesrv.constants import ResponseCode
from namesrv.models import TopicRouteData

BROKERS = ("broker-a", "broker-b", "broker-c")
QUEUES = 4


# ---------------------------------------------------------------------------- machine
def machine() -> dict[str, Any]:
    model = platform.processor() or "unknown"
    try:
        for line in open("/proc/cpuinfo", encoding="utf-8"):
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_gib: float | None = None
    try:
        for line in open("/proc/meminfo", encoding="utf-8"):
            if line.startswith("MemTotal:"):
                mem_gib = int(line.split()[1]) / 1024 / 1024
                break
    except OSError:
        pass
    return {
        "cpu": model,
        "cpus": os.cpu_count(),
        "affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "memory_gib": round(mem_gib, 1) if mem_gib else None,
        "os": platform.platform(),
        "python": sys.version.split()[0],
        "ray": ray.__version__,
        "loadavg_1m": round(os.getloadavg()[0], 2),  # other work on the machine skews every number
    }


# ---------------------------------------------------------------------------- actors
class BenchProducer(ProducerActor):
    """ProducerActor plus what the benchmark reads: its cached route and its route-change log."""

    def warm_up(self, topic: str, n: int) -> int:
        for i in range(n):
            self.send_one(topic, f"warm-up {i}".encode())
        with self._lock:
            failed = sum(1 for r in self.records if not r.ok)
            self.records.clear()
        return failed

    def cached_brokers(self, topic: str) -> list[str]:
        info = self.producer.publish_info(topic)
        return info.broker_names() if info is not None else []

    def updates(self, topic: str) -> list[tuple[int, str]]:
        assert self.producer.instance is not None
        return [(t_ns, src) for t, t_ns, src in self.producer.instance.route_updates if t == topic]


def start_producers(dep: Deployment, n: int, **producer_kwargs: Any) -> list[Any]:
    cls = ray.remote(BenchProducer).options(num_cpus=0, max_concurrency=4)
    handles = []
    for _ in range(n):
        group = f"bench_{uuid.uuid4().hex[:8]}"
        handles.append(cls.remote(group, dep.spec.namespace, list(dep.namesrvs), **producer_kwargs))
    return handles


def stop_producers(handles: list[Any]) -> None:
    for h in handles:
        try:
            ray.get(h.shutdown.remote(), timeout=10)
        except Exception:
            pass
        ray.kill(h, no_restart=True)


# ---------------------------------------------------------------------------- waiting
def wait_for(predicate: Any, timeout_s: float, what: str, interval_s: float = 0.01) -> Any:
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = predicate()
        except Exception as e:  # e.g. a NameServer still in its not-ready window
            last = e
        else:
            if last:
                return last
        time.sleep(interval_s)
    raise TimeoutError(f"timed out after {timeout_s} s waiting for {what}; last saw {last!r}")


def route_brokers(dep: Deployment, namesrv: str, topic: str) -> set[str]:
    resp = ray.get(dep.namesrvs[namesrv].get_routeinfo_by_topic.remote(topic=topic), timeout=10)
    if resp.code != ResponseCode.SUCCESS:
        return set()
    return {q.broker_name for q in TopicRouteData.from_wire(resp.decode_body()).queue_datas}


def wait_route_everywhere(dep: Deployment, topic: str, brokers: set[str], timeout_s: float = 30) -> None:
    for name in dep.namesrvs:
        wait_for(lambda name=name: route_brokers(dep, name, topic) == brokers, timeout_s, f"{topic} on {name}")


# ---------------------------------------------------------------------------- measurements
def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p * len(ordered)))]


def bench_throughput(dep: Deployment, topic: str, n: int, duration_s: float, body_size: int, warmup: int) -> dict:
    producers = start_producers(dep, n)
    try:
        failed = ray.get([p.warm_up.remote(topic, warmup) for p in producers], timeout=120)
        if any(failed):
            raise RuntimeError(f"warm-up sends failed: {failed}")
        t0 = time.perf_counter()
        summaries = ray.get(
            [p.run_send_loop.remote([topic], 0.0, duration_s, body_size, seed=i) for i, p in enumerate(producers)],
            timeout=duration_s + 120,
        )
        wall = time.perf_counter() - t0
        records = [r for p in producers for r in ray.get(p.get_records.remote())]
    finally:
        stop_producers(producers)
    ok = [r for r in records if r["ok"]]
    lat = [r["latency_ms"] for r in ok]
    per_broker: dict[str, int] = {}
    for r in ok:
        per_broker[r["broker_name"]] = per_broker.get(r["broker_name"], 0) + 1
    return {
        "producers": n,
        "acked": len(ok),
        "failed": len(records) - len(ok),
        "retried": sum(1 for r in ok if r["attempts"] > 1),
        "wall_s": wall,
        "msgs_per_s": len(ok) / wall,
        "p50_ms": pct(lat, 0.50),
        "p99_ms": pct(lat, 0.99),
        "mean_ms": statistics.fmean(lat),
        "max_ms": max(lat),
        "per_broker": dict(sorted(per_broker.items())),
        "per_producer_msgs_per_s": [s["acknowledged"] / wall for s in summaries],
    }


class _NoTransport:
    def send(self, *a: Any, **k: Any) -> Any:
        raise AssertionError("selection only")

    def send_oneway(self, *a: Any, **k: Any) -> None:
        raise AssertionError("selection only")


def bench_selection(dep: Deployment, topic: str, iterations: int) -> dict[str, float]:
    """ns per select_one_message_queue on the topic's real route (3 brokers x 4 queues)."""
    ns = next(iter(dep.namesrvs.values()))
    route = TopicRouteData.from_wire(ray.get(ns.get_routeinfo_by_topic.remote(topic=topic)).decode_body())
    out: dict[str, float] = {}
    cases = {  # (fault tolerance on, brokers isolated by a failure: 10 s in the 5.x table)
        "fault_on_all_available": (True, ()),
        "fault_on_one_isolated": (True, ("broker-b",)),
        "fault_off": (False, ()),
        "fault_on_retry_avoiding_last": (True, ()),
    }
    for case, (fault, isolated) in cases.items():
        engine = SendEngine(_NoTransport(), SendPolicy(send_latency_fault_enable=fault))
        info = topic_route_data_to_publish_info(topic, route)
        for b in BROKERS:
            engine.fault.update_fault_item(b, 5, isolation=b in isolated)
        last = "broker-a" if case.endswith("avoiding_last") else None
        select = engine.select_one_message_queue
        for _ in range(1000):
            select(info, last)
        best = float("inf")
        for _ in range(3):  # best of 3 runs: the least disturbed by the rest of the machine
            t0 = time.perf_counter_ns()
            for _ in range(iterations):
                select(info, last)
            best = min(best, (time.perf_counter_ns() - t0) / iterations)
        out[case] = best
    return out


def bench_propagation(
    dep: Deployment, topic: str, victim: str, n: int, timeout_s: float, **producer_kwargs: Any
) -> dict[str, Any]:
    """Kill `victim`'s master with ray.kill; seconds until each producer's cached route dropped it."""
    started = time.monotonic_ns()
    producers = start_producers(dep, n, **producer_kwargs)
    try:
        for p in producers:  # caches the route and subscribes the topic (push and poll)
            ray.get(p.send_one.remote(topic, b"cache the route"), timeout=30)
        expect = sorted(route_brokers(dep, next(iter(dep.namesrvs)), topic))
        wait_for(lambda: all(ray.get(p.cached_brokers.remote(topic)) == expect for p in producers), 30,
                 f"every producer caching {expect}")
        if producer_kwargs.get("route_push", True):  # the long-poll is held once the first push came back
            wait_for(lambda: all(any(s == "push" for _, s in ray.get(p.updates.remote(topic))) for p in producers),
                     30, "every producer holding a long-poll")
        kill_wall_ms = time.time_ns() // 1_000_000
        t_kill = time.monotonic_ns()
        dep.kill_broker(f"{victim}-0")
        wait_for(lambda: all(victim not in ray.get(p.cached_brokers.remote(topic)) for p in producers),
                 timeout_s, f"{victim} gone from every producer's cache", interval_s=0.05)
        lags, sources = [], []
        for p in producers:
            after = [(t, s) for t, s in ray.get(p.updates.remote(topic)) if t >= t_kill]
            lags.append((after[0][0] - t_kill) / 1e9)
            sources.append(after[0][1])
        removals = [
            r for ns in dep.namesrvs.values() for r in ray.get(ns.get_removals.remote())
            if r.broker_addr == f"{victim}-0" and r.t_ms >= kill_wall_ms
        ]
    finally:
        stop_producers(producers)
    return {
        "victim": victim,
        "producers": n,
        "lag_s": sorted(lags),
        "max_s": max(lags),
        "sources": sorted(set(sources)),
        "namesrv_removal_ms": sorted((r.t_ms - kill_wall_ms, r.cause) for r in removals),
        "producer_age_at_kill_s": (t_kill - started) / 1e9,
    }


# ---------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--duration", type=float, default=10.0, help="seconds of sending per throughput run")
    ap.add_argument("--producers", default="1,4", help="producer counts for the throughput runs")
    ap.add_argument("--body-size", type=int, default=128)
    ap.add_argument("--warmup", type=int, default=100, help="sends per producer before measuring")
    ap.add_argument("--select-iterations", type=int, default=200_000)
    ap.add_argument("--propagation-producers", type=int, default=4)
    ap.add_argument("--poll-interval-ms", type=int, default=30_000,
                    help="poll interval for the push-off propagation run (RocketMQ's default 30 s)")
    ap.add_argument("--skip-poll", action="store_true", help="skip the push-off (poll only) propagation run")
    args = ap.parse_args(argv)
    counts = [int(c) for c in args.producers.split(",") if c.strip()]

    info = machine()
    print("machine: " + ", ".join(f"{k}={v}" for k, v in info.items()), flush=True)
    namespace = f"bench-producer-{uuid.uuid4().hex[:8]}"
    data_dir = tempfile.mkdtemp(prefix="bench-producer-")
    ray.init(address="local", num_cpus=2, include_dashboard=False, namespace=namespace, log_to_driver=False)
    dep: Deployment | None = None
    try:
        spec = ClusterSpec(
            namesrv_count=2, brokers=[BrokerSpec(b) for b in BROKERS], profile="fast", namespace=namespace,
            data_dir=data_dir, broker_overrides={"flush_disk_type": "SYNC_FLUSH"},
        )
        dep = deploy(spec)
        print(f"cluster: 2 NameServers, brokers {', '.join(BROKERS)} (fast profile, SYNC_FLUSH, store in {data_dir})")
        for name, ns in dep.namesrvs.items():
            wait_for(lambda ns=ns: ray.get(ns.get_status.remote())["ready"], 30, f"{name} ready")
        topic = f"Bench_{uuid.uuid4().hex[:6]}"
        AdminClient(dep).create_topic(topic, read_queue_nums=QUEUES, write_queue_nums=QUEUES)
        wait_route_everywhere(dep, topic, set(BROKERS))
        print(f"topic {topic}: {QUEUES} queues on each of {len(BROKERS)} brokers\n")

        print(f"== sync send, ProducerActors (one process each), {args.body_size}-byte bodies, "
              f"{args.duration:g} s after {args.warmup} warm-up sends each")
        print(f"{'producers':>9} {'msgs/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'mean ms':>8} {'max ms':>8} "
              f"{'acked':>7} {'failed':>6}  per broker")
        results = {}
        for n in counts:
            r = bench_throughput(dep, topic, n, args.duration, args.body_size, args.warmup)
            results[n] = r
            print(f"{n:>9} {r['msgs_per_s']:>9.0f} {r['p50_ms']:>8.2f} {r['p99_ms']:>8.2f} {r['mean_ms']:>8.2f} "
                  f"{r['max_ms']:>8.1f} {r['acked']:>7} {r['failed']:>6}  {r['per_broker']}", flush=True)

        print(f"\n== queue selection: SendEngine.select_one_message_queue, {args.select_iterations} calls, "
              "best of 3, in this process")
        sel = bench_selection(dep, topic, args.select_iterations)
        base = results[counts[0]]["p50_ms"] * 1e6 if counts else float("nan")
        for case, ns_per in sel.items():
            print(f"  {case:<30} {ns_per / 1000:7.2f} us/select   = {ns_per / base:.5f} of a {counts[0]}-producer "
                  f"p50 send ({base / 1e6:.2f} ms), 1 : {base / ns_per:,.0f}")

        print(f"\n== route propagation after ray.kill of a broker, to {args.propagation_producers} producers' caches")
        push = bench_propagation(dep, topic, "broker-c", args.propagation_producers, 30)
        print(f"  push (long-poll):     max {push['max_s'] * 1000:8.1f} ms; per producer "
              f"{[round(x * 1000, 1) for x in push['lag_s']]} ms; via {push['sources']}")
        print(f"  NameServer removal after the kill (ms, cause): {push['namesrv_removal_ms']}")
        if not args.skip_poll:
            interval = args.poll_interval_ms
            print(f"  poll only (push off, poll every {interval / 1000:g} s): expected lag uniform in "
                  f"[0, {interval / 1000:g}] s (+ one route query), mean {interval / 2000:g} s ...", flush=True)
            poll = bench_propagation(dep, topic, "broker-b", args.propagation_producers, interval / 1000 + 30,
                                     route_push=False, poll_name_server_interval_ms=interval)
            print(f"  poll:                 max {poll['max_s']:8.2f} s;  per producer "
                  f"{[round(x, 2) for x in poll['lag_s']]} s; via {poll['sources']}")
            print(f"  (each producer polls every {interval / 1000:g} s from its own start, and they started at most "
                  f"{poll['producer_age_at_kill_s']:.1f} s before the kill: these lags sit near the worst case)")
            print(f"  push is {poll['max_s'] / push['max_s']:,.0f}x faster on the worst producer")
        print(f"\nload average (1 min) at the end: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    finally:
        if dep is not None:
            dep.teardown(graceful=False)
        ray.shutdown()
        shutil.rmtree(data_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
