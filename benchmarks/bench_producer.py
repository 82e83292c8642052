"""Producer benchmark on a private local Ray: what group commit buys a SYNC_FLUSH broker, the cost of
queue selection, and (optionally) how fast a broker's death reaches producers' route caches.

    bash run.sh bench bench_producer                     # flush comparison + selection, under 2 min
    bash run.sh bench bench_producer --propagation       # plus route propagation (push, then 30 s poll)
    bash run.sh bench bench_producer --quick             # the same parts, 0.3 s measured each (a smoke run)

1. Flush policies, one broker each, 16 concurrent senders (threads of one Producer in this driver,
   sync sends back to back, 128-byte bodies): SYNC_FLUSH with group commit (one fsync per batch of
   whatever arrived meanwhile, RocketMQ's GroupCommitService), ASYNC_FLUSH (acknowledged after
   write(), fsync every 500 ms), and SYNC_FLUSH with one fsync per message. Printed side by side:
   msg/s, p50/p99 ack latency (the Producer's send() call), messages per fsync, and the ratios
   (target: group commit >= 0.8x async and >= 3x one-fsync-per-message).
2. Queue selection (SendEngine.select_one_message_queue) timed in a tight loop in this process.
3. With --propagation: route propagation after ray.kill of a broker to every producer's cache, with
   route push (the NameServer's long-poll) and, unless --skip-poll, with only the 30 s poll.
"""

from __future__ import annotations

import argparse
import os
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any

import ray
from _common import local_ray_run

from actors.deployment.launcher import Deployment, deploy
from actors.deployment.spec import BrokerSpec, ClusterSpec
from clients.admin.client import AdminClient
from clients.producer.actor import ProducerActor
from clients.producer.producer import Message, Producer
from namesrv.client.config import ProducerConfig
from namesrv.client.publish_info import topic_route_data_to_publish_info
from namesrv.client.send_engine import SendEngine
from namesrv.common.stats import percentile
from namesrv.protocol.codes import ResponseCode
from namesrv.protocol.models import TopicRouteData
from namesrv.store.types import FlushDiskType

BROKERS = ("broker-a", "broker-b", "broker-c")
QUEUES = 4


# ---------------------------------------------------------------------------- actors
class BenchProducer(ProducerActor):
    """ProducerActor plus what the benchmark reads: its cached route and its route-change log."""

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
    return {q.broker_name for q in TopicRouteData.from_wire(resp.wire_body()).queue_datas}


def wait_route_everywhere(dep: Deployment, topic: str, brokers: set[str], timeout_s: float = 30) -> None:
    for name in dep.namesrvs:
        wait_for(lambda name=name: route_brokers(dep, name, topic) == brokers, timeout_s, f"{topic} on {name}")


# ---------------------------------------------------------------------------- measurements
class _NoTransport:
    def send(self, *a: Any, **k: Any) -> Any:
        raise AssertionError("selection only")

    def send_oneway(self, *a: Any, **k: Any) -> None:
        raise AssertionError("selection only")


def bench_selection(dep: Deployment, topic: str, iterations: int) -> dict[str, float]:
    """ns per select_one_message_queue on the topic's real route (3 brokers x 4 queues)."""
    ns = next(iter(dep.namesrvs.values()))
    route = TopicRouteData.from_wire(ray.get(ns.get_routeinfo_by_topic.remote(topic=topic)).wire_body())
    out: dict[str, float] = {}
    cases = {  # (fault tolerance on, brokers isolated by a failure: 10 s in the 5.x table)
        "fault_on_all_available": (True, ()),
        "fault_on_one_isolated": (True, ("broker-b",)),
        "fault_off": (False, ()),
        "fault_on_retry_avoiding_last": (True, ()),
    }
    for case, (fault, isolated) in cases.items():
        engine = SendEngine(_NoTransport(), ProducerConfig(send_latency_fault_enable=fault))
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


# ---------------------------------------------------------------------------- flush policies
@dataclass(frozen=True)
class FlushCase:
    label: str
    flush: FlushDiskType
    group_commit: bool


FLUSH_CASES = (
    FlushCase("SYNC_FLUSH group commit", FlushDiskType.SYNC_FLUSH, True),
    FlushCase("ASYNC_FLUSH", FlushDiskType.ASYNC_FLUSH, True),
    FlushCase("SYNC_FLUSH 1 fsync/msg", FlushDiskType.SYNC_FLUSH, False),
)


