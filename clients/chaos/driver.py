"""Carrying a fault plan out: kill, signal and restart brokers and NameServers of a `Deployment`,
recording every fault as it is made."""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

import ray
from ray.exceptions import RayActorError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from actors.deployment.launcher import Deployment
from actors.runtime.ray_info import head_node_id
from clients.chaos.hosts.faults import HostFaults
from clients.chaos.observe import RemovalLog, RouteObserver, SnapshotCollector
from clients.chaos.plan import ChaosConfig, FaultRecord, PlannedFault, Timing
from clients.chaos.roles import MASTER_ROLES, broker_status, current_role
from clients.chaos.schema import (
    BROKER_FAULTS,
    BROKER_REVIVALS,
    DELAY_BROKER,
    HEAL,
    ISOLATE_HOST,
    KILL_BROKER,
    KILL_MASTER,
    KILL_NAMESRV,
    LOSE_MASTER_NODE,
    MASTER_FAULTS,
    PARTITION_BROKER_NAMESRV,
    PARTITION_CLIENT_BROKER,
    PAUSE_SLAVE,
    RESTART_BROKER,
    RESTART_NAMESRV,
    SET_FAULTS,
    SIGCONT_BROKER,
    SIGKILL_BROKER,
    SIGKILL_MASTER,
    SIGSTOP_BROKER,
    TIMELINE_KINDS,
)
from namesrv.common.clock import system_clock as now_ms

log = logging.getLogger(__name__)

NodeRemover = Callable[[str], object]
"""Removes the Ray node with this id for good (its raylet and every process on it), e.g. the
multi-node test cluster's `Cluster.remove_node(node, allow_graceful=False)`; what lose_master_node
calls. Only whoever owns the cluster can: a chaos run on a real cluster has none."""

@ray.remote(num_cpus=0, max_retries=0)
def _signal_on_node(pid: int, sig: int) -> int:
    os.kill(pid, sig)
    return now_ms()


_LOCAL_NODE_IPS: dict[str, bool] = {}


def _is_local_node(node_id: str) -> bool:
    if node_id not in _LOCAL_NODE_IPS:
        me = ray.util.get_node_ip_address()
        ips = {n["NodeID"]: n["NodeManagerAddress"] for n in ray.nodes()}
        _LOCAL_NODE_IPS[node_id] = ips.get(node_id) == me
    return _LOCAL_NODE_IPS[node_id]


def send_signal(pid: int, sig: signal.Signals, node_id: str | None = None) -> int:
    """Signal a worker process: directly when it runs on this machine, else through a task pinned
    to its node (a driver on another host cannot reach it with os.kill). Returns when (epoch ms)
    the signal was sent, which a fault's record must carry: a task on a busy node may start
    seconds after it was asked for (a worker process made first), and a fault timed at the asking
    would count those seconds against its detection."""
    if node_id is None or _is_local_node(node_id):
        os.kill(pid, sig)
        return now_ms()
    strategy = NodeAffinitySchedulingStrategy(node_id, soft=False)
    sent: int = ray.get(_signal_on_node.options(scheduling_strategy=strategy).remote(pid, int(sig)), timeout=60)
    return sent


