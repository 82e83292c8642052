"""Where a deployment's actors go on the Ray cluster: the alive nodes in placement order, brokers
spread over them (pinned, so a restart finds its store), and the brokers' ports."""

from __future__ import annotations

import contextlib
import socket
import time
from dataclasses import replace
from typing import Any

import ray

from actors.deployment.spec import ClusterSpec
from namesrv.proxy.route import GRPC_PORT_OFFSET
from namesrv.remoting.config import ALL_INTERFACES, LOOPBACK


def placement_nodes() -> list[str]:
    """Alive Ray nodes in placement order: workers first (by node id), the head last."""
    alive = [n for n in ray.nodes() if n["Alive"]]
    alive.sort(key=lambda n: ("node:__internal_head__" in n["Resources"], n["NodeID"]))
    return [n["NodeID"] for n in alive]


def wait_for_nodes(count: int, timeout_s: float) -> list[str]:
    """Wait until at least `count` Ray nodes are alive; returns `placement_nodes()`."""
    deadline = time.monotonic() + timeout_s
    while len(nodes := placement_nodes()) < count:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{len(nodes)} Ray nodes alive after {timeout_s:.0f} s, wanted {count}")
        time.sleep(1.0)
    return nodes


def spread_over_nodes(
    spec: ClusterSpec, node_ids: list[str], *, brokers: bool = True, namesrvs: bool = True, proxies: bool = False
) -> ClusterSpec:
    """Round-robin placement over `node_ids`: each broker pinned hard (a restart finds its store on
    the same disk), NameServers softly (`ClusterSpec.namesrv_node_ids`); `proxies`: one proxy on
    each node, softly (`ClusterSpec.proxy_node_ids`, as Ray Serve runs a proxy per node). Modifies
    and returns spec."""
    if not node_ids:
        raise ValueError("no node to place actors on")
    if brokers:
        spec.brokers = [replace(b, node_id=node_ids[i % len(node_ids)]) for i, b in enumerate(spec.brokers)]
    if namesrvs:
        spec.namesrv_node_ids = list(node_ids)
    if proxies:
        spec.proxy_count, spec.proxy_node_ids = len(node_ids), list(node_ids)
    return spec


def spread_sets_over_nodes(spec: ClusterSpec, node_ids: list[str]) -> ClusterSpec:
    """Pin brokers so a broker set's master and slaves sit on different nodes, each on a node of its
    own while there are enough: masters first over `node_ids` (in order: workers first, so the masters
    land on removable nodes), then the first slaves, and so on, round-robin. A set whose members
    still share a node (too few nodes) is left so: `shared_set_nodes` tells. Modifies and returns spec."""
    if not node_ids:
        raise ValueError("no node to place actors on")
    names = list(dict.fromkeys(b.broker_name for b in spec.brokers))
    order = sorted(spec.brokers, key=lambda b: (b.broker_id, names.index(b.broker_name)))
    where = {b.actor_name: node_ids[i % len(node_ids)] for i, b in enumerate(order)}
    spec.brokers = [replace(b, node_id=where[b.actor_name]) for b in spec.brokers]
    return spec


def shared_set_nodes(spec: ClusterSpec) -> dict[str, list[str]]:
    """Broker set name -> its members' actor names, for each set with two members on one node."""
    out: dict[str, list[str]] = {}
    for name in dict.fromkeys(b.broker_name for b in spec.brokers):
        members = [b for b in spec.brokers if b.broker_name == name]
        nodes = [b.node_id for b in members]
        if len(set(nodes)) < len(nodes) or (None in nodes and len(nodes) > 1):
            out[name] = [b.actor_name for b in members]
    return out


def free_port(host: str = LOOPBACK, spare: int = 0) -> int:
    """A port nobody listens on right now (bound and released), and the `spare` ports after it too
    (a broker's local-mode proxy listens on its port + GRPC_PORT_OFFSET)."""
    while True:
        with contextlib.ExitStack() as held:
            first = held.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            first.bind((host, 0))
            port = int(first.getsockname()[1])
            try:
                for extra in range(1, spare + 1):
                    held.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM)).bind((host, port + extra))
            except (OSError, OverflowError):
                continue  # one after it is taken (or past 65535): another port
            return port


def node_ip(node_id: str) -> str:
    for node in ray.nodes():
        if node["NodeID"] == node_id:
            return str(node["NodeManagerAddress"])
    raise ValueError(f"no Ray node {node_id}")


def broker_port(spec: ClusterSpec, index: int) -> int:
    """Broker `index`'s port: broker_port + 10 * index, or a free one whose port + GRPC_PORT_OFFSET
    (a local-mode proxy's) is free too."""
    assert spec.broker_port is not None
    return spec.broker_port + 10 * index if spec.broker_port else free_port(LOOPBACK, GRPC_PORT_OFFSET)


def assign_broker_ports(spec: ClusterSpec) -> None:
    """Give every broker spec its port (and, listening on all interfaces, its node's IP)."""
    if spec.broker_port is None:
        return
    assigned = []
    for i, b in enumerate(spec.brokers):
        if b.port is None:
            port = broker_port(spec, i)
            host = b.host
            if spec.listen_host == ALL_INTERFACES:
                host = node_ip(b.node_id) if b.node_id else ray.util.get_node_ip_address()
            b = replace(b, port=port, host=host)
        assigned.append(b)
    spec.brokers = assigned


def alive_node_ids() -> set[str]:
    return {n["NodeID"] for n in ray.nodes() if n["Alive"]}


SERVER_NICENESS = 0
"""The scheduling niceness a NameServer's process runs at. Ray starts every worker at nice 15 (its
`worker_niceness`, so its own daemons come first); a NameServer at 15 gets ~1/28 of a core's share
against any process at 0 (weights 36 vs 1024), so on a busy machine its answers wait tens of
milliseconds for the CPU, not for its own work (docs/performance.md, "Registration storm").
RocketMQ's NameServer is a JVM at the default priority: so is this one. Set through Ray's own
`RAY_worker_niceness` in the actor's runtime_env (no privilege needed: the worker starts at its
raylet's niceness and only ever raises it)."""


def server_runtime_env() -> dict[str, Any]:
    """The runtime_env of a NameServer actor (see SERVER_NICENESS)."""
    return {"env_vars": {"RAY_worker_niceness": str(SERVER_NICENESS)}}
