"""A history checker for a queue, the way Jepsen checks one (issue 33, point 5): what producers sent
and were told, what consumers were given, what transactions decided, and what the brokers hold
at the end, checked against the promises a reader is made through any number of failovers.

A history is plain records (`Sent`, `Received`, `Decided`, and the final reads as `Stored`), so
the chaos run can record it as it goes and the checks can be tried on made-up histories that break
each one. The checks, each an `Invariant` with its counterexamples:

- H1 no acknowledged message lost: every acknowledged send is held at the end (or was given to a
  consumer: retention may have deleted it since).
- H2 no message a consumer read ever changed: a (queue, offset) is given with one message only, and
  the brokers hold that message there at the end (a failover that reused the offset for another
  message breaks it; so does a reader given a message no replica held).
- H3 a committed transaction is delivered once: its message is held at exactly one (queue, offset);
  one whose commit went unanswered (a kill between the broker's write and its answer) at most once.
- H4 a rolled-back transaction is never delivered: not held, never given.
- H5 per-queue order: of one producer's acknowledged sends to one queue, made one after the other
  (the next started after the previous was acknowledged), the later one holds the greater offset.

Queues are named (topic, broker name, queue id): queue offsets are a broker set's, and a set keeps
its name through a failover, so the offsets before and after one are comparable.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from clients.chaos.invariants import Invariant

Queue = tuple[str, str, int]
"""(topic, broker name, queue id)."""
EXAMPLES = 3


@dataclass(frozen=True, slots=True)
class Sent:
    """A send and what its producer was told. `queue` and `offset` as acknowledged (None: not)."""

    producer: str
    msg_id: str
    started_ms: int
    ended_ms: int
    acknowledged: bool
    queue: Queue | None = None
    offset: int | None = None
    transactional: bool = False


@dataclass(frozen=True, slots=True)
class Received:
    """A message a consumer was given."""

    consumer: str
    queue: Queue
    offset: int
    msg_id: str
    at_ms: int
    source: str = ""
    """The replica it was read from (a broker actor or address), when known."""


@dataclass(frozen=True, slots=True)
class Decided:
    """A transaction's decision, as its producer made it (`acknowledged`: the broker answered it)."""

    msg_id: str
    commit: bool
    acknowledged: bool


@dataclass(frozen=True, slots=True)
class Stored:
    """A message the brokers hold at the end (every queue read from its first kept offset)."""

    queue: Queue
    offset: int
    msg_id: str


@dataclass(slots=True)
class History:
    sent: list[Sent] = field(default_factory=list)
    received: list[Received] = field(default_factory=list)
    decided: list[Decided] = field(default_factory=list)
    stored: list[Stored] = field(default_factory=list)


def history_of_run(sends: list[dict[str, Any]], received: list[Received], stored: Iterable[Any],
                   transactions: Iterable[Sent] = (), decided: Iterable[Decided] = ()) -> History:
    """A chaos run's history: its producers' send records (`SendRecord` fields and `producer`),
    what its live reader was given, what every queue held at the end (`ConsumedMessage`s), and
    its transactional producer's halves and decisions (clients.chaos.transactions)."""
    sent = [Sent(r["producer"], r["msg_id"] or "", r["t_ms"], r["t_ms"] + round(r["latency_ms"]), bool(r["ok"]),
                 (r["topic"], r["broker_name"], r["queue_id"]) if r["ok"] else None, r["queue_offset"])
            for r in sends]
    held = [Stored((m.topic, m.broker_name, m.queue_id), m.queue_offset, m.msg_id) for m in stored]
    return History([*sent, *transactions], list(received), list(decided), held)


def _examples(items: Iterable[object]) -> str:
    shown = list(items)[:EXAMPLES]
    return f"; e.g. {shown}" if shown else ""


def check_history(h: History) -> list[Invariant]:
    """Every check of the module's docstring, in order."""
    held: dict[tuple[Queue, int], str] = {(s.queue, s.offset): s.msg_id for s in h.stored}
    places: dict[str, set[tuple[Queue, int]]] = defaultdict(set)
    for s in h.stored:
        places[s.msg_id].add((s.queue, s.offset))
    given = {r.msg_id for r in h.received}
    return [_no_loss(h, places, given), _no_change(h, held), *_transactions(h, places, given), _order(h)]


