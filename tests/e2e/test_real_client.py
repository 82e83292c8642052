"""An unmodified RocketMQ client library (PyPI `rocketmq` 0.4.4: rocketmq-client-cpp) against
NameServers and brokers on Ray, over real TCP on 127.0.0.1: routes, produce, consume, consumer
groups, broker kills, and the mixed paths with the Ray-native producer and consumer."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest
import ray

from actors.deployment.launcher import Deployment
from actors.deployment.spec import BrokerSpec
from clients.admin.client import AdminClient
from clients.consumer.pull_consumer import PullConsumer
from clients.interop.real_client import command
from clients.producer.producer import Message, Producer
from namesrv.common.waiting import wait_until
from namesrv.protocol.codes import RequestCode, ResponseCode
from namesrv.protocol.constants import AUTO_CREATE_TOPIC_KEY_TOPIC
from namesrv.remoting.wire_command import LanguageCode
from tests.support.ray_cluster import (
    DeploymentFactory,
    broker_names,
    registered_deployment,
    wait_for_route_everywhere,
    wait_registered_everywhere,
)

CPP = int(LanguageCode.CPP)


def run_client(*args: str, timeout: float = 120) -> list[dict[str, Any]]:
    """Run the real client to completion; its JSON lines."""
    out = subprocess.run(command(*args), capture_output=True, text=True, timeout=timeout)
    lines = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    assert lines and "done" in lines[-1], (
        f"client failed: rc={out.returncode}\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}")
    return lines[:-1]


def start_client(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(command(*args), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def finish(proc: subprocess.Popen[str], timeout: float = 180) -> list[dict[str, Any]]:
    stdout, stderr = proc.communicate(timeout=timeout)
    lines = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    assert lines and "done" in lines[-1], f"client failed: rc={proc.returncode}\n{stdout[-2000:]}\n{stderr[-2000:]}"
    return lines[:-1]


TCP_CLUSTER: dict[str, Any] = {"brokers": [BrokerSpec("broker-a"), BrokerSpec("broker-b")], "namesrv_count": 2,
                               "broker_port": 0}
"""Two NameServers and two brokers on TCP ports of their own."""


@pytest.fixture(scope="module")
def shared_cluster(ray_local: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    """One deployment for the tests that fault nothing: each uses topics and groups of its own."""
    with registered_deployment(tmp_path_factory.mktemp("real-client"), **TCP_CLUSTER) as dep:
        yield dep


@pytest.fixture
def tcp_cluster(deployments: DeploymentFactory) -> Iterator[Deployment]:
    """A deployment of the test's own, for the tests that kill a broker."""
    dep = deployments.deploy(**TCP_CLUSTER)
    wait_registered_everywhere(dep)
    yield dep


def create_topic(dep: Deployment, topic: str, queues: int = 4) -> None:
    """Create `topic` on every broker and wait until every NameServer routes it to all of them: the
    real client asks either NameServer, and each learns the topic at its broker's next registration."""
    AdminClient(dep).create_topic(topic, read_queue_nums=queues, write_queue_nums=queues)
    every = {spec.broker_name for spec in dep.broker_specs.values()}
    wait_for_route_everywhere(dep, topic, lambda r: broker_names(r) == every, 30, f"{topic} on every broker")


def wire_log(dep: Deployment) -> list[Any]:
    return [r for ns in dep.namesrvs.values() for r in ray.get(ns.get_wire_log.remote(), timeout=60)]


# ---------------------------------------------------------------------------- routes (issue: NameServer TCP)
def test_a_real_client_gets_its_route_from_our_namesrvs(shared_cluster: Deployment) -> None:
    dep = shared_cluster
    create_topic(dep, "RouteTopic")
    sends = run_client("produce", dep.namesrv_addr(), "RouteTopic", "4")
    assert all("error" not in s for s in sends), sends
    served = [r for r in wire_log(dep) if r.language == CPP and r.code == RequestCode.GET_ROUTEINFO_BY_TOPIC]
    assert any(r.subject == "RouteTopic" and r.response_code == ResponseCode.SUCCESS for r in served), served
    served_by_brokers = sum(ray.get(b.get_runtime_info.remote(), timeout=60)["remoting"]["requests"]
                            for b in dep.brokers.values())
    assert served_by_brokers >= 4, "the client dialled the brokers the route named and sent there"


