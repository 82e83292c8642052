"""RocketMQ 5's PopReviveService: a popped message not acked before its invisible time lapsed is
delivered again.

- A message of an ordinary pop is put into the group's pop retry topic `%RETRY%<group>_<topic>`
  (queue 0, created on first use) with reconsumeTimes + 1 and `1ST_POP_TIME` set on its first
  revive, as RocketMQ's reviveRetry; the next pop of the topic reads it from there. Past the
  group's retryMaxTimes (namesrv.broker.subscription) it goes to `%DLQ%<group>` instead.
- A message of an orderly pop is not moved: the queue's offset stayed at it, so the next pop of
  the queue takes it again, in order (its attempts are counted in memory; past retryMaxTimes it
  goes to the DLQ and the queue moves past it).

Each re-delivery is journalled once stored: a crash in between re-delivers it again after the
restart (at-least-once), never loses it. A message the store no longer has (retention) is dropped
from the index. Runs on the broker's event loop while the broker is a master.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from namesrv.broker.context import BrokerContext
from namesrv.broker.pop.extra_info import pop_retry_topic
from namesrv.broker.pop.inflight import InFlight
from namesrv.broker.pop.journal import ack_record, pop_record
from namesrv.broker.pop.processor import FIRST_POP_TIME
from namesrv.broker.pop.state import PopState
from namesrv.broker.processor.types import SendOutcome
from namesrv.broker.schedule.delivery import SCHEDULE_PROPERTIES
from namesrv.broker.transaction.service import TRAN_MSG
from namesrv.protocol.constants import DLQ_GROUP_TOPIC_PREFIX, RETRY_GROUP_TOPIC_PREFIX
from namesrv.protocol.message.properties import POP_CK
from namesrv.protocol.message.types import MessageInner, StoredMessage
from namesrv.remoting.command import MQServerError
from namesrv.store.message_store import MessageStore

log = logging.getLogger(__name__)

IDLE_WAIT_S = 1.0
BATCH = 256
PUT_BATCH = 64
"""Re-deliveries stored per send (one batch of one topic's queue 0)."""
DROPPED_PROPERTIES = frozenset({POP_CK, TRAN_MSG, *SCHEDULE_PROPERTIES})
"""Not carried into the retry topic or the DLQ: the old handle, and what would park or half the copy."""
RETRY_AFTER_MS = 1000
"""How long a message whose re-delivery failed waits before the next try."""
Send = Callable[[list[MessageInner], str, int], Awaitable[SendOutcome]]


class PopReviveService:
    def __init__(self, ctx: BrokerContext, state: PopState, send: Send) -> None:
        self.ctx, self.state, self.send = ctx, state, send
        self._wake = asyncio.Event()
        self.revived = 0
        self.dead = 0
        self.failures = 0
        self._journalling: set[asyncio.Task[None]] = set()
        self.lateness_ms: list[int] = []
        """How late each of the last revives was after its invisible time lapsed (figures, tests)."""
        state.on_added = self.notify

    def notify(self) -> None:
        self._wake.set()

    async def journalled(self) -> None:
        """Until the journal holds every revive so far (shutdown, tests)."""
        while self._journalling:
            await asyncio.gather(*self._journalling)

    async def run(self, closed: Callable[[], bool]) -> None:
        """Revive until `closed()`: when the earliest entry is due, at least every IDLE_WAIT_S."""
        while not closed():
            if await self.revive_due() >= BATCH:
                continue
            wait = IDLE_WAIT_S
            upcoming = self.state.index.next_due()
            if upcoming is not None:
                wait = min(wait, max(0.0, (upcoming - self.ctx.clock()) / 1000))
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), wait)
            except TimeoutError:
                pass
        await self.journalled()

    async def revive_due(self) -> int:
        """Re-deliver what is due now, a batch at a time: the messages read in one worker-thread
        call, stored in batches per target topic (queue 0, all batches at once), journalled in one
        record write. How many entries were handled. What fails (the store refused it, or a bug)
        is tried again RETRY_AFTER_MS later and the rest go on: one bad message never stops the revive
        (apache/rocketmq #9956)."""
        due = self.state.index.take_due(BATCH)
        if not due:
            return 0
        messages = await asyncio.to_thread(read_entries, self.ctx.store, due)
        by_topic: dict[str, list[Revival]] = {}
        records: list[dict[str, object]] = []
        revived: list[InFlight] = []
        for entry, message in zip(due, messages, strict=True):
            r = self._decide(entry, message)
            if r.message is None:
                records.extend(r.records)
                revived.append(entry)
            else:
                by_topic.setdefault(r.message.topic, []).append(r)
        await asyncio.gather(*(self._store_batch(topic, part, records, revived)
                               for topic, group in by_topic.items()
                               for part in (group[i:i + PUT_BATCH] for i in range(0, len(group), PUT_BATCH))))
        # Journalled in the background (in order, behind the earlier records): a crash before it is
        # on disk revives these again after the restart (at least once), so the next batch need not
        # wait for the fsync.
        if records:
            task = asyncio.get_running_loop().create_task(self.state.record(*records))
            self._journalling.add(task)
            task.add_done_callback(self._journalling.discard)
        now = self.ctx.clock()
        self.lateness_ms = [*self.lateness_ms, *(now - e.due_at for e in revived)][-10_000:]
        return len(due)

    async def _store_batch(self, topic: str, part: list[Revival], records: list[dict[str, object]],
                           revived: list[InFlight]) -> None:
        """Store one batch of re-deliveries of one topic; on failure, put them back for later."""
        try:
            if self.ctx.topics.create_topic_in_send_message_back_method(topic, 1) is not None:
                self.ctx.on_topic_created(topic)
            await self.send([r.message for r in part if r.message is not None], topic, 1)
        except Exception as e:  # not stored: back in the index, tried again later
            log.warning("pop revive of %d messages into %s failed, again in %d ms: %s", len(part), topic,
                        RETRY_AFTER_MS, e, exc_info=e if not isinstance(e, (MQServerError, OSError)) else None)
            self.failures += len(part)
            for r in part:
                self.state.index.restore(r.entry, self.ctx.clock() + RETRY_AFTER_MS)
            return
        for r in part:
            self._stored(r)
            records.extend(r.records)
            revived.append(r.entry)

    def _decide(self, entry: InFlight, message: StoredMessage | None) -> Revival:
        """Where a lapsed message goes: nowhere (gone from the store; an orderly pop's message,
        popped again from its queue), its retry topic, or the DLQ."""
        ctx = self.ctx
        done: list[dict[str, object]] = [ack_record(entry, "rev")]
        if message is None:
            log.warning("pop revive: %s is no longer in the store", entry.key)
            return Revival(entry, done)
        group = ctx.subscription_groups.find(entry.group)
        max_times = group.retry_max_times if group is not None else 16
        dlq = f"{DLQ_GROUP_TOPIC_PREFIX}{entry.group}"
        if entry.order:
            attempts = self.state.order_attempts.get(entry.key, 0) + 1
            if attempts <= max_times:
                self.state.order_attempts[entry.key] = attempts
                ctx.hold.notify(entry.origin_topic, entry.queue_id)  # the queue is free again
                return Revival(entry, done)
            return Revival(entry, done, self._inner(entry, message, dlq, attempts), dead=True)
        times = message.reconsume_times + 1
        if times > max_times:
            return Revival(entry, done, self._inner(entry, message, dlq, times), dead=True)
        retry = entry.topic if entry.topic.startswith(RETRY_GROUP_TOPIC_PREFIX) \
            else pop_retry_topic(entry.origin_topic, entry.group)
        return Revival(entry, done, self._inner(entry, message, retry, times))

    def _inner(self, entry: InFlight, message: StoredMessage, topic: str, times: int) -> MessageInner:
        props = {k: v for k, v in message.properties.items() if k not in DROPPED_PROPERTIES}
        if message.reconsume_times == 0 or FIRST_POP_TIME not in props:
            props[FIRST_POP_TIME] = str(entry.pop_time)
        if topic.startswith(DLQ_GROUP_TOPIC_PREFIX):
            props.setdefault("RETRY_TOPIC", entry.origin_topic)
        return MessageInner(topic, 0, message.body, props, message.msg_id, message.flag, message.sys_flag,
                            message.born_timestamp, self.ctx.identity.broker_addr, times)

    def _stored(self, r: Revival) -> None:
        """A re-delivery is stored: count it; an orderly pop's queue moves past a dead message."""
        ctx, entry = self.ctx, r.entry
        if r.dead:
            self.dead += 1
        else:
            self.revived += 1
            ctx.hold.notify(entry.origin_topic, -1)  # held pops of the topic read its retry topic too
        if entry.order:
            self.state.order_attempts.pop(entry.key, None)
            q = (entry.group, entry.topic, entry.queue_id)
            lowest = self.state.index.lowest_in_flight(*q)
            nxt = lowest if lowest is not None else entry.offset + 1
            if nxt > ctx.offsets.query_offset(*q):
                ctx.offsets.commit_offset(*q, nxt)
                r.records.append(pop_record([], (*q, nxt)))
            ctx.hold.notify(entry.origin_topic, entry.queue_id)


