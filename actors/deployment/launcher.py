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
from dataclasses import asdict, replace
from typing import Any, cast

import ray
from ray.actor import ActorHandle
from ray.exceptions import RayActorError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from actors.broker.actor import BrokerActor, store_path
from actors.console import CONSOLE_NAME
from actors.controller.actor import CONTROLLER_NAME, kv_prefix
from actors.controller.gcs_kv import KV_NAMESPACE, GcsKV
from actors.controller.start import controller_config, start_controller
from actors.deployment.placement import (
    alive_node_ids,
    assign_broker_ports,
    broker_port,
    server_runtime_env,
)
from actors.deployment.profiles import get_profile
from actors.deployment.registry import DeploymentRecord
from actors.deployment.spec import DEFAULT_NAMESPACE as DEFAULT_NAMESPACE  # the specs are the launcher's API too
from actors.deployment.spec import NAMESRV_PREFIX as NAMESRV_PREFIX
from actors.deployment.spec import REGISTRY_SETTINGS
from actors.deployment.spec import BrokerSpec as BrokerSpec
from actors.deployment.spec import ClusterSpec as ClusterSpec
from actors.namesrv.actor import NameServerActor
from actors.proxy.actor import PROXY_PREFIX, ProxyActor, proxy_actor_name
from actors.runtime.ray_info import SOFT_PLACEMENT_MEMORY
from namesrv.protocol.constants import MASTER_ID
from namesrv.remoting.config import LOOPBACK, RemotingServerConfig

log = logging.getLogger(__name__)

START_TIMEOUT_S = 60.0
CONTROLLER_JOIN_S = 30.0
"""How long `Deployment.start` waits for the controller to decide the configured masters' roles
before it starts their slaves."""


def ensure_ray(address: str | None = None, namespace: str = DEFAULT_NAMESPACE, **init_kwargs: Any) -> None:
    """Connect to `address` (e.g. "auto"), or start an embedded local Ray when None."""
    if ray.is_initialized():
        return
    if address is None:
        init_kwargs.setdefault("include_dashboard", False)
    ray.init(address=address, namespace=namespace, log_to_driver=False, **init_kwargs)


class BrokerRestartError(RuntimeError):
    """A broker cannot come back where its store is (its node is dead, or the store is not there)."""


