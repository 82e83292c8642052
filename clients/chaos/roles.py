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
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from clients.chaos.invariants import Invariant
from clients.chaos.plan import FaultRecord
from clients.chaos.schema import KILL_BROKER, KILL_MASTER, PAUSE_SLAVE, RESTART_BROKER, SIGKILL_BROKER, SIGKILL_MASTER

log = logging.getLogger(__name__)

MASTER_ROLES = frozenset({"SYNC_MASTER", "ASYNC_MASTER"})
DEATHS = frozenset({KILL_BROKER, SIGKILL_BROKER, KILL_MASTER, SIGKILL_MASTER})


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
    run. Its last role ends at the first death fault (kill, SIGKILL) on its address after its
    start, or when the next incarnation at that address was started, or at `end_ms`."""
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
    return sorted(spans, key=lambda s: (s.broker_set, s.start_ms, s.broker))


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
    if broker_role != "ASYNC_MASTER" or slaves < 1:
        return loss, figures
    return Invariant(loss.name + " (ASYNC_MASTER: counted, not failed)", True,
                     f"{counts.get('lost', 0)} acknowledged-but-lost of {counts.get('acknowledged', 0)} "
                     f"across {masters_died} master deaths", loss.detail), figures


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
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def poll(self) -> None:
        for addr, handle in sorted(self.brokers().items()):
            try:
                status = broker_status(handle, timeout_s=2)
            except Exception as e:  # dead, restarting, stopped: nothing new from it this round
                log.debug("role of %s: %s", addr, type(e).__name__)
                continue
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
