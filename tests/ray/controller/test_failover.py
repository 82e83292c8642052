"""Failover on a local Ray (issue 21, controller mode): a controller decides which replica of a
broker set is master; killing the master's actor promotes its slave, which every NameServer then
routes as brokerId 0, which accepts sends and holds every acknowledged message at the same queue
offsets; the old master comes back as a slave, cuts its unreplicated tail and copies the new
master's log; killing a slave only shrinks the SyncStateSet; a controller killed during a failover
delays the election but never lets two masters write."""

from __future__ import annotations

import itertools
import json
import time
from pathlib import Path
from typing import Any

import pytest
import ray
from ray.exceptions import RayActorError

from actors.controller.start import controller_config, start_controller
from actors.deployment.launcher import Deployment
from actors.deployment.spec import BrokerSpec
from clients.admin.client import AdminClient
from clients.cli.main import main as namesrv_main
from clients.consumer.pull_consumer import PullConsumer
from clients.producer.producer import Message, MQClientError, Producer
from namesrv.common.waiting import wait_until
from namesrv.protocol.codes import BrokerRequestCode, ResponseCode
from namesrv.remoting.command import RemotingRequest
from namesrv.store.mapped_file_queue import segment_paths
from tests.support.ray_cluster import (
    FAILOVER_HA,
    DeploymentFactory,
    await_master_and_slave_in_sync,
    broker_status,
    read_all,
    routes_master_to,
    send_numbered,
    stopped,
    wait_for_route_everywhere,
)

TOPIC = "FailT"
A0, A1 = "broker-a-0", "broker-a-1"
HA = FAILOVER_HA


def status(dep: Deployment, broker: str) -> dict[str, Any]:
    return broker_status(dep, broker)


def deploy(deployments: DeploymentFactory, namesrv_count: int = 2, **overrides: Any) -> Deployment:
    """broker-a's master and slave in controller mode, in sync, with TOPIC; 2 NameServers where the
    test looks at what every NameServer routes, 1 where it looks at the brokers only."""
    dep = deployments.deploy([BrokerSpec("broker-a", 0), BrokerSpec("broker-a", 1)], namesrv_count=namesrv_count,
                             controller=True, broker_overrides=HA | overrides, broker_port=0)  # replication over TCP
    await_master_and_slave_in_sync(dep, A0, A1, TOPIC)
    return dep


def send(dep: Deployment, broker: str, n: int, start: int = 0) -> list[Any]:
    return send_numbered(dep, broker, TOPIC, n, start)


def writable_spans(role_log: list[dict[str, Any]], end_ms: int) -> list[tuple[int, int]]:
    spans, start = [], None
    for entry in [*role_log, {"atMs": end_ms, "role": "END"}]:
        if start is not None and entry["role"] != "SYNC_MASTER":
            spans.append((start, entry["atMs"]))
            start = None
        if entry["role"] == "SYNC_MASTER" and start is None:
            start = entry["atMs"]
    return spans


def log_bytes(dep: Deployment, broker: str) -> bytes:
    info = ray.get(dep.brokers[dep.addr_of(broker)].get_runtime_info.remote(), timeout=30)
    return b"".join(p.read_bytes() for p in segment_paths(Path(info["store_dir"]) / "store" / "commitlog"))


def test_a_new_sets_configured_master_wins_its_first_election(deployments: DeploymentFactory) -> None:
    """Deployment.start brings a controller-mode set's brokerId-0 broker up first and waits until it
    has joined the controller: its slave, asking at once (no first-elect delay), never wins the set's
    first election. (Started together, whichever replica reached the controller first won.)"""
    dep = deployments.deploy([BrokerSpec("broker-a", 0), BrokerSpec("broker-a", 1)], namesrv_count=1,
                             controller=True, broker_overrides=HA | {"controller_first_elect_delay_ms": 0})
    wait_until(lambda: status(dep, A1)["role"] == "SLAVE", 30, f"{A1} a slave")
    master, slave = status(dep, A0), status(dep, A1)
    assert master["role"] == "SYNC_MASTER" and master["masterEpoch"] == 1, master["role_log"]
    assert {e["role"] for e in slave["role_log"]} == {"SLAVE"}, slave["role_log"]


