"""Deploy NameServers and brokers on the current Ray cluster (or a new local one), find them again
by name from another driver, and kill or restart them.

Names, in one Ray namespace (default `namesrv`): NameServers `namesrv-0..N-1`; a broker's actor
name is its address, `<brokerName>-<brokerId>` (e.g. `broker-a-0`). Control actors take
`num_cpus=0`: they are I/O-bound, and on a 2-CPU machine Spark needs the CPUs.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from actors.broker_actor import BrokerActor
from actors.namesrv_actor import NameServerActor
from actors.profiles import get_profile

log = logging.getLogger(__name__)

DEFAULT_NAMESPACE = "namesrv"
NAMESRV_PREFIX = "namesrv-"
SOFT_PLACEMENT_MEMORY = 1024 * 1024


@dataclass(frozen=True)
class BrokerSpec:
    broker_name: str
    broker_id: int = 0
    cluster: str = "DefaultCluster"
    node_id: str | None = None
    """Pin the broker to this Ray node so a restart finds its store on the same disk."""

    @property
    def addr(self) -> str:
        return f"{self.broker_name}-{self.broker_id}"


@dataclass
class ClusterSpec:
    namesrv_count: int = 2
    brokers: list[BrokerSpec] = field(
        default_factory=lambda: [BrokerSpec("broker-a"), BrokerSpec("broker-b"), BrokerSpec("broker-c")]
    )
    profile: str = "default"
    namespace: str = DEFAULT_NAMESPACE
    data_dir: str = "~/namesrv-data"
    detached: bool = False
    namesrv_max_restarts: int = -1
    broker_max_restarts: int = 0
    namesrv_overrides: dict[str, Any] = field(default_factory=dict)
    broker_overrides: dict[str, Any] = field(default_factory=dict)
    namesrv_node_ids: list[str] = field(default_factory=list)
    """Place NameServer i on `namesrv_node_ids[i % len]`, softly: if that node dies, Ray restarts it
    elsewhere (a NameServer's state is rebuilt from broker registrations)."""

    @property
    def namesrv_names(self) -> list[str]:
        return [f"{NAMESRV_PREFIX}{i}" for i in range(self.namesrv_count)]

    def namesrv_node_id(self, name: str) -> str | None:
        if not self.namesrv_node_ids or name not in self.namesrv_names:
            return None
        return self.namesrv_node_ids[self.namesrv_names.index(name) % len(self.namesrv_node_ids)]


def ensure_ray(address: str | None = None, namespace: str = DEFAULT_NAMESPACE, **init_kwargs: Any) -> None:
    """Connect to `address` (e.g. "auto"), or start an embedded local Ray when None."""
    if ray.is_initialized():
        return
    if address is None:
        init_kwargs.setdefault("include_dashboard", False)
    ray.init(address=address, namespace=namespace, log_to_driver=False, **init_kwargs)


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
    spec: ClusterSpec, node_ids: list[str], *, brokers: bool = True, namesrvs: bool = True
) -> ClusterSpec:
    """Round-robin placement over `node_ids`: each broker pinned hard (a restart finds its store on
    the same disk), NameServers softly (`ClusterSpec.namesrv_node_ids`). Modifies and returns spec."""
    if not node_ids:
        raise ValueError("no node to place actors on")
    if brokers:
        spec.brokers = [replace(b, node_id=node_ids[i % len(node_ids)]) for i, b in enumerate(spec.brokers)]
    if namesrvs:
        spec.namesrv_node_ids = list(node_ids)
    return spec