class Deployment:
    """Handles to one deployed cluster, plus the spec needed to restart any of its actors. Brokers
    are keyed by their address (`BrokerSpec.addr`), as routes name them."""

    def __init__(self, spec: ClusterSpec) -> None:
        self.spec = spec
        self.namesrvs: dict[str, Any] = {}
        self.brokers: dict[str, Any] = {}
        self.broker_specs: dict[str, BrokerSpec] = {b.addr: b for b in spec.brokers}
        self.registry = DeploymentRecord(spec.namespace)
        self.controller: Any = None
        self.proxies: dict[str, Any] = {}
        self.proxy_endpoints: dict[str, str] = {}
        self.console: Any = None
        self.console_url: str | None = None

    # ------------------------------------------------------------------ start
    def _lifetime(self) -> str | None:
        return "detached" if self.spec.detached else None

    def start_namesrv(self, name: str) -> Any:
        config = get_profile(self.spec.profile).namesrv_config(**self.spec.namesrv_overrides)
        options: dict[str, Any] = {
            "name": name,
            "namespace": self.spec.namespace,
            "num_cpus": 0,
            "max_restarts": self.spec.namesrv_max_restarts,
            "lifetime": self._lifetime(),
            "get_if_exists": True,
            "runtime_env": server_runtime_env(),  # nice 0, not Ray's 15 (placement.SERVER_NICENESS)
        }
        _prefer_node(options, self.spec.namesrv_node_id(name))
        handle = ray.remote(NameServerActor).options(**options).remote(
            name, config, self.spec.data_dir, self.spec.namesrv_remoting(name)
        )
        self.namesrvs[name] = handle
        return handle

    def start_broker(self, spec: BrokerSpec, require_store: bool = False) -> Any:
        """Start a broker (returns at once; its constructor runs on its node). `require_store`: it
        refuses to start where its commit log is not (a restart)."""
        if spec.port is None and self.spec.broker_port is not None:  # started alone, not through start()
            index = next((i for i, b in enumerate(self.spec.brokers) if b.actor_name == spec.actor_name), 0)
            spec = replace(spec, port=broker_port(self.spec, index))
        config = get_profile(self.spec.profile).broker_config(**self.spec.broker_overrides)
        remoting = None
        if spec.port is not None:
            remoting = RemotingServerConfig(listen_host=self.spec.listen_host, listen_port=spec.port,
                                            advertised_host=spec.host)
        options: dict[str, Any] = {
            "name": spec.actor_name,
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
                    self.spec.namesrv_names, self.spec.namespace, config, remoting, require_store,
                    dict(self.spec.proxy_overrides) if self.spec.proxy_mode == "local" and remoting else None,
                )
                break
            except ValueError as e:
                if "already taken" not in str(e) or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        self.brokers[spec.addr] = handle
        self.broker_specs[spec.addr] = spec
        self.registry.put_broker(spec.actor_name, asdict(spec))
        return handle

    def start(self) -> Deployment:
        assign_broker_ports(self.spec)
        self.broker_specs = {b.addr: b for b in self.spec.brokers}
        if not _live_actor_names(self.spec.namespace):  # a new deployment: nothing of an earlier one's record
            self.registry.forget()
        self.registry.put_settings({k: getattr(self.spec, k) for k in REGISTRY_SETTINGS})
        for name in self.spec.namesrv_names:
            self.start_namesrv(name)
        ray.get([h.ping.remote() for h in self.namesrvs.values()])  # a NameServer that cannot bind fails here
        first, rest = list(self.spec.brokers), []
        if self.spec.controller:
            self.start_controller()
            first = [b for b in self.spec.brokers if b.broker_id == MASTER_ID]
            rest = [b for b in self.spec.brokers if b.broker_id != MASTER_ID]
        for spec in first:
            self.start_broker(spec)
        ray.get([self.brokers[s.addr].ping.remote() for s in first])
        if rest:
            self._await_roles(first)
            for spec in rest:
                self.start_broker(spec)
            ray.get([self.brokers[s.addr].ping.remote() for s in rest])
        if self.spec.proxy_mode == "local":
            self.await_local_proxies()
        for i in range(self.spec.proxy_count):
            self.start_proxy(i)
        if self.spec.console:
            self.start_console()
        log.info("deployed %d NameServers, %d brokers and %d proxies", len(self.namesrvs), len(self.brokers),
                 len(self.proxies))
        return self

    def await_local_proxies(self) -> dict[str, str]:
        """Local mode: each live broker's gRPC endpoint once its proxy serves, kept in
        `proxy_endpoints` under the broker's actor name (a broker's bind error raises here)."""
        names = {addr: self.broker_specs[addr].actor_name for addr in self.brokers}
        endpoints = ray.get([h.proxy_endpoint.remote() for h in self.brokers.values()], timeout=30)
        for addr, endpoint in zip(self.brokers, endpoints, strict=True):
            if endpoint is not None:
                self.proxy_endpoints[names[addr]] = str(endpoint)
        return self.proxy_endpoints

    def start_proxy(self, index: int, overrides: dict[str, Any] | None = None) -> str:
        """Start RocketMQ 5 gRPC proxy `index` (actors.proxy) and return its endpoint once it serves;
        `overrides` change its config from the spec's `proxy_overrides` (a benchmark's second proxy)."""
        name = proxy_actor_name(index)
        options: dict[str, Any] = {"name": name, "namespace": self.spec.namespace, "num_cpus": 0,
                                   "max_restarts": self.spec.namesrv_max_restarts, "lifetime": self._lifetime(),
                                   "get_if_exists": True}
        _prefer_node(options, self.spec.proxy_node_id(index))
        handle: Any = ray.remote(ProxyActor).options(**options).remote(
            name, self.spec.namespace, self.spec.namesrv_names, self.spec.listen_host,
            self.spec.proxy_listen_port(index), dict(self.spec.proxy_overrides) | (overrides or {}))
        self.proxies[name] = handle
        self.proxy_endpoints[name] = str(ray.get(handle.endpoint.remote(), timeout=30))
        return self.proxy_endpoints[name]

    def start_console(self, port: int | None = None) -> str:
        """Start (or find) this deployment's web console (actors.console); its URL, on 127.0.0.1 of
        this driver's node (where the console is placed, softly). With ACL on (the NameServers'
        `acl_enable`), it asks for an account before any page."""
        from actors.console.actor import start_console

        self.console, self.console_url = start_console(
            self.spec.namespace, self.spec.namesrv_names, acl=bool(self.spec.namesrv_overrides.get("acl_enable")),
            port=self.spec.console_port if port is None else port, detached=self.spec.detached,
            node_id=ray.get_runtime_context().get_node_id())
        return self.console_url

    def _await_roles(self, specs: list[BrokerSpec]) -> None:
        """Controller mode: wait (at most CONTROLLER_JOIN_S) until the controller has decided these
        brokers' roles, so that a new set's configured master is elected before its slaves start.
        Started together, a slave whose node came up first would win the set's first election after
        its `controller_first_elect_delay_ms`. On timeout the slaves start anyway (the controller decides)."""
        decided = ray.get([self.brokers[s.addr].await_role.remote(CONTROLLER_JOIN_S) for s in specs],
                          timeout=START_TIMEOUT_S)
        late = [s.actor_name for s, ok in zip(specs, decided, strict=True) if not ok]
        if late:
            log.warning("starting the slaves anyway: no role decided for %s in %g s", ", ".join(late),
                        CONTROLLER_JOIN_S)

    def start_controller(self) -> Any:
        """The controller of this deployment's namespace (started once, found again after); the
        brokers started after it run in controller mode."""
        self.controller = start_controller(self.spec.namespace, controller_config(self.spec.profile),
                                           detached=self.spec.detached)
        ray.get(self.controller.stats.remote(), timeout=START_TIMEOUT_S)
        return self.controller

    def kill_controller(self, restart: bool = True) -> None:
        """Kill the controller actor; with restart Ray brings it back (its state is in the GCS KV)."""
        ray.kill(self.controller, no_restart=not restart)

    def namesrv_addr(self, timeout_s: float = 10.0) -> str:
        """The NameServers' remoting addresses in RocketMQ's form, `host:9876;host:9877` (what a
        RocketMQ client takes as namesrvAddr); empty when none serves TCP."""
        addrs = ray.get([h.get_remoting_address.remote() for h in self.namesrvs.values()], timeout=timeout_s)
        return ";".join(a for a in addrs if a)

    # ------------------------------------------------------------------ faults and recovery
    def addr_of(self, broker: str) -> str:
        """A broker's address (what routes carry), given its address or its actor name."""
        if broker in self.broker_specs:
            return broker
        for addr, spec in self.broker_specs.items():
            if spec.actor_name == broker:
                return addr
        raise KeyError(f"no broker {broker!r} in this deployment")

    def kill_broker(self, broker: str) -> None:
        """ray.kill: the actor dies at once, no graceful shutdown (pending calls fail)."""
        ray.kill(self.brokers[self.addr_of(broker)], no_restart=True)

    def broker_pid(self, broker: str) -> int:
        return ray.get(self.brokers[self.addr_of(broker)].get_runtime_info.remote())["pid"]

    def signal_broker(self, broker: str, sig: signal.Signals, pid: int | None = None) -> int:
        """SIGKILL / SIGSTOP / SIGCONT the broker's worker process (this machine's nodes only)."""
        pid = pid if pid is not None else self.broker_pid(broker)
        os.kill(pid, sig)
        return pid

    def restart_broker(self, broker: str, start_empty: bool = False) -> Any:
        """Start the broker again with the same name, address, node, store and config (after it
        died), and wait until it is up (and, in local mode, its gRPC proxy serving). It must come
        back where its store is: a broker pinned to a dead node, or whose node no longer holds its
        store, raises BrokerRestartError, unless `start_empty` (then it starts with an empty store,
        elsewhere if its node is dead)."""
        addr = self.addr_of(broker)
        spec = self.broker_specs[addr]
        old = self.brokers.get(addr)
        if old is None:  # not answering when this Deployment was built: its name may still be held
            try:
                old = ray.get_actor(spec.actor_name, namespace=self.spec.namespace)
            except ValueError:
                old = None
        if old is not None:
            try:
                ray.kill(old, no_restart=True)
            except Exception:  # already gone
                pass
        where = store_path(self.spec.data_dir, spec.actor_name)
        if spec.node_id is not None and spec.node_id not in alive_node_ids():
            if not start_empty:
                raise BrokerRestartError(
                    f"broker {spec.actor_name} is pinned to node {spec.node_id}, which is dead: its store {where} "
                    "went with it; restart it with start_empty (--start-empty) to start it empty on another node")
            log.warning("broker %s: node %s is dead; starting it empty elsewhere", spec.actor_name, spec.node_id)
            spec = replace(spec, node_id=None)
        handle = self.start_broker(spec, require_store=not start_empty)
        try:
            ray.get(handle.ping.remote(), timeout=START_TIMEOUT_S)
        except RayActorError as e:
            self.brokers.pop(addr, None)
            raise BrokerRestartError(f"broker {spec.actor_name} did not start: {_creation_error(e)}") from e
        if self.spec.proxy_mode == "local" and (endpoint := ray.get(handle.proxy_endpoint.remote(),
                                                                    timeout=START_TIMEOUT_S)) is not None:
            self.proxy_endpoints[spec.actor_name] = str(endpoint)  # its local-mode proxy serves again
        return handle

    def kill_namesrv(self, name: str, restart: bool = True) -> None:
        """Kill a NameServer; with restart Ray brings it back empty (max_restarts) at the same name."""
        ray.kill(self.namesrvs[name], no_restart=not restart)

    def shutdown_broker(self, broker: str) -> dict[str, str]:
        addr = self.addr_of(broker)
        outcome = ray.get(self.brokers[addr].shutdown.remote())
        ray.kill(self.brokers[addr], no_restart=True)
        return outcome

    def teardown(self, graceful: bool = True) -> None:
        """Stop everything this deployment started: proxies, brokers (they unregister), then NameServers."""
        _stop_all(self.proxies, "proxy", graceful)
        self.proxy_endpoints.clear()
        _stop_all(self.brokers, "broker", graceful)
        _stop_all(self.namesrvs, "NameServer", graceful)
        self.registry.forget()
        if self.controller is not None:
            ray.kill(self.controller, no_restart=True)
            self.controller = None
            forget_controller_state(self.spec.namespace)
        if self.console is not None:
            ray.kill(self.console, no_restart=True)
            self.console = None


