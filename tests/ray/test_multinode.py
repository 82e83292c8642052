"""Several Ray nodes on one machine (`ray.cluster_utils.Cluster`: a head without CPUs plus three
one-CPU raylets): NameServers and brokers placed over nodes, and whole nodes removed.

Placement is the launcher's (`placement_nodes` + `spread_over_nodes`, what `namesrv up
--pin-brokers --spread-namesrvs` runs): brokers pinned hard, round-robin, workers first;
NameServers placed softly the same way. A node is removed the hard way (SIGKILL of its raylet and
processes), so every actor on it dies with no graceful shutdown.

Detection bound: the NameServers watch each broker with a long-pending call. When a node dies, that
call fails at the latest when Ray declares the node dead (GCS health checks, ~15 s here, design §5);
measured, it fails sooner (~2 s), because the node's worker processes exit with their raylet. Expiry
is set to 120 s, so a removal inside NODE_DEATH_BOUND_S with cause "channel" is the watch's doing.
Routes are awaited through the NameServers' long-poll, not by polling.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

import pytest
import ray
from ray.cluster_utils import Cluster

from actors.launcher import BrokerSpec, ClusterSpec, Deployment
from actors.placement import placement_nodes, spread_over_nodes
from clients.admin import AdminClient
from clients.cli import main as namesrv_cli
from tests.ray.helpers import (
    broker_info,
    broker_names,
    cluster_addrs,
    removals_of,
    unique_namespace,
    wait_for_route,
    wait_for_route_everywhere,
    wait_registered_everywhere,
    wait_until,
)

log = logging.getLogger(__name__)

pytestmark = pytest.mark.slow

WORKERS = 3
NODE_DEATH_BOUND_S = 30.0
TOPIC = "TopicMultiNode"
# `fast` heartbeats (0.5 s), but a 120 s expiry: only the channel watch can remove a broker in time.
NAMESRV_OVERRIDES = {"broker_channel_expired_time_ms": 120_000}


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    if ray.is_initialized():
        ray.shutdown()
    # cluster_utils writes its address to /tmp/ray/ray_current_cluster, where `ray.init("auto")` and
    # `ray status` of everyone else on this machine would find it; keep that file untouched.
    with mock.patch("ray._private.utils.write_ray_address"):
        c = Cluster(
            initialize_head=True,
            head_node_args={"num_cpus": 0, "include_dashboard": False, "dashboard_agent_listen_port": None},
        )
    try:
        for _ in range(WORKERS):
            c.add_node(num_cpus=1)
        c.wait_for_nodes()
        ray.init(address=c.address, namespace=unique_namespace("multinode"), log_to_driver=False)
        yield c
    finally:
        ray.shutdown()
        c.shutdown()


@contextlib.contextmanager
def deployed(spec: ClusterSpec) -> Iterator[Deployment]:
    dep = Deployment(spec)
    try:
        yield dep.start()
    finally:
        for handle in [*dep.brokers.values(), *dep.namesrvs.values()]:
            with contextlib.suppress(Exception):
                ray.kill(handle, no_restart=True)


def spread_spec(tmp_path: Path, brokers: list[str]) -> ClusterSpec:
    spec = ClusterSpec(
        namesrv_count=2,
        brokers=[BrokerSpec(b) for b in brokers],
        profile="fast",
        namespace=unique_namespace("mn"),
        data_dir=str(tmp_path / "data"),
        namesrv_overrides=NAMESRV_OVERRIDES,
        namesrv_port=0,  # free ports; brokers over Ray only, so routes name them `broker-a-0`
        broker_port=None,
    )
    return spread_over_nodes(spec, placement_nodes())


def node_of(cluster: Cluster, node_id: str) -> ray._private.node.Node:
    (node,) = [n for n in cluster.worker_nodes if n.node_id == node_id]
    return node


def alive_node_ids() -> set[str]:
    return {n["NodeID"] for n in ray.nodes() if n["Alive"]}


def assert_placed_as_specified(dep: Deployment) -> None:
    for addr, handle in dep.brokers.items():
        assert broker_info(handle)["node_id"] == dep.broker_specs[addr].node_id, addr
    for name, handle in dep.namesrvs.items():
        assert ray.get(handle.get_status.remote(), timeout=60)["node_id"] == dep.spec.namesrv_node_id(name), name


def with_topic_everywhere(dep: Deployment) -> None:
    AdminClient(dep).create_topic(TOPIC, read_queue_nums=4, write_queue_nums=4)
    wait_registered_everywhere(dep, timeout=20)
    every = {s.broker_name for s in dep.broker_specs.values()}
    wait_for_route_everywhere(dep, TOPIC, lambda r: broker_names(r) == every, timeout=20, what="with every broker")


def remove_node_and_time_routes(
    cluster: Cluster, node_id: str, dep: Deployment, gone: set[str], namesrvs: list[str]
) -> dict[str, float]:
    """SIGKILL a node; seconds until each of `namesrvs` routes TOPIC without the `gone` brokers."""
    node = node_of(cluster, node_id)
    started = time.monotonic()
    cluster.remove_node(node, allow_graceful=False)
    elapsed = {}
    for name in namesrvs:
        wait_for_route(
            dep.namesrvs[name], TOPIC, lambda r: not broker_names(r) & gone,
            timeout=max(0.0, started + NODE_DEATH_BOUND_S - time.monotonic()), what=f"without {sorted(gone)}",
        )
        elapsed[name] = time.monotonic() - started
    # Ray's own verdict (GCS health checks) comes later; later tests place actors on alive nodes only.
    wait_until(lambda: node_id not in alive_node_ids(), timeout=60, what=f"Ray to declare node {node_id} dead")
    log.warning("node %s removed: %s left the routes after %s; Ray declared the node dead after %.1f s",
                node_id[:8], sorted(gone), {k: f"{v:.1f} s" for k, v in elapsed.items()}, time.monotonic() - started)
    return elapsed


# ============================================================================ tests
def test_placement_is_workers_first_then_the_head(cluster: Cluster) -> None:
    workers = sorted(n.node_id for n in cluster.worker_nodes)

    assert placement_nodes() == [*workers, cluster.head_node.node_id]


def test_namesrv_up_pins_brokers_and_spreads_namesrvs_over_the_nodes(cluster: Cluster, tmp_path: Path) -> None:
    namespace = unique_namespace("mn-cli")
    nodes = placement_nodes()

    assert namesrv_cli(["up", "--address", cluster.address, "--namespace", namespace, "--namesrvs", "2",
                        "--brokers", "broker-a,broker-b,broker-c,broker-d", "--pin-brokers", "--spread-namesrvs",
                        "--wait-nodes", str(WORKERS + 1), "--wait-timeout", "5", "--profile", "fast",
                        "--data-dir", str(tmp_path)]) == 0
    try:
        brokers = {b: ray.get_actor(f"{b}-0", namespace=namespace) for b in ("broker-a", "broker-b", "broker-c",
                                                                            "broker-d")}
        assert {b: broker_info(h)["node_id"] for b, h in brokers.items()} == {
            "broker-a": nodes[0], "broker-b": nodes[1], "broker-c": nodes[2], "broker-d": nodes[3],
        }
        namesrvs = {n: ray.get_actor(n, namespace=namespace) for n in ("namesrv-0", "namesrv-1")}
        assert {n: ray.get(h.get_status.remote(), timeout=60)["node_id"] for n, h in namesrvs.items()} == {
            "namesrv-0": nodes[0], "namesrv-1": nodes[1],
        }
        # The placement is in the actors' options, so Ray keeps it: the brokers are detached and
        # pinned, and a NameServer restarted by Ray comes back on its node while that node lives.
        ray.kill(namesrvs["namesrv-1"], no_restart=False)
        wait_until(lambda: ray.get(namesrvs["namesrv-1"].get_status.remote(), timeout=5)["node_id"] == nodes[1],
                   timeout=20, what="namesrv-1 restarted on its node")
    finally:
        assert namesrv_cli(["down", "--address", cluster.address, "--namespace", namespace]) == 0
    assert not [a for a in ray.util.list_named_actors(all_namespaces=True) if a["namespace"] == namespace]


def test_pinned_broker_restarts_on_its_node_and_recovers_its_store(cluster: Cluster, tmp_path: Path) -> None:
    spec = spread_spec(tmp_path, ["broker-a", "broker-b"])
    with deployed(spec) as dep:
        with_topic_everywhere(dep)
        addr = "broker-a-0"
        sends = [dep.brokers[addr].send_message.remote(TOPIC, i % 4, f"m{i}".encode()) for i in range(40)]
        assert all(r.ok for r in ray.get(sends, timeout=60))
        before = broker_info(dep.brokers[addr])

        dep.kill_broker(addr)
        wait_for_route_everywhere(dep, TOPIC, lambda r: broker_names(r) == {"broker-b"}, timeout=10)
        after = broker_info(dep.restart_broker(addr))

        assert after["node_id"] == before["node_id"] == spec.brokers[0].node_id
        assert after["incarnation"] != before["incarnation"]
        assert after["store_dir"] == before["store_dir"]
        assert after["recovered_messages"] == 40
        wait_for_route_everywhere(dep, TOPIC, lambda r: broker_names(r) == {"broker-a", "broker-b"}, timeout=10)


def test_a_dead_node_takes_its_brokers_out_of_every_route(cluster: Cluster, tmp_path: Path) -> None:
    spec = spread_spec(tmp_path, ["broker-a", "broker-b", "broker-c"])
    placed = {b.broker_name: b.node_id for b in spec.brokers}
    namesrv_nodes = {spec.namesrv_node_id(n) for n in spec.namesrv_names}
    # A worker that hosts brokers but no NameServer: only the channel watches can notice its death.
    victim = next(n for n in placement_nodes() if n not in namesrv_nodes and n in placed.values()
                  and n != cluster.head_node.node_id)
    gone = {b for b, n in placed.items() if n == victim}
    with deployed(spec) as dep:
        assert_placed_as_specified(dep)
        assert len(set(placed.values())) == 3, placed  # one broker per node
        with_topic_everywhere(dep)

        elapsed = remove_node_and_time_routes(cluster, victim, dep, gone, spec.namesrv_names)

        assert max(elapsed.values()) < NODE_DEATH_BOUND_S, elapsed
        survivors = {f"{b}-0" for b in placed if b not in gone}
        for name, ns in dep.namesrvs.items():
            for addr in (f"{b}-0" for b in gone):
                assert [r.cause for r in removals_of(ns, addr)] == ["channel"], name
            assert cluster_addrs(ns) == survivors, name


def test_a_dead_node_with_a_namesrv_the_other_keeps_serving_and_it_comes_back_elsewhere(
    cluster: Cluster, tmp_path: Path
) -> None:
    spec = spread_spec(tmp_path, ["broker-a", "broker-b", "broker-c"])
    victim = spec.namesrv_node_id("namesrv-1")
    assert victim != cluster.head_node.node_id
    gone = {b.broker_name for b in spec.brokers if b.node_id == victim}
    assert gone, "the NameServer's node hosts a broker too"
    with deployed(spec) as dep:
        assert_placed_as_specified(dep)
        with_topic_everywhere(dep)

        elapsed = remove_node_and_time_routes(cluster, victim, dep, gone, ["namesrv-0"])

        assert elapsed["namesrv-0"] < NODE_DEATH_BOUND_S, elapsed
        assert [r.cause for r in removals_of(dep.namesrvs["namesrv-0"], f"{next(iter(gone))}-0")] == ["channel"]
        # namesrv-1 was placed softly: Ray restarts it on a live node, and the surviving brokers
        # register with it again (its tables start empty).
        survivors = {f"{b.broker_name}-0" for b in spec.brokers if b.node_id != victim}
        ns1 = dep.namesrvs["namesrv-1"]
        status = wait_until(
            lambda: (s := ray.get(ns1.get_status.remote(), timeout=5))["ready"] and survivors <= cluster_addrs(ns1)
            and s,
            timeout=NODE_DEATH_BOUND_S, what="namesrv-1 restarted elsewhere with the surviving brokers",
        )
        assert status["node_id"] in alive_node_ids() - {victim}
        assert status["reconstructed"]
        assert cluster_addrs(ns1) == survivors
