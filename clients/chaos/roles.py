"""Issue 21's chaos invariants on broker roles, from the brokers' own accounts.

Each broker actor's `status()` returns `role_log`: `[{"atMs": int, "role": "SYNC_MASTER" |
"ASYNC_MASTER" | "SLAVE", "epoch": int}, ...]`, appended on every role change (the contract with the
broker's controller wiring). A broker without it (`status()` missing, or no `role_log` key) logged
its start role only: its configured `broker_role` from `get_runtime_info()`, from its start.

`RoleLogCollector` polls every broker while a run goes on and keeps each incarnation's newest log
(a killed broker's log dies with it); `role_spans` turns the logs into intervals, each incarnation's
last one ending when a fault killed it, when the next incarnation at its address started, or at the
end of the run; `writable_master_overlaps` finds instants where two brokers of one set were both
writable masters. The checks: one writable master per broker set (`check_one_master`); with
ASYNC_MASTER the acknowledged-but-lost count reported, not hidden (`check_loss_for_role`); a paused
slave holding up its SYNC_MASTER's sends no longer than the SyncStateSet takes to shrink
(`check_paused_slave_sends`).

A master lost with its node (lose_master_node): its role log is gone with the node, so what counts
is the newest log the collector read before (it polls every 0.5 s, and role changes carry their own
times), and its last role ends at the node loss (the fault's time), a death like a SIGKILL: the
node's raylet and every worker process on it are killed with it (`Cluster.remove_node(...,
allow_graceful=False)`), so that process can serve nothing after. A partition that left the process
alive somewhere would not be a lost node; fencing it is the controller's epoch, not this invariant.

A stopped process (SIGSTOP: sigstop_broker, pause_slave) writes nothing to its log while stopped:
its last entry (a master's "SYNC_MASTER", say) would read as held throughout, though the process
answers nothing, and when the controller fenced it meanwhile (elected its slave at a higher epoch),
its "SLAVE" entry is only written once it runs again and hears so. So `role_spans` marks the span
from the stop to its SIGCONT UNREACHABLE (from the fault timeline, not a guess): not a writable
master. From the SIGCONT on the log counts as it says: a resumed old master that still believes it
is master beside the new one, until it applies the controller's change, is counted as an overlap,
since it would take a send in that window (under SYNC_MASTER it cannot acknowledge one: its slave
no longer follows it). A master hung without a signal (its event loop blocked) cannot be told from
the outside and keeps its logged role.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from clients.chaos.checks import Invariant
from clients.chaos.plan import FaultRecord
from clients.chaos.schema import (
    HANG_FAULTS,
    KILL_BROKER,
    KILL_MASTER,
    LOSE_MASTER_NODE,
    PAUSE_SLAVE,
    RESTART_BROKER,
    SIGKILL_BROKER,
    SIGKILL_MASTER,
)

log = logging.getLogger(__name__)

MASTER_ROLES = frozenset({"SYNC_MASTER", "ASYNC_MASTER"})
UNREACHABLE = "UNREACHABLE"
"""The role of a span while the broker's process was stopped (SIGSTOP): it serves nothing, so it
is no writable master then, whatever its log's last entry says."""
DEATHS = frozenset({KILL_BROKER, SIGKILL_BROKER, KILL_MASTER, SIGKILL_MASTER, LOSE_MASTER_NODE})


def broker_status(handle: Any, timeout_s: float = 10.0) -> dict[str, Any]:
    """The broker's `status()` (with `role_log`), or, from a broker that has none yet, its runtime
    info (`broker_role`, `incarnation`)."""
    import ray

    try:
        method = handle.status
    except AttributeError:
        method = None
    if method is not None:
        status: dict[str, Any] = ray.get(method.remote(), timeout=timeout_s)
        if "broker_role" in status and "incarnation" in status:
            return status
        info: dict[str, Any] = ray.get(handle.get_runtime_info.remote(), timeout=timeout_s)
        return info | status
    result: dict[str, Any] = ray.get(handle.get_runtime_info.remote(), timeout=timeout_s)
    return result


def role_log_of(status: dict[str, Any], start_ms: int) -> list[dict[str, Any]]:
    """The broker's role log; without one, its start role from `start_ms` (epoch 0)."""
    logged = status.get("role_log")
    if logged:
        return [{"atMs": int(e["atMs"]), "role": str(e["role"]), "epoch": int(e.get("epoch", 0))} for e in logged]
    return [{"atMs": start_ms, "role": str(status.get("broker_role", "")), "epoch": 0}]


