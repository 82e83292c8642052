"""Ray-native producers sending over their own TCP connections to brokers that listen for clients
(broker_transport="tcp", the default; clients/impl/broker_tcp.py): the route still comes from the
NameServer actors, every send mode stores what it acknowledged, a dead broker's sends are retried
on another, and broker_transport="ray" keeps one actor call per send. Real brokers on free ports."""

from __future__ import annotations

import socket
import uuid

from actors.deployment.launcher import Deployment
from actors.deployment.spec import BrokerSpec
from clients.admin.client import AdminClient
from clients.consumer.pull_consumer import PullConsumer
from clients.producer.producer import Message, Producer, select_by_hash
from namesrv.common.waiting import wait_until
from tests.support.ray_cluster import (
    DeploymentFactory,
    broker_names,
    wait_for_route_everywhere,
    wait_registered_everywhere,
)

BROKERS = ["broker-a", "broker-b"]
QUEUES = 4


def tcp_brokers_with_topic(deployments: DeploymentFactory) -> tuple[Deployment, str]:
    dep = deployments.deploy(brokers=[BrokerSpec(b) for b in BROKERS], namesrv_count=1, broker_port=0)
    wait_registered_everywhere(dep)
    topic = f"Tcp_{uuid.uuid4().hex[:8]}"
    AdminClient(dep).create_topic(topic, read_queue_nums=QUEUES, write_queue_nums=QUEUES)
    wait_for_route_everywhere(dep, topic, lambda r: broker_names(r) == set(BROKERS), 15, "on both brokers")
    return dep, topic


def listening(addr: str) -> bool:
    host, port = addr.rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout=1).close()
    except OSError:
        return False
    return True


def producer(dep: Deployment, **kwargs: object) -> Producer:
    group = f"pg_{uuid.uuid4().hex[:8]}"
    return Producer(group, namesrv=list(dep.namesrvs), namespace=dep.spec.namespace, instance_name=group, **kwargs)


def test_every_send_mode_over_tcp_stores_what_it_acknowledged(deployments: DeploymentFactory) -> None:
    dep, topic = tcp_brokers_with_topic(deployments)
    acked: dict[str, bytes] = {}
    with producer(dep) as p:
        for i in range(40):
            r = p.send(Message(topic, f"sync {i}".encode(), keys=f"s{i}"))
            assert r.send_status == "SEND_OK" and r.attempts == 1
            acked[r.msg_id] = f"sync {i}".encode()
        futures = {p.send_async(Message(topic, f"async {i}".encode())): f"async {i}".encode() for i in range(40)}
        for f, body in futures.items():
            acked[f.result(timeout=60).msg_id] = body
        ordered = [p.send_orderly(Message(topic, f"order {k} {i}".encode()), select_by_hash, k)
                   for i in range(10) for k in ("a", "b")]
        for i in range(5):
            p.send_oneway(Message(topic, f"oneway {i}".encode()))
        assert p._direct is not None
        connected = set(p._direct._connections)
        routed = {addr for info in [p.publish_info(topic)] if info is not None and info.route is not None
                  for bd in info.route.broker_datas for addr in bd.broker_addrs.values()}
    assert connected == routed and all(":" in a for a in connected), "every broker was sent to over TCP"
    got: dict[str, bytes] = {}

    def all_consumed() -> bool:
        got.update({m.msg_id: m.body for m in PullConsumer(dep.spec.namespace, list(dep.namesrvs)).consume_all(topic)})
        return len(got) >= len(acked) + len(ordered) + 5

    wait_until(all_consumed, 60, "every acknowledged message and the oneway ones consumed")
    assert all(got[msg_id] == body for msg_id, body in acked.items())
    assert sum(1 for b in got.values() if b.startswith(b"oneway")) == 5
    for key in ("a", "b"):  # one queue per key, in send order
        mine = [r for r in ordered if got[r.msg_id].startswith(f"order {key} ".encode())]
        assert len({(r.message_queue.broker_name, r.message_queue.queue_id) for r in mine}) == 1
        assert [got[r.msg_id] for r in sorted(mine, key=lambda r: r.queue_offset)] == \
            [f"order {key} {i}".encode() for i in range(10)]


def test_a_dead_broker_in_a_stale_route_is_retried_on_the_other_over_tcp(deployments: DeploymentFactory) -> None:
    dep, topic = tcp_brokers_with_topic(deployments)
    with producer(dep, route_push=False, poll_name_server_interval_ms=600_000) as p:
        for _ in range(2 * QUEUES):  # a connection to each broker
            assert p.send(Message(topic, b"warm")).send_status == "SEND_OK"
        info = p.publish_info(topic)
        assert info is not None and info.route is not None
        addr = next(a for bd in info.route.broker_datas if bd.broker_name == "broker-a"
                    for a in bd.broker_addrs.values())
        dep.kill_broker("broker-a-0")  # ray.kill returns before the actor is gone: wait until its port is closed
        wait_until(lambda: not listening(addr), 30, f"broker-a ({addr}) gone")
        info = p.publish_info(topic)
        assert info is not None and "broker-a" in info.broker_names(), "the cached route is stale"
        results = [p.send(Message(topic, f"after {i}".encode())) for i in range(2 * QUEUES)]
        futures = [p.send_async(Message(topic, f"async {i}".encode())) for i in range(2 * QUEUES)]
        results += [f.result(timeout=60) for f in futures]
        stats = p.stats()
    assert all(r.message_queue.broker_name == "broker-b" for r in results)
    moved = [r for r in results if r.brokers_tried[0] == "broker-a"]
    assert moved and all(r.brokers_tried == ["broker-a", "broker-b"] for r in moved)
    assert stats.get("failed_attempts.no_answer", 0) >= len(moved)


def test_broker_transport_ray_keeps_actor_calls(deployments: DeploymentFactory) -> None:
    dep, topic = tcp_brokers_with_topic(deployments)
    with producer(dep, broker_transport="ray") as p:
        assert p.send(Message(topic, b"over Ray")).send_status == "SEND_OK"
        assert p._direct is None
