"""Reads never pass what the SyncStateSet holds (RocketMQ 5's confirm offset, issue: a consumer must
never be given a message a failover can take back).

A SYNC_MASTER, and any master in controller mode, writes a message before its slaves hold it. If
the master dies in between, the new master never had that message and gives its queue offset to
another one: a consumer that read the first and committed past it skips the second for good. So
where the role gates reads (`RoleGuard.gates_reads`), a reader sees a queue only up to the last
entry whose record ends at or before the confirm offset (`RoleGuard.confirm_offset`: what every
member holds): pulls, held-pull wake-ups, GET_MAX_OFFSET, consume and topic stats, the index.

Held pulls are woken when what they wait for becomes readable, not when it is written: a write's
wake-up (`written`) is kept until the confirm offset passes its end, and released by `advanced`,
which the role calls on every acknowledgement, shrink and role change. Where reads are not gated
the confirm offset is the log's end and nothing waits.

Pure: no Ray, no sockets; runs on the broker's event loop.
"""

from __future__ import annotations

import heapq

from namesrv.broker.client.pull_hold import PullHoldService
from namesrv.broker.role import RoleGuard
from namesrv.store.message_store import MessageStore


class ReadFence:
    def __init__(self, store: MessageStore, guard: RoleGuard, hold: PullHoldService) -> None:
        self.store, self.guard, self.hold = store, guard, hold
        self._pending: list[tuple[int, str, int]] = []
        """(record end, topic, queue id) of writes not yet readable: a min-heap by end."""
        guard.on_confirm = self.advanced

    def confirm_offset(self) -> int:
        return self.guard.confirm_offset(self.store.size_bytes())

    def max_offset(self, topic: str, queue_id: int) -> int:
        """The queue's max offset a reader may see."""
        if not self.guard.gates_reads:
            return self.store.max_offset(topic, queue_id)
        return self.store.confirmed_max_offset(topic, queue_id, self.confirm_offset())

    def readable_end(self) -> float:
        """Where the records a reader may be shown end (a record is readable when it ends at or
        before it): the confirm offset, unbounded when reads are not gated. Read once per query."""
        return self.confirm_offset() if self.guard.gates_reads else float("inf")

    def written(self, end: int, topic: str, queue_id: int) -> None:
        """A message of the queue is stored, its record ending at `end`: wake the queue's held
        pulls now if it is readable, else once it is."""
        if end <= self.confirm_offset():
            self.hold.notify(topic, queue_id)
        else:
            heapq.heappush(self._pending, (end, topic, queue_id))

    def advanced(self) -> None:
        """The confirm offset may have moved: wake the queues whose writes became readable."""
        if not self._pending:
            return
        confirm = self.readable_end()  # deposed (reads not gated): release all
        woken: set[tuple[str, int]] = set()
        while self._pending and self._pending[0][0] <= confirm:
            _, topic, queue_id = heapq.heappop(self._pending)
            woken.add((topic, queue_id))
        for topic, queue_id in woken:
            self.hold.notify(topic, queue_id)

    @property
    def waiting(self) -> int:
        """Writes whose wake-up waits for the confirm offset."""
        return len(self._pending)
