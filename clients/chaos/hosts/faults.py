"""A chaos run on the multi-host test bed: where its servers go, and the host faults the kernel makes
there (clients.chaos.schema.HOST_FAULTS).

Placement: NameServer i on host i (host 0 is also Ray's head, where the controller goes), then each
broker on a host of its own, listening on its host's address; the run's clients (producers, the
live reader, the transactional producer, the route observer) stay on the test driver's node in the
root namespace. So a cut between two hosts separates exactly one broker from exactly one NameServer,
and a cut between a host and the clients' node separates the clients from exactly one broker.

    bed = HostBed(hosts, cluster, Nemesis(hosts))    # a test bed with a Ray node per host
    bed.place(spec)                                  # before the deployment starts
    faults = HostFaults(bed, dep)                    # once it runs
    faults.partition_broker_namesrv(addr, "namesrv-1"); faults.heal(addr)
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace

import ray

from actors.deployment.launcher import Deployment
from actors.deployment.spec import ClusterSpec
from clients.chaos.hosts.nemesis import Nemesis, NemesisWindow
from clients.chaos.hosts.netns import Hosts
from clients.chaos.hosts.ray_nodes import RayOnHosts
from namesrv.remoting.config import ALL_INTERFACES

log = logging.getLogger(__name__)


@dataclass
class HostBed:
    """A test bed with a Ray node per host and its nemesis, owned by whoever made it (the chaos CLI
    or a test): a run places its deployment on it and faults its hosts, never tears it down."""

    hosts: Hosts
    cluster: RayOnHosts
    nemesis: Nemesis

    def place(self, spec: ClusterSpec) -> None:
        """Pin each NameServer and broker of `spec` to a host of its own (see the module's docstring);
        a ValueError when the bed has too few hosts."""
        need = spec.namesrv_count + len(spec.brokers)
        if self.hosts.count < need:
            raise ValueError(f"{spec.namesrv_count} NameServers and {len(spec.brokers)} brokers need {need} hosts "
                             f"of their own; the test bed has {self.hosts.count}")
        spec.listen_host = ALL_INTERFACES
        spec.namesrv_node_ids = [self.cluster.node_id(i) for i in range(spec.namesrv_count)]
        spec.brokers = [replace(b, node_id=self.cluster.node_id(spec.namesrv_count + j))
                        for j, b in enumerate(spec.brokers)]


@dataclass
class HostFaults:
    """Makes the host faults of a chaos run on a deployment placed by `HostBed.place`, one nemesis
    window per fault (keyed by the broker it is planned on), healed one at a time."""

    bed: HostBed
    host_of: dict[str, int]
    """Broker address or NameServer name -> its host."""
    open: dict[str, NemesisWindow] = field(default_factory=dict)

    @classmethod
    def of(cls, bed: HostBed, dep: Deployment) -> HostFaults:
        """Where each server of `dep` runs (its NameServers asked for their remoting addresses)."""
        refs = {n: h.get_remoting_address.remote() for n, h in dep.namesrvs.items()}
        addrs = dict(zip(refs, ray.get(list(refs.values()), timeout=30), strict=True))
        host_of = {name: bed.hosts.layout.host_of(str(addr).rsplit(":", 1)[0]) for name, addr in addrs.items()}
        host_of |= {addr: bed.hosts.layout.host_of(spec.host) for addr, spec in dep.broker_specs.items()}
        return cls(bed, host_of)

    def _open(self, addr: str, window: NemesisWindow) -> str:
        self.open[addr] = window
        cuts = f", {len(window.cuts)} cuts" if window.cuts else ""
        return f"{window.detail} ({window.kind}{cuts})"

    def _check(self, addr: str) -> int:
        if addr in self.open:
            raise RuntimeError(f"{addr} is already under a host fault ({self.open[addr].kind}); heal it first")
        return self.host_of[addr]

    def partition_broker_namesrv(self, addr: str, namesrv: str) -> str:
        host, peer = self._check(addr), self.host_of[namesrv]
        if host == peer:
            raise RuntimeError(f"{addr} and {namesrv} share host {host}: a partition cannot part them")
        return self._open(addr, self.bed.nemesis.partition([[host], [peer]]))

    def partition_client_broker(self, addr: str) -> str:
        return self._open(addr, self.bed.nemesis.cut_clients(self._check(addr)))

    def isolate_host(self, addr: str) -> str:
        return self._open(addr, self.bed.nemesis.isolate_all(self._check(addr)))

    def delay_broker(self, addr: str, port: int, delay_ms: int) -> str:
        """A relay in front of the broker's `port` holding each chunk `delay_ms` each way. A delay
        starts with a glitch: the connections open to the port are reset (`ss -K` inside the host),
        so the clients' next ones go through the relay (only new connections are redirected)."""
        host = self._check(addr)
        detail = self._open(addr, self.bed.nemesis.delay(host, [port], delay_ms))
        self.bed.hosts.run(host, ["ss", "-K", "state", "established", "(", "sport", "=", f":{port}", ")"],
                           check=False)
        return detail + "; open connections reset"

    def heal(self, addr: str) -> str:
        window = self.open.pop(addr)
        self.bed.nemesis.end(window)
        return f"{window.detail} ({window.kind}) healed after {(window.end_ms or 0) - window.start_ms} ms"

    def heal_all(self) -> None:
        """Remove every cut (however the run ends)."""
        self.open.clear()
        self.bed.nemesis.heal()

    def windows(self) -> list[dict[str, object]]:
        return [w.as_record() for w in self.bed.nemesis.timeline.windows]