def test_a_missing_topic_is_auto_created_through_tbw102_as_rocketmq_does(shared_cluster: Deployment) -> None:
    dep = shared_cluster
    sends = run_client("produce", dep.namesrv_addr(), "AutoCreated", "3")
    assert all("error" not in s for s in sends), sends
    log = [r for r in wire_log(dep) if r.language == CPP and r.code == RequestCode.GET_ROUTEINFO_BY_TOPIC]
    assert any(r.subject == "AutoCreated" and r.response_code == ResponseCode.TOPIC_NOT_EXIST for r in log)
    assert any(r.subject == AUTO_CREATE_TOPIC_KEY_TOPIC and r.response_code == ResponseCode.SUCCESS for r in log)
    route = wait_until(lambda: AdminClient(dep).route("AutoCreated"), 10, "the auto-created topic's route")
    assert len(route.broker_datas) == 1, "created on the one broker that received the first message"


# ---------------------------------------------------------------------------- produce and consume
def test_produce_and_consume_with_tags_keys_and_properties(shared_cluster: Deployment) -> None:
    dep = shared_cluster
    create_topic(dep, "RoundTrip")
    sends = run_client("produce", dep.namesrv_addr(), "RoundTrip", "40", "--tag", "TagB")
    acked = {s["msg_id"]: s for s in sends if "error" not in s}
    assert len(acked) == 40, [s for s in sends if "error" in s]  # what the client said about a failed send
    got = run_client("consume", dep.namesrv_addr(), "CID_round_trip", "RoundTrip", "40", "--timeout", "60")
    by_id = {m["msg_id"]: m for m in got}
    assert set(by_id) == set(acked)
    for msg_id, s in acked.items():
        m = by_id[msg_id]
        assert (m["body"], m["tags"], m["keys"], m["seq"], m["origin"]) == (
            s["body"], "TagB", f"key-{s['seq']}", str(s["seq"]), "real-client")
    assert len({m["queue_id"] for m in got}) > 1, "the producer spread the messages over the queues"


def test_a_tag_expression_filters_on_the_broker(shared_cluster: Deployment) -> None:
    dep = shared_cluster
    create_topic(dep, "Tagged", queues=2)
    keep = run_client("produce", dep.namesrv_addr(), "Tagged", "6", "--tag", "Keep")
    drop = run_client("produce", dep.namesrv_addr(), "Tagged", "6", "--tag", "Drop", "--prefix", "drop")
    failed = [s for s in keep + drop if "error" in s]
    assert not failed, failed  # what the client said about a send it gave up on
    got = run_client("consume", dep.namesrv_addr(), "CID_tagged", "Tagged", "6", "--expression", "Keep",
                     "--timeout", "60", "--linger", "2")
    by_id = {m["msg_id"]: m for m in got}
    missing = [s for s in keep if s["msg_id"] not in by_id]
    assert not missing, f"acknowledged, never delivered: {missing}; delivered: {got}"
    assert len(got) == 6 and {m["tags"] for m in got} == {"Keep"}


def test_consumers_of_one_group_share_the_queues(shared_cluster: Deployment) -> None:
    dep = shared_cluster
    create_topic(dep, "Shared")
    addr = dep.namesrv_addr()
    consumers = [start_client("consume", addr, "CID_shared", "Shared", "60", "--timeout", "40", "--linger", "3")
                 for _ in range(2)]

    def members() -> bool:
        groups = [ray.get(b.get_runtime_info.remote(), timeout=60)["consumer_groups"].get("CID_shared", []) for b in
                  dep.brokers.values()]
        return all(len(g) == 2 for g in groups)

    wait_until(members, 30, "both consumers registered on every broker")
    time.sleep(2)  # rebalance runs on the members' own schedule after NOTIFY_CONSUMER_IDS_CHANGED
    sends = run_client("produce", addr, "Shared", "60")
    acked = {s["msg_id"] for s in sends if "error" not in s}
    got = [finish(c) for c in consumers]
    ids = [{m["msg_id"] for m in g} for g in got]
    assert ids[0] | ids[1] == acked, "every message consumed by the group"
    assert ids[0] and ids[1], "both members got a share of the queues"


