"""Replication on a local Ray: a master and its slave as real broker actors with real stores.

Sends to the master appear on the slave byte for byte; a restarted slave resumes from what it holds
(it never copies again); topic config, consumer offsets and subscription groups follow; SYNC_MASTER
acknowledges only what the slave holds (a stopped slave makes sends answer FLUSH_SLAVE_TIMEOUT); a
slave refuses sends and serves pulls at the master's offsets, also once the master is dead. The
brokers listen on TCP, so slaves replicate over their connection to the master's client port
(HA_TRANSFER); one test runs a slave over that, over Ray calls by choice (ha_transport "ray"), and
over Ray calls because its master has no TCP address.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import ray

from actors.deployment.launcher import Deployment
from actors.deployment.spec import BrokerSpec
from namesrv.acl.plain_acl import SessionCredentials, signature
from namesrv.common.waiting import wait_until
from namesrv.protocol.codes import BrokerRequestCode, ResponseCode
from namesrv.remoting.command import MQServerError, RemotingRequest
from namesrv.store.ha.wire import TransferRequest, peer_call_ext
from namesrv.store.mapped_file_queue import segment_paths
from tests.support.ray_cluster import DeploymentFactory, broker_info, stopped

TOPIC = "ReplT"
MASTER, SLAVE = "broker-a-0", "broker-a-1"
HA = {"slave_sync_interval_ms": 200, "slave_read_enable": True, "ha_poll_wait_ms": 500}


def deploy_pair(deployments: DeploymentFactory, broker_port: int | None = 0, **overrides: Any) -> Deployment:
    dep = deployments.deploy([BrokerSpec("broker-a", 0), BrokerSpec("broker-a", 1)], namesrv_count=1,
                             broker_port=broker_port, broker_overrides=HA | overrides)
    resp = ray.get(actor(dep, MASTER).create_topic.remote(TOPIC, 4, 4), timeout=30)
    assert resp.ok, resp
    return dep


def actor(dep: Deployment, broker: str) -> Any:
    """A broker's actor by its actor name (TCP brokers are keyed by their address)."""
    return dep.brokers[dep.addr_of(broker)]


def send(dep: Deployment, n: int, start: int = 0) -> list[Any]:
    master = actor(dep, MASTER)
    return ray.get([master.send_message.remote(TOPIC, i % 4, f"m{i}".encode() * 20) for i in range(start, start + n)],
                   timeout=60)


def ha(dep: Deployment, broker: str) -> dict[str, Any]:
    return ray.get(actor(dep, broker).get_ha_info.remote(), timeout=30)


def caught_up(dep: Deployment) -> bool:
    return bool(ha(dep, SLAVE)["offset"] == ha(dep, MASTER)["master_max"])


def log_bytes(dep: Deployment, broker: str) -> bytes:
    return b"".join(p.read_bytes() for p in segment_paths(Path(broker_info(actor(dep, broker))["store_dir"])
                                                          / "store" / "commitlog"))


