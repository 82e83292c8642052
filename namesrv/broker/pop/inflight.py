"""The invisibility index: which popped messages are in flight, until when (RocketMQ keeps check
points and ack records in rmq_sys_REVIVE_LOG and matches them up; here one entry per message).

An entry is keyed by the message's place (group, real topic, queue id, queue offset) and carries
the pop time its handle names: an ack or a change of invisible time must name both, so a handle
from before a change, or of a message revived and popped again, is stale and matches nothing
(apache/rocketmq #7724, #9583). A change gives the entry a new pop time (now) and invisible time;
the old handle stops working and the new one works at once.

`take_due` removes the entries whose invisible time lapsed, for the revive service to re-deliver;
one it could not re-deliver is `restore`d and comes up again. Pure: an injected clock, no I/O
(namesrv.broker.pop.journal persists the index's changes).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, replace

from namesrv.common.clock import Clock

Key = tuple[str, str, int, int]
"""(group, real topic, queue id, queue offset)."""
QueueKey = tuple[str, str, int]
"""(group, real topic, queue id)."""


@dataclass(frozen=True, slots=True)
class InFlight:
    group: str
    topic: str
    """The topic the message is stored in: the popped topic or its pop retry topic."""
    queue_id: int
    offset: int
    origin_topic: str
    """The topic the consumer popped (the retry topic's messages are delivered under it)."""
    ck_offset: int
    """Where the pop that delivered it started reading the queue (the handle's ckQueueOffset)."""
    pop_time: int
    invisible_time: int
    order: bool = False

    @property
    def key(self) -> Key:
        return (self.group, self.topic, self.queue_id, self.offset)

    @property
    def due_at(self) -> int:
        return self.pop_time + self.invisible_time


class InflightIndex:
    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.entries: dict[Key, InFlight] = {}
        self._due: list[tuple[int, Key, int]] = []
        """(due at, key, pop time): a min-heap; an item whose entry changed or left is skipped."""
        self._per_queue: dict[QueueKey, set[int]] = {}
        self._deferred: dict[Key, int] = {}
        """Entries `restore`d with a later due time than their invisible time gives."""

    def __len__(self) -> int:
        return len(self.entries)

    def add(self, entry: InFlight) -> None:
        """A message popped (again: its former entry, if any, is replaced)."""
        self._per_queue.setdefault((entry.group, entry.topic, entry.queue_id), set()).add(entry.offset)
        self._deferred.pop(entry.key, None)
        self.entries[entry.key] = entry
        heapq.heappush(self._due, (entry.due_at, entry.key, entry.pop_time))

    def find(self, key: Key, pop_time: int) -> InFlight | None:
        """The entry a handle names: in flight, with the handle's pop time; else None."""
        entry = self.entries.get(key)
        return entry if entry is not None and entry.pop_time == pop_time else None

    def ack(self, key: Key, pop_time: int) -> InFlight | None:
        """Done with: it never comes back. None (nothing changed) for a stale or unknown handle."""
        entry = self.find(key, pop_time)
        if entry is not None:
            self._remove(entry)
        return entry

    def change(self, key: Key, pop_time: int, invisible_time: int) -> InFlight | None:
        """Hidden for `invisible_time` ms from now, under a new pop time (now): the entry as it now
        is, or None (nothing changed) for a stale or unknown handle."""
        entry = self.find(key, pop_time)
        if entry is None:
            return None
        now = self.clock()
        changed = replace(entry, pop_time=now if now != entry.pop_time else now + 1, invisible_time=invisible_time)
        self.entries[key] = changed
        self._deferred.pop(key, None)
        heapq.heappush(self._due, (changed.due_at, key, changed.pop_time))
        return changed

    def take_due(self, limit: int = 1024) -> list[InFlight]:
        """Remove and return up to `limit` entries whose invisible time lapsed, earliest first."""
        now = self.clock()
        out: list[InFlight] = []
        while self._due and len(out) < limit and self._due[0][0] <= now:
            due_at, key, pop_time = heapq.heappop(self._due)
            entry = self.entries.get(key)
            if entry is None or not self._current(entry, due_at, pop_time):
                continue  # acked, changed, re-popped or deferred since
            self._remove(entry)
            out.append(entry)
        return out

    def restore(self, entry: InFlight, not_before: int | None = None) -> None:
        """Put back an entry `take_due` gave out that could not be re-delivered (unless the message
        was popped again meanwhile): due again at once, or at `not_before` (ms). Its handle stays
        what it was."""
        if entry.key in self.entries:
            return
        self.add(entry)
        if not_before is not None and not_before > entry.due_at:
            self._deferred[entry.key] = not_before
            heapq.heappush(self._due, (not_before, entry.key, entry.pop_time))

    def next_due(self) -> int | None:
        """When the earliest entry lapses (ms), or None when nothing is in flight."""
        while self._due:
            due_at, key, pop_time = self._due[0]
            if self._current(self.entries.get(key), due_at, pop_time):
                return due_at
            heapq.heappop(self._due)
        return None

    def _current(self, entry: InFlight | None, due_at: int, pop_time: int) -> bool:
        """Whether a heap item is the entry's current due time."""
        return (entry is not None and entry.pop_time == pop_time
                and self._deferred.get(entry.key, entry.due_at) == due_at)

    def in_flight(self, group: str, topic: str, queue_id: int) -> int:
        """How many of the queue's messages the group holds in flight (an orderly pop waits for 0)."""
        return len(self._per_queue.get((group, topic, queue_id), ()))

    def lowest_in_flight(self, group: str, topic: str, queue_id: int) -> int | None:
        """The queue's lowest offset the group holds in flight (an orderly pop's offset stays there)."""
        offsets = self._per_queue.get((group, topic, queue_id))
        return min(offsets) if offsets else None

    def _remove(self, entry: InFlight) -> None:
        del self.entries[entry.key]
        self._deferred.pop(entry.key, None)
        q = (entry.group, entry.topic, entry.queue_id)
        offsets = self._per_queue.get(q)
        if offsets is not None:
            offsets.discard(entry.offset)
            if not offsets:
                del self._per_queue[q]