def _no_loss(h: History, places: dict[str, set[tuple[Queue, int]]], given: set[str]) -> Invariant:
    acked = [s for s in h.sent if s.acknowledged and not s.transactional]
    lost = [s.msg_id for s in acked if s.msg_id not in places and s.msg_id not in given]
    return Invariant("H1 no acknowledged message lost", not lost, f"{len(lost)} lost of {len(acked)}",
                     _examples(lost))


def _no_change(h: History, held: dict[tuple[Queue, int], str]) -> Invariant:
    first: dict[tuple[Queue, int], Received] = {}
    changed: list[str] = []
    for r in sorted(h.received, key=lambda r: r.at_ms):
        where = (r.queue, r.offset)
        before = first.setdefault(where, r)
        if before.msg_id != r.msg_id:
            changed.append(f"{where}: given {before.msg_id} to {before.consumer}, later {r.msg_id} to {r.consumer}")
    for where, r in first.items():
        now = held.get(where)
        if now is not None and now != r.msg_id:
            changed.append(f"{where}: given {r.msg_id} to {r.consumer} at {r.at_ms}"
                           f"{f' by {r.source}' if r.source else ''}, held {now} at the end")
    return Invariant("H2 no message a consumer read ever changed", not changed,
                     f"{len(changed)} of {len(first)} read (queue, offset)s changed", _examples(changed))


def _transactions(h: History, places: dict[str, set[tuple[Queue, int]]], given: set[str]) -> list[Invariant]:
    commits = [d for d in h.decided if d.commit and d.acknowledged]
    not_once = [f"{d.msg_id} held {len(places.get(d.msg_id, ()))}x" for d in commits
                if len(places.get(d.msg_id, ())) != 1]
    # a commit whose answer was lost may or may not have taken effect, but never twice
    not_once += [f"{d.msg_id} (commit unanswered) held {len(places[d.msg_id])}x" for d in h.decided
                 if d.commit and not d.acknowledged and len(places.get(d.msg_id, ())) > 1]
    rollbacks = [d for d in h.decided if not d.commit]
    delivered = [d.msg_id for d in rollbacks if d.msg_id in places or d.msg_id in given]
    return [
        Invariant("H3 a committed transaction is delivered once", not not_once,
                  f"{len(not_once)} of {len(commits)} committed not held exactly once", _examples(not_once)),
        Invariant("H4 a rolled-back transaction is never delivered", not delivered,
                  f"{len(delivered)} of {len(rollbacks)} rolled back delivered", _examples(delivered)),
    ]


def _order(h: History) -> Invariant:
    """Per (producer, queue): each send against the highest offset of the sends acknowledged before
    it started (sorted by start and by end, one pass each: no pairwise comparison)."""
    by_lane: dict[tuple[str, Queue], list[Sent]] = defaultdict(list)
    for s in h.sent:
        if s.acknowledged and s.queue is not None and s.offset is not None:
            by_lane[(s.producer, s.queue)].append(s)
    checked, reordered = 0, []
    for (producer, queue), sends in by_lane.items():
        by_end = sorted(sends, key=lambda s: s.ended_ms)
        done, highest = 0, None
        for later in sorted(sends, key=lambda s: s.started_ms):
            while done < len(by_end) and by_end[done].ended_ms < later.started_ms:
                if highest is None or (by_end[done].offset or 0) > (highest.offset or 0):
                    highest = by_end[done]
                done += 1
            if highest is None:
                continue
            checked += 1
            if (later.offset or 0) <= (highest.offset or 0):
                reordered.append(f"{producer} on {queue}: {highest.msg_id}@{highest.offset} acknowledged, "
                                 f"then {later.msg_id}@{later.offset}")
    return Invariant("H5 per-queue order of a producer's sends", not reordered,
                     f"{len(reordered)} of {checked} sends out of order", _examples(reordered))