@pytest.mark.timeout(240)
def test_master_killed_slave_takes_over_and_old_master_returns_as_slave(deployments: DeploymentFactory,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    dep = deploy(deployments)
    acked = send(dep, A0, 40)
    assert all(r.ok for r in acked), acked
    expected = {(r.ext_fields["queueId"], r.ext_fields["queueOffset"]): f"m{i}".encode() * 10
                for i, r in enumerate(acked)}
    before = status(dep, A0)["max_offset"]
    old_log = status(dep, A0)["role_log"]

    with stopped(dep.broker_pid(A1)):
        # The stopped slave's pending replication call may still carry the first send to it; the
        # second reaches no request of the slave's: stored on the master only, never acknowledged.
        pending = [dep.brokers[dep.addr_of(A0)].send_message.remote(TOPIC, 0, b"first-unacknowledged")]
        wait_until(lambda: status(dep, A0)["max_offset"] > before, 10, "the first send stored on the master")
        time.sleep(0.3)
        middle = status(dep, A0)["max_offset"]
        pending.append(dep.brokers[dep.addr_of(A0)].send_message.remote(TOPIC, 0, b"never-acknowledged"))
        wait_until(lambda: status(dep, A0)["max_offset"] > middle, 10, "the unreplicated send stored on the master")
        killed_ms = int(time.time() * 1000)
        master_pid = dep.broker_pid(A0)
        dep.kill_broker(A0)
        # ray.kill returns before the process is gone: over TCP a master still alive would answer
        # the resumed slave's next request with the unacknowledged record; resume it once it is dead.
        wait_until(lambda: not Path(f"/proc/{master_pid}").exists(), 10, "the master's process gone")
    for ref in pending:  # never acknowledged: the master died first, or answered FLUSH_SLAVE_TIMEOUT
        try:
            reply = ray.get(ref, timeout=30)
        except RayActorError:
            continue
        assert reply.code == ResponseCode.FLUSH_SLAVE_TIMEOUT, reply

    wait_until(lambda: status(dep, A1)["role"] == "SYNC_MASTER", 15, "broker-a-1 promoted")
    new = status(dep, A1)
    assert new["broker_id"] == 0 and new["masterEpoch"] == 2, (new["role_log"], old_log)
    wait_for_route_everywhere(dep, TOPIC, routes_master_to(dep.addr_of(A1)), 15, "broker-a-1 as brokerId 0")
    assert all(r.ok for r in send(dep, A1, 8, start=100))
    held = read_all(dep, A1, TOPIC)
    assert {k: held.get(k) for k in expected} == expected  # every acknowledged message, same queue and offset
    assert b"never-acknowledged" not in held.values()
    spans = writable_spans(old_log, killed_ms) + writable_spans(new["role_log"], int(time.time() * 1000))
    spans.sort()
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans)), spans  # never two writable masters

    dep.restart_broker(A0)  # from its store: it returns as a slave and cuts what it wrote after the fence
    wait_until(lambda: status(dep, A0)["role"] == "SLAVE" and status(dep, A0)["controller"]["truncations"], 30,
               "the old master back as a slave, its tail cut")
    back = status(dep, A0)
    assert back["role_log"][0]["role"] == "SLAVE" and all(e["role"] == "SLAVE" for e in back["role_log"])
    assert back["controller"]["truncations"][0]["bytes"] > 0
    wait_until(lambda: status(dep, A0)["max_offset"] == status(dep, A1)["max_offset"], 30, "the old master caught up")
    assert log_bytes(dep, A0) == log_bytes(dep, A1)
    refused = ray.get(dep.brokers[dep.addr_of(A0)].send_message.remote(TOPIC, 0, b"no"), timeout=30)
    assert refused.code == ResponseCode.SERVICE_NOT_AVAILABLE
    admin = AdminClient(dep)  # topics go to the elected master, not to the spec's brokerId 0
    assert admin.master_addrs() == [dep.addr_of(A1)]
    assert list(admin.create_topic("AfterFailoverT", read_queue_nums=2, write_queue_nums=2)) == [dep.addr_of(A1)]
    wait_for_route_everywhere(dep, "AfterFailoverT", routes_master_to(dep.addr_of(A1)), 15, "the new topic's route")

    capsys.readouterr()
    assert namesrv_main(["getBrokerEpoch", "-b", "broker-a", "--json", "--namespace", dep.spec.namespace]) == 0
    caches = json.loads(capsys.readouterr().out)
    assert sorted(caches) == sorted([dep.addr_of(A0), dep.addr_of(A1)])  # keyed by broker address
    assert all([e["epoch"] for e in c["epochList"]] == [1, 2] for c in caches.values()), caches