def current_role(status: dict[str, Any]) -> str:
    return role_log_of(status, 0)[-1]["role"]


@dataclass(slots=True)
class Incarnation:
    """One broker actor's life as the collector saw it."""

    broker_set: str
    broker: str
    incarnation: str
    first_seen_ms: int
    last_seen_ms: int
    role_log: list[dict[str, Any]]
    has_log: bool
    """The broker reported a role_log (else its start role only was assumed)."""


@dataclass(frozen=True, slots=True)
class RoleSpan:
    broker_set: str
    broker: str
    incarnation: str
    role: str
    epoch: int
    start_ms: int
    end_ms: int


@dataclass(frozen=True, slots=True)
class Overlap:
    broker_set: str
    a: RoleSpan
    b: RoleSpan
    from_ms: int
    to_ms: int


def role_spans(incarnations: Iterable[Incarnation], timeline: Iterable[FaultRecord], end_ms: int,
               run_start_ms: int = 0) -> list[RoleSpan]:
    """Each logged role as [start, end) per incarnation. An incarnation without a role log starts
    at the restart that made it (the restart's record), or at `run_start_ms` when it predates the
    run. Its last role ends at the first death fault (kill, SIGKILL, node loss) on its address
    after its start, or when the next incarnation at that address was started, or at `end_ms`.
    While its process was stopped (a hang fault until its SIGCONT) a span's role is UNREACHABLE."""
    timeline = list(timeline)
    by_addr: dict[str, list[Incarnation]] = {}
    for inc in incarnations:
        by_addr.setdefault(inc.broker, []).append(inc)
    spans: list[RoleSpan] = []
    for addr, incs in by_addr.items():
        restarts = sorted(r.t_ms for r in timeline if r.kind == RESTART_BROKER and r.target == addr and r.ok)
        deaths = sorted(r.t_ms for r in timeline if r.kind in DEATHS and r.target == addr and r.ok)
        incs.sort(key=lambda i: i.first_seen_ms)
        starts: list[int] = []
        for inc in incs:
            if inc.has_log:
                starts.append(min(e["atMs"] for e in inc.role_log))
            else:
                before = [t for t in restarts if t <= inc.first_seen_ms]
                starts.append(before[-1] if before else run_start_ms)
        for i, inc in enumerate(incs):
            start = starts[i]
            log_ = sorted(inc.role_log, key=lambda e: e["atMs"]) if inc.has_log else [
                dict(inc.role_log[-1], atMs=start)]
            stop = min([t for t in deaths if t >= start] + starts[i + 1:i + 2] + [end_ms])
            for j, entry in enumerate(log_):
                a = max(int(entry["atMs"]), start)
                b = min(int(log_[j + 1]["atMs"]), stop) if j + 1 < len(log_) else stop
                if b > a:
                    spans.append(RoleSpan(inc.broker_set, addr, inc.incarnation, entry["role"], int(entry["epoch"]),
                                          a, b))
    return sorted(_mark_stopped(spans, timeline, end_ms), key=lambda s: (s.broker_set, s.start_ms, s.broker))


def stopped_windows(timeline: Iterable[FaultRecord], end_ms: int) -> dict[str, list[tuple[int, int]]]:
    """Broker address -> [(SIGSTOP, SIGCONT)) ms while its process was stopped (to `end_ms` when never
    continued in the timeline)."""
    timeline = list(timeline)
    cont = {r.revives: r.t_ms for r in timeline if r.revives is not None}
    out: dict[str, list[tuple[int, int]]] = {}
    for r in timeline:
        if r.kind in HANG_FAULTS and r.ok:
            out.setdefault(r.target, []).append((r.t_ms, cont.get(r.fault_id, end_ms)))
    return out


def _mark_stopped(spans: list[RoleSpan], timeline: Iterable[FaultRecord], end_ms: int) -> list[RoleSpan]:
    """Each span cut where its broker was stopped; the stopped pieces' role is UNREACHABLE."""
    stops = stopped_windows(timeline, end_ms)
    out = []
    for s in spans:
        rest: RoleSpan | None = s
        for a, b in sorted(stops.get(s.broker, [])):
            if rest is None or b <= rest.start_ms or a >= rest.end_ms:
                continue
            lo, hi = max(a, rest.start_ms), min(b, rest.end_ms)
            if lo > rest.start_ms:
                out.append(replace(rest, end_ms=lo))
            out.append(replace(rest, role=UNREACHABLE, start_ms=lo, end_ms=hi))
            rest = replace(rest, start_ms=hi) if hi < rest.end_ms else None
        if rest is not None:
            out.append(rest)
    return out