def _prefer_node(options: dict[str, Any], node_id: str | None) -> None:
    """Place an actor on `node_id` softly (None: anywhere): if that node dies, Ray restarts it
    elsewhere. Ray places a request for no resources at all on a random node, ignoring a *soft*
    affinity (only hard affinity is special-cased), so it asks for a token 1 MiB of memory."""
    if node_id is not None:
        options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(node_id, soft=True)
        options["memory"] = SOFT_PLACEMENT_MEMORY


def _stop_all(handles: dict[str, Any], kind: str, graceful: bool) -> None:
    """Each actor of `handles` (emptied): its own `shutdown` first when `graceful`, then killed."""
    for name in list(handles):
        handle = handles.pop(name)
        try:
            if graceful:
                ray.get(handle.shutdown.remote(), timeout=10)
        except Exception as e:
            log.info("%s %s not shut down gracefully: %s", kind, name, type(e).__name__)
        ray.kill(handle, no_restart=True)


def forget_controller_state(namespace: str) -> int:
    """Delete the namespace's controller state from the GCS KV (a torn-down deployment's broker
    ids and epochs must not outlive it: a new one would find a set whose master can never return).
    Returns the keys deleted."""
    return GcsKV(KV_NAMESPACE).delete_prefix(kv_prefix(namespace, CONTROLLER_NAME) + "/")