def bench_flush(case: FlushCase, data_dir: str, senders: int, duration_s: float, body_size: int,
                warmup_s: float) -> dict[str, Any]:
    """One broker with `case`'s flush policy; `senders` threads send sync through one Producer."""
    namespace = f"bench-flush-{uuid.uuid4().hex[:8]}"
    spec = ClusterSpec(
        namesrv_count=1, brokers=[BrokerSpec("broker-a")], profile="fast", namespace=namespace,
        data_dir=os.path.join(data_dir, namespace), namesrv_port=None, broker_port=None,
        broker_overrides={"flush_disk_type": case.flush.value, "group_commit": case.group_commit},
    )
    dep = deploy(spec)
    try:
        for name, ns in dep.namesrvs.items():
            wait_for(lambda ns=ns: ray.get(ns.get_status.remote())["ready"], 30, f"{name} ready")
        topic = f"Flush_{uuid.uuid4().hex[:6]}"
        AdminClient(dep).create_topic(topic, read_queue_nums=QUEUES, write_queue_nums=QUEUES)
        wait_route_everywhere(dep, topic, {"broker-a"})
        body = b"x" * body_size
        latencies: list[list[float]] = [[] for _ in range(senders)]
        failed = [0] * senders
        measuring = threading.Event()
        stop = threading.Event()

        def sender(i: int, producer: Producer) -> None:
            lat, msg = latencies[i], Message(topic, body)
            while not stop.is_set():
                t0 = time.perf_counter()
                try:
                    producer.send(msg)
                except Exception:
                    failed[i] += 1
                    continue
                if measuring.is_set():
                    lat.append((time.perf_counter() - t0) * 1000)

        group = f"bench_{uuid.uuid4().hex[:8]}"
        with Producer(group, namesrv=list(dep.namesrvs), namespace=namespace, instance_name=group,
                      auto_create_topic=False) as producer:
            threads = [threading.Thread(target=sender, args=(i, producer), daemon=True) for i in range(senders)]
            for t in threads:
                t.start()
            time.sleep(warmup_s)
            before = ray.get(dep.brokers["broker-a-0"].get_runtime_info.remote())
            measuring.set()
            t0 = time.perf_counter()
            time.sleep(duration_s)
            measuring.clear()
            wall = time.perf_counter() - t0
            after = ray.get(dep.brokers["broker-a-0"].get_runtime_info.remote())
            stop.set()
            for t in threads:
                t.join(30)
    finally:
        dep.teardown(graceful=False)
    lat = [x for per in latencies for x in per]
    fsyncs = after["store_fsyncs"] - before["store_fsyncs"]
    stored = sum(after["queues"].values()) - sum(before["queues"].values())
    return {
        "case": case.label,
        "acked": len(lat),
        "failed": sum(failed),
        "msgs_per_s": len(lat) / wall,
        "p50_ms": percentile(lat, 0.50),
        "p99_ms": percentile(lat, 0.99),
        "msgs_per_fsync": stored / fsyncs if fsyncs else float("inf"),
        "msgs_per_batch": stored / max(1, after["store_batches"] - before["store_batches"]),
    }


def print_flush_comparison(results: list[dict[str, Any]]) -> None:
    print(f"{'configuration':<26} {'msgs/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'msgs/fsync':>10} "
          f"{'msgs/batch':>10} {'acked':>7} {'failed':>6}")
    for r in results:
        per_fsync = "-" if r["msgs_per_fsync"] == float("inf") else f"{r['msgs_per_fsync']:.1f}"
        print(f"{r['case']:<26} {r['msgs_per_s']:>8.0f} {r['p50_ms']:>8.2f} {r['p99_ms']:>8.2f} {per_fsync:>10} "
              f"{r['msgs_per_batch']:>10.1f} {r['acked']:>7} {r['failed']:>6}")
    group, async_, one = (r["msgs_per_s"] for r in results)
    vs_async, vs_one = group / async_, group / one
    print(f"group commit vs ASYNC_FLUSH: {vs_async:.2f}x (target >= 0.8x: {'met' if vs_async >= 0.8 else 'NOT met'})")
    print(f"group commit vs 1 fsync/msg: {vs_one:.2f}x (target >= 3x:   {'met' if vs_one >= 3 else 'NOT met'})")


