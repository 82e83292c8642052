"""What a chaos run faults (`Target`): a private deployment of the config's shape, deployed for the
run and torn down after it, or an existing deployment adopted as it runs, with the bounds its own
NameServer and broker configs give and what its brokers need to be restarted as they were."""

from __future__ import annotations

import string
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ray
from pydantic.alias_generators import to_snake

from actors.deployment.launcher import Deployment, connect
from actors.deployment.placement import assign_broker_ports, placement_nodes, spread_sets_over_nodes
from actors.deployment.profiles import get_profile, replication_overrides
from actors.deployment.spec import BrokerSpec, ClusterSpec
from actors.runtime.ray_info import head_node_id
from clients.chaos.hosts.faults import HostBed
from clients.chaos.leaks import named_actors
from clients.chaos.plan import ChaosConfig, Timing
from clients.chaos.report import EXISTING, PRIVATE
from clients.chaos.schema import BROKER_FAULTS, NODE_FAULTS
from clients.cli.support import env_credentials
from namesrv.broker.config import BrokerConfig
from namesrv.remoting.config import LOOPBACK
from namesrv.routeinfo.config import NamesrvConfig


class ChaosSetupError(RuntimeError):
    """The run cannot start as asked (no deployment to fault, no fault fits, output in the way);
    nothing was changed."""


@dataclass
class Target:
    """What the run faults: the deployment, the bounds its configs give, and what must stay."""

    dep: Deployment
    kind: str
    timing: Timing
    fault_brokers: list[str]
    """Broker addresses a fault may hit (masters: the producers write to them)."""
    data_dir: str
    own_dir: bool = False
    """A temp dir of the run's own, removed afterwards unless kept."""
    keep: set[str] = field(default_factory=set)
    """Actor names in the namespace that are not the run's (an existing deployment's)."""
    broker_config: BrokerConfig = field(default_factory=BrokerConfig)
    """The brokers' config in force (a master's: its role, its HA timing)."""
    slaves: int = 0
    """Slaves per broker set."""

    @property
    def sets(self) -> dict[str, list[str]]:
        """Broker set name -> its members' addresses."""
        out: dict[str, list[str]] = {}
        for addr, spec in sorted(self.dep.broker_specs.items()):
            out.setdefault(spec.broker_name, []).append(addr)
        return out


def broker_specs(n: int, slaves: int = 0) -> list[BrokerSpec]:
    names = [f"broker-{string.ascii_lowercase[i]}" if i < 26 else f"broker-{i}" for i in range(n)]
    return [BrokerSpec(name, i) for name in names for i in range(slaves + 1)]


def private_target(cfg: ChaosConfig, namespace: str, bed: HostBed | None = None) -> Target:
    """A fresh deployment of the config's shape and profile (not started yet); on the test bed
    `bed`, each server pinned to a host of its own (`HostBed.place`)."""
    own_dir = cfg.data_dir is None
    data_dir = cfg.data_dir or tempfile.mkdtemp(prefix="namesrv-chaos-")
    overrides = replication_overrides(cfg.slaves, cfg.broker_role) | cfg.broker_overrides
    spec = ClusterSpec(namesrv_count=cfg.namesrvs, brokers=broker_specs(cfg.brokers, cfg.slaves), profile=cfg.profile,
                       namespace=namespace, data_dir=data_dir, namesrv_port=0,
                       broker_port=0 if cfg.broker_tcp else None,
                       namesrv_overrides=cfg.namesrv_overrides | {"snapshot_interval_ms": cfg.snapshot_interval_ms},
                       broker_overrides=overrides, controller=cfg.controller)
    if any(k in NODE_FAULTS for k in cfg.fault_mix):  # a set's members on different nodes, services on the head
        spread_sets_over_nodes(spec, placement_nodes())
        head = head_node_id()
        spec.namesrv_node_ids = [head] if head is not None else []
    if bed is not None:
        bed.place(spec)
    assign_broker_ports(spec)  # TCP brokers: their host:port, the addresses the run keys them by, known now
    masters = [b.addr for b in spec.brokers if b.broker_id == 0]
    return Target(Deployment(spec), PRIVATE, cfg.timing(), masters, data_dir, own_dir,
                  broker_config=get_profile(cfg.profile).broker_config(**overrides), slaves=cfg.slaves)


def adopt_existing(cfg: ChaosConfig) -> Target:
    """The deployment running in `cfg.namespace`, set up so the driver can restart its brokers as
    they were (same node, store, config; detached, so they outlive this driver), with the bounds
    its own NameServer and broker configs give."""
    namespace = str(cfg.namespace)
    dep = connect(namespace)
    if not dep.namesrvs:
        raise ChaosSetupError(f"no NameServer in Ray namespace {namespace!r}: nothing to fault "
                              "(leave --namespace out to run on a private deployment)")
    keep = set(named_actors(namespace))
    infos = {addr: ray.get(h.get_runtime_info.remote(), timeout=30) for addr, h in sorted(dep.brokers.items())}
    masters = [a for a, info in infos.items() if info["broker_id"] == 0]
    if any(k in BROKER_FAULTS for k in cfg.fault_mix) and len(masters) < 2:
        raise ChaosSetupError(f"broker faults need at least 2 master brokers; {namespace!r} has {len(masters)}")
    roots = {str(Path(info["store_dir"]).parent) for info in infos.values()}
    if len(roots) > 1:
        raise ChaosSetupError(f"the brokers of {namespace!r} keep their stores under different roots {roots}")
    props = ray.get(next(iter(dep.namesrvs.values())).get_namesrv_config.remote(), timeout=30).payload.properties
    namesrv_config = NamesrvConfig.model_validate({to_snake(k): v for k, v in props.items()})
    master_info = next((i for i in infos.values() if i["broker_id"] == 0), next(iter(infos.values()), None))
    broker_config = _broker_config(master_info) if master_info is not None else BrokerConfig()
    dep.spec.data_dir = roots.pop() if roots else dep.spec.data_dir
    dep.spec.detached = True
    dep.spec.broker_overrides = broker_config.model_dump()
    for addr, info in infos.items():  # each where it runs now: its node, and the port it serves on
        known = dep.broker_specs.get(addr)
        dep.broker_specs[addr] = BrokerSpec(info["broker_name"], info["broker_id"], info["cluster"],
                                            node_id=info["node_id"], port=known.port if known else None,
                                            host=known.host if known else LOOPBACK)
    dep.spec.brokers = list(dep.broker_specs.values())
    slaves = max((sum(1 for i in infos.values() if i["broker_name"] == n and i["broker_id"] > 0)
                  for n in {i["broker_name"] for i in infos.values()}), default=0)
    return Target(dep, EXISTING, cfg.timing_for(namesrv_config, broker_config), masters, dep.spec.data_dir,
                  keep=keep, broker_config=broker_config, slaves=slaves)


def _broker_config(info: dict[str, Any]) -> BrokerConfig:
    """The brokers' config, to restart them as they were. A broker never hands out its secret: one
    that signs its registrations takes the account from NAMESRV_ACCESS_KEY / NAMESRV_SECRET_KEY."""
    config = BrokerConfig.model_validate(info["config"])
    signs_as = info.get("signs_as")
    if signs_as:
        creds = env_credentials()
        if creds is None or creds.access_key != signs_as:
            raise ChaosSetupError(f"the brokers sign their registrations as {signs_as!r}: set NAMESRV_ACCESS_KEY "
                                  "and NAMESRV_SECRET_KEY to that account, so restarted brokers can register")
        config.credentials = creds
    return config