def pop_all(broker: Any, topic: str, n: int, until_s: float = 10.0) -> list[Any]:
    """Pop `topic` on `broker` for group PopG (3 s invisible) until `n` messages came (or `until_s`)."""
    got: list[Any] = []
    deadline = time.monotonic() + until_s
    while len(got) < n and time.monotonic() < deadline:
        answer = ray.get(broker.process.remote(RemotingRequest(BrokerRequestCode.POP_MESSAGE, {
            "consumerGroup": "PopG", "topic": topic, "queueId": "-1", "maxMsgNums": "32", "invisibleTime": "3000",
            "pollTime": "0", "bornTime": str(int(time.time() * 1000)), "initMode": "0"})), timeout=30)
        if answer.ok and answer.payload is not None and answer.payload.messages:
            got += answer.payload.messages
        else:
            time.sleep(0.2)
    assert len(got) == n, f"popped {len(got)} of {n}"
    return got


@pytest.mark.timeout(180)
def test_topics_created_just_before_the_kill_are_served_by_the_new_master(deployments: DeploymentFactory) -> None:
    """Issue 33, point 0: with the periodic metadata copy effectively off, a topic created through the
    admin path (its own queue count and order flag) and one auto-created by a send, each written,
    are served in full by the promoted slave under their own configs, not TOPIC_NOT_EXIST; a group's
    config and committed offset are the promoted slave's too (before: rewound to the last copy); and
    (issue 35) what a pop consumer had in flight is revived by the promoted slave, what it acked is not."""
    dep = deploy(deployments, namesrv_count=1, slave_sync_interval_ms=3_600_000)
    a0 = dep.brokers[dep.addr_of(A0)]
    created = ray.get(a0.create_topic.remote("MetaT", 6, 6, order=True), timeout=30)
    assert created.code == ResponseCode.SUCCESS, created
    acked = send_numbered(dep, A0, "MetaT", 12) + send_numbered(dep, A0, "AutoT", 8)
    assert all(r.ok for r in acked), acked
    mine = ray.get(a0.get_topic_config_table.remote(), timeout=30)
    group = RemotingRequest(BrokerRequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
                            body=b'{"groupName": "MetaG", "retryMaxTimes": 3}')
    commit = RemotingRequest(BrokerRequestCode.UPDATE_CONSUMER_OFFSET,
                             {"consumerGroup": "MetaG", "topic": "MetaT", "queueId": "2", "commitOffset": "3"})
    assert ray.get(a0.process.remote(group), timeout=30).ok and ray.get(a0.process.remote(commit), timeout=30).ok
    query = RemotingRequest(BrokerRequestCode.QUERY_CONSUMER_OFFSET,
                            {"consumerGroup": "MetaG", "topic": "MetaT", "queueId": "2"})
    a1 = dep.brokers[dep.addr_of(A1)]
    wait_until(lambda: ray.get(a1.process.remote(query), timeout=30).ext_fields.get("offset") == "3", 30,
               "the offset on the slave, by the log alone")
    popped = pop_all(a0, "MetaT", 12)  # issue 35: in flight on the master, one acked
    acked_one = popped[0]
    answer = ray.get(a0.process.remote(RemotingRequest(BrokerRequestCode.ACK_MESSAGE, {
        "consumerGroup": "PopG", "topic": "MetaT", "queueId": str(acked_one.queue_id),
        "offset": str(acked_one.queue_offset), "extraInfo": acked_one.properties["POP_CK"]})), timeout=30)
    assert answer.ok, answer
    wait_until(lambda: ray.get(a1.get_runtime_info.remote(), timeout=30)["pop_in_flight"] == 11, 30,
               "the slave holds what is in flight, by the log")
    master_pid = dep.broker_pid(A0)
    dep.kill_broker(A0)
    wait_until(lambda: not Path(f"/proc/{master_pid}").exists(), 10, "the master's process gone")
    wait_until(lambda: status(dep, A1)["role"] == "SYNC_MASTER", 15, "broker-a-1 promoted")
    revived = {m.body for m in pop_all(a1, "MetaT", 11, until_s=30)}  # after their invisible time, from the retry topic
    assert revived == {m.body for m in popped[1:]} and acked_one.body not in revived

    theirs = ray.get(dep.brokers[dep.addr_of(A1)].get_topic_config_table.remote(), timeout=30)
    assert theirs["MetaT"] == mine["MetaT"] and theirs["MetaT"]["readQueueNums"] == 6
    assert theirs["MetaT"]["order"] is True and theirs["AutoT"] == mine["AutoT"]
    held = read_all(dep, A1, "MetaT")  # the sends ran concurrently: any order within a queue
    assert sorted(held) == [(q, o) for q in range(4) for o in range(3)]
    assert sorted(held.values()) == sorted(f"m{i}".encode() * 10 for i in range(12))
    assert sorted(read_all(dep, A1, "AutoT").values()) == sorted(f"m{i}".encode() * 10 for i in range(8))
    assert ray.get(a1.process.remote(query), timeout=30).ext_fields.get("offset") == "3"
    groups = ray.get(a1.process.remote(RemotingRequest(BrokerRequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)), timeout=30)
    assert groups.payload["subscriptionGroupTable"]["MetaG"]["retryMaxTimes"] == 3


