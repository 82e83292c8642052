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
- H3 a committed transaction is delivered once per half: each half a commit was decided for is
  held at exactly one (queue, offset), one whose commit went unanswered (a kill between the
  broker's write and its answer) at most once; never one half committed twice. A transaction is
  held more than once only from distinct halves, no more halves than its half's send made
  attempts, each in a broker set an attempt went to (a half send with no record, every attempt of
  it failed, is held to once per half only): RocketMQ's producer sends a half as any sync
  send, retried on another broker when an attempt failed or got no answer
  (DefaultMQProducerImpl.sendMessageInTransaction -> send -> sendDefaultImpl), so an attempt whose
  answer a master kill lost may have stored a half too. That half is a transaction of its own on
  its broker, checked back with the same message (same msgId and properties) and committed as its
  producer answers: RocketMQ delivers both copies (at least once; consumers dedupe by key), and
  so does this broker. What the brokers promise, and H3 holds them to, is that no half is
  committed twice (a second END_TRANSACTION, or a check-back after a torn commit or a failover).
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

from clients.chaos.checks import Invariant
from namesrv.broker.transaction.service import PREPARED_OFFSET

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
    brokers_tried: tuple[str, ...] = ()
    """Every broker name an attempt of the send went to, in order (the producer's retries)."""


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
    prepared_offset: int | None = None
    """A committed transactional message's half: its queue offset in the set's half topic
    (TRAN_PREPARED_QUEUE_OFFSET; the half is in the same broker set as the message)."""


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
    held = [Stored((m.topic, m.broker_name, m.queue_id), m.queue_offset, m.msg_id, _prepared_offset(m))
            for m in stored]
    return History([*sent, *transactions], list(received), list(decided), held)


def _prepared_offset(m: Any) -> int | None:
    value = m.properties.get(PREPARED_OFFSET) if hasattr(m, "properties") else None
    return int(value) if value is not None and value.isdigit() else None


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
    copies: dict[str, dict[tuple[Queue, int], Stored]] = defaultdict(dict)
    for s in h.stored:
        copies[s.msg_id][(s.queue, s.offset)] = s
    sends = {s.msg_id: s for s in h.sent if s.transactional}
    commits = [d for d in h.decided if d.commit and d.acknowledged]
    not_once: list[str] = []
    retried: list[str] = []
    for d in h.decided:
        if d.commit:
            broken, from_retry = _commit_held(d, list(copies[d.msg_id].values()), sends.get(d.msg_id))
            not_once += [broken] if broken else []
            retried += [from_retry] if from_retry else []
    rollbacks = [d for d in h.decided if not d.commit]
    delivered = [d.msg_id for d in rollbacks if d.msg_id in places or d.msg_id in given]
    again = f"; {len(retried)} held once per half of a retried half send" if retried else ""
    return [
        Invariant("H3 a committed transaction is delivered once per half", not not_once,
                  f"{len(not_once)} of {len(commits)} committed not held once per half{again}",
                  _examples(not_once or retried)),
        Invariant("H4 a rolled-back transaction is never delivered", not delivered,
                  f"{len(delivered)} of {len(rollbacks)} rolled back delivered", _examples(delivered)),
    ]


def _commit_held(d: Decided, held: list[Stored], half_send: Sent | None) -> tuple[str | None, str | None]:
    """(what breaks H3, or what it allows: copies from the halves of a retried half send) for one
    commit decision and the copies of its message held at the end."""
    where = _where(held, half_send)
    if d.acknowledged and not held:
        return f"{d.msg_id} held 0x{where}", None
    by_half: dict[tuple[str, int | None], int] = defaultdict(int)
    for s in held:  # a committed message's half is in its own broker set
        by_half[(s.queue[1], s.prepared_offset)] += 1
    what = f"{d.msg_id}{'' if d.acknowledged else ' (commit unanswered)'} held {len(held)}x"
    twice = [f"{b}@{'?' if off is None else off}" for (b, off), n in sorted(by_half.items(), key=str) if n > 1]
    if twice:
        return f"{what}, half {', '.join(twice)} committed more than once{where}", None
    # a half send with no record failed every attempt (its producer never learned its msgId), and
    # each attempt may have stored a half all the same: only "once per half" is known of it
    tried = half_send.brokers_tried if half_send is not None and half_send.brokers_tried else ()
    attempts = max(1, len(tried))
    if half_send is not None and (len(by_half) > attempts or (tried and any(b not in tried for b, _ in by_half))):
        return f"{what} from {len(by_half)} halves, its half sent {attempts}x{where}", None
    if len(by_half) > 1:
        return None, f"{what} from {len(by_half)} halves{where}"
    return None, None


def _where(copies: list[Stored], half: Sent | None) -> str:
    """Where a transaction's copies are held, each with the half it was committed from, and where
    its half was sent (every attempt's broker): what tells a half committed twice from two halves."""
    held = ", ".join(f"{t}/{b}/{q}@{s.offset}" + (f" from half {b}@{s.prepared_offset}"
                                                   if s.prepared_offset is not None else "")
                     for s in sorted(copies, key=lambda s: (s.queue, s.offset)) for t, b, q in (s.queue,))
    sent = f"; its half sent to {', '.join(half.brokers_tried)}" if half is not None and half.brokers_tried else ""
    return f" ({held}{sent})" if held or sent else ""


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
