"""What a broker's role changes in its send and pull paths (RocketMQ's brokerRole checks), in one
object the processor calls from three places: before a send, after a send is stored, and on a pull.

- SLAVE: refuses sends as RocketMQ 5's store does (SERVICE_NOT_AVAILABLE, "messages are put to the
  slave"; RocketMQ's SLAVE_NOT_AVAILABLE, 11, means "stored on the master, not on a slave", which a
  client takes as sent). Serves pulls only with slaveReadEnable (else SYSTEM_BUSY, as
  PullMessageProcessor.rejectRequest); while its master is reachable it points consumers back to
  it (suggestWhichBrokerId 0, and PULL_RETRY_IMMEDIATELY when it found nothing).
- SYNC_MASTER: refuses a send while the SyncStateSet is smaller than minInSyncReplicas, and
  acknowledges a stored send once every member holds it, else FLUSH_SLAVE_TIMEOUT after
  slaveTimeout (the message is stored on the master; RocketMQ answers the same).
- A master with slaveReadEnable points a consumer lagging by more than the in-memory window to
  whichBrokerWhenConsumeSlowly (RocketMQ's suggestPullingFromSlave).

In controller mode (actors.broker.ha.replicas_manager) the role changes at runtime through `change_role`,
and every change is kept in `role_log` ({atMs, role, epoch}; the broker's clock, wall-clock ms):
the chaos invariant "at most one writable master per broker set at any instant" is read from it.
A master whose controller lease ran out (namesrv.broker.lease) refuses sends until a heartbeat is
answered again. A deposed master fences at once: the next send is refused, and a send stored but not yet answered
when the role changed is answered SERVICE_NOT_AVAILABLE, never SUCCESS (its record is cut by the
truncation that follows). Controlled (`controlled`), the SyncStateSet shrinks only once the
controller agreed (`remove_members`); it grows at once locally (a stricter acknowledgement), then
at the controller.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from namesrv.broker.config import BrokerConfig
from namesrv.broker.lease import LEASE_EXPIRED_REMARK, MasterLease
from namesrv.common.clock import Clock
from namesrv.protocol.codes import ResponseCode
from namesrv.protocol.constants import MASTER_ID
from namesrv.remoting.command import MQServerError
from namesrv.store.ha.sync_state import SyncStateSet
from namesrv.store.types import BrokerRole

SLAVE_REFUSES_SEND = ("service not available now. It may be caused by one of the following reasons: "
                      "messages are put to the slave, ...")
REJECT_PULL = "[REJECTREQUEST]system busy, start flow control for a while"
FLUSH_SLAVE_TIMEOUT_REMARK = "stored on the master, but not on every in-sync replica within the slave timeout"
DEPOSED_REMARK = "this broker stopped being master while storing the message: not acknowledged, send again"
ROLE_LOG_KEPT = 1_000


class RoleGuard:
    def __init__(self, config: BrokerConfig, broker_id: int, clock: Clock) -> None:
        self.config = config
        self.broker_id = broker_id
        self.sync = SyncStateSet(broker_id, clock, config.ha_max_time_slave_not_catchup_ms)
        self.master_reachable: Callable[[], bool] = lambda: False
        """A slave: whether its master answered lately (set by its replication client)."""
        self._waiting: list[tuple[int, asyncio.Future[None]]] = []
        self.timeouts = 0
        self.fenced_sends = 0
        self.controlled = False
        """Controller mode: `shrink` leaves the set alone (the controller must agree first)."""
        self.lease: MasterLease | None = None
        """Controller mode: a master takes sends only while its lease holds (namesrv.broker.lease)."""
        self.master_epoch = 0
        self._confirmed = 0
        """The confirm offset last computed in this term (it never moves back within one)."""
        self.master_confirm = 0
        """A slave's: the confirm offset its master last told it (0 until one did since its start)."""
        self.on_confirm: Callable[[], None] = lambda: None
        """Called when the confirm offset may have moved (a slave's acknowledgement, the set
        shrinking, a role change): the read fence releases what became readable."""
        self.clock = clock
        self.role_log: list[dict[str, object]] = [{"atMs": clock(), "role": str(config.broker_role), "epoch": 0}]

    def change_role(self, role: BrokerRole, epoch: int, broker_id: int | None = None) -> None:
        """The controller's decision, applied at once. Becoming a master starts a fresh SyncStateSet
        of this broker alone (`broker_id`: its controller id); becoming a slave fences: sends are
        refused from now on, and sends waiting for their replicas are answered SERVICE_NOT_AVAILABLE."""
        if broker_id is not None:
            self.broker_id = broker_id
        self.config.broker_role = role
        self.master_epoch = epoch
        if role is BrokerRole.SLAVE:
            for _, future in self._waiting:
                if not future.done():
                    future.set_result(None)
        else:
            self.sync = SyncStateSet(self.broker_id, self.sync.clock, self.config.ha_max_time_slave_not_catchup_ms)
        self._confirmed = 0
        self.on_confirm()
        self.role_log.append({"atMs": self.clock(), "role": str(role), "epoch": epoch})
        del self.role_log[:-ROLE_LOG_KEPT]

    @property
    def gates_reads(self) -> bool:
        """Whether readers are held to the confirm offset: a SYNC_MASTER, and every broker in
        controller mode (RocketMQ 5's AutoSwitchHAService), a slave included: it serves up to
        the confirm offset its master last told it, never a tail the next master may not have
        (an old master back as a slave before it is truncated, a copy its master's set did not
        yet hold). An ASYNC_MASTER outside controller mode keeps RocketMQ 4's weaker promise (a
        reader sees what the master wrote), and its slave serves what it holds."""
        return self.role is BrokerRole.SYNC_MASTER or self.controlled

    def master_confirmed(self, offset: int) -> None:
        """A slave's master said its SyncStateSet holds the log up to `offset`."""
        if offset > self.master_confirm:
            self.master_confirm = offset
            self.on_confirm()

    def log_cut(self, end: int) -> None:
        """This log was truncated to `end` (a slave reconciling with a new master)."""
        self.master_confirm = min(self.master_confirm, end)

    def confirm_offset(self, log_end: int) -> int:
        """What every member of the SyncStateSet holds of a log ending at `log_end` (RocketMQ 5's
        confirmOffset); `log_end` itself where reads are not gated or the master is alone; for a
        slave, what its master last said of it."""
        if not self.gates_reads:
            return log_end
        if self.role is BrokerRole.SLAVE:
            return min(log_end, self.master_confirm)
        acks = [self.sync.acks.get(s, 0) for s in self.sync.members if s != self.sync.master_id]
        # never back within a term: a member whose acknowledgement stopped counting (ahead of
        # this master) held what it acknowledged before
        self._confirmed = min(log_end, max(self._confirmed, min([log_end, *acks])))
        return self._confirmed

    @property
    def writable(self) -> bool:
        return self.role is not BrokerRole.SLAVE

    def remove_members(self, gone: set[int]) -> None:
        """Members the controller agreed to drop (controller mode's shrink)."""
        if gone & self.sync.members:
            self.sync.members -= gone
            self.sync.epoch += 1
            self._wake()

    @property
    def role(self) -> BrokerRole:
        return self.config.broker_role

    # ------------------------------------------------------------------ send
    def check_send(self) -> None:
        """Before anything is stored; raises MQServerError."""
        if self.role is BrokerRole.SLAVE:
            raise MQServerError(ResponseCode.SERVICE_NOT_AVAILABLE, SLAVE_REFUSES_SEND)
        lease = self.lease
        if lease is not None and not lease.valid():
            lease.refused += 1
            silent = lease.silent_ms()
            raise MQServerError(ResponseCode.SERVICE_NOT_AVAILABLE,
                                LEASE_EXPIRED_REMARK.format(ms="ever" if silent is None else silent))
        if self.role is BrokerRole.SYNC_MASTER:
            self.shrink()
            if len(self.sync.members) < self.config.min_in_sync_replicas:
                raise MQServerError(ResponseCode.SYSTEM_ERROR, "in-sync replicas not enough")

    async def replicated(self, end_offset: int) -> int:
        """After a send is stored locally up to `end_offset`: SUCCESS, or FLUSH_SLAVE_TIMEOUT when
        the SyncStateSet did not hold it within slaveTimeout; SERVICE_NOT_AVAILABLE when this broker
        was deposed meanwhile."""
        if self.role is BrokerRole.SLAVE:
            self.fenced_sends += 1
            return ResponseCode.SERVICE_NOT_AVAILABLE
        if self.role is not BrokerRole.SYNC_MASTER or self.sync.acked(end_offset):
            return ResponseCode.SUCCESS
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (end_offset, future)
        self._waiting.append(entry)
        try:
            await asyncio.wait_for(future, self.config.slave_timeout_ms / 1000)
            if not self.writable:  # deposed while waiting
                self.fenced_sends += 1
                return ResponseCode.SERVICE_NOT_AVAILABLE
            return ResponseCode.SUCCESS
        except TimeoutError:
            self.timeouts += 1
            return ResponseCode.FLUSH_SLAVE_TIMEOUT
        finally:
            self._waiting.remove(entry)

    def on_slave_request(self, slave_id: int, ack_offset: int, master_end: int) -> None:
        """A slave asked from `ack_offset`: it holds everything before; wake the sends it covers. It
        joins the SyncStateSet only holding the confirm offset readers were served up to."""
        confirm = self.confirm_offset(master_end) if self.gates_reads else 0
        self.sync.on_request(slave_id, ack_offset, master_end, confirm)
        self._wake()

    def slave_gone(self, slave_id: int) -> None:
        """A slave's actor died: it leaves the SyncStateSet now (controlled: once the controller
        agreed, on the replicas manager's next step)."""
        self.sync.forget(slave_id)
        self.shrink()

    def shrink(self) -> set[int]:
        if self.controlled:
            return set()
        gone = self.sync.shrink()
        if gone:
            self._wake()
        return gone

    def _wake(self) -> None:
        for end, future in self._waiting:
            if not future.done() and self.sync.acked(end):
                future.set_result(None)
        self.on_confirm()

    # ------------------------------------------------------------------ pull
    def check_pull(self) -> None:
        if self.role is BrokerRole.SLAVE and not self.config.slave_read_enable:
            raise MQServerError(ResponseCode.SYSTEM_BUSY, REJECT_PULL)

    def pull_advice(self, code: int, found: bool, behind_bytes: int, in_memory_bytes: int) -> tuple[int, int]:
        """(answer code, suggestWhichBrokerId) of a pull whose last message lies `behind_bytes`
        before the log's end."""
        from_slave = behind_bytes > in_memory_bytes
        suggest = MASTER_ID
        if self.config.slave_read_enable and from_slave:
            suggest = self.config.which_broker_when_consume_slowly
        if self.role is BrokerRole.SLAVE and not from_slave and self.master_reachable():
            suggest = MASTER_ID
            if not found:
                code = ResponseCode.PULL_RETRY_IMMEDIATELY
        return code, suggest