def deploy(spec: ClusterSpec) -> Deployment:
    return Deployment(spec).start()


def connect(namespace: str = DEFAULT_NAMESPACE) -> Deployment:
    """Find a running deployment by its actor names (from any driver connected to the cluster).
    Its settings and every broker it started (dead ones included, with the node their store is on)
    come from its registry (actors.deployment.registry); a deployment without one (started by an older
    version) is rebuilt from the live brokers' runtime info, each pinned to its current node."""
    names = _live_actor_names(namespace)
    namesrv_names = [n for n in names if n.startswith(NAMESRV_PREFIX)]
    spec = ClusterSpec(namesrv_count=len(namesrv_names), brokers=[], namespace=namespace)
    record: dict[str, Any] = {"settings": {}, "brokers": {}}
    if names:  # a record with nothing running is what a driver that died without teardown left
        record = DeploymentRecord(namespace).get()
        spec = replace(spec, **{k: v for k, v in record["settings"].items() if k in REGISTRY_SETTINGS})
    dep = Deployment(spec)
    for name in namesrv_names:
        if (handle := _named_actor(name, namespace)) is not None:
            dep.namesrvs[name] = handle
    for b in record["brokers"].values():
        known = BrokerSpec(**b)
        dep.broker_specs[known.addr] = known
    spec.brokers = list(dep.broker_specs.values())
    if CONTROLLER_NAME in names:
        dep.controller = _named_actor(CONTROLLER_NAME, namespace)
        spec.controller = True
    if CONSOLE_NAME in names:
        dep.console = _named_actor(CONSOLE_NAME, namespace)
        if dep.console is not None:
            try:
                dep.console_url = ray.get(dep.console.get_url.remote(), timeout=5)
            except Exception:  # not answering: status shows it without a URL
                dep.console_url = None
    for name in names:
        if name.startswith(PROXY_PREFIX) and (handle := _named_actor(name, namespace)) is not None:
            dep.proxies[name] = handle
            continue
        if name in dep.namesrvs or name in (CONTROLLER_NAME, CONSOLE_NAME):
            continue
        handle = _named_actor(name, namespace)
        if handle is None:
            continue
        try:
            info = cast(dict[str, Any], ray.get(handle.get_runtime_info.remote(), timeout=5))
        except Exception:  # not a broker (a producer, a chaos driver) or not answering
            continue
        if "broker_addr" in info:
            addr = info["broker_addr"]
            host, sep, port = addr.rpartition(":")
            tcp = bool(sep) and port.isdigit()
            dep.brokers[addr] = handle
            if addr not in dep.broker_specs:
                dep.broker_specs[addr] = BrokerSpec(info["broker_name"], info["broker_id"], info["cluster"],
                                                    node_id=info.get("node_id"), port=int(port) if tcp else None,
                                                    host=host if tcp else LOOPBACK)
    return dep


def _live_actor_names(namespace: str) -> list[str]:
    """The named actors alive (or restarting) in the Ray namespace, sorted."""
    return sorted(a["name"] for a in ray.util.list_named_actors(all_namespaces=True) if a["namespace"] == namespace)


def _named_actor(name: str, namespace: str) -> ActorHandle[Any] | None:
    """The named actor's handle, or None when it died between being listed and being looked up
    (Ray drops a dead actor's name asynchronously, so a listing can still show a broker just killed)."""
    try:
        return ray.get_actor(name, namespace=namespace)
    except ValueError:
        log.info("actor %s in namespace %s is gone (died after it was listed)", name, namespace)
        return None


def _creation_error(e: RayActorError) -> str:
    """The broker constructor's own error out of Ray's wrapping (one line)."""
    text = str(e)
    for line in reversed(text.splitlines()):
        if "StoreMissingError" in line or "Error:" in line:
            return line.strip()
    return " ".join(text.split())[:500]