@pytest.mark.timeout(180)
def test_slave_killed_sync_state_set_shrinks_and_sends_go_on(deployments: DeploymentFactory) -> None:
    """The slave's death (its actor channel) takes it out of the SyncStateSet at once, long before
    haMaxTimeSlaveNotCatchup (a minute here): sends right after the kill are acknowledged."""
    dep = deploy(deployments, namesrv_count=1, ha_max_time_slave_not_catchup_ms=60_000, slave_timeout_ms=10_000)
    master_id = status(dep, A0)["controller"]["controller_broker_id"]
    dep.kill_broker(A1)
    started = time.monotonic()
    replies = send(dep, A0, 20)
    assert all(r.ok for r in replies), replies
    assert time.monotonic() - started < 5
    wait_until(lambda: status(dep, A0)["controller"]["sync_state_set"] == [master_id], 5, "the SyncStateSet shrunk")
    assert status(dep, A0)["role"] == "SYNC_MASTER"


@pytest.mark.timeout(180)
def test_controller_killed_during_failover_election_waits_for_its_restart(deployments: DeploymentFactory) -> None:
    dep = deploy(deployments)
    assert all(r.ok for r in send(dep, A0, 12))
    ray.kill(dep.controller, no_restart=True)
    time.sleep(1.5)  # heartbeats and the long poll fail meanwhile: roles, sends and routes stay
    assert all(r.ok for r in send(dep, A0, 6, start=20))
    assert status(dep, A0)["role"] == "SYNC_MASTER" and status(dep, A1)["role"] == "SLAVE"
    wait_for_route_everywhere(dep, TOPIC, routes_master_to(dep.addr_of(A0)), 5, "broker-a-0 still brokerId 0")
    killed_ms = int(time.time() * 1000)
    dep.kill_broker(A0)
    time.sleep(2.0)
    assert status(dep, A1)["role"] == "SLAVE"  # nobody to elect it: it stays fenced
    dep.controller = start_controller(dep.spec.namespace, controller_config("fast"), detached=False)
    wait_until(lambda: status(dep, A1)["role"] == "SYNC_MASTER", 20, "the election after the controller restarts")
    promoted = [e for e in status(dep, A1)["role_log"] if e["role"] == "SYNC_MASTER"]
    assert promoted[0]["atMs"] > killed_ms
    assert all(r.ok for r in send(dep, A1, 4, start=50))


