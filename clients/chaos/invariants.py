"""Turning what the run recorded into measurements the invariants judge (clients.chaos.checks):
per-fault detection and recovery times at every NameServer and producer, removals no fault
explains, the producers' routes through a partition from one NameServer, the windows in which a
broker could not take a send, and why a failed send failed.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from clients.chaos.observe import RemovalLog, RouteLog, RouteObservation
from clients.chaos.plan import FaultRecord, Timing
from clients.chaos.schema import (
    BROKER_FAULTS,
    BROKER_REVIVALS,
    DELAY_BROKER,
    HEAL,
    KILL_NAMESRV,
    NODE_FAULTS,
    PARTITION_BROKER_NAMESRV,
    PARTITION_CLIENT_BROKER,
    PAUSE_SLAVE,
    RESTART_BROKER,
    RESTART_NAMESRV,
)


@dataclass(slots=True)
class Detection:
    fault_id: int
    kind: str
    broker_addr: str
    observer: str
    observer_kind: str
    """'namesrv' (removal / return in its tables) or 'producer' (its route cache)."""
    fault_t_ms: int
    seen_t_ms: int | None
    elapsed_ms: int | None
    cause: str
    bound_ms: int
    ok: bool


# ---------------------------------------------------------------------------------------- measuring
def _revival_times(timeline: list[FaultRecord]) -> dict[int, int]:
    """fault_id of a broker fault -> t_ms of the event that revived it."""
    return {r.revives: r.t_ms for r in timeline if r.revives is not None and r.kind in BROKER_REVIVALS}


def namesrv_outages(timeline: list[FaultRecord]) -> list[tuple[str, int, int]]:
    """(NameServer, killed t_ms, answering again t_ms) for every NameServer kill in the timeline."""
    killed = {r.fault_id: r for r in timeline if r.kind == KILL_NAMESRV}
    return [(r.target, killed[r.revives].t_ms, r.t_ms) for r in timeline
            if r.kind == RESTART_NAMESRV and r.revives in killed]


def _deadline(start_ms: int, bound_ms: int, outages: list[tuple[str, int, int]]) -> tuple[int, str]:
    """When a client-side change is due: `bound_ms` after `start_ms`, or, when a NameServer outage
    overlaps that window, `bound_ms` after the NameServer is back. A client holding a long-poll on a
    killed NameServer learns of it only when Ray fails the call, ~2 s later as the actor restarts
    (a non-restartable actor's calls fail in ~10 ms): until then it sees no change from anyone."""
    due, note = start_ms + bound_ms, ""
    for name, down, up in outages:
        if down <= due and up >= start_ms and up + bound_ms > due:
            due, note = up + bound_ms, f" (after {name} restart)"
    return due, note


def must_remove(fault: FaultRecord, namesrvs: Iterable[str]) -> list[str]:
    """The NameServers a broker fault takes the broker from: every one, but only the partitioned
    one for partition_broker_namesrv (the fault's peer) and none for partition_client_broker and
    delay_broker (the NameServers still reach the broker; only the clients do not, or slowly)."""
    if fault.kind in (PARTITION_CLIENT_BROKER, DELAY_BROKER):
        return []
    if fault.kind == PARTITION_BROKER_NAMESRV:
        return [n for n in namesrvs if n == fault.peer]
    return sorted(namesrvs)


def measure_namesrv_detection(
    timeline: list[FaultRecord], removals: RemovalLog, namesrvs: Iterable[str], timing: Timing,
) -> list[Detection]:
    """For each broker fault and NameServer it takes the broker from (`must_remove`): when that
    NameServer removed the broker (its own timestamp and cause). A NameServer killed after the fault,
    before it removed the broker, stopped advertising it by restarting empty: that counts, dated at
    the kill."""
    kills: dict[str, list[int]] = {}
    for r in timeline:
        if r.kind == KILL_NAMESRV:
            kills.setdefault(r.target, []).append(r.t_ms)
    out = []
    for f in timeline:
        if f.kind not in BROKER_FAULTS or not f.ok:
            continue
        bound = timing.detect_bound_ms(f.kind)
        for name in must_remove(f, namesrvs):
            seen = next(((t, c) for a, c, t in removals.events(name) if a == f.broker_addr and t >= f.t_ms), None)
            killed = next((t for t in kills.get(name, []) if t >= f.t_ms), None)
            if killed is not None and (seen is None or killed < seen[0]):
                seen = (killed, "namesrv_restart")
            t, cause = seen if seen is not None else (None, "never")
            elapsed = None if t is None else t - f.t_ms
            out.append(Detection(f.fault_id, f.kind, f.target, name, "namesrv", f.t_ms, t, elapsed, cause, bound,
                                 elapsed is not None and elapsed <= bound))
    return out


def _first_time(entries: list[tuple[int, bool]], since_ms: int) -> int | None:
    """entries: (t_ms, condition holds) in time order. The first time >= since_ms the condition
    holds: since_ms itself when it already held then."""
    held = None
    for t, ok in entries:
        if t > since_ms:
            break
        held = ok
    if held:
        return since_ms
    return next((t for t, ok in entries if t > since_ms and ok), None)


def measure_namesrv_return(
    timeline: list[FaultRecord], history: list[RouteObservation], namesrvs: Iterable[str], topics: list[str],
    timing: Timing, up_ms: dict[int, float] | None = None,
) -> list[Detection]:
    """For each revival and NameServer: when the broker was back in every topic's route there (if
    that NameServer was down meanwhile, the bound counts from its return). A restart's bound counts
    the new actor's start as measured (`up_ms[revival fault_id]`, the driver's figure)."""
    up_ms = up_ms or {}
    outages = namesrv_outages(timeline)
    out = []
    for r in timeline:
        if r.kind not in BROKER_REVIVALS or not r.ok:
            continue
        for name in sorted(namesrvs):
            times = []
            for topic in topics:
                entries = [(o.t_ms, o.addrs is not None and r.target in o.addrs)
                           for o in history if o.namesrv == name and o.topic == topic]
                times.append(_first_time(entries, r.t_ms))
            t = None if any(x is None for x in times) else max(times)  # type: ignore[type-var]
            due, note = _deadline(r.t_ms, timing.back_bound_ms(r.kind, up_ms.get(r.fault_id)),
                                  [o for o in outages if o[0] == name])
            elapsed = None if t is None else t - r.t_ms
            out.append(Detection(r.fault_id, r.kind, r.target, name, "namesrv", r.t_ms, t, elapsed,
                                 ("registered" if t is not None else "never") + note, due - r.t_ms,
                                 t is not None and t <= due))
    return out


def measure_producer_routes(
    timeline: list[FaultRecord], route_logs: dict[str, RouteLog],
    broker_names: dict[str, str], topics: list[str], timing: Timing, up_ms: dict[int, float] | None = None,
) -> list[Detection]:
    """For each broker fault / revival and producer: when its route cache dropped / regained the
    broker for every topic (from the producer's own route log). A producer whose NameServer was
    killed meanwhile follows only once it fails over; if the broker was revived before that, there
    was nothing left to drop and the row says so. A paused slave is not measured: its set's master
    lives on, so a producer's route rightly keeps the set. Nor is a lost master node: its slave is
    promoted (~2-3 s, the controller's heartbeat timeout) long before Ray declares the node dead, and
    registers as brokerId 0 at a higher epoch, so the set never leaves any route; that the producers
    follow it shows in invariant 2 and in the failover view (first acknowledged send). Nor are the
    partitions that leave the broker in some NameServer's route: the producers must keep it
    (`measure_kept_routes`). A restart's bound counts the new actor's start as measured (`up_ms`),
    as `measure_namesrv_return` does."""
    up_ms = up_ms or {}
    outages = namesrv_outages(timeline)
    revived = _revival_times(timeline)
    kept = {PAUSE_SLAVE, PARTITION_BROKER_NAMESRV, PARTITION_CLIENT_BROKER, DELAY_BROKER, *NODE_FAULTS}
    paused = {f.fault_id for f in timeline if f.kind in kept}
    out = []
    for f in timeline:
        if not f.ok or f.kind not in BROKER_FAULTS | BROKER_REVIVALS or f.fault_id in paused or f.revives in paused:
            continue
        name = broker_names[f.target]
        want_present = f.kind in BROKER_REVIVALS
        bound = (timing.producer_back_bound_ms(f.kind, up_ms.get(f.fault_id)) if want_present
                 else timing.producer_bound_ms(f.kind))
        due, note = _deadline(f.t_ms, bound, outages)
        for producer, entries in sorted(route_logs.items()):
            per_topic: list[tuple[int, str] | None] = []
            for topic in topics:
                mine = [(t, (name in brokers) == want_present, src) for tp, t, src, brokers in entries if tp == topic]
                t = _first_time([(t, ok) for t, ok, _ in mine], f.t_ms)
                src = next((s for tm, ok, s in mine if tm == t and ok), "already")
                per_topic.append(None if t is None else (t, src))
            done = None if any(x is None for x in per_topic) else max(per_topic)  # type: ignore[type-var]
            t, cause = done if done is not None else (None, "never")  # cause: how the last topic followed
            ok = t is not None and t <= due
            back = revived.get(f.fault_id)
            if t is None and note and back is not None and back <= due:
                cause, ok = "revived before its NameServer returned", True
            elapsed = None if t is None else t - f.t_ms
            out.append(Detection(f.fault_id, f.kind, f.target, producer, "producer", f.t_ms, t, elapsed, cause + note,
                                 due - f.t_ms, ok))
    return out


def spurious_removals(removals: RemovalLog, timeline: list[FaultRecord], timing: Timing,
                      up_ms: dict[int, float] | None = None) -> list[dict[str, Any]]:
    """Removals of a broker no fault touched at the time: a live broker dropped from routes (a
    channel watch that took a transient error for death, heartbeats late because a NameServer's
    event loop stalled). Invariant 3d: there must be none (`check_no_live_removal`). A removal
    from a fault until its revival's return bound is the fault's own (a resumed broker may expire
    before its first heartbeat lands); a restart's bound counts its measured actor start (`up_ms`).
    A partition excuses only the NameServers it cut the broker from (`must_remove`)."""
    up_ms = up_ms or {}
    revived = {r.revives: r for r in timeline if r.revives is not None and r.kind in BROKER_REVIVALS}
    namesrvs = sorted({row["namesrv"] for row in removals.rows()})
    windows: dict[tuple[str, str], list[tuple[int, float]]] = {}
    for f in timeline:
        if f.kind in BROKER_FAULTS:
            r = revived.get(f.fault_id)
            end = float("inf") if r is None else r.t_ms + timing.back_bound_ms(r.kind, up_ms.get(r.fault_id))
            for name in must_remove(f, namesrvs):
                windows.setdefault((f.target, name), []).append((f.t_ms, end))
    return [row for row in removals.rows()
            if row["cause"] != "unregister"
            and not any(a <= row["t_ms"] <= b for a, b in windows.get((row["broker_addr"], row["namesrv"]), []))]


def measure_kept_routes(timeline: list[FaultRecord], route_logs: dict[str, RouteLog], broker_names: dict[str, str],
                        topics: list[str], timing: Timing, up_ms: dict[int, float] | None = None,
                        ) -> list[dict[str, Any]]:
    """For each partition between a broker and one NameServer, and each producer: the times its route
    of a topic lacked the broker from the partition until one return bound after the heal (invariant
    3e: none; the producer reaches the broker, and another NameServer still lists it), or until the
    broker's next fault. The driver
    starts a fault once the broker is back in every NameServer's routes: a producer still following
    that return (it has the broker within a route poll and the margin) is judged from then on. A
    partition overlapping another NameServer's restart is not judged (then no NameServer may list
    the broker for a moment); its row says so. `up_ms`: heal fault_id -> the cut's length."""
    up_ms = up_ms or {}
    heals = {r.revives: r for r in timeline if r.kind == HEAL and r.revives is not None}
    follow_ms = timing.route_poll_ms + timing.margin_ms
    outages = namesrv_outages(timeline)
    rows = []
    for f in timeline:
        if f.kind != PARTITION_BROKER_NAMESRV or not f.ok:
            continue
        name = broker_names[f.target]
        heal = heals.get(f.fault_id)
        end = f.t_ms if heal is None else heal.t_ms + timing.back_bound_ms(HEAL, up_ms.get(heal.fault_id))
        end = min([end, *(g.t_ms for g in timeline if g.kind in BROKER_FAULTS and g.target == f.target
                          and g.t_ms > f.t_ms)])  # the broker's next fault may take it away rightly
        others_down = [n for n, down, up in outages if n != f.peer and down <= end and up >= f.t_ms]
        for producer, entries in sorted(route_logs.items()):
            lacking = []
            for topic in topics:
                mine = sorted((t, name in brokers) for tp, t, _, brokers in entries if tp == topic)
                since = _first_time(mine, f.t_ms)
                if since is None or since - f.t_ms > follow_ms:
                    lacking.append(f.t_ms)
                    since = f.t_ms
                lacking += [t for t, ok in mine if since < t <= end and not ok]
            rows.append({"fault_id": f.fault_id, "broker": name, "namesrv": f.peer, "producer": producer,
                         "from_ms": f.t_ms, "to_ms": end, "lacking_ms": sorted(lacking),
                         "judged": not others_down,
                         "note": f"{', '.join(others_down)} restarted meanwhile" if others_down else ""})
    return rows


def impaired_windows(timeline: list[FaultRecord], broker_names: dict[str, str], timing: Timing,
                     end_ms: int, up_ms: dict[int, float] | None = None,
                     masterless: dict[str, list[tuple[int, int]]] | None = None) -> dict[str, list[tuple[int, int]]]:
    """broker name -> [(from, to)] ms while it could not take a send: from its fault until its
    revival completed (SIGCONT: at once; a restart: once the new actor was up, `up_ms[revival
    fault_id]` as the driver measured it, else the profile's actor start); open-ended faults run to
    `end_ms`. Tight on purpose: not until the broker was back in routes, since a producer sends
    only to brokers its route names, so a failure after the revival was not the fault's.

    `masterless` (broker set -> windows while it had no writable master, `roles.masterless_windows`)
    adds those windows to the set's name: between a master's death and its slave's promotion (and
    the producers' following it) a send to that name fails because of the fault, revived or not. A
    fault that is never revived (a lost node) ends, instead of at `end_ms`, where its set's
    masterless window from the fault ends: once the new master took over, a failure is not the
    fault's. A partition between the broker and a NameServer impairs nothing (the clients reach
    the broker); the clients' cut from it, its host's isolation and a delay in front of it (which
    resets the open connections when it starts and its relay's when it ends) last until the heal, plus the
    margin and the cut's length (`up_ms[heal fault_id]`): a connection the cut stalled resumes at
    TCP's next retransmission, whose back-off doubles while the cut lasts."""
    revived = {r.revives: r for r in timeline if r.revives is not None and r.kind in BROKER_REVIVALS}
    up_ms = up_ms or {}
    windows: dict[str, list[tuple[int, int]]] = {}
    for f in timeline:
        if f.kind not in BROKER_FAULTS or f.kind == PARTITION_BROKER_NAMESRV:
            continue
        r = revived.get(f.fault_id)
        name = broker_names[f.target]
        if r is None and f.kind in NODE_FAULTS and masterless is not None:
            to = next((b for a, b in masterless.get(name, []) if a <= f.t_ms + timing.margin_ms and b >= f.t_ms),
                      f.t_ms + timing.margin_ms)
        elif r is None:
            to = end_ms
        elif r.kind == HEAL:  # a connection the cut stalled resumes at TCP's next retransmission
            to = r.t_ms + timing.margin_ms + int(up_ms.get(r.fault_id, 0))
        else:
            start = up_ms.get(r.fault_id, timing.actor_start_ms) if r.kind == RESTART_BROKER else 0
            to = r.t_ms + int(start)
        windows.setdefault(name, []).append((f.t_ms, to))
    for name, spans in (masterless or {}).items():
        windows.setdefault(name, []).extend(spans)
    return windows


def explain_failure(record: dict[str, Any], windows: dict[str, list[tuple[int, int]]],
                    no_master: list[tuple[int, int]] | None = None, brokers: Iterable[str] = ()) -> str | None:
    """Why a failed send failed, when every broker it tried was faulted (or its set had no writable
    master) at the time, or when it tried none while no broker set had a writable master (`no_master`,
    `roles.no_master_anywhere`: no route had a writable queue), or when it ran out of its send timeout
    on its last attempt after every earlier one was on a faulted broker (a broker on a lost node
    hangs a call until Ray declares the node dead: the budget was the fault's, as in RocketMQ's
    client, whose timeout covers every attempt), or when it tried none while every one of `brokers`
    (names) was faulted (no route had a broker to try); None when it tried a healthy broker
    otherwise, or none while some set had a master: such a failure breaks invariant 2."""
    tried = [b for b in (record.get("brokers_tried") or "").split(",") if b]
    start, end = record["t_ms"], record["t_ms"] + int(record["latency_ms"]) + 1
    if not tried:
        if any(a <= end and start <= b for a, b in no_master or []):
            return "no broker set had a writable master"
        names = set(brokers)
        if names and all(any(a <= end and start <= b for a, b in windows.get(n, [])) for n in names):
            return "every broker was faulted: no route had a broker to try"
        return None
    def faulted(broker: str) -> bool:
        return any(a <= end and start <= b for a, b in windows.get(broker, []))

    error = record.get("error") or ""
    if not all(faulted(b) for b in tried):
        if "send timeout" in error and len(tried) > 1 and all(faulted(b) for b in tried[:-1]):
            return f"send timeout: its budget spent on faulted broker(s) {','.join(dict.fromkeys(tried[:-1]))}"
        return None
    hung = "timed out" in error
    return f"{'timed out on hung' if hung else 'every attempt on faulted'} broker(s) {','.join(dict.fromkeys(tried))}"
