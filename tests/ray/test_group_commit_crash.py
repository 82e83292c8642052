"""SIGKILL of a SYNC_FLUSH broker in the middle of group-commit batches: many senders in flight, the
broker's process killed once the first acknowledgements came back (so batches are being written
and fsynced at that moment). After a restart from the same store, every message that was
acknowledged is readable at the queue offset its sender was given. The store's segments are small
and its checkpoint frequent, so the kill lands among segment rolls and consume-queue checkpoints.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
import ray
from ray.exceptions import RayActorError

from actors.launcher import BrokerSpec
from tests.ray.helpers import DeploymentFactory, broker_info, local_ray, pull_all, wait_registered_everywhere

TOPIC = "TopicGroupCommitCrash"
QUEUES = 4
IN_FLIGHT = 3000


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
                                               "flush_interval_consume_queue_ms": 50})
    wait_registered_everywhere(dep)
    broker = dep.brokers["broker-a-0"]
    assert ray.get(broker.create_topic.remote(TOPIC, QUEUES, QUEUES)).ok
    pid = dep.broker_pid("broker-a-0")

    bodies = {i: f"gc-{i}-".encode() * (1 + i % 5) for i in range(IN_FLIGHT)}
    refs = {broker.send_message.remote(TOPIC, i % QUEUES, body, {"i": str(i)}): i for i, body in bodies.items()}
    first, _ = ray.wait(list(refs), num_returns=50, timeout=120)
    assert len(first) == 50, "the broker acknowledged nothing"
    dep.signal_broker("broker-a-0", signal.SIGKILL, pid)

    acked: dict[tuple[int, int], bytes] = {}
    lost = 0
    for ref, i in refs.items():
        try:
            resp = ray.get(ref, timeout=60)
        except RayActorError:
            lost += 1
            continue
        assert resp.ok, resp
        acked[(resp.ext_fields["queueId"], resp.ext_fields["queueOffset"])] = bodies[i]
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
