"""A deployment on the multi-host test bed (clients/chaos/hosts): hosts as network namespaces, a Ray
node in each, the deployment's servers placed on them, and the bed's nemesis; the tests' module
fixtures build theirs with `deployed_bed`."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest
import ray

from actors.deployment.launcher import Deployment
from actors.deployment.spec import ClusterSpec
from clients.chaos.hosts.nemesis import Nemesis
from clients.chaos.hosts.netns import Hosts, HostsUnavailable, missing_host_tools
from clients.chaos.hosts.ray_nodes import RayOnHosts
from tests.support.multinode import deployed
from tests.support.ray_cluster import release_shared_ray, unique_namespace


def require_test_bed() -> None:
    """At a module's top: skip it without root, fail it when a tool is missing (run.sh installs them)."""
    if os.geteuid() != 0:
        pytest.skip("the multi-host test bed needs root (network namespaces, veth pairs, nftables)",
                    allow_module_level=True)
    if missing_host_tools():
        raise HostsUnavailable(f"the multi-host test bed needs {', '.join(missing_host_tools())}: "
                               "bash run.sh test installs them (ensure_netns_tools)")


@dataclass
class Bed:
    hosts: Hosts
    cluster: RayOnHosts
    dep: Deployment
    nemesis: Nemesis


@contextlib.contextmanager
def deployed_bed(count: int, make_spec: Callable[[RayOnHosts, str], ClusterSpec], prefix: str,
                 ray_env: dict[str, str] | None = None) -> Iterator[Bed]:
    """`count` hosts with a Ray node each (this process's Ray released first), connected in a fresh
    namespace, and the deployment `make_spec(cluster, namespace)` describes; all of it torn down after."""
    release_shared_ray()
    if ray.is_initialized():
        ray.shutdown()
    with Hosts(count) as hosts, RayOnHosts(hosts, ray_env=ray_env) as cluster:
        namespace = unique_namespace(prefix)
        cluster.connect(namespace)
        with deployed(make_spec(cluster, namespace)) as dep:
            yield Bed(hosts, cluster, dep, Nemesis(hosts))
