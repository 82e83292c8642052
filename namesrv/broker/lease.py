"""A controller-mode master's lease on its role (beyond RocketMQ, issue 36).

RocketMQ 5's controller deposes a master it has not heard from for brokerHeartbeatTimeout and elects
another; the old master, if it still runs (cut off from the controller by a partition, or on a node
Ray declared dead while its processes go on: ray-project/ray #26405), goes on taking writes until it
hears of the new term, and everything it acknowledged meanwhile is cut from its log when it comes
back as a slave: acknowledged messages lost, two masters writing at once.

The lease closes that window. A heartbeat the controller answered proves the controller heard from
this broker no earlier than when the heartbeat was sent, so the controller cannot expire it before
`sent + brokerHeartbeatTimeout`. The master takes sends only until `sent + lease_ms` of the last
answered heartbeat, with `lease_ms` below that timeout: by the time the controller may elect another
master, this one refuses writes (SERVICE_NOT_AVAILABLE, a failed send the client retries elsewhere).
Times are one process's monotonic clock (a lease is a duration, never compared across machines);
the margin between the two durations covers the clocks' rates.

The cost: while no controller answers (all down, or this broker cut off), masters stop taking writes
after `lease_ms`, where RocketMQ's go on. Sends are refused, never acknowledged and then lost.
"""

from __future__ import annotations

from namesrv.common.clock import Clock

LEASE_EXPIRED_REMARK = ("service not available now: this master has not heard from the controller for {ms} ms "
                        "and may have been replaced; not stored, send again")


class MasterLease:
    def __init__(self, lease_ms: int, clock: Clock) -> None:
        if lease_ms <= 0:
            raise ValueError(f"a lease must be positive, got {lease_ms} ms")
        self.lease_ms = lease_ms
        self.clock = clock
        self._last_sent_ms: int | None = None
        self.refused = 0
        """Sends refused because the lease had run out."""

    def renewed(self, sent_at_ms: int) -> None:
        """The controller answered a heartbeat sent at `sent_at_ms` (this lease's clock)."""
        if self._last_sent_ms is None or sent_at_ms > self._last_sent_ms:
            self._last_sent_ms = sent_at_ms

    def valid(self) -> bool:
        return self._last_sent_ms is not None and self.clock() < self._last_sent_ms + self.lease_ms

    def silent_ms(self) -> int | None:
        """How long since the last answered heartbeat was sent (None: none was answered yet)."""
        return None if self._last_sent_ms is None else self.clock() - self._last_sent_ms
