"""SIGKILL of a SYNC_FLUSH broker in the middle of group-commit batches: many senders in flight, the
broker's process killed once the first acknowledgements came back (so batches are being written
and fsynced at that moment). After a restart from the same store, every message that was
acknowledged is readable at the queue offset its sender was given, and found again by its key
(QUERY_MESSAGE through the message index, which was being written and checkpointed too). The store's
segments are small and its checkpoint frequent, so the kill lands among segment rolls and
checkpoints.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import ray
from ray.exceptions import RayActorError

from actors.deployment.spec import BrokerSpec
from namesrv.common.waiting import wait_until
from namesrv.protocol.codes import ResponseCode
from namesrv.store.retention import disk_used_ratio
from tests.support.ray_cluster import DeploymentFactory, broker_info, local_ray, pull_all, wait_registered_everywhere
from tests.support.store import mounted_tmpfs

TOPIC = "TopicGroupCommitCrash"
QUEUES = 4
IN_FLIGHT = 3000
DISK_KIB = 32 * 1024
NO_RETENTION = {"disk_max_used_space_ratio": 95, "disk_space_clean_forcibly_ratio": 99,
                "disk_space_warning_level_ratio": 99}
"""The crash test is about recovery, not retention: on a machine whose disk is over 85 % used (RocketMQ's
diskSpaceCleanForciblyRatio), the broker would delete its segments at once, acknowledged messages with them."""


@pytest.fixture(scope="module")
def ray_session() -> Iterator[str]:
    with local_ray("test-group-commit-crash") as namespace:
        yield namespace


@pytest.fixture
def deployments(ray_session: str, tmp_path: Path) -> Iterator[DeploymentFactory]:
    factory = DeploymentFactory(tmp_path, prefix="gcc")
    try:
        yield factory
    finally:
        factory.close()


@pytest.mark.timeout(300)
def test_sigkill_during_group_commit_keeps_every_acknowledged_message(deployments: DeploymentFactory) -> None:
    dep = deployments.deploy(brokers=[BrokerSpec("broker-a")], namesrv_count=1,
                             broker_overrides={"flush_disk_type": "SYNC_FLUSH", "group_commit": True,
                                               "mapped_file_size_commit_log": 4096,
                                               "flush_interval_consume_queue_ms": 50, **NO_RETENTION})
    wait_registered_everywhere(dep)
    broker = dep.brokers["broker-a-0"]
    assert ray.get(broker.create_topic.remote(TOPIC, QUEUES, QUEUES)).ok
    pid = dep.broker_pid("broker-a-0")

    bodies = {i: f"gc-{i}-".encode() * (1 + i % 5) for i in range(IN_FLIGHT)}
    refs = {broker.send_message.remote(TOPIC, i % QUEUES, body, {"i": str(i), "KEYS": f"gc-key-{i}"}): i
            for i, body in bodies.items()}
    first, _ = ray.wait(list(refs), num_returns=50, timeout=120)
    assert len(first) == 50, "the broker acknowledged nothing"
    dep.signal_broker("broker-a-0", signal.SIGKILL, pid)

    acked: dict[tuple[int, int], bytes] = {}
    acked_ids: list[int] = []
    lost = 0
    for ref, i in refs.items():
        try:
            resp = ray.get(ref, timeout=60)
        except RayActorError:
            lost += 1
            continue
        assert resp.ok, resp
        acked[(resp.ext_fields["queueId"], resp.ext_fields["queueOffset"])] = bodies[i]
        acked_ids.append(i)
    assert lost > 0, "every send finished before the kill: nothing was in flight"
    assert len(acked) >= 50

    restarted = dep.restart_broker("broker-a-0")
    info = broker_info(restarted)
    assert info["recovered_messages"] >= len(acked), info
    assert info["recovery_scanned_from"] > 0, "recovery started from a checkpoint"
    segments = list((Path(info["store_dir"]) / "store" / "commitlog").iterdir())
    assert len(segments) >= 2, "the run crossed segment rolls"
    stored: dict[tuple[int, int], bytes] = {}
    for q in range(QUEUES):
        page = pull_all(restarted, TOPIC, q)
        stored.update({(q, m["queue_offset"]): m["body"] for m in page["messages"]})
    missing = {k for k in acked if stored.get(k) != acked[k]}
    assert not missing, f"{len(missing)} of {len(acked)} acknowledged messages lost or changed: {sorted(missing)[:5]}"

    unfound = [i for i in acked_ids if not _found_by_key(restarted, f"gc-key-{i}", bodies[i])]
    assert not unfound, f"{len(unfound)} of {len(acked_ids)} acknowledged messages not found by key: {unfound[:5]}"


def _found_by_key(broker: object, key: str, body: bytes) -> bool:
    from namesrv.protocol.codes import BrokerRequestCode
    from namesrv.protocol.message.decoder import decode_messages
    from namesrv.remoting.command import RemotingRequest

    ext = {"topic": TOPIC, "key": key, "maxNum": 4, "beginTimestamp": 0, "endTimestamp": 2**63 - 1}
    resp = ray.get(broker.process.remote(RemotingRequest(BrokerRequestCode.QUERY_MESSAGE, ext)),  # type: ignore[attr-defined]
                   timeout=30)
    return resp.ok and [m.body for m in decode_messages(resp.body or b"")] == [body]

def _stable_queue(broker: object, q: int) -> tuple[dict[str, Any], dict[int, bytes]]:
    """A pull at offset 0 and the queue's messages read between two such pulls that agree: the
    restarted broker's retention keeps deleting segments (the disk is still over its ratio), so a
    minimum read before the messages may be stale by the time they are read; it only moves up and
    stops at the active segment, so this ends."""
    while True:
        first: dict[str, Any] = ray.get(broker.pull_message.remote(TOPIC, q, 0, 1), timeout=30)  # type: ignore[attr-defined]
        page = pull_all(broker, TOPIC, q)
        again: dict[str, Any] = ray.get(broker.pull_message.remote(TOPIC, q, 0, 1), timeout=30)  # type: ignore[attr-defined]
        if (first["code"], first["next_begin_offset"]) == (again["code"], again["next_begin_offset"]):
            return first, {m["queue_offset"]: m["body"] for m in page["messages"]}


@pytest.mark.timeout(300)
def test_sigkill_after_segment_rolls_and_retention_runs_keeps_what_retention_keeps(
        ray_session: str, tmp_path: Path) -> None:
    """A broker on 4 KiB segments whose retention runs every 200 ms, forced by its disk's use
    (diskSpaceCleanForciblyRatio at its lowest, 30 %), under a send load, then SIGKILLed: after the
    restart every acknowledged message of the segments kept is there, min offsets are where the
    deleted segments left them and a pull below them is moved up. The disk is one of its own (a
    tmpfs half filled), so retention is forced on any machine."""
    with mounted_tmpfs(tmp_path / "disk", DISK_KIB) as disk:
        (disk / "filler").write_bytes(bytes(DISK_KIB * 1024 // 2))
        assert 0.35 < disk_used_ratio(disk) < 0.95  # as retention reads it
        deployments = DeploymentFactory(disk / "data", prefix="gcc")
        try:
            _sigkill_after_retention(deployments)
        finally:
            deployments.close()


def _sigkill_after_retention(deployments: DeploymentFactory) -> None:
    dep = deployments.deploy(brokers=[BrokerSpec("broker-a")], namesrv_count=1,
                             broker_overrides={"flush_disk_type": "SYNC_FLUSH", "mapped_file_size_commit_log": 4096,
                                               "disk_space_clean_forcibly_ratio": 30,
                                               "disk_space_warning_level_ratio": 99,
                                               "clean_resource_interval_ms": 200,
                                               "delete_commit_log_files_interval_ms": 0,
                                               "flush_interval_consume_queue_ms": 100})
    wait_registered_everywhere(dep)
    broker = dep.brokers["broker-a-0"]
    assert ray.get(broker.create_topic.remote(TOPIC, QUEUES, QUEUES)).ok
    acked: dict[tuple[int, int], bytes] = {}
    for round_ in range(6):
        bodies = {i: f"r{round_}-{i}-".encode() * 10 for i in range(200)}
        replies = ray.get([broker.send_message.remote(TOPIC, i % QUEUES, b) for i, b in bodies.items()], timeout=120)
        for r, body in zip(replies, bodies.values(), strict=True):
            assert r.ok, r
            acked[(int(r.ext_fields["queueId"]), int(r.ext_fields["queueOffset"]))] = body
    wait_until(lambda: broker_info(broker)["min_physical_offset"] > 0, 30, "a retention run")
    pid = dep.broker_pid("broker-a-0")
    dep.signal_broker("broker-a-0", signal.SIGKILL, pid)

    restarted = dep.restart_broker("broker-a-0")
    info = broker_info(restarted)
    low = info["min_physical_offset"]
    assert low > 0 and info["truncated_bytes"] == 0, info
    for q in range(QUEUES):
        first, stored = _stable_queue(restarted, q)
        assert stored, f"queue {q} kept nothing"
        kept_from = min(stored)
        if kept_from > 0:
            assert first["code"] == ResponseCode.PULL_OFFSET_MOVED and first["next_begin_offset"] == kept_from
        ours = {o: b for (qq, o), b in acked.items() if qq == q and o >= kept_from}
        assert {o: stored.get(o) for o in ours} == ours, f"queue {q}: acknowledged messages past the minimum lost"