@pytest.mark.timeout(240)
def test_ray_producer_and_consumer_follow_the_new_master_over_tcp_addresses(deployments: DeploymentFactory) -> None:
    """TCP brokers (routes carry host:port): the Ray-native producer keeps sending to brokerName
    broker-a through a master kill, and a consumer then reads every acknowledged message from the
    new master at the offsets the producer was told."""
    dep = deployments.deploy([BrokerSpec("broker-a", 0), BrokerSpec("broker-a", 1)], namesrv_count=2,
                             controller=True, broker_overrides=HA, broker_port=0)
    wait_until(lambda: status(dep, A0)["role"] == "SYNC_MASTER" and
               len(status(dep, A0)["controller"]["sync_state_set"]) == 2, 30, "a master with its slave in sync")
    assert ray.get(dep.brokers[dep.addr_of(A0)].create_topic.remote(TOPIC, 4, 4), timeout=30).ok
    wait_for_route_everywhere(dep, TOPIC, routes_master_to(dep.addr_of(A0)), 15, "broker-a-0 as brokerId 0")
    producer = Producer("fo-producer", namesrv=list(dep.namesrvs), namespace=dep.spec.namespace,
                        instance_name="fo-producer")
    producer.start()
    acked: dict[tuple[int, int], bytes] = {}
    failures = 0

    def send_some(n: int, start: int) -> None:
        nonlocal failures
        for i in range(start, start + n):
            body = f"p{i}".encode()
            try:
                r = producer.send(Message(TOPIC, body))
            except MQClientError:
                failures += 1
                continue
            if r.send_status == "SEND_OK":
                acked[(r.message_queue.queue_id, r.queue_offset)] = body

    try:
        send_some(30, 0)
        dep.kill_broker(A0)
        deadline = time.monotonic() + 30
        after_kill = len(acked)
        i = 1000
        while len(acked) < after_kill + 20 and time.monotonic() < deadline:
            send_some(1, i)
            i += 1
        assert len(acked) >= after_kill + 20, f"sends did not resume: {failures} failures"
    finally:
        producer.shutdown()
    held = {(m.queue_id, m.queue_offset): m.body
            for m in PullConsumer(dep.spec.namespace, list(dep.namesrvs)).consume_all(TOPIC)}
    assert {k: held.get(k) for k in acked} == acked


@pytest.mark.timeout(240)
def test_a_paused_master_is_deposed_and_fences_when_it_wakes(deployments: DeploymentFactory) -> None:
    """SIGSTOP of the master past the heartbeat timeout: the controller elects the slave; the old
    master, resumed, learns it was deposed, answers nothing it stored meanwhile as acknowledged,
    becomes a slave of the new master and ends with its log."""
    dep = deploy(deployments, namesrv_count=1)
    assert all(r.ok for r in send(dep, A0, 12))
    pid = dep.broker_pid(A0)
    with stopped(pid):
        late = dep.brokers[dep.addr_of(A0)].send_message.remote(TOPIC, 1, b"sent-to-a-paused-master")
        wait_until(lambda: status(dep, A1)["role"] == "SYNC_MASTER", 20, "the slave elected while the master sleeps")
        assert all(r.ok for r in send(dep, A1, 6, start=200))
    assert not ray.get(late, timeout=30).ok  # never acknowledged by a deposed master
    wait_until(lambda: status(dep, A0)["role"] == "SLAVE", 15, "the woken master fenced")
    wait_until(lambda: status(dep, A0)["max_offset"] == status(dep, A1)["max_offset"], 30, "the old master caught up")
    assert log_bytes(dep, A0) == log_bytes(dep, A1)
    epochs = [e["epoch"] for e in status(dep, A0)["role_log"]]
    assert epochs == sorted(epochs) and status(dep, A0)["masterEpoch"] == status(dep, A1)["masterEpoch"]