def read_entries(store: MessageStore, entries: list[InFlight]) -> list[StoredMessage | None]:
    """The stored message of each entry (None where the store no longer has it), in order. Entries
    of one queue at consecutive offsets (a pop's batch, falling due together) are read in one go."""
    found: dict[tuple[str, int, int], StoredMessage] = {}
    by_queue: dict[tuple[str, int], list[int]] = {}
    for e in entries:
        by_queue.setdefault((e.topic, e.queue_id), []).append(e.offset)
    for (topic, queue_id), offsets in by_queue.items():
        offsets.sort()
        i = 0
        while i < len(offsets):
            end = i + 1
            while end < len(offsets) and offsets[end] == offsets[end - 1] + 1:
                end += 1
            # a read stops at the transfer caps: go on from where it stopped; a message the store
            # no longer has (retention) is passed over
            got = {m.queue_offset: m for m in store.read_messages(topic, queue_id, offsets[i], end - i).messages}
            start = i
            while i < end and offsets[i] in got:
                found[(topic, queue_id, offsets[i])] = got[offsets[i]]
                i += 1
            if i == start:
                i += 1
    return [found.get((e.topic, e.queue_id, e.offset)) for e in entries]


@dataclass(slots=True)
class Revival:
    entry: InFlight
    records: list[dict[str, object]]
    """The journal records once it is done."""
    message: MessageInner | None = None
    """What to store (retry topic or DLQ); None: nothing to store."""
    dead: bool = False
