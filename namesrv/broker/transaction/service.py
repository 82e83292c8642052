"""Transactional messages as RocketMQ's broker keeps them (TransactionalMessageServiceImpl,
EndTransactionProcessor, TransactionalMessageCheckService), pure: no Ray, no sockets.

- A prepared message (`TRAN_MSG=true`) is stored as a half message in RMQ_SYS_TRANS_HALF_TOPIC
  (queue 0) with its real topic and queue in REAL_TOPIC / REAL_QID: no consumer sees it.
- END_TRANSACTION commits it (the real message is stored in its topic and queue, with the
  transaction's commit flag) or rolls it back; either way an op record (the half's queue offset)
  goes to RMQ_SYS_TRANS_OP_HALF_TOPIC, so a restarted broker knows what is resolved.
- A half left unresolved past `transactionTimeOut` (6 s, or the message's
  CHECK_IMMUNITY_TIME_IN_SECONDS) is checked back with its producer group, at most once per
  `transactionCheckInterval` and `transactionCheckMax` (15) times; then it is dropped and logged, a
  copy kept in TRANS_CHECK_MAX_TIME_TOPIC (RocketMQ 5).

Beyond RocketMQ: a second END_TRANSACTION for a resolved half changes nothing (RocketMQ would store
the committed message twice).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field, replace

from namesrv.common.clock import Clock
from namesrv.protocol.constants import TRANS_CHECK_MAX_TIME_TOPIC, TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC
from namesrv.protocol.message.properties import REAL_QID, REAL_TOPIC, UNIQ_KEY
from namesrv.protocol.message.types import MessageInner, StoredMessage
from namesrv.store.message_store import MessageStore

log = logging.getLogger(__name__)

TRAN_MSG = "TRAN_MSG"
PGROUP = "PGROUP"
PREPARED_OFFSET = "TRAN_PREPARED_QUEUE_OFFSET"
"""On a committed message: its half's queue offset (RocketMQ's PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET)."""
CHECK_IMMUNITY = "CHECK_IMMUNITY_TIME_IN_SECONDS"
TRANSACTION_ID = "__transactionId__"
TRANSACTION_CHECK_TIMES = "TRANSACTION_CHECK_TIMES"
NOT_TYPE, PREPARED_TYPE, COMMIT_TYPE, ROLLBACK_TYPE = 0, 0x1 << 2, 0x2 << 2, 0x3 << 2
TRANSACTION_MASK = 0x3 << 2


class TransactionError(ValueError):
    """An END_TRANSACTION that names no half message of its producer group (SYSTEM_ERROR)."""


def is_prepared(msg: MessageInner) -> bool:
    """A send that opens a transaction (SendMessageProcessor: the TRAN_MSG property)."""
    return msg.properties.get(TRAN_MSG, "").lower() == "true"


def half_of(msg: MessageInner) -> MessageInner:
    """The half message stored for a prepared send (TransactionalMessageBridge.parseHalfMessageInner)."""
    props = msg.properties | {REAL_TOPIC: msg.topic, REAL_QID: str(msg.queue_id)}
    return replace(msg, topic=TRANS_HALF_TOPIC, queue_id=0, properties=props,
                   sys_flag=(msg.sys_flag & ~TRANSACTION_MASK) | NOT_TYPE)


def committed(half: StoredMessage) -> MessageInner:
    """The real message of a committed half (EndTransactionProcessor.endMessageTransaction)."""
    props = {k: v for k, v in half.properties.items() if k not in (REAL_TOPIC, REAL_QID, TRAN_MSG)}
    props[PREPARED_OFFSET] = str(half.queue_offset)
    return MessageInner(half.properties[REAL_TOPIC], int(half.properties[REAL_QID]), half.body, props, half.msg_id,
                        half.flag, (half.sys_flag & ~TRANSACTION_MASK) | COMMIT_TYPE, half.born_timestamp,
                        half.born_host, half.reconsume_times)


@dataclass
class TransactionState:
    """Which halves are resolved, rebuilt from the op topic; how often each was checked back."""

    floor: int = 0
    """Every half below this queue offset is resolved."""
    resolved: set[int] = field(default_factory=set)
    """Halves at or above the floor that are resolved."""
    checks: dict[int, int] = field(default_factory=dict)
    last_check: dict[int, int] = field(default_factory=dict)

    def is_resolved(self, offset: int) -> bool:
        return offset < self.floor or offset in self.resolved

    def resolve(self, offset: int) -> None:
        if offset >= self.floor:
            self.resolved.add(offset)
        while self.floor in self.resolved:
            self.resolved.discard(self.floor)
            self.checks.pop(self.floor, None)
            self.last_check.pop(self.floor, None)
            self.floor += 1


class TransactionService:
    def __init__(self, store: MessageStore, clock: Clock, timeout_ms: int = 6_000, check_max: int = 15,
                 check_interval_ms: int = 60_000) -> None:
        self.store = store
        self.clock = clock
        self.timeout_ms = timeout_ms
        self.check_max = check_max
        self.check_interval_ms = check_interval_ms
        self.state = TransactionState()
        self.discarded = 0
        self._ops_read = 0
        """The queue offset of the next op record to replay."""
        self.catch_up()
        store.truncation_listeners.append(lambda _end: self.reload())

    def catch_up(self) -> int:
        """Replay the op records the log gained since the last call (all of them at start): what
        was committed, rolled back or dropped before a restart, and, on a replica, what its master
        decided (the records arrive with the replicated log). Run before every check-back scan, so
        a promoted slave never checks back a half its old master resolved. Returns how many."""
        end, replayed = self.store.max_offset(TRANS_OP_HALF_TOPIC, 0), 0
        while self._ops_read < end:
            page = self.store.get_message(TRANS_OP_HALF_TOPIC, 0, self._ops_read, 256)
            if not page:
                break
            for op in page:
                try:
                    self.state.resolve(int(op.body))
                except ValueError:
                    log.warning("op record %d is not a half offset: %r", op.queue_offset, op.body[:40])
            self._ops_read = page[-1].queue_offset + 1
            replayed += len(page)
        return replayed

    def reload(self) -> None:
        """The log was cut (a replica's truncation): the op records cut may have resolved halves
        that are not resolved any more; rebuild the state from what the log holds now."""
        self.state = TransactionState()
        self._ops_read = 0
        self.catch_up()

    def discard_copy(self, half: StoredMessage) -> MessageInner:
        """Where a half checked back `check_max` times goes before it is marked resolved (RocketMQ 5's
        DefaultTransactionalMessageCheckListener.resolveDiscardMsg): TRANS_CHECK_MAX_TIME_TOPIC,
        queue 0, with its real topic and queue kept in its properties, for an operator to look at."""
        props = half.properties | {TRANSACTION_CHECK_TIMES: str(self.state.checks.get(half.queue_offset, 0))}
        return MessageInner(TRANS_CHECK_MAX_TIME_TOPIC, 0, half.body, props, half.msg_id, half.flag, half.sys_flag,
                            half.born_timestamp, half.born_host, half.reconsume_times)

    def op_record(self, half_offset: int) -> MessageInner:
        """What marks a half resolved (RocketMQ's op message, tag "d")."""
        return MessageInner(TRANS_OP_HALF_TOPIC, 0, str(half_offset).encode(), {"TAGS": "d"})

    def find_half(self, producer_group: str, tran_state_table_offset: int, commit_log_offset: int) -> StoredMessage:
        """The half an END_TRANSACTION names (blocking read); TransactionError as RocketMQ's checks."""
        half = self.store.get_by_commit_offset(commit_log_offset)
        if half is None or half.topic != TRANS_HALF_TOPIC:
            raise TransactionError("Find prepared transaction message failed")
        if half.properties.get(PGROUP) != producer_group:
            raise TransactionError("The producer group wrong")
        if half.queue_offset != tran_state_table_offset:
            raise TransactionError("The transaction state table offset wrong")
        return half

    async def scan_for_check(self, limit: int = 256) -> tuple[list[StoredMessage], list[StoredMessage]]:
        """`due_for_check` after catching up with the log's op records, both where END_TRANSACTION
        resolves halves (the event loop), the scan's reads in a thread."""
        self.catch_up()
        return await asyncio.to_thread(self.due_for_check, limit)

    def committed_already(self, half: StoredMessage, topic: str) -> bool:
        """Whether `half`'s committed message is in `topic` already although no op record says so:
        a commit is two writes (the message, then the op record), and a broker killed between them,
        or a promoted slave that copied the first and not the second, leaves the half unresolved.
        Its check-back must not commit it a second time. Blocking (the index): off the loop."""
        key = half.properties.get(UNIQ_KEY) or half.msg_id
        found = self.store.query_message(topic, key, 8, half.store_timestamp, self.clock() + 1)
        return any(m.properties.get(PREPARED_OFFSET) == str(half.queue_offset) for m in found)

    def due_for_check(self, limit: int = 256) -> tuple[list[StoredMessage], list[StoredMessage]]:
        """(halves to check back now, halves checked `check_max` times: to drop), as far as the op
        records replayed so far tell (`scan_for_check` catches up first). Blocking reads."""
        now = self.clock()
        to_check: list[StoredMessage] = []
        to_drop: list[StoredMessage] = []
        offset, end = self.state.floor, self.store.max_offset(TRANS_HALF_TOPIC, 0)
        while offset < end and len(to_check) + len(to_drop) < limit:
            page = self.store.get_message(TRANS_HALF_TOPIC, 0, offset, 64)
            if not page:
                break
            for half in page:
                off = half.queue_offset
                if self.state.is_resolved(off):
                    continue
                if self.state.checks.get(off, 0) >= self.check_max:
                    to_drop.append(half)
                    continue
                immunity = half.properties.get(CHECK_IMMUNITY)
                wait_ms = int(immunity) * 1000 if immunity and immunity.isdigit() else self.timeout_ms
                if now - half.store_timestamp < wait_ms:
                    continue
                if now - self.state.last_check.get(off, -self.check_interval_ms) >= self.check_interval_ms:
                    to_check.append(half)
            offset = page[-1].queue_offset + 1
        return to_check, to_drop

    async def due_for_group(self, producer_group: str) -> list[StoredMessage]:
        """The halves of `producer_group` due for a check-back now, each counted as checked: what a
        Ray-native producer, which has no connection to be sent CHECK_TRANSACTION_STATE down, asks for."""
        to_check, _ = await self.scan_for_check()
        due = [h for h in to_check if h.properties.get(PGROUP) == producer_group]
        for half in due:
            self.checked(half.queue_offset)
        return due

    def checked(self, half_offset: int) -> None:
        """A check-back of this half went to a producer of its group."""
        self.state.checks[half_offset] = self.state.checks.get(half_offset, 0) + 1
        self.state.last_check[half_offset] = self.clock()


def check_back_header(half: StoredMessage, broker_name: str, offset_msg_id: str) -> dict[str, str]:
    """CHECK_TRANSACTION_STATE's header (AbstractTransactionalMessageCheckListener.sendCheckMessage)."""
    uniq = half.properties.get(UNIQ_KEY, half.msg_id)
    return {"topic": half.properties.get(REAL_TOPIC, half.topic), "tranStateTableOffset": str(half.queue_offset),
            "commitLogOffset": str(half.commit_log_offset), "msgId": uniq, "transactionId": uniq,
            "offsetMsgId": offset_msg_id, "brokerName": broker_name}


def as_checked(half: StoredMessage) -> StoredMessage:
    """The half as a producer's check listener sees it: under its real topic and queue."""
    return replace(half, topic=half.properties.get(REAL_TOPIC, half.topic),
                   queue_id=int(half.properties.get(REAL_QID, "0")))