# ---------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--senders", type=int, default=16, help="concurrent senders against the one broker")
    ap.add_argument("--duration", type=float, default=10.0, help="seconds measured per flush configuration")
    ap.add_argument("--warmup", type=float, default=2.0, help="seconds of sending before measuring")
    ap.add_argument("--body-size", type=int, default=128)
    ap.add_argument("--select-iterations", type=int, default=200_000)
    ap.add_argument("--namesrvs", type=int, default=2,
                    help="NameServers of the 3-broker cluster (queue selection, propagation)")
    ap.add_argument("--propagation", action="store_true", help="also measure route propagation (push, poll)")
    ap.add_argument("--propagation-producers", type=int, default=4)
    ap.add_argument("--poll-interval-ms", type=int, default=30_000,
                    help="poll interval for the push-off propagation run (RocketMQ's default 30 s)")
    ap.add_argument("--skip-poll", action="store_true", help="with --propagation: skip the poll-only run")
    ap.add_argument("--quick", action="store_true",
                    help="0.3 s measured after 0.2 s warm-up per flush policy, 5,000 selections, one NameServer "
                         "(a smoke run)")
    args = ap.parse_args(argv)
    if args.quick:
        args.duration, args.warmup, args.select_iterations, args.namesrvs = 0.3, 0.2, 5_000, 1

    with local_ray_run("bench-producer", fsync=True) as run:
        data_dir, namespace = run.data_dir, run.namespace
        print(f"\n== flush policies: 1 broker, {args.senders} concurrent senders (threads of one Producer, sync "
              f"sends), {args.body_size}-byte bodies, {args.duration:g} s measured after {args.warmup:g} s warm-up")
        flush = [bench_flush(c, data_dir, args.senders, args.duration, args.body_size, args.warmup)
                 for c in FLUSH_CASES]
        print_flush_comparison(flush)

        spec = ClusterSpec(
            namesrv_count=args.namesrvs, brokers=[BrokerSpec(b) for b in BROKERS], profile="fast",
            namespace=namespace, data_dir=os.path.join(data_dir, "cluster"), namesrv_port=None, broker_port=None,
        )
        dep = deploy(spec)
        run.deployments.append(dep)
        for name, ns in dep.namesrvs.items():
            wait_for(lambda ns=ns: ray.get(ns.get_status.remote())["ready"], 30, f"{name} ready")
        topic = f"Bench_{uuid.uuid4().hex[:6]}"
        AdminClient(dep).create_topic(topic, read_queue_nums=QUEUES, write_queue_nums=QUEUES)
        wait_route_everywhere(dep, topic, set(BROKERS))

        print(f"\n== queue selection: SendEngine.select_one_message_queue on {len(BROKERS)} brokers x {QUEUES} "
              f"queues, {args.select_iterations} calls, best of 3, in this process")
        sel = bench_selection(dep, topic, args.select_iterations)
        base = flush[0]["p50_ms"] * 1e6
        for case, ns_per in sel.items():
            print(f"  {case:<30} {ns_per / 1000:7.2f} us/select   = 1 : {base / ns_per:,.0f} of a group-commit "
                  f"p50 send ({base / 1e6:.2f} ms)")

        if args.propagation:
            print(f"\n== route propagation after ray.kill of a broker, to {args.propagation_producers} producers' "
                  "caches")
            push = bench_propagation(dep, topic, "broker-c", args.propagation_producers, 30)
            print(f"  push (long-poll):     max {push['max_s'] * 1000:8.1f} ms; per producer "
                  f"{[round(x * 1000, 1) for x in push['lag_s']]} ms; via {push['sources']}")
            print(f"  NameServer removal after the kill (ms, cause): {push['namesrv_removal_ms']}")
            if not args.skip_poll:
                interval = args.poll_interval_ms
                poll = bench_propagation(dep, topic, "broker-b", args.propagation_producers, interval / 1000 + 30,
                                         route_push=False, poll_name_server_interval_ms=interval)
                print(f"  poll only (every {interval / 1000:g} s): max {poll['max_s']:8.2f} s; per producer "
                      f"{[round(x, 2) for x in poll['lag_s']]} s; via {poll['sources']}")
                print(f"  push is {poll['max_s'] / push['max_s']:,.0f}x faster on the worst producer")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