@pytest.mark.timeout(180)
def test_slave_copies_log_config_offsets_and_resumes_after_restart(deployments: DeploymentFactory) -> None:
    # the periodic metadata copy off: config and offsets reach the slave only as records of the
    # replicated log, so once the slave shows them its log holds every record the master wrote
    dep = deploy_pair(deployments, slave_sync_interval_ms=3_600_000)
    assert all(r.ok for r in send(dep, 60))
    wait_until(lambda: caught_up(dep), 30, "the slave to catch up")
    assert log_bytes(dep, SLAVE) == log_bytes(dep, MASTER)
    assert ha(dep, SLAVE)["transport"] == "tcp"
    assert broker_info(actor(dep, SLAVE))["broker_role"] == "SLAVE"
    wait_until(lambda: TOPIC in ray.get(actor(dep, SLAVE).get_topic_config_table.remote()), 30,
               "the topic config on the slave")
    commit = RemotingRequest(BrokerRequestCode.UPDATE_CONSUMER_OFFSET,
                             {"consumerGroup": "g", "topic": TOPIC, "queueId": "1", "commitOffset": "7"})
    assert ray.get(actor(dep, MASTER).process.remote(commit), timeout=30).ok
    query = RemotingRequest(BrokerRequestCode.QUERY_CONSUMER_OFFSET, {"consumerGroup": "g", "topic": TOPIC,
                                                                      "queueId": "1"})
    wait_until(lambda: ray.get(actor(dep, SLAVE).process.remote(query)).ext_fields.get("offset") == "7", 30,
               "the consumer offset on the slave")
    group = RemotingRequest(BrokerRequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
                            body=b'{"groupName": "g", "consumeEnable": false, "retryMaxTimes": 3}')
    assert ray.get(actor(dep, MASTER).process.remote(group), timeout=30).ok
    groups = RemotingRequest(BrokerRequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
    wait_until(lambda: ray.get(actor(dep, SLAVE).process.remote(groups)).payload["subscriptionGroupTable"].get(
        "g", {}).get("retryMaxTimes") == 3, 30, "the subscription group on the slave")

    wait_until(lambda: caught_up(dep), 30, "the slave to hold the metadata records too")
    held = ha(dep, SLAVE)["offset"]
    slave_pid = dep.broker_pid(SLAVE)
    dep.kill_broker(SLAVE)
    # ray.kill returns before the process is gone: a slave still alive would copy the first of the
    # next sends (held then counts less than it restarts with); send once it is dead.
    wait_until(lambda: not Path(f"/proc/{slave_pid}").exists(), 10, "the slave's process gone")
    assert all(r.ok for r in send(dep, 40, start=60))  # ASYNC_MASTER: acknowledged without the slave
    dep.restart_broker(SLAVE)
    wait_until(lambda: caught_up(dep), 30, "the restarted slave to catch up")
    info = ha(dep, SLAVE)
    assert info["bytes_received"] == info["offset"] - held  # only what it missed: resumed, not re-copied
    assert log_bytes(dep, SLAVE) == log_bytes(dep, MASTER)


@pytest.mark.timeout(180)
def test_sync_master_acknowledges_only_what_the_slave_holds(deployments: DeploymentFactory) -> None:
    dep = deploy_pair(deployments, broker_role="SYNC_MASTER", slave_timeout_ms=1500)
    wait_until(lambda: ha(dep, MASTER)["sync_state_set"] == [0, 1], 30, "the slave in the SyncStateSet")
    replies = send(dep, 20)
    assert all(r.ok for r in replies), replies
    assert ha(dep, SLAVE)["offset"] >= ha(dep, MASTER)["slave_acks"][1] > 0
    end = ha(dep, MASTER)["master_max"]
    assert ha(dep, MASTER)["slave_acks"][1] == end  # every acknowledged byte is on the slave

    with stopped(dep.broker_pid(SLAVE)):
        [late] = send(dep, 1, start=20)
        assert late.code == ResponseCode.FLUSH_SLAVE_TIMEOUT, late
        assert late.ext_fields["queueOffset"] is not None  # stored on the master, offsets given
        assert ha(dep, MASTER)["flush_slave_timeouts"] == 1
    wait_until(lambda: caught_up(dep), 30, "the resumed slave to catch up")
    assert all(r.ok for r in send(dep, 5, start=21))
    assert log_bytes(dep, SLAVE) == log_bytes(dep, MASTER)


@pytest.mark.timeout(180)
def test_slave_refuses_sends_and_serves_pulls_at_the_masters_offsets(deployments: DeploymentFactory) -> None:
    dep = deploy_pair(deployments)
    send(dep, 24)
    wait_until(lambda: caught_up(dep), 30, "the slave to catch up")
    slave = actor(dep, SLAVE)
    wait_until(lambda: TOPIC in ray.get(slave.get_topic_config_table.remote()), 30, "the topic config on the slave")
    refused = ray.get(slave.send_message.remote(TOPIC, 0, b"no"), timeout=30)
    assert refused.code == ResponseCode.SERVICE_NOT_AVAILABLE and "slave" in refused.remark

    def pulled(broker: str) -> dict[str, Any]:
        return ray.get(actor(dep, broker).pull_message.remote(TOPIC, 2, 0, 32), timeout=30)

    from_master, from_slave = pulled(MASTER), pulled(SLAVE)
    assert from_slave["code"] == ResponseCode.SUCCESS
    assert [m["queue_offset"] for m in from_slave["messages"]] == list(range(6))
    assert [(m["queue_offset"], m["body"], m["msg_id"]) for m in from_slave["messages"]] == \
           [(m["queue_offset"], m["body"], m["msg_id"]) for m in from_master["messages"]]
    assert from_slave["next_begin_offset"] == from_master["next_begin_offset"] == 6
    at_end = ray.get(slave.pull_message.remote(TOPIC, 2, 6, 32), timeout=30)
    assert at_end["code"] == ResponseCode.PULL_RETRY_IMMEDIATELY  # master reachable: go back to it

    dep.kill_broker(MASTER)  # the master is gone: its messages are still readable, at the same offsets
    after = pulled(SLAVE)
    assert [(m["queue_offset"], m["body"]) for m in after["messages"]] == \
           [(m["queue_offset"], m["body"]) for m in from_master["messages"]]
    wait_until(lambda: ray.get(slave.pull_message.remote(TOPIC, 2, 6, 32))["code"] == ResponseCode.PULL_NOT_FOUND,
               30, "the slave to stop pointing at its dead master")


@pytest.mark.timeout(180)
def test_a_delayed_message_is_moved_by_the_master_alone(deployments: DeploymentFactory) -> None:
    """Only a master runs the schedule service: the slave's log stays its master's copy, byte for
    byte, with the delayed message moved to its queue once (by the master) and replicated."""
    dep = deploy_pair(deployments, message_delay_level="1s 1s")
    master = actor(dep, MASTER)
    sent = ray.get(master.send_message.remote(TOPIC, 0, b"later", {"DELAY": "1"}), timeout=30)
    assert sent.ok, sent
    wait_until(lambda: ray.get(master.pull_message.remote(TOPIC, 0, 0, 32), timeout=30)["messages"], 30,
               "the delayed message in its queue on the master")
    wait_until(lambda: caught_up(dep), 30, "the slave to catch up")
    assert log_bytes(dep, SLAVE) == log_bytes(dep, MASTER)
    page = ray.get(actor(dep, SLAVE).pull_message.remote(TOPIC, 0, 0, 32), timeout=30)
    assert [m["body"] for m in page["messages"]] == [b"later"]


@pytest.mark.timeout(240)
@pytest.mark.parametrize(("broker_port", "transport", "used"),
                         [(0, "tcp", "tcp"), (0, "ray", "ray"), (None, "tcp", "ray")],
                         ids=["tcp", "ray-by-choice", "ray-master-without-tcp"])
def test_a_sync_master_replicates_over_tcp_and_over_the_ray_fallback(deployments: DeploymentFactory,
                                                                     broker_port: int | None, transport: str,
                                                                     used: str) -> None:
    dep = deploy_pair(deployments, broker_port, broker_role="SYNC_MASTER", ha_transport=transport)
    wait_until(lambda: ha(dep, MASTER)["sync_state_set"] == [0, 1], 30, "the slave in the SyncStateSet")
    replies = send(dep, 30)
    assert all(r.ok for r in replies), replies
    assert ha(dep, MASTER)["slave_acks"][1] == ha(dep, MASTER)["master_max"]  # every acknowledged byte is on the slave
    info = ha(dep, SLAVE)
    assert info["transport"] == used and info["last_error"] is None, info
    # The master timed the batches of those sends until the slave acknowledged them (each send waited for it).
    timed = ray.get(actor(dep, MASTER).status.remote(), timeout=30)["replication_lag_ms"][1]
    assert timed["n"] >= 1 and 0 < timed["p50"] <= timed["p99"] <= timed["max"] < 30_000, timed
    wait_until(lambda: caught_up(dep), 30, "the slave to catch up")
    assert log_bytes(dep, SLAVE) == log_bytes(dep, MASTER)


@pytest.mark.timeout(180)
@pytest.mark.parametrize("transport", ["tcp", "ray"])
def test_a_slave_signs_its_transfers_as_a_broker_when_the_master_checks_acl(deployments: DeploymentFactory,
                                                                           tmp_path: Path, transport: str) -> None:
    """Over TCP (HA_TRANSFER) and over Ray calls alike (issue 33, point 4: the Ray path used to take no
    account at all, so any Ray driver could read every topic's raw log or forge an acknowledgement),
    only a broker's (or an admin's) account replicates."""
    acl = tmp_path / "plain_acl.yml"
    acl.write_text("accounts:\n  - accessKey: broker\n    secretKey: broker-secret\n    broker: true\n"
                   "  - accessKey: app\n    secretKey: app-secret\n    defaultTopicPerm: PUB|SUB\n")
    creds = SessionCredentials(access_key="broker", secret_key="broker-secret")
    app = SessionCredentials(access_key="app", secret_key="app-secret")
    dep = deployments.deploy([BrokerSpec("broker-a", 0), BrokerSpec("broker-a", 1)], namesrv_count=1, broker_port=0,
                             broker_overrides=HA | {"broker_role": "SYNC_MASTER", "acl_enable": True,
                                                    "acl_file": str(acl), "credentials": creds,
                                                    "ha_transport": transport})
    wait_until(lambda: ha(dep, MASTER)["sync_state_set"] == [0, 1], 30, "the slave in the SyncStateSet")
    info = ha(dep, SLAVE)
    assert info["transport"] == transport and info["last_error"] is None, info
    master = actor(dep, MASTER)
    transfer = TransferRequest(7, 0, 4096, 0)
    for who, why in ((None, "No accessKey"), (app, "Need broker permission")):
        with pytest.raises(MQServerError, match=why):
            ray.get(master.ha_transfer.remote(7, 0, 4096, 0, auth=signature(transfer.ext_fields(), None, who)),
                    timeout=30)
        with pytest.raises(MQServerError, match=why):
            ray.get(master.ha_metadata.remote(7, auth=signature(peer_call_ext("ha_metadata", 7), None, who)),
                    timeout=30)
    assert ha(dep, MASTER)["sync_state_set"] == [0, 1] and 7 not in ha(dep, MASTER)["slave_acks"]
    meta = ray.get(master.ha_metadata.remote(7, auth=signature(peer_call_ext("ha_metadata", 7), None, creds)),
                   timeout=30)
    assert "topicConfigTable" in meta


@pytest.mark.timeout(180)
def test_only_the_master_hands_out_halves_to_check_back(deployments: DeploymentFactory) -> None:
    """The check-back is a master's service (RocketMQ's TransactionalMessageCheckService runs on the
    master alone; over TCP this broker sends CHECK_TRANSACTION_STATE only while writable): a slave
    holding the same unresolved half answers a Ray-native producer's check_transactions with none,
    since its offsets are of its own log (a restarted old master's may have diverged) and the
    producer's answer goes to the master."""
    dep = deploy_pair(deployments, transaction_timeout_ms=500)
    half = ray.get(actor(dep, MASTER).send_message.remote(TOPIC, 0, b"undecided", {"TRAN_MSG": "true",
                                                                                  "PGROUP": "PG_repl_tx"}),
                   timeout=30)
    assert half.ok, half
    wait_until(lambda: caught_up(dep), 30, "the slave to hold the half")
    due = wait_until(lambda: ray.get(actor(dep, MASTER).check_transactions.remote("PG_repl_tx"), timeout=30), 30,
                     "the half due for its check-back on the master")
    assert [h["body"] for h in due] == [b"undecided"]
    assert ray.get(actor(dep, SLAVE).check_transactions.remote("PG_repl_tx"), timeout=30) == []
