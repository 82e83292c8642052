"""The real RocketMQ client over TCP side by side with the Ray-native clients, against the same
brokers in the same run (a private local Ray: 1 NameServer, 2 brokers, fast profile, free ports).

    bash run.sh bench bench_clients            # 2,000 sync sends each per round, a few minutes
    bash run.sh bench bench_clients --quick    # 100 sync sends each, one round (a smoke run)

1. Sync sends: one sender each, sequential sync sends back to back, the same body size and count.
   Real client: PyPI `rocketmq` 0.4.4 (rocketmq-client-cpp) in a process of its own
   (clients/interop/real_client.py produce), over TCP to the NameServer and brokers. Ray-native:
   clients.producer.producer.Producer in this driver, route from the NameServer actor, sends over its own
   TCP connection to each broker (the default, broker_transport="tcp"); then the same producer with
   broker_transport="ray" (one actor call per send). The first --warmup sends of each (route
   lookup, connections) are left out; sends/s is the measured sends over the time they took,
   latency is each send_sync()/send() call.
   Then async: one Ray-native producer keeping --inflight send_async() calls outstanding (10 x the
   count), against its own sync rate. Real, Ray-native sync and async run in --rounds rounds (3; --quick 1):
   the load of a shared machine drifts between rounds more than within one, so each ratio is taken
   within a round, every round's is printed, and the tables show the round with the median ratio.
2. Consumption of everything both producers stored: the real client's PushConsumer
   (clients/interop/real_client.py consume, messages/s from its first delivery to its last, its start-up and
   rebalance left out) and the Ray-native PullConsumer.consume_all in this driver.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import threading
import time
import uuid
from typing import Any

from _common import latency_ms, local_ray_run, pct_ms, ratio_table
from _real_client import bench_real_consume, bench_real_sends, median_index, send_figures

from actors.deployment.launcher import Deployment, deploy
from actors.deployment.spec import BrokerSpec, ClusterSpec
from clients.admin.client import AdminClient
from clients.consumer.pull_consumer import PullConsumer
from clients.producer.producer import Message, Producer

BASE, MEASURED = "real client (TCP)", "Ray-native"


def bench_ray_sends(dep: Deployment, topic: str, count: int, warmup: int, body_size: int,
                    transport: str = "tcp") -> dict[str, Any]:
    group = f"bench_{uuid.uuid4().hex[:6]}"
    t_end: list[float] = []
    lat: list[float] = []
    with Producer(group, namesrv=list(dep.namesrvs), namespace=dep.spec.namespace, instance_name=group,
                  auto_create_topic=False, broker_transport=transport) as producer:
        for i in range(count + warmup):
            body = f"ray-{i}".encode()
            msg = Message(topic, body + b"x" * (body_size - len(body)))
            t0 = time.monotonic()
            producer.send(msg)
            t1 = time.monotonic()
            t_end.append(t1)
            lat.append(t1 - t0)
    return send_figures(t_end, lat, warmup)


ASYNC_PER_SYNC = 10
"""Async sends measured per sync send: at several times the sync rate, fewer would be over in a
fraction of a second, a figure of its warm-up (the first route answers, the reader thread starting)."""


def bench_ray_async_sends(dep: Deployment, topic: str, count: int, warmup: int, body_size: int,
                          inflight: int) -> dict[str, Any]:
    """One producer keeping `inflight` send_async() calls outstanding (over TCP no thread waits per
    send: its executor of async_send_threads threads runs only the callbacks): acknowledged sends/s
    over the measured ones, and each one's latency from its call to its future's result."""
    group = f"bench_{uuid.uuid4().hex[:6]}"
    slots = threading.Semaphore(inflight)
    lat: list[float] = []
    failed: list[BaseException] = []
    with Producer(group, namesrv=list(dep.namesrvs), namespace=dep.spec.namespace, instance_name=group,
                  auto_create_topic=False) as producer:
        for i in range(warmup):
            producer.send(Message(topic, f"ray-async-warm-{i}".encode()))
        t0 = time.monotonic()
        for i in range(count):
            body = f"ray-async-{i}".encode()
            slots.acquire()
            started = time.monotonic()

            def done(result: Any, err: BaseException | None, started: float = started) -> None:
                lat.append(time.monotonic() - started)
                if err is not None:
                    failed.append(err)
                slots.release()

            producer.send_async(Message(topic, body + b"x" * (body_size - len(body))), done)
        for _ in range(inflight):  # every callback has run
            slots.acquire()
        wall = time.monotonic() - t0
    if failed:
        raise RuntimeError(f"{len(failed)} async sends failed, e.g. {failed[0]!r}")
    return {"per_s": count / wall, "p50_ms": pct_ms(lat, 0.5), "p99_ms": pct_ms(lat, 0.99), "lat": lat,
            "acked": warmup + count}


def bench_ray_consume(dep: Deployment, topic: str, total: int) -> dict[str, Any]:
    t0 = time.monotonic()
    got = PullConsumer(dep.spec.namespace, list(dep.namesrvs)).consume_all(topic)
    wall = time.monotonic() - t0
    if len(got) < total:
        raise RuntimeError(f"the PullConsumer got {len(got)} of {total} messages")
    return {"per_s": len(got) / wall, "distinct": len(got)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="100 sends each instead of 2,000, one round (a smoke run)")
    ap.add_argument("--count", type=int, help="measured sync sends per client (default 2000, --quick 100)")
    ap.add_argument("--warmup", type=int, default=20, help="sends per client left out of the figures")
    ap.add_argument("--body-size", type=int, default=128)
    ap.add_argument("--inflight", type=int, default=64, help="async sends outstanding at once")
    ap.add_argument("--rounds", type=int,
                    help="rounds of real / Ray-native sync / async sends; the tables show the median round "
                         "(default 3, --quick 1)")
    args = ap.parse_args(argv)
    count = args.count or (100 if args.quick else 2000)
    args.rounds = args.rounds or (1 if args.quick else 3)
    if importlib.util.find_spec("rocketmq") is None:
        raise SystemExit("the real client is missing: pip install rocketmq==0.4.4 (or pip install -e '.[dev]')")

    with local_ray_run("bench-clients") as run:
        dep = deploy(ClusterSpec(
            namesrv_count=1, brokers=[BrokerSpec("broker-a"), BrokerSpec("broker-b")], profile="fast",
            namespace=run.namespace, data_dir=os.path.join(run.data_dir, "cluster"), namesrv_port=0, broker_port=0,
        ))
        run.deployments.append(dep)
        addr = dep.namesrv_addr()
        topic = f"BenchClients_{uuid.uuid4().hex[:6]}"
        AdminClient(dep).create_topic(topic, read_queue_nums=4, write_queue_nums=4)
        print("\n== 1 NameServer, brokers broker-a and broker-b (fast profile, SYNC_FLUSH with group commit), "
              f"namesrvAddr {addr}; "
              f"topic {topic} with 4 queues on each; {count:,} sync sends per client after {args.warmup} warm-up, "
              f"{args.body_size}-byte bodies, one sender each, back to back", flush=True)
        rounds: list[tuple[dict[str, Any], dict[str, Any], dict[str, Any]]] = []
        for r in range(args.rounds):  # side by side in each round: load drifts between rounds, not within one
            print(f"  round {r + 1} of {args.rounds}", flush=True)
            real = bench_real_sends(addr, topic, count, args.warmup, args.body_size)
            print(f"    {BASE:<18} {real['per_s']:8.0f} sends/s  {latency_ms(real['lat'])}", flush=True)
            ray_ = bench_ray_sends(dep, topic, count, args.warmup, args.body_size)
            print(f"    {MEASURED:<18} {ray_['per_s']:8.0f} sends/s  {latency_ms(ray_['lat'])}  (direct to the "
                  "brokers over TCP, route from the NameServer actor)", flush=True)
            async_ = bench_ray_async_sends(dep, topic, count * ASYNC_PER_SYNC, args.warmup, args.body_size,
                                           args.inflight)
            print(f"    {'Ray-native async':<18} {async_['per_s']:8.0f} sends/s  {latency_ms(async_['lat'])}  "
                  f"(1 producer, {args.inflight} in flight)", flush=True)
            rounds.append((real, ray_, async_))
        actor = bench_ray_sends(dep, topic, count, args.warmup, args.body_size, transport="ray")
        print(f"  {'Ray actor calls':<18} {actor['per_s']:8.0f} sends/s  {latency_ms(actor['lat'])}  "
              "(broker_transport='ray': one actor call per send)", flush=True)
        sync_ratios = [ray_["per_s"] / real["per_s"] for real, ray_, _ in rounds]
        async_ratios = [async_["per_s"] / ray_["per_s"] for _, ray_, async_ in rounds]
        print(f"  per round: Ray-native / real client sync {', '.join(f'{x:.2f}x' for x in sync_ratios)}; "
              f"async / own sync {', '.join(f'{x:.2f}x' for x in async_ratios)}")
        real, ray_, _ = rounds[median_index(sync_ratios)]
        _, sync_of_async, async_ = rounds[median_index(async_ratios)]

        total = sum(x["acked"] for x in (*(x for r in rounds for x in r), actor))  # sends a failed warm-up left out
        print(f"\n== consume all {total:,} messages of {topic}: the real client's PushConsumer "
              "(first to last delivery) and the Ray-native PullConsumer.consume_all", flush=True)
        real_c = bench_real_consume(addr, topic, total)
        print(f"  {BASE:<18} {real_c['per_s']:8.0f} msgs/s  (first delivery {real_c['first_delivery_s']:.2f} s "
              f"after its process started; {real_c['deliveries']:,} deliveries of {real_c['distinct']:,} messages)",
              flush=True)
        ray_c = bench_ray_consume(dep, topic, total)
        print(f"  {MEASURED:<18} {ray_c['per_s']:8.0f} msgs/s  (PullConsumer in this driver, {ray_c['distinct']:,} "
              "messages)", flush=True)

        print()
        print(ratio_table([
            ("sync sends/s", real["per_s"], ray_["per_s"]),
            ("send p50 ms", real["p50_ms"], ray_["p50_ms"]),
            ("send p99 ms", real["p99_ms"], ray_["p99_ms"]),
            ("consume msgs/s", real_c["per_s"], ray_c["per_s"]),
        ], BASE, MEASURED, digits=3))
        print()
        print(ratio_table([
            ("sends/s", sync_of_async["per_s"], async_["per_s"]),
            ("p50 ms", sync_of_async["p50_ms"], async_["p50_ms"]),
        ], "Ray-native sync", f"async, {args.inflight} in flight", digits=3))
        print()
        print(ratio_table([
            ("sync sends/s", actor["per_s"], ray_["per_s"]),
            ("send p50 ms", actor["p50_ms"], ray_["p50_ms"]),
        ], "actor call per send", "direct TCP", digits=3))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
