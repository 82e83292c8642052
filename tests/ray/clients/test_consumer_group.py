"""ConsumerGroup of Ray actors against real brokers over TCP (issue 34): n members started with one
call share the queues, a killed member's queues are taken over at once (the broker sees its
connections close and tells the group), duplicates only among what the dead member had not
committed, scale up and down, and a group mixing these members with the unmodified PyPI RocketMQ
client shares the queues without overlap.

One deployment for the module (a NameServer, two brokers on free ports); each test has its own topic
and group."""

from __future__ import annotations

import json
import subprocess
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
import ray

from actors.deployment.launcher import Deployment
from actors.deployment.spec import BrokerSpec
from clients.admin.client import AdminClient
from clients.consumer.actor import ConsumerGroup
from clients.consumer.push_consumer import ConsumeConcurrentlyStatus
from clients.producer.producer import Message, Producer
from namesrv.client.errors import MQClientError
from namesrv.common.waiting import wait_until
from tests.support.consumer import committed
from tests.support.ray_cluster import registered_deployment

QUEUES = 8
FAST = {"rebalance_interval_ms": 600_000, "consume_thread_max": 2, "consume_thread_min": 1,
        "broker_suspend_max_time_ms": 2_000, "persist_consumer_offset_interval_ms": 200,
        "consume_from_where": "CONSUME_FROM_FIRST_OFFSET"}