# ---------------------------------------------------------------------------- broker kills
@pytest.mark.parametrize("fault", ["ray.kill", "SIGKILL"])
def test_broker_killed_mid_stream_loses_nothing_acknowledged(tcp_cluster: Deployment, fault: str) -> None:
    dep = tcp_cluster
    topic = f"Killed{fault.replace('.', '')}"
    create_topic(dep, topic)
    victim = dep.addr_of("broker-a-0")
    producer = start_client("produce", dep.namesrv_addr(), topic, "150", "--rate", "50")
    time.sleep(1.0)  # the producer is mid-stream (sending at 50/s for 3 s)
    if fault == "ray.kill":
        dep.kill_broker(victim)
    else:
        dep.signal_broker(victim, signal.SIGKILL)
    sends = finish(producer)
    acked = {s["msg_id"] for s in sends if "error" not in s}
    assert len(acked) >= 140, f"retries landed on the other broker: {len(acked)} of 150 acknowledged"
    dep.restart_broker(victim)
    wait_registered_everywhere(dep)
    got = run_client("consume", dep.namesrv_addr(), f"CID_{topic}", topic, str(len(acked)), "--timeout", "60")
    assert acked <= {m["msg_id"] for m in got}, "every acknowledged message is consumed after the restart"


# ---------------------------------------------------------------------------- mixed paths
def test_real_client_to_ray_consumer_and_ray_producer_to_real_consumer(shared_cluster: Deployment) -> None:
    dep = shared_cluster
    create_topic(dep, "FromReal")
    sends = run_client("produce", dep.namesrv_addr(), "FromReal", "20")
    acked = {s["body"] for s in sends if "error" not in s}
    consumed = PullConsumer(dep.spec.namespace, list(dep.namesrvs)).consume_all("FromReal")
    assert {m.body.decode() for m in consumed} == acked
    assert all(m.properties.get("origin") == "real-client" and m.properties.get("TAGS") == "TagA" for m in consumed)

    create_topic(dep, "FromRay")
    with Producer("ray_to_real", namesrv=list(dep.namesrvs), namespace=dep.spec.namespace) as p:
        results = [p.send(Message("FromRay", f"ray-{i}".encode(), tags="TagR", keys=f"key-{i}",
                                  properties={"seq": str(i), "origin": "ray"})) for i in range(20)]
    got = run_client("consume", dep.namesrv_addr(), "CID_from_ray", "FromRay", "20", "--timeout", "60")
    assert {m["msg_id"] for m in got} == {r.msg_id for r in results}, "the real client sees the Ray producer's ids"
    assert all(m["tags"] == "TagR" and m["origin"] == "ray" for m in got)


def test_a_consumer_that_dies_before_committing_gets_its_messages_delivered_again(shared_cluster: Deployment) -> None:
    """At-least-once: messages a consumer received but whose offsets it had not committed when it
    was killed go to the next member of the group."""
    dep = shared_cluster
    broker_addr = dep.addr_of("broker-a-0")
    ray.get(dep.brokers[broker_addr].create_topic.remote("Redeliver", 2, 2), timeout=60)  # on one broker only
    wait_until(lambda: AdminClient(dep).route("Redeliver"), 10, "route of Redeliver")
    sends = run_client("produce", dep.namesrv_addr(), "Redeliver", "30")
    acked = {s["msg_id"] for s in sends if "error" not in s}
    first = start_client("consume", dep.namesrv_addr(), "CID_redeliver", "Redeliver", "1000", "--timeout", "60")
    assert first.stdout is not None
    got_first: dict[str, dict[str, Any]] = {}
    while len(got_first) < len(acked):
        line = first.stdout.readline()
        assert line, "the first consumer ended before receiving everything"
        if line.startswith("{") and "msg_id" in line:
            record = json.loads(line)
            got_first[record["msg_id"]] = record
    first.send_signal(signal.SIGKILL)  # before its periodic offset commit (every 5 s)
    first.wait(timeout=30)
    host, port = broker_addr.rsplit(":", 1)
    from namesrv.protocol.codes import BrokerRequestCode
    from namesrv.remoting.client import RemotingClient

    with RemotingClient(host, int(port)) as c:
        committed = {q: int((c.invoke(BrokerRequestCode.QUERY_CONSUMER_OFFSET, {
            "consumerGroup": "CID_redeliver", "topic": "Redeliver", "queueId": q}).ext_fields or {})["offset"])
            for q in range(2)}
    owed = {m["msg_id"] for m in got_first.values() if m["queue_offset"] >= committed[m["queue_id"]]}
    assert owed, f"the consumer committed everything before it died ({committed}); nothing to redeliver"
    second = run_client("consume", dep.namesrv_addr(), "CID_redeliver", "Redeliver", str(len(owed)),
                        "--timeout", "60")
    assert owed <= {m["msg_id"] for m in second}, "every uncommitted message is delivered again"
    assert acked <= set(got_first) | {m["msg_id"] for m in second}
