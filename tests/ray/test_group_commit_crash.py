"""SIGKILL of a SYNC_FLUSH broker in the middle of group-commit batches: many senders in flight, the
broker's process killed once the first acknowledgements came back (so batches are being written
and fsynced at that moment). After a restart from the same store, every message that was
acknowledged is readable at the queue offset its sender was given, and found again by its key
(QUERY_MESSAGE through the message index, which was being written and checkpointed too).
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
                             broker_overrides={"flush_disk_type": "SYNC_FLUSH", "group_commit": True})
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
    stored: dict[tuple[int, int], bytes] = {}
    for q in range(QUEUES):
        page = pull_all(restarted, TOPIC, q)
        stored.update({(q, m["queue_offset"]): m["body"] for m in page["messages"]})
    missing = {k for k in acked if stored.get(k) != acked[k]}
    assert not missing, f"{len(missing)} of {len(acked)} acknowledged messages lost or changed: {sorted(missing)[:5]}"

    unfound = [i for i in acked_ids if not _found_by_key(restarted, f"gc-key-{i}", bodies[i])]
    assert not unfound, f"{len(unfound)} of {len(acked_ids)} acknowledged messages not found by key: {unfound[:5]}"


def _found_by_key(broker: object, key: str, body: bytes) -> bool:
    from namesrv.broker.message_decoder import decode_messages
    from namesrv.protocol.codes import BrokerRequestCode
    from namesrv.remoting.command import RemotingRequest

    ext = {"topic": TOPIC, "key": key, "maxNum": 4, "beginTimestamp": 0, "endTimestamp": 2**63 - 1}
    resp = ray.get(broker.process.remote(RemotingRequest(BrokerRequestCode.QUERY_MESSAGE, ext)),  # type: ignore[attr-defined]
                   timeout=30)
    return resp.ok and [m.body for m in decode_messages(resp.body or b"")] == [body]
