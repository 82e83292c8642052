"""Restarting a broker where its data is, from a driver that did not deploy it (`connect()`, the
`namesrv restart-broker` verb), on several Ray nodes (the `cluster` fixture of tests/ray/conftest.py: a head without
CPUs plus three one-CPU raylets on this machine).

The deployment's record (actors.deployment.registry, in the GCS KV) keeps each broker's node, data
dir, profile and port, so a restart comes back on the broker's node with its commit log; a broker whose node is dead or
holds no store of it is refused with a clear error, unless started empty on purpose.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import ray
from ray.cluster_utils import Cluster

from actors.deployment.launcher import BrokerRestartError, connect
from clients.cli.main import main as namesrv_cli
from namesrv.common.waiting import wait_until
from tests.support.multinode import (
    TOPIC,
    alive_node_ids,
    deployed,
    node_of,
    spread_spec,
    with_topic_everywhere,
)
from tests.support.ray_cluster import broker_info, broker_names, wait_for_route_everywhere

pytestmark = pytest.mark.slow

A = "broker-a-0"


def send_to_a(dep: object, n: int) -> None:
    broker = dep.brokers[A]  # type: ignore[attr-defined]
    assert all(r.ok for r in ray.get([broker.send_message.remote(TOPIC, i % 4, f"m{i}".encode()) for i in range(n)]))


@pytest.mark.timeout(300)
def test_connect_restarts_a_dead_broker_on_its_node_with_its_store(cluster: Cluster, tmp_path: Path) -> None:
    spec = spread_spec(tmp_path, ["broker-a", "broker-b"])
    with deployed(spec) as dep:
        with_topic_everywhere(dep)
        send_to_a(dep, 40)
        before = broker_info(dep.brokers[A])
        dep.kill_broker(A)

        other = connect(spec.namespace)  # another driver's view: no spec of its own
        assert other.broker_specs[A].node_id == spec.brokers[0].node_id
        assert other.spec.data_dir == spec.data_dir and other.spec.profile == "fast"
        after = broker_info(other.restart_broker(A))

        assert after["node_id"] == before["node_id"] == spec.brokers[0].node_id
        assert after["store_dir"] == before["store_dir"]
        assert after["recovered_messages"] == 40
        wait_for_route_everywhere(dep, TOPIC, lambda r: broker_names(r) == {"broker-a", "broker-b"}, timeout=20)
        dep.brokers[A] = other.brokers[A]  # torn down with the rest


@pytest.mark.timeout(300)
def test_restart_broker_verb_refuses_a_node_without_the_store_unless_start_empty(
    cluster: Cluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = spread_spec(tmp_path, ["broker-a", "broker-b"])
    spec.detached = True  # as `namesrv up` deploys: the verb's broker outlives the command
    with deployed(spec) as dep:
        with_topic_everywhere(dep)
        send_to_a(dep, 10)
        store_dir = broker_info(dep.brokers[A])["store_dir"]
        dep.kill_broker(A)
        shutil.rmtree(store_dir)  # the node lost the broker's data (a replaced disk, a wiped volume)
        argv = ["restart-broker", "--address", cluster.address, "--namespace", spec.namespace, A]
        capsys.readouterr()

        assert namesrv_cli(argv) == 1
        err = capsys.readouterr().err
        assert "no store at" in err and "refusing to start it empty" in err and "--start-empty" in err, err
        assert not Path(store_dir).exists(), "a refused start creates nothing"

        assert namesrv_cli([*argv, "--start-empty"]) == 0
        out = capsys.readouterr().out
        assert f"restarted {A} on node {spec.brokers[0].node_id}: recovered 0 messages" in out, out
        dep.brokers[A] = connect(spec.namespace).brokers[A]
        assert broker_info(dep.brokers[A])["node_id"] == spec.brokers[0].node_id


@pytest.mark.timeout(300)
def test_a_broker_whose_node_died_is_refused_then_started_empty_elsewhere(cluster: Cluster, tmp_path: Path) -> None:
    spec = spread_spec(tmp_path, ["broker-a", "broker-b"])
    victim = spec.brokers[0].node_id
    assert victim is not None and victim != cluster.head_node.node_id
    with deployed(spec) as dep:
        with_topic_everywhere(dep)
        send_to_a(dep, 10)
        cluster.remove_node(node_of(cluster, victim), allow_graceful=False)
        wait_until(lambda: victim not in alive_node_ids(), timeout_s=60, what="Ray to declare the node dead")
        other = connect(spec.namespace)

        with pytest.raises(BrokerRestartError, match=f"pinned to node {victim}, which is dead"):
            other.restart_broker(A)
        info = broker_info(other.restart_broker(A, start_empty=True))

        assert info["node_id"] in alive_node_ids() - {victim}
        # (Every "node" here shares this machine's disk, so the store is still readable from the new
        # node; on a real cluster it would start empty. start_empty accepts that; it wipes nothing.)
        dep.brokers[A] = other.brokers[A]
