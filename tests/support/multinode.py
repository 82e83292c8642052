"""Several Ray nodes on one machine for the tests that place actors over nodes and lose whole nodes:
`ray.cluster_utils.Cluster` with a head without CPUs (the driver, NameServers and controller live
there) plus one-CPU worker raylets."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

import ray
from ray.cluster_utils import Cluster

from actors.deployment.launcher import Deployment
from actors.deployment.placement import placement_nodes, spread_over_nodes
from actors.deployment.spec import BrokerSpec, ClusterSpec
from clients.admin.client import AdminClient
from tests.support.ray_cluster import (
    broker_names,
    release_shared_ray,
    unique_namespace,
    wait_for_route_everywhere,
    wait_registered_everywhere,
)

# `fast` heartbeats (0.5 s), but a 120 s expiry: only the channel watch can remove a broker in time.
WORKERS = 3
NAMESRV_OVERRIDES = {"broker_channel_expired_time_ms": 120_000}
TOPIC = "TopicMultiNode"



@contextlib.contextmanager
def multinode_cluster(workers: int, namespace_prefix: str) -> Iterator[Cluster]:
    """A connected cluster of a CPU-less head and `workers` one-CPU nodes (a Ray this process had is
    shut down first), shut down afterwards."""
    release_shared_ray()
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
        for _ in range(workers):
            c.add_node(num_cpus=1)
        c.wait_for_nodes()
        ray.init(address=c.address, namespace=unique_namespace(namespace_prefix), log_to_driver=False)
        yield c
    finally:
        ray.shutdown()
        c.shutdown()


def node_of(cluster: Cluster, node_id: str) -> ray._private.node.Node:
    (node,) = [n for n in cluster.worker_nodes if n.node_id == node_id]
    return node


def alive_node_ids() -> set[str]:
    return {n["NodeID"] for n in ray.nodes() if n["Alive"]}


def remove_node_now(cluster: Cluster, node_id: str) -> None:
    """Lose a worker node the hard way: SIGKILL of its raylet and every process on it."""
    cluster.remove_node(node_of(cluster, node_id), allow_graceful=False)



@contextlib.contextmanager
def deployed(spec: ClusterSpec) -> Iterator[Deployment]:
    dep = Deployment(spec)
    try:
        yield dep.start()
    finally:
        for handle in [*dep.brokers.values(), *dep.namesrvs.values(), *([dep.controller] if dep.controller else [])]:
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

def with_topic_everywhere(dep: Deployment) -> None:
    AdminClient(dep).create_topic(TOPIC, read_queue_nums=4, write_queue_nums=4)
    wait_registered_everywhere(dep, timeout=20)
    every = {s.broker_name for s in dep.broker_specs.values()}
    wait_for_route_everywhere(dep, TOPIC, lambda r: broker_names(r) == every, timeout=20, what="with every broker")
