"""A queue a member holds (RocketMQ's ProcessQueue): the messages pulled and not yet consumed, by
queue offset, what flow control counts (messages and body bytes cached), and for orderly
consumption the broker lock and the messages being consumed."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from namesrv.protocol.message.decoder import MessageExt

REBALANCE_LOCK_MAX_LIVE_S = 30.0
"""A lock not renewed for this long is taken as lost (rocketmq.client.rebalance.lockMaxLiveTime)."""


class ProcessQueue:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._msgs: dict[int, MessageExt] = {}
        """Cached, not consumed yet, by queue offset."""
        self._consuming: dict[int, MessageExt] = {}
        """Orderly: taken by the listener, not committed yet."""
        self.cached_bytes = 0
        self.max_offset = -1
        self.dropped = False
        self.locked = False
        self.last_lock_s = 0.0
        self.last_pull_s = time.monotonic()
        self.consume_lock = threading.Lock()
        """Held while a listener runs on this queue (orderly: one at a time, in order)."""

    def drop(self) -> None:
        """The member no longer holds this queue: what is still pulled or consumed for it commits
        nothing (`if_live`)."""
        with self._lock:
            self.dropped = True

    def if_live(self, action: Callable[[], None]) -> bool:
        """Run `action` (an offset commit) unless the queue is dropped, as one step: a drop (a
        reset's new offset) never lands between the check and the commit."""
        with self._lock:
            if self.dropped:
                return False
            action()
            return True

    @property
    def cached_count(self) -> int:
        with self._lock:
            return len(self._msgs) + len(self._consuming)

    def put(self, msgs: list[MessageExt]) -> None:
        with self._lock:
            for m in msgs:
                if m.queue_offset not in self._msgs:
                    self._msgs[m.queue_offset] = m
                    self.cached_bytes += len(m.body)
                self.max_offset = max(self.max_offset, m.queue_offset)

    def remove(self, msgs: list[MessageExt]) -> int:
        """Forget consumed messages; the offset to commit: the smallest still cached, else past the
        largest pulled (-1 when nothing was ever cached)."""
        with self._lock:
            for m in msgs:
                if self._msgs.pop(m.queue_offset, None) is not None:
                    self.cached_bytes -= len(m.body)
            if self._msgs:
                return min(self._msgs)
            return self.max_offset + 1 if self.max_offset >= 0 else -1

    def is_empty(self) -> bool:
        with self._lock:
            return not self._msgs and not self._consuming

    # ------------------------------------------------------------------ orderly
    def take(self, n: int) -> list[MessageExt]:
        """The next `n` messages in offset order, moved to 'consuming'."""
        with self._lock:
            out = [self._msgs.pop(o) for o in sorted(self._msgs)[:n]]
            for m in out:
                self._consuming[m.queue_offset] = m
            return out

    def commit(self) -> int:
        """The messages being consumed are done: the offset to commit (-1 when none were)."""
        with self._lock:
            if not self._consuming:
                return -1
            offset = max(self._consuming) + 1
            self.cached_bytes -= sum(len(m.body) for m in self._consuming.values())
            self._consuming.clear()
            return offset

    def consume_again(self, msgs: list[MessageExt]) -> None:
        """Orderly: put messages taken back in front (each counts one more reconsume)."""
        with self._lock:
            for m in msgs:
                self._consuming.pop(m.queue_offset, None)
                m.reconsume_times += 1
                self._msgs[m.queue_offset] = m

    def lock_expired(self) -> bool:
        return time.monotonic() - self.last_lock_s > REBALANCE_LOCK_MAX_LIVE_S