def writable_master_overlaps(spans: Iterable[RoleSpan]) -> list[Overlap]:
    """Every pair of writable-master spans of one broker set (different brokers or incarnations)
    that share an instant."""
    masters: dict[str, list[RoleSpan]] = {}
    for s in spans:
        if s.role in MASTER_ROLES:
            masters.setdefault(s.broker_set, []).append(s)
    out = []
    for name, group in sorted(masters.items()):
        group.sort(key=lambda s: s.start_ms)
        for i, a in enumerate(group):
            for b in group[i + 1:]:
                if b.start_ms >= a.end_ms:
                    break
                if (a.broker, a.incarnation) != (b.broker, b.incarnation):
                    out.append(Overlap(name, a, b, b.start_ms, min(a.end_ms, b.end_ms)))
    return out


def masterless_windows(spans: Iterable[RoleSpan], broker_sets: Iterable[str], start_ms: int, end_ms: int,
                       follow_ms: int = 0) -> dict[str, list[tuple[int, int]]]:
    """Broker set -> [(from, to)] within [start_ms, end_ms) while no member was a writable master by
    the role spans (between a master's death and its slave's promotion, say), each stretched by
    `follow_ms` at its end: the time a producer takes to learn the new master's address (its route
    poll), during which its sends still go to the dead one."""
    cover: dict[str, list[tuple[int, int]]] = {n: [] for n in broker_sets}
    for s in spans:
        if s.role in MASTER_ROLES and s.broker_set in cover:
            cover[s.broker_set].append((s.start_ms, s.end_ms))
    out: dict[str, list[tuple[int, int]]] = {}
    for name, covered in cover.items():
        gaps, t = [], start_ms
        for a, b in sorted(covered):
            if a > t:
                gaps.append((t, min(a, end_ms)))
            t = max(t, b)
        if t < end_ms:
            gaps.append((t, end_ms))
        out[name] = [(a, min(b + follow_ms, end_ms)) for a, b in gaps if b > a]
    return out


def no_master_anywhere(masterless: dict[str, list[tuple[int, int]]]) -> list[tuple[int, int]]:
    """The instants no broker set had a writable master (the intersection of `masterless_windows`):
    a send then finds no writable queue in any route and tries no broker at all."""
    sets = list(masterless.values())
    if not sets:
        return []
    common = sets[0]
    for other in sets[1:]:
        common = [(max(a, c), min(b, d)) for a, b in common for c, d in other if max(a, c) < min(b, d)]
    return sorted(common)


# ---------------------------------------------------------------------------------------- checks
def check_one_master(incarnations: list[Incarnation], timeline: list[FaultRecord], end_ms: int,
                     run_start_ms: int = 0) -> Invariant:
    spans = role_spans(incarnations, timeline, end_ms, run_start_ms)
    overlaps = writable_master_overlaps(spans)
    assumed = sorted({i.broker for i in incarnations if not i.has_log})
    detail = "; ".join(f"{o.broker_set}: {o.a.broker} ({o.a.role} epoch {o.a.epoch}) and {o.b.broker} "
                       f"({o.b.role} epoch {o.b.epoch}) from {o.from_ms} to {o.to_ms}" for o in overlaps[:5])
    if assumed:
        detail += ("; " if detail else "") + f"no role_log from {', '.join(assumed)}: their start role assumed"
    sets = len({s.broker_set for s in spans})
    return Invariant("5 at most one writable master per broker set", not overlaps,
                     f"{len(overlaps)} overlaps in {sets} broker sets ({len(spans)} role spans)", detail)


def check_loss_for_role(loss: Invariant, counts: dict[str, int], broker_role: str | None, slaves: int,
                        timeline: list[FaultRecord]) -> tuple[Invariant, dict[str, Any]]:
    """Invariant 1 as issue 21 words it: with SYNC_MASTER (or no slaves) nothing acknowledged may
    be lost; with ASYNC_MASTER slaves a master that dies before its slave copied a message may lose
    it, so the acknowledged-but-lost count is reported (in the invariant's value and the figures),
    not failed."""
    masters_died = sum(1 for r in timeline if r.kind in DEATHS and r.ok)
    figures = {"broker_role": broker_role, "acknowledged_lost": counts.get("lost", 0),
               "master_deaths": masters_died}
    if promises_no_loss(broker_role, slaves):
        return loss, figures
    return counted_not_failed(loss, f"{counts.get('lost', 0)} acknowledged-but-lost of "
                                    f"{counts.get('acknowledged', 0)} across {masters_died} master deaths"), figures