class Deployment:
    """Handles to one deployed cluster, plus the spec needed to restart any of its actors."""

    def __init__(self, spec: ClusterSpec) -> None:
        self.spec = spec
        self.namesrvs: dict[str, Any] = {}
        self.brokers: dict[str, Any] = {}
        self.broker_specs: dict[str, BrokerSpec] = {b.addr: b for b in spec.brokers}

    # ------------------------------------------------------------------ start
    def _lifetime(self) -> str | None:
        return "detached" if self.spec.detached else None

    def start_namesrv(self, name: str) -> Any:
        profile = get_profile(self.spec.profile)
        config = profile.namesrv_config(**self.spec.namesrv_overrides).model_dump(
            exclude={"kv_config_path", "config_store_path"}
        )
        options: dict[str, Any] = {
            "name": name,
            "namespace": self.spec.namespace,
            "num_cpus": 0,
            "max_restarts": self.spec.namesrv_max_restarts,
            "lifetime": self._lifetime(),
            "get_if_exists": True,
        }
        node_id = self.spec.namesrv_node_id(name)
        if node_id is not None:
            options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(node_id, soft=True)
            # Ray places a request for no resources at all on a random node, ignoring a *soft*
            # affinity (only hard affinity is special-cased): ask for a token 1 MiB of memory.
            options["memory"] = SOFT_PLACEMENT_MEMORY
        handle = ray.remote(NameServerActor).options(**options).remote(name, config, self.spec.data_dir)
        self.namesrvs[name] = handle
        return handle

    def start_broker(self, spec: BrokerSpec) -> Any:
        profile = get_profile(self.spec.profile)
        config = profile.broker_config(**self.spec.broker_overrides).model_dump(mode="json")
        options: dict[str, Any] = {
            "name": spec.addr,
            "namespace": self.spec.namespace,
            "num_cpus": 0,
            "max_restarts": self.spec.broker_max_restarts,
            "lifetime": self._lifetime(),
        }
        if spec.node_id is not None:
            options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(spec.node_id, soft=False)
        deadline = time.monotonic() + 10
        while True:  # the name of a just-killed actor is released asynchronously by the GCS
            try:
                handle = ray.remote(BrokerActor).options(**options).remote(
                    spec.cluster, spec.broker_name, spec.broker_id, self.spec.data_dir,
                    self.spec.namesrv_names, self.spec.namespace, config, spec.addr,
                )
                break
            except ValueError as e:
                if "already taken" not in str(e) or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        self.brokers[spec.addr] = handle
        self.broker_specs[spec.addr] = spec
        return handle

    def start(self) -> Deployment:
        for name in self.spec.namesrv_names:
            self.start_namesrv(name)
        ray.get([h.ping.remote() for h in self.namesrvs.values()])
        for spec in self.spec.brokers:
            self.start_broker(spec)
        ray.get([h.ping.remote() for h in self.brokers.values()])
        log.info("deployed %d NameServers and %d brokers", len(self.namesrvs), len(self.brokers))
        return self

    # ------------------------------------------------------------------ faults and recovery
    def kill_broker(self, addr: str) -> None:
        """ray.kill: the actor dies at once, no graceful shutdown (pending calls fail)."""
        ray.kill(self.brokers[addr], no_restart=True)

    def broker_pid(self, addr: str) -> int:
        return ray.get(self.brokers[addr].get_runtime_info.remote())["pid"]

    def signal_broker(self, addr: str, sig: signal.Signals, pid: int | None = None) -> int:
        """SIGKILL / SIGSTOP / SIGCONT the broker's worker process (this machine's nodes only)."""
        pid = pid if pid is not None else self.broker_pid(addr)
        os.kill(pid, sig)
        return pid

    def restart_broker(self, addr: str) -> Any:
        """Start the broker again with the same name, store and config (after it died)."""
        old = self.brokers.get(addr)
        if old is not None:
            try:
                ray.kill(old, no_restart=True)
            except Exception:  # already gone
                pass
        return self.start_broker(self.broker_specs[addr])

    def kill_namesrv(self, name: str, restart: bool = True) -> None:
        """Kill a NameServer; with restart Ray brings it back empty (max_restarts) at the same name."""
        ray.kill(self.namesrvs[name], no_restart=not restart)

    def shutdown_broker(self, addr: str) -> dict[str, str]:
        outcome = ray.get(self.brokers[addr].shutdown.remote())
        ray.kill(self.brokers[addr], no_restart=True)
        return outcome

    def teardown(self, graceful: bool = True) -> None:
        """Stop everything this deployment started: brokers first (they unregister), then NameServers."""
        for addr in list(self.brokers):
            try:
                if graceful:
                    ray.get(self.brokers[addr].shutdown.remote(), timeout=10)
            except Exception as e:
                log.info("broker %s not shut down gracefully: %s", addr, type(e).__name__)
            ray.kill(self.brokers.pop(addr), no_restart=True)
        for name in list(self.namesrvs):
            ray.kill(self.namesrvs.pop(name), no_restart=True)


def deploy(spec: ClusterSpec) -> Deployment:
    return Deployment(spec).start()


def connect(namespace: str = DEFAULT_NAMESPACE) -> Deployment:
    """Find a running deployment by its actor names (from any driver connected to the cluster)."""
    names = sorted(
        a["name"] for a in ray.util.list_named_actors(all_namespaces=True) if a["namespace"] == namespace
    )
    namesrv_names = [n for n in names if n.startswith(NAMESRV_PREFIX)]
    spec = ClusterSpec(namesrv_count=len(namesrv_names), brokers=[], namespace=namespace)
    dep = Deployment(spec)
    for name in namesrv_names:
        dep.namesrvs[name] = ray.get_actor(name, namespace=namespace)
    for name in names:
        if name in dep.namesrvs:
            continue
        handle = ray.get_actor(name, namespace=namespace)
        try:
            info = ray.get(handle.get_runtime_info.remote(), timeout=5)
        except Exception:  # not a broker (a producer, a chaos driver) or not answering
            continue
        if "broker_addr" in info:
            dep.brokers[name] = handle
            dep.broker_specs[name] = BrokerSpec(info["broker_name"], info["broker_id"], info["cluster"])
    return dep


def data_dir_path(spec: ClusterSpec) -> Path:
    return Path(spec.data_dir).expanduser()
