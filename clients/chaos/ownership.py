"""A consumer group's queue ownership through a chaos run, judged (pure): invariant 7, every queue of
the run's topics owned by exactly one member of the group, but for a bound after a change, while its
broker is reachable by the group.

The group lane (clients.chaos.group) samples each member's assignment; `ownership_defects` turns
the samples into runs of time a queue had no owner or more than one, and `check_ownership` judges
each run not excused by a fault: a broker the clients cannot reach (killed, stopped, isolated, cut
from the clients) and its return (back in the routes, then a rebalance) excuse its own queues; a
partition between it and one NameServer excuses nothing (the group reaches it, and with the union
of the NameServers' views its members agree on its queues) unless every other NameServer was
restarted meanwhile.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from clients.chaos.checks import Invariant
from clients.chaos.invariants import namesrv_outages
from clients.chaos.plan import FaultRecord, Timing
from clients.chaos.schema import BROKER_FAULTS, BROKER_REVIVALS, PARTITION_BROKER_NAMESRV, RESTART_BROKER

Queue = tuple[str, str, int]
"""(topic, broker name, queue id)."""


@dataclass(frozen=True, slots=True)
class OwnershipSample:
    t_ms: int
    owners: dict[Queue, int]
    """Members holding each queue of the run's topics (0 when none does)."""


@dataclass(frozen=True, slots=True)
class Defect:
    queue: Queue
    owners: int
    """The most owners seen in the run (0: unowned throughout)."""
    start_ms: int
    end_ms: int
    """The first sample that had it right again (the last sample when none did)."""

    @property
    def lasted_ms(self) -> int:
        return self.end_ms - self.start_ms


def ownership_defects(samples: Iterable[OwnershipSample]) -> list[Defect]:
    """Each run of samples in which a queue had no owner or more than one."""
    open_: dict[Queue, tuple[int, int]] = {}
    out: list[Defect] = []
    last_ms = 0
    for s in sorted(samples, key=lambda s: s.t_ms):
        last_ms = s.t_ms
        for q, n in s.owners.items():
            if n != 1:
                start, most = open_.get(q, (s.t_ms, n))
                open_[q] = (start, max(most, n))
            elif q in open_:
                start, most = open_.pop(q)
                out.append(Defect(q, most, start, s.t_ms))
    out += [Defect(q, most, start, last_ms) for q, (start, most) in open_.items()]
    return sorted(out, key=lambda d: (d.start_ms, d.queue))


def excused_windows(timeline: list[FaultRecord], broker_names: dict[str, str], namesrvs: Iterable[str],
                    timing: Timing, rebalance_ms: int, end_ms: int, up_ms: dict[int, float] | None = None,
                    ) -> dict[str, list[tuple[int, int]]]:
    """Broker name -> [(from, to)] ms in which its queues' ownership is not judged: from a fault that
    keeps the clients from it until its revival, the producers' return bound (back in the routes
    the members read) and one rebalance later; a fault never revived runs to `end_ms`. A partition
    from one NameServer counts only while every other NameServer was down or restarting at some
    point of it (then none may list the broker: there is no view left to take it from), until the
    last of them is back, the return bound and a rebalance."""
    up_ms = up_ms or {}
    revived = {r.revives: r for r in timeline if r.revives is not None and r.kind in BROKER_REVIVALS}
    outages = namesrv_outages(timeline)
    out: dict[str, list[tuple[int, int]]] = {}
    for f in timeline:
        if f.kind not in BROKER_FAULTS or f.target not in broker_names:
            continue
        r = revived.get(f.fault_id)
        back = None if r is None else r.t_ms + timing.producer_back_bound_ms(r.kind, up_ms.get(r.fault_id))
        if f.kind == PARTITION_BROKER_NAMESRV:
            until = r.t_ms if r is not None else end_ms
            others = [n for n in namesrvs if n != f.peer]
            ups = [max((u for n2, d, u in outages if n2 == n and d <= until and u >= f.t_ms), default=None)
                   for n in others]
            if not others or any(u is None for u in ups):
                continue  # some other NameServer listed the broker all along
            back = max([*(u for u in ups if u is not None), until]) + timing.producer_back_bound_ms(RESTART_BROKER, 0)
        to = end_ms if back is None else back + rebalance_ms
        out.setdefault(broker_names[f.target], []).append((f.t_ms, to))
    return out


def judged(defects: list[Defect], excused: dict[str, list[tuple[int, int]]]) -> list[Defect]:
    """The defects overlapping none of their broker's excused windows."""
    return [d for d in defects if not any(a <= d.end_ms and d.start_ms <= b for a, b in excused.get(d.queue[1], []))]


def check_ownership(defects: list[Defect], excused: dict[str, list[tuple[int, int]]], bound_ms: int,
                    samples: int) -> Invariant:
    """Invariant 7: no judged defect (`judged`) lasts longer than `bound_ms` (a rebalance interval
    and the margin)."""
    judged_ = judged(defects, excused)
    bad = [d for d in judged_ if d.lasted_ms > bound_ms]
    worst = max((d.lasted_ms for d in judged_), default=0)
    detail = "; ".join(f"{d.queue[0]}/{d.queue[1]}:{d.queue[2]} {'unowned' if d.owners == 0 else f'{d.owners} owners'} "
                       f"for {d.lasted_ms} ms from {d.start_ms}" for d in bad[:4])
    return Invariant("7 a consumer group owns each reachable queue once", not bad and samples > 0,
                     f"{len(bad)} of {len(judged_)} judged ownership gaps or overlaps over {bound_ms} ms, longest "
                     f"{worst} ms; {len(defects) - len(judged_)} excused by a fault on the queue's broker; "
                     f"{samples} samples", detail)