class ChaosDriver:
    """Carries a fault plan out against a Deployment and records each fault as it makes it.

    Events run in plan order, each no earlier than planned (a slow restart delays what follows, it
    never reorders it), so the timeline's kinds and targets are the plan's. Before faulting a broker
    the driver waits (bounded) until that broker is back in every route, so each fault starts from
    a converged cluster. Stopped processes are always continued when `run` ends, however it ends.

    lose_master_node calls `lose_node` (see NodeRemover) with the node of the set's master; every
    broker on that node goes into `lost` (never revived, never asked anything again). The host
    faults (partitions, isolation) are made by `host_faults` on the test bed, each healed by its
    planned revival and every one of them when `run` ends, however it ends.
    """

    def __init__(self, dep: Deployment, cfg: ChaosConfig, observer: RouteObserver | None = None,
                 removals: RemovalLog | None = None, *, timing: Timing | None = None,
                 snapshots: SnapshotCollector | None = None, lose_node: NodeRemover | None = None,
                 host_faults: HostFaults | None = None) -> None:
        self.dep = dep
        self.host_faults = host_faults
        self.lose_node = lose_node
        self.lost: set[str] = set()
        """Addresses of the brokers that went with a lost node."""
        self.cfg = cfg
        self.timing = timing or cfg.timing()
        self.observer = observer
        self.removals = removals
        self.snapshots = snapshots
        self.timeline: list[FaultRecord] = []
        self.recovery_ms: dict[int, float] = {}
        """restart_broker fault_id -> ms from the restart call until the broker answered."""
        self.cut_ms: dict[int, float] = {}
        """heal fault_id -> how long the cut it removed lasted, ms (what its return bound counts)."""
        self._stopped: dict[str, tuple[int, str | None]] = {}
        self._open: dict[str, int] = {}
        self._faulted_at: dict[str, float] = {}
        self._set_faulted: dict[str, str] = {}
        """Broker set name -> the broker a set fault hit (its revival revives that one)."""
        self._halt = threading.Event()
        self._lock = threading.Lock()

    def halt(self) -> None:
        self._halt.set()

    def run(self, plan: list[PlannedFault], start: float | None = None) -> list[FaultRecord]:
        """Execute `plan` (times relative to `start`, a time.monotonic() value; default now)."""
        start = time.monotonic() if start is None else start
        try:
            for event in plan:
                due = start + event.at_s
                if event.after_s is not None and event.target in self._faulted_at:
                    due = max(due, self._faulted_at[event.target] + event.after_s)
                if self._halt.wait(max(0.0, due - time.monotonic())):
                    log.warning("chaos halted before %s %s", event.kind, event.target)
                    break
                self.execute(event.kind, event.target, event.peer)
        finally:
            self.release_stopped()
        return self.timeline

    def release_stopped(self) -> None:
        """SIGCONT every broker still stopped and heal every host fault (idempotent)."""
        if self.host_faults is not None and self.host_faults.open:
            try:
                self.host_faults.heal_all()
            except Exception:
                log.exception("could not heal the host faults")
        with self._lock:
            stopped, self._stopped = dict(self._stopped), {}
        for addr, (pid, node) in stopped.items():
            try:
                send_signal(pid, signal.SIGCONT, node)
                log.info("released stopped broker %s (pid %d)", addr, pid)
            except ProcessLookupError:
                pass
            except Exception:
                log.exception("could not SIGCONT %s (pid %d)", addr, pid)

    # -- one event
    def execute(self, kind: str, target: str, peer: str | None = None) -> FaultRecord:
        """Make one fault or revival now and record it; a failed action is recorded (ok=False), not raised.
        `peer`: the NameServer a partition_broker_namesrv cuts the broker from."""
        handler: dict[str, Callable[[str, FaultRecord], str]] = {
            KILL_BROKER: self._kill_broker, SIGKILL_BROKER: self._sigkill_broker,
            SIGSTOP_BROKER: self._sigstop_broker, SIGCONT_BROKER: self._sigcont_broker,
            RESTART_BROKER: self._restart_broker, KILL_NAMESRV: self._kill_namesrv,
            KILL_MASTER: self._kill_broker, SIGKILL_MASTER: self._sigkill_broker, PAUSE_SLAVE: self._sigstop_broker,
            LOSE_MASTER_NODE: self._lose_node, PARTITION_BROKER_NAMESRV: self._partition_broker_namesrv,
            PARTITION_CLIENT_BROKER: self._partition_client_broker, ISOLATE_HOST: self._isolate_host, HEAL: self._heal,
            DELAY_BROKER: self._delay_broker,
        }
        make = handler[kind]
        planned, found = None, ""
        if kind in SET_FAULTS:
            planned = target
            for addr in self._members(planned):
                self._settle(addr)
            try:
                target, found = self._holder(kind, planned)
            except Exception as e:  # recorded as a failed fault on the set, not raised
                found = f"no broker of {planned} found in the role: {type(e).__name__}: {e}"
        elif kind in BROKER_REVIVALS and target in self._set_faulted:
            planned, target = target, self._set_faulted.pop(target)
        elif kind in BROKER_FAULTS:
            self._settle(target)
        if kind in BROKER_FAULTS:
            self._another_up(planned or target)
        revives = self._open.pop(target, None) if kind in BROKER_REVIVALS else None
        broker_addr = None if kind == KILL_NAMESRV else target
        rec = FaultRecord(len(self.timeline), now_ms(), kind, target, broker_addr, revives=revives, planned=planned,
                          peer=peer)
        self.timeline.append(rec)
        try:
            if planned is not None and target == planned:
                raise LookupError(found)
            detail = make(target, rec)
            detail = f"{found}; {detail}" if found else detail
            rec.detail = detail if rec.revives is None else f"revives fault {rec.revives}; {detail}"
        except Exception as e:
            rec.ok = False
            rec.detail = f"failed: {type(e).__name__}: {e}"[:500]
            log.exception("chaos event %s on %s failed", kind, target)
        if kind in BROKER_FAULTS and rec.ok:
            self._open[target] = rec.fault_id
            self._faulted_at[planned or target] = time.monotonic() - (now_ms() - rec.t_ms) / 1000
            if planned is not None:
                self._set_faulted[planned] = target
        log.info("fault %d %s %s: %s", rec.fault_id, kind, target, rec.detail)
        return rec

    def inject(self, kind: str, target: str, action: Callable[[], object], detail: str) -> FaultRecord:
        """Record a fault made by the caller (e.g. losing a whole node), timed right before `action`
        runs, so its revival and measurements link up like those of planned faults."""
        if kind not in TIMELINE_KINDS:
            raise ValueError(f"unknown fault kind {kind!r}")
        rec = FaultRecord(len(self.timeline), now_ms(), kind, target, None if kind == KILL_NAMESRV else target, detail)
        self.timeline.append(rec)
        action()
        if kind in BROKER_FAULTS:
            self._open[target] = rec.fault_id
            self._faulted_at[target] = time.monotonic()
        return rec

    def _settle(self, addr: str) -> None:
        observer = self.observer
        if observer is None:
            return
        bound = self.timing.back_bound_ms(RESTART_BROKER) / 1000
        if not observer.wait_for(lambda: observer.advertised_everywhere(addr), bound):
            log.warning("%s not back in every route after %.1f s; faulting it anyway", addr, bound)

    def _another_up(self, target: str) -> None:
        """Wait (bounded) until a broker of another set, not faulted now, is in every route: the plan
        faults a broker only while another is up, and a revived one may still be on its way back
        (a heal's return waits for TCP's and gRPC's back-off), which the plan's timing cannot see."""
        observer = self.observer
        if observer is None:
            return
        name = self.dep.broker_specs[target].broker_name if target in self.dep.broker_specs else target
        others = [a for a, spec in self.dep.broker_specs.items()
                  if spec.broker_name != name and a not in self._open and a not in self.lost]
        if not others:
            return
        bound = self.timing.back_bound_ms(RESTART_BROKER) / 1000
        if not observer.wait_for(lambda: any(observer.advertised_everywhere(a) for a in others), bound):
            log.warning("no broker but %s in every route after %.1f s; faulting it anyway", name, bound)

    def _members(self, broker_set: str) -> list[str]:
        return sorted(a for a, s in self.dep.broker_specs.items() if s.broker_name == broker_set)

    def _holder(self, kind: str, broker_set: str) -> tuple[str, str]:
        """The member of `broker_set` holding the role the fault is after, by the brokers' own
        account (their role log's last entry, else their configured role): its master for a master
        kill, its first slave (by address) for pause_slave. A member that does not answer is
        passed over."""
        roles: dict[str, str] = {}
        for addr in self._members(broker_set):
            handle = self.dep.brokers.get(addr)
            if handle is None:
                continue
            try:
                roles[addr] = current_role(broker_status(handle, timeout_s=10))
            except Exception as e:
                log.info("%s did not say its role: %s", addr, type(e).__name__)
        want_master = kind in MASTER_FAULTS
        found = [a for a, role in sorted(roles.items()) if (role in MASTER_ROLES) == want_master]
        if not found:
            raise LookupError(f"no {'master' if want_master else 'slave'} among {roles or 'no answering broker'}")
        return found[0], f"{broker_set}'s {'master' if want_master else 'slave'} is {found[0]} ({roles[found[0]]})"

    def _runtime(self, addr: str) -> dict[str, Any]:
        return ray.get(self.dep.brokers[addr].get_runtime_info.remote(), timeout=30)

    def _node_of(self, addr: str) -> str:
        spec = self.dep.broker_specs.get(addr)
        if spec is not None and spec.node_id is not None:
            return spec.node_id
        try:
            return str(self._runtime(addr)["node_id"])
        except Exception:  # dead or restarting: not on any node now
            return ""

    def _lose_node(self, addr: str, rec: FaultRecord) -> str:
        """Remove the node `addr` runs on through the run's hook. Refused (nothing done) without a
        hook, when the node is this driver's or the head (the run's own records and the GCS live
        there), or when another member of the set shares the node (nothing could take over)."""
        if self.lose_node is None:
            raise RuntimeError("lose_master_node needs a node-removal hook (run_chaos(lose_node=...)), "
                               "which only whoever owns the cluster can give")
        node = str(self._runtime(addr)["node_id"])
        if node in (ray.get_runtime_context().get_node_id(), head_node_id()):
            raise RuntimeError(f"{addr} runs on the head or this driver's node {node[:12]}: not removable")
        name = self.dep.broker_specs[addr].broker_name
        mates = [a for a in self._members(name) if a != addr and a not in self.lost and self._node_of(a) == node]
        if mates:
            raise RuntimeError(f"{addr} shares node {node[:12]} with {', '.join(mates)} of its set: nothing "
                               "could take over; place a set's master and slaves on different nodes")
        on_node = sorted(a for a in self.dep.brokers if a not in self.lost and self._node_of(a) == node)
        rec.t_ms = now_ms()
        self.lose_node(node)
        self.lost.update(on_node)
        return f"node {node[:12]} removed, with {', '.join(on_node)}; no revival"

    def _hosts(self, kind: str) -> HostFaults:
        if self.host_faults is None:
            raise RuntimeError(f"{kind} is made by the kernel on the multi-host test bed, which this run is not on")
        return self.host_faults

    def _partition_broker_namesrv(self, addr: str, rec: FaultRecord) -> str:
        if rec.peer is None:
            raise ValueError("partition_broker_namesrv needs the NameServer to cut the broker from (the plan's peer)")
        rec.t_ms = now_ms()
        return f"{addr} | {rec.peer}: " + self._hosts(rec.kind).partition_broker_namesrv(addr, rec.peer)

    def _partition_client_broker(self, addr: str, rec: FaultRecord) -> str:
        rec.t_ms = now_ms()
        return self._hosts(rec.kind).partition_client_broker(addr)

    def _isolate_host(self, addr: str, rec: FaultRecord) -> str:
        rec.t_ms = now_ms()
        return self._hosts(rec.kind).isolate_host(addr)

    def _delay_broker(self, addr: str, rec: FaultRecord) -> str:
        port = self.dep.broker_specs[addr].port
        if port is None:
            raise RuntimeError(f"{addr} serves no TCP port to put a delay in front of")
        rec.t_ms = now_ms()
        return self._hosts(rec.kind).delay_broker(addr, port, self.cfg.delay_ms)

    def _heal(self, addr: str, rec: FaultRecord) -> str:
        rec.t_ms = now_ms()
        if rec.revives is not None:
            self.cut_ms[rec.fault_id] = rec.t_ms - self.timeline[rec.revives].t_ms
        return self._hosts(rec.kind).heal(addr)

    def _kill_broker(self, addr: str, rec: FaultRecord) -> str:
        self.dep.kill_broker(addr)
        return "ray.kill, no restart"

    def _sigkill_broker(self, addr: str, rec: FaultRecord) -> str:
        info = self._runtime(addr)
        rec.t_ms = send_signal(info["pid"], signal.SIGKILL, info["node_id"])
        return f"SIGKILL pid {info['pid']}"

    def _sigstop_broker(self, addr: str, rec: FaultRecord) -> str:
        info = self._runtime(addr)
        with self._lock:
            self._stopped[addr] = (info["pid"], info["node_id"])
        rec.t_ms = send_signal(info["pid"], signal.SIGSTOP, info["node_id"])
        return f"SIGSTOP pid {info['pid']} (alive to Ray, silent to NameServers)"

    def _sigcont_broker(self, addr: str, rec: FaultRecord) -> str:
        with self._lock:
            pid, node = self._stopped.pop(addr)
        rec.t_ms = send_signal(pid, signal.SIGCONT, node)
        return f"SIGCONT pid {pid}"

    def _restart_broker(self, addr: str, rec: FaultRecord) -> str:
        started = time.perf_counter()
        handle = self.dep.restart_broker(addr)
        info = ray.get(handle.get_runtime_info.remote(), timeout=120)
        up_ms = (time.perf_counter() - started) * 1000
        self.recovery_ms[rec.fault_id] = up_ms
        return (f"up in {up_ms:.0f} ms; store recovered {info['recovered_messages']} messages in "
                f"{info['recovery_ms']:.0f} ms")

    def _kill_namesrv(self, name: str, rec: FaultRecord) -> str:
        handle = self.dep.namesrvs[name]
        before = ray.get(handle.get_status.remote(), timeout=30)
        if self.removals is not None:
            self.removals.snapshot([name])  # its removal list dies with it
        if self.snapshots is not None:
            try:
                self.snapshots.collect([name])  # and so do its buffered route snapshots
            except Exception:  # never let the record keeping stop the fault
                log.exception("snapshots of %s not collected before its kill", name)
        rec.t_ms = now_ms()
        self.dep.kill_namesrv(name, restart=True)
        deadline = time.monotonic() + 120
        while True:  # calls made while it restarts either wait for the new instance or fail fast
            try:
                status = ray.get(handle.get_status.remote(), timeout=max(1.0, deadline - time.monotonic()))
                if status["started_ms"] != before["started_ms"] or status["pid"] != before["pid"]:
                    break
            except RayActorError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"{name} did not come back within 120 s")
            self._halt.wait(0.05)
        back = FaultRecord(len(self.timeline), now_ms(), RESTART_NAMESRV, name, None, revives=rec.fault_id)
        back.detail = f"revives fault {rec.fault_id}; Ray restarted it empty in {back.t_ms - rec.t_ms} ms"
        self.timeline.append(back)
        return f"ray.kill, Ray restarts it (was pid {before['pid']})"
