"""A master's SyncStateSet and its slaves' acknowledged offsets (RocketMQ's AutoSwitchHAService and
AutoSwitchHAConnection bookkeeping), pure, with an injected clock.

A slave acknowledges by asking for more: its request from offset X says it holds every byte before
X (durably, per its own flush policy). A request from past the master's end (a slave ahead of its
master) acknowledges nothing. It is caught up when X reaches the master's log end as it
was at that slave's previous request (or now); a slave not caught up for `max_not_catchup_ms`
(haMaxTimeSlaveNotCatchup, 15 s) leaves the set, and one that catches up rejoins, but only once
it holds the confirm offset too (RocketMQ 5's maybeExpandInSyncStateSet): readers were already
served up to it as held by every member, so a member that lacked it could be elected master without
what they read. The master is always a member. A SYNC_MASTER acknowledges a send ending at offset
E once every member holds E.

Without a controller the set is kept here only (RocketMQ keeps it at the controller: alter
SyncStateSet); `epoch` counts its changes.
"""

from __future__ import annotations

from namesrv.common.clock import Clock


class SyncStateSet:
    def __init__(self, master_id: int, clock: Clock, max_not_catchup_ms: int) -> None:
        self.master_id = master_id
        self.clock = clock
        self.max_not_catchup_ms = max_not_catchup_ms
        self.members: set[int] = {master_id}
        self.epoch = 0
        self.acks: dict[int, int] = {}
        """slave id -> offset it holds everything before."""
        self.caught_up_ms: dict[int, int] = {}
        self._last_request: dict[int, tuple[int, int]] = {}
        """slave id -> (master's log end, time) at its previous request."""

    def on_request(self, slave_id: int, ack_offset: int, master_end: int, confirm_offset: int = 0) -> bool:
        """A slave asks from `ack_offset` while the master's log ends at `master_end` and the set
        holds `confirm_offset` (0 where reads are not held to it); True when it joined the set."""
        now = self.clock()
        if ack_offset > master_end:
            # Ahead of its master: it holds bytes this master never wrote (an old master's tail).
            # Its acknowledgement counts for nothing until it is truncated to a consistent point
            # and asks again from there; as a member it holds sends back meanwhile.
            self.acks.pop(slave_id, None)
            self._last_request.pop(slave_id, None)
            return False
        self.acks[slave_id] = ack_offset
        previous = self._last_request.get(slave_id)
        self._last_request[slave_id] = (master_end, now)
        if ack_offset >= master_end:
            caught: int | None = now
        elif previous is not None and ack_offset >= previous[0]:
            caught = previous[1]
        else:
            caught = None
        if caught is None:
            return False
        self.caught_up_ms[slave_id] = max(self.caught_up_ms.get(slave_id, 0), caught)
        if slave_id in self.members or now - self.caught_up_ms[slave_id] > self.max_not_catchup_ms:
            return False
        if ack_offset < confirm_offset:  # caught up with the log as sent, not yet with what readers saw
            return False
        self.members.add(slave_id)
        self.epoch += 1
        return True

    def forget(self, slave_id: int) -> None:
        """The slave is definitely gone (its actor died): stale at once, rejoins once caught up."""
        self.caught_up_ms.pop(slave_id, None)
        self._last_request.pop(slave_id, None)
        self.acks.pop(slave_id, None)

    def stale(self) -> set[int]:
        """The members not caught up for longer than the limit."""
        now = self.clock()
        return {s for s in self.members if s != self.master_id
                and (s not in self.caught_up_ms or now - self.caught_up_ms[s] > self.max_not_catchup_ms)}

    def shrink(self) -> set[int]:
        """Remove (and return) the members not caught up for longer than the limit."""
        gone = self.stale()
        if gone:
            self.members -= gone
            self.epoch += 1
        return gone

    def acked(self, offset: int) -> bool:
        """Every member holds the log up to `offset`."""
        return all(self.acks.get(s, -1) >= offset for s in self.members if s != self.master_id)

    def slave_acks(self) -> dict[int, int]:
        return dict(self.acks)