@pytest.fixture(scope="module")
def dep(ray_local: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    with registered_deployment(tmp_path_factory.mktemp("group"),
                               brokers=[BrokerSpec("broker-a"), BrokerSpec("broker-b")], namesrv_count=1,
                               broker_port=0) as d:
        yield d


@pytest.fixture(scope="module")
def producer(dep: Deployment) -> Iterator[Producer]:
    with Producer("group_test_producer", namesrv=list(dep.namesrvs), namespace=dep.spec.namespace) as p:
        yield p


def new_topic(dep: Deployment, name: str) -> str:
    topic = f"{name}_{uuid.uuid4().hex[:8]}"
    AdminClient(dep).create_topic(topic, read_queue_nums=QUEUES // 2, write_queue_nums=QUEUES // 2)
    return topic


def send(producer: Producer, topic: str, n: int) -> set[str]:
    return {producer.send(Message(topic, f"m{i}".encode())).msg_id for i in range(n)}


def ok(msgs: Any, ctx: Any) -> ConsumeConcurrentlyStatus:
    return ConsumeConcurrentlyStatus.CONSUME_SUCCESS


def partitioned(stats: list[dict[str, Any]]) -> bool:
    held = [tuple(q) for s in stats for q in s["queues"] if not q[0].startswith("%RETRY%")]
    return len(held) == len(set(held)) == QUEUES


def keys(actors: list[Any]) -> Counter[str]:
    return Counter(k for ks in ray.get([a.consumed_keys.remote() for a in actors]) for k in ks)


def test_a_group_of_actors_shares_takes_over_from_a_killed_member_and_scales(dep: Deployment,
                                                                             producer: Producer) -> None:
    topic, name = new_topic(dep, "Actors"), f"CG_actors_{uuid.uuid4().hex[:6]}"
    group = ConsumerGroup.start(3, name, topic, ok, namespace=dep.spec.namespace, namesrv=list(dep.namesrvs), **FAST)
    try:
        wait_until(lambda: partitioned(group.stats()), 20, "three actors holding every queue once")
        first = send(producer, topic, 60)
        wait_until(lambda: first <= set(keys(group.actors)), 30, "every message consumed")
        assert max(keys(group.actors).values()) == 1 and all(s["consumed"] for s in group.stats())

        wait_until(lambda: committed(dep, name, topic) == 60, 10, "every consumed message committed")
        victim = group.actors.pop()
        before = set(ray.get(victim.consumed_keys.remote()))
        killed = time.monotonic()
        ray.kill(victim, no_restart=True)
        wait_until(lambda: partitioned(group.stats()), 10, "the survivors holding every queue")
        took = time.monotonic() - killed
        assert took < 5, f"queues taken over {took:.2f} s after the kill (the timer is 10 min off)"
        second = send(producer, topic, 40)
        wait_until(lambda: second <= set(keys(group.actors)), 30, "every later message consumed by the survivors")
        twice = {k for k, n in (keys(group.actors) + Counter(before)).items() if n > 1}
        assert twice <= before, "a duplicate that the killed member had not consumed"

        wait_until(lambda: committed(dep, name, topic) == 100, 10, "every consumed message committed")
        group.scale(4)
        wait_until(lambda: partitioned(stats := group.stats()) and all(s["queues"] for s in stats), 20,
                   "four members each holding a share")
        third = send(producer, topic, 40)
        wait_until(lambda: third <= set(keys(group.actors)), 30, "every message consumed after scaling up")
        assert max(keys(group.actors).values()) == 1, "a duplicate after scaling up with every offset committed"
        wait_until(lambda: committed(dep, name, topic) == 140, 10, "every consumed message committed")
        group.scale(2)
        wait_until(lambda: partitioned(group.stats()), 10, "two members holding every queue")
        assert len(group.actors) == 2
    finally:
        group.shutdown()
    assert group.actors == []


class RealClientLines:
    """The real client's JSON lines, read as they come."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        self.cv = threading.Condition()
        self.lines: list[dict[str, Any]] = []
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("{"):
                with self.cv:
                    self.lines.append(json.loads(line))
                    self.cv.notify_all()

    def bodies(self) -> list[bytes]:
        with self.cv:
            return [str(r["body"]).encode() for r in self.lines if "body" in r]


def test_a_group_mixing_these_consumers_with_the_real_client_shares_queues_without_overlap(
        dep: Deployment, producer: Producer) -> None:
    from clients.consumer.push_consumer import PushConsumer
    from tests.e2e.test_real_client import start_client

    topic, name = new_topic(dep, "Mixed"), f"CG_mixed_{uuid.uuid4().hex[:6]}"
    got: list[bytes] = []
    lock = threading.Lock()

    def record(msgs: Any, ctx: Any) -> ConsumeConcurrentlyStatus:
        with lock:
            got.extend(m.body for m in msgs)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    ours = PushConsumer(name, namesrv=list(dep.namesrvs), namespace=dep.spec.namespace, **FAST)
    ours.subscribe(topic, "*")
    ours.register_message_listener(record)
    ours.start()
    real = RealClientLines(start_client("consume", dep.namesrv_addr(), name, topic, "1000000", "--timeout", "120"))
    try:
        wait_until(lambda: len([q for q in ours.assignment() if q.topic == topic]) == QUEUES // 2, 30,
                   "this consumer down to half the queues once the real client joined")
        sent = {f"mixed-{i}".encode() for i in range(80)}
        for body in sorted(sent):
            producer.send(Message(topic, body))
        wait_until(lambda: sent <= set(got) | set(real.bodies()), 30, "every message consumed by one of the two")
        theirs = real.bodies()
        with lock:
            mine = list(got)
        assert theirs and mine, "both members consumed a share"
        assert not set(mine) & set(theirs), "a message consumed by both members"
        assert len(mine) == len(set(mine)) and len(theirs) == len(set(theirs))
    finally:
        ours.shutdown()
        real.proc.terminate()
        real.proc.wait(timeout=30)


def test_bodies_a_real_client_compressed_are_delivered_plain(dep: Deployment) -> None:
    """The C++ client deflates bodies over 4 KiB (sysFlag 0x1, as Java's producer does); the broker
    stores them so; a PushConsumer's listener gets them as they were sent."""
    from clients.consumer.push_consumer import PushConsumer
    from tests.e2e.test_real_client import run_client

    topic, name = new_topic(dep, "Deflated"), f"CG_deflated_{uuid.uuid4().hex[:6]}"
    sent = run_client("produce", dep.namesrv_addr(), topic, "3", "--body-size", "6000")
    assert all("error" not in s for s in sent), sent
    got: list[Any] = []
    arrived = threading.Event()

    def record(msgs: Any, ctx: Any) -> ConsumeConcurrentlyStatus:
        got.extend(msgs)
        if len(got) >= 3:
            arrived.set()
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    c = PushConsumer(name, namesrv=list(dep.namesrvs), namespace=dep.spec.namespace, **FAST)
    c.subscribe(topic, "*")
    c.register_message_listener(record)
    c.start()
    try:
        assert arrived.wait(30), f"{len(got)} of 3 delivered"
    finally:
        c.shutdown()
    assert any(m.sys_flag & 0x1 for m in got), "the real client compressed them (the case under test)"
    assert sorted(m.body for m in got) == sorted(s["body"].encode() for s in sent)


@pytest.mark.parametrize("group, topics, options, words", [
    ("bad group!", "T", {}, "the specified group"),
    ("DEFAULT_CONSUMER", "T", {}, "consumerGroup can not equal"),
    ("CG_ok", {}, {}, "no subscription"),
    ("CG_ok", "bad topic!", {}, "topic"),
    ("CG_ok", "T", {"consume_thread_max": 0}, "consume_thread_max"),
])
def test_a_group_with_bad_settings_is_refused_before_any_actor_starts(
        group: str, topics: Any, options: dict[str, Any], words: str) -> None:
    with pytest.raises(MQClientError, match=words):
        ConsumerGroup.start(2, group, topics, ok, namespace="nowhere", **options)
