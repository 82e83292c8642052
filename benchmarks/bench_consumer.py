"""Consumer groups (issue 34's figures), against the same brokers in one run (a private local Ray:
1 NameServer, 2 brokers with 4 queues each, fast profile, free ports).

    bash run.sh bench bench_consumer            # 10 kills, 10,000 messages
    bash run.sh bench bench_consumer --quick    # 2 kills, 500 messages

1. Rebalance after a member is killed: a ConsumerGroup of 3 PushConsumer actors (the rebalance timer
   set 10 minutes off, so only the broker's NOTIFY_CONSUMER_IDS_CHANGED can move queues), one member
   `ray.kill`ed; the time from the kill until the survivors hold every queue once again (their
   assignments polled every 10 ms). The group is scaled back to 3 between kills. RocketMQ's own
   consumers rebalance on the same notice; without it, on their 20 s timer.
2. Push consumption: every message of a topic, sent beforehand, delivered to a no-op listener:
   this project's PushConsumer in this driver, then the real client's PushConsumer (PyPI `rocketmq`
   0.4.4, clients/interop/real_client.py consume, in a process of its own that prints a line per
   message); messages/s from the first delivery to the last, start-up and rebalance left out.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import threading
import time
import uuid
from typing import Any

import ray
from _common import local_ray_run, pct_ms
from _real_client import bench_real_consume

from actors.deployment.launcher import Deployment, deploy
from actors.deployment.spec import BrokerSpec, ClusterSpec
from clients.admin.client import AdminClient
from clients.consumer.actor import ConsumerGroup
from clients.consumer.push_consumer import ConsumeConcurrentlyStatus, PushConsumer
from clients.producer.producer import Message, Producer

QUEUES = 8
NO_TIMER = {"rebalance_interval_ms": 600_000, "consume_from_where": "CONSUME_FROM_FIRST_OFFSET"}


def ok(msgs: Any, ctx: Any) -> ConsumeConcurrentlyStatus:
    return ConsumeConcurrentlyStatus.CONSUME_SUCCESS


def held(group: ConsumerGroup, topic: str) -> list[tuple[str, str, int]]:
    return [tuple(q) for s in group.stats() for q in s["queues"] if q[0] == topic]


def await_partition(group: ConsumerGroup, topic: str, timeout_s: float = 60) -> float:
    start = time.monotonic()
    while True:
        queues = held(group, topic)
        if len(queues) == len(set(queues)) == QUEUES:
            return time.monotonic() - start
        if time.monotonic() - start > timeout_s:
            raise RuntimeError(f"no partition of {topic} after {timeout_s} s: {sorted(queues)}")
        time.sleep(0.01)


def bench_rebalance(dep: Deployment, topic: str, kills: int) -> list[float]:
    group = ConsumerGroup.start(3, f"CG_bench_{uuid.uuid4().hex[:6]}", topic, ok, namespace=dep.spec.namespace,
                                namesrv=list(dep.namesrvs), **NO_TIMER)
    took: list[float] = []
    try:
        await_partition(group, topic)
        for i in range(kills):
            victim = group.actors.pop(i % len(group.actors))
            ray.kill(victim, no_restart=True)
            took.append(await_partition(group, topic))
            print(f"    kill {i + 1}: every queue owned again after {took[-1] * 1000:.0f} ms", flush=True)
            group.scale(3)
            await_partition(group, topic)
    finally:
        group.shutdown()
    return took


def bench_push(dep: Deployment, topic: str, total: int) -> dict[str, Any]:
    times: list[float] = []
    lock = threading.Lock()
    done = threading.Event()

    def listener(msgs: Any, ctx: Any) -> ConsumeConcurrentlyStatus:
        with lock:
            times.extend(time.monotonic() for _ in msgs)
            if len(times) >= total:
                done.set()
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    consumer = PushConsumer(f"CG_push_{uuid.uuid4().hex[:6]}", namesrv=list(dep.namesrvs),
                            namespace=dep.spec.namespace, **NO_TIMER)
    consumer.subscribe(topic, "*")
    consumer.register_message_listener(listener)
    consumer.start()
    try:
        if not done.wait(300):
            raise RuntimeError(f"the PushConsumer got {len(times)} of {total} messages")
    finally:
        consumer.shutdown()
    return {"per_s": (len(times) - 1) / (times[-1] - times[0]), "distinct": len(times)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="2 kills and 500 messages")
    ap.add_argument("--kills", type=int)
    ap.add_argument("--count", type=int)
    args = ap.parse_args(argv)
    kills, count = args.kills or (2 if args.quick else 10), args.count or (500 if args.quick else 10_000)
    real = importlib.util.find_spec("rocketmq") is not None
    with local_ray_run("bench-consumer") as run:
        dep = deploy(ClusterSpec(namesrv_count=1, brokers=[BrokerSpec("broker-a"), BrokerSpec("broker-b")],
                                 profile="fast", namespace=run.namespace, data_dir=os.path.join(run.data_dir, "c"),
                                 namesrv_port=0, broker_port=0))
        run.deployments.append(dep)
        topic = f"BenchConsumer_{uuid.uuid4().hex[:6]}"
        AdminClient(dep).create_topic(topic, read_queue_nums=QUEUES // 2, write_queue_nums=QUEUES // 2)
        print(f"\n== 1. rebalance after a member of 3 is killed ({kills} kills, {QUEUES} queues)", flush=True)
        took = bench_rebalance(dep, topic, kills)
        print(f"  until every queue has an owner again: p50 {pct_ms(took, 0.5):.0f} ms, "
              f"p99 {pct_ms(took, 0.99):.0f} ms, max {max(took) * 1000:.0f} ms", flush=True)
        print(f"\n== 2. push consumption of {count:,} messages (128 bytes) to a no-op listener", flush=True)
        with Producer("bench_consumer_producer", namesrv=list(dep.namesrvs), namespace=run.namespace) as p:
            # text bodies: the real client's consume command decodes each body as UTF-8
            futures = [p.send_async(Message(topic, f"{i:0128d}".encode())) for i in range(count)]
            for f in futures:
                f.result(timeout=60)
        ours = bench_push(dep, topic, count)
        print(f"  PushConsumer (this project)   {ours['per_s']:8.0f} messages/s", flush=True)
        if real:
            theirs = bench_real_consume(dep.namesrv_addr(), topic, count)
            print(f"  PushConsumer (C++ client)     {theirs['per_s']:8.0f} messages/s  "
                  f"ratio {ours['per_s'] / theirs['per_s']:.2f}x", flush=True)
        else:
            print("  the real client is missing (pip install rocketmq==0.4.4): no comparison", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
