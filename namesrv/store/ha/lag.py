"""Replication lag in time, as the master sees it: for every batch of records written to its log,
how long until a slave acknowledged holding it (its next transfer request carries what it holds).

Both ends of each interval are events on the master, read from one clock, so the figure has no
sampling step in it (a probe that reads the master's end and the slave's acknowledgement every
few ms can only say "within one probe interval"). RocketMQ reports a slave's lag in bytes
(`slave_lag_bytes` here too); this adds the time a SYNC_MASTER's sender actually waits for.
"""

from __future__ import annotations

import bisect
import time
from collections import deque
from collections.abc import Callable

from namesrv.common.stats import summarize

WINDOW = 4096
"""Lag samples kept per slave (the most recent ones)."""
KEEP_S = 60.0
"""Written ends older than this are forgotten (a slave acknowledging them later is not timed)."""
MAX_PENDING = 65_536
"""Written ends kept at most, however fast batches come."""


class ReplicationLag:
    """Written log ends with their times, and per slave the lags of the ends it acknowledged."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, window: int = WINDOW,
                 keep_s: float = KEEP_S, max_pending: int = MAX_PENDING) -> None:
        self.clock = clock
        self.window, self.keep_s, self.max_pending = window, keep_s, max_pending
        self._ends: list[int] = []
        self._times: list[float] = []
        self._first = 0
        """Index of the oldest kept entry (the lists are compacted once half is dead)."""
        self._acked: dict[int, int] = {}
        self._lags: dict[int, deque[float]] = {}

    def written(self, end: int) -> None:
        """The log now ends at `end` (after a batch). Kept only while some slave stands somewhere:
        a slave's first acknowledgement times nothing, so ends written before it are never needed."""
        if not self._acked or (self._first < len(self._ends) and end <= self._ends[-1]):
            return
        now = self.clock()
        self._ends.append(end)
        self._times.append(now)
        while self._first < len(self._ends) and (now - self._times[self._first] > self.keep_s
                                                 or len(self._ends) - self._first > self.max_pending):
            self._first += 1
        if self._first > 1024 and self._first * 2 > len(self._ends):
            del self._ends[: self._first], self._times[: self._first]
            self._first = 0

    def acked(self, slave_id: int, offset: int) -> None:
        """`slave_id` holds the log up to `offset`. Its first acknowledgement (or its first after
        `forget`) only sets where it stands; each later one times the ends it newly covers."""
        before = self._acked.get(slave_id)
        if before is not None and offset <= before:
            return
        self._acked[slave_id] = offset
        if before is None:
            return
        lo = bisect.bisect_right(self._ends, before, self._first)
        hi = bisect.bisect_right(self._ends, offset, lo)
        if hi > lo:
            now = self.clock()
            lags = self._lags.setdefault(slave_id, deque(maxlen=self.window))
            lags.extend((now - t) * 1000 for t in self._times[lo:hi])

    def forget(self, slave_id: int) -> None:
        """The slave is gone: its next acknowledgement starts it afresh (its samples stay)."""
        self._acked.pop(slave_id, None)

    def summary(self) -> dict[int, dict[str, float | int | None]]:
        """Per slave, over its last `window` timed batches: n, p50, p99 and max, in ms."""
        return {slave_id: summarize(lags) for slave_id, lags in self._lags.items() if lags}
