"""Several Ray nodes on one machine for the tests that place actors over nodes and lose whole nodes:
`ray.cluster_utils.Cluster` with a head without CPUs (the driver, NameServers and controller live
there) plus one-CPU worker raylets."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from unittest import mock

import ray
from ray.cluster_utils import Cluster

from tests.ray.helpers import unique_namespace


@contextlib.contextmanager
def multinode_cluster(workers: int, namespace_prefix: str) -> Iterator[Cluster]:
    """A connected cluster of a CPU-less head and `workers` one-CPU nodes (a Ray this process had is
    shut down first), shut down afterwards."""
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