def promises_no_loss(broker_role: str | None, slaves: int) -> bool:
    """Whether a master's death may lose nothing acknowledged: not with ASYNC_MASTER slaves."""
    return broker_role != "ASYNC_MASTER" or slaves < 1


def counted_not_failed(inv: Invariant, value: str | None = None) -> Invariant:
    """An invariant ASYNC_MASTER does not promise: reported with its value, never failed."""
    return Invariant(inv.name + " (ASYNC_MASTER: counted, not failed)", True, inv.value if value is None else value,
                     inv.detail)


def check_paused_slave_sends(sends: list[dict[str, Any]], timeline: list[FaultRecord], broker_names: dict[str, str],
                             shrink_bound_ms: int, sync_master: bool) -> Invariant:
    """Under SYNC_MASTER, a paused slave may hold its master's sends up only until the SyncStateSet
    shrinks (`shrink_bound_ms` after the pause: haMaxTimeSlaveNotCatchup + slaveTimeout + margin);
    a send to that set failing later, before the slave is continued, breaks this. Sends do go on:
    the set must acknowledge some sends in that window when it is at least a second long."""
    pauses = [r for r in timeline if r.kind == PAUSE_SLAVE and r.ok]
    if not sync_master or not pauses:
        return Invariant("6 sends continue past a paused slave", True, f"{len(pauses)} pauses (no SYNC_MASTER check)")
    ends = {r.revives: r.t_ms for r in timeline if r.revives is not None}
    late_failures, idle = [], []
    for p in pauses:
        name = broker_names.get(p.target, p.target)
        lo, hi = p.t_ms + shrink_bound_ms, ends.get(p.fault_id, 2**62)
        window = [r for r in sends if r.get("broker_name") == name and lo <= r["t_ms"] < hi]
        late_failures += [r for r in window if not r["ok"]]
        if hi - lo >= 1000 and not any(r["ok"] for r in window):
            idle.append(f"{name} acknowledged nothing from {lo} to {hi}")
    detail = "; ".join([f"{r['broker_name']} failed at {r['t_ms']}: {(r.get('error') or '')[:100]}"
                        for r in late_failures[:3]] + idle[:3])
    return Invariant("6 sends continue past a paused slave", not late_failures and not idle,
                     f"{len(late_failures)} failures after the SyncStateSet should have shrunk, "
                     f"{len(pauses)} pauses", detail)


# ---------------------------------------------------------------------------------------- collecting
@dataclass
class RoleLogCollector:
    """Polls every broker's status every `interval_s` while a run goes on (brokers found afresh each
    round from `brokers()`: a restarted broker is a new handle) and keeps each incarnation's newest
    role log."""

    brokers: Callable[[], dict[str, Any]]
    broker_sets: dict[str, str]
    clock: Callable[[], int]
    interval_s: float = 0.5
    seen: dict[tuple[str, str], Incarnation] = field(default_factory=dict)
    transports: set[str] = field(default_factory=set)
    """How the slaves seen replicating copied their master's log ("tcp": HA_TRANSFER on the
    master's client port, "ray": Ray calls)."""
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def poll(self) -> None:
        for addr, handle in sorted(self.brokers().items()):
            try:
                status = broker_status(handle, timeout_s=2)
            except Exception as e:  # dead, restarting, stopped: nothing new from it this round
                log.debug("role of %s: %s", addr, type(e).__name__)
                continue
            ha = status.get("ha")
            if isinstance(ha, dict) and ha.get("role") == "SLAVE" and ha.get("transfers"):
                self.transports.add(str(ha.get("transport", "ray")))
            now = self.clock()
            key = (addr, str(status.get("incarnation", "")))
            inc = self.seen.get(key)
            has_log = bool(status.get("role_log"))
            if inc is None:
                inc = self.seen[key] = Incarnation(self.broker_sets.get(addr, addr), addr, key[1], now, now,
                                                   role_log_of(status, now), has_log)
            inc.last_seen_ms = now
            if has_log or not inc.has_log:
                inc.role_log, inc.has_log = role_log_of(status, inc.first_seen_ms), has_log

    def start(self) -> RoleLogCollector:
        self.poll()
        self._thread = threading.Thread(target=self._loop, name="role-log-collector", daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.poll()

    def stop(self) -> bool:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
            return not self._thread.is_alive()
        return True

    def incarnations(self) -> list[Incarnation]:
        return sorted(self.seen.values(), key=lambda i: (i.broker, i.first_seen_ms))
