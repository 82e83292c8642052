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

from namesrv.broker.context import BrokerContext
from namesrv.broker.pop.extra_info import pop_retry_topic
from namesrv.broker.pop.inflight import InFlight, Key
from namesrv.broker.pop.journal import ack_record, pop_record
from namesrv.broker.pop.processor import FIRST_POP_TIME, POP_CK
from namesrv.broker.pop.state import PopState
from namesrv.broker.processor.types import SendOutcome
from namesrv.protocol.constants import DLQ_GROUP_TOPIC_PREFIX, RETRY_GROUP_TOPIC_PREFIX
from namesrv.protocol.message.types import MessageInner, StoredMessage
from namesrv.remoting.command import MQServerError

log = logging.getLogger(__name__)

IDLE_WAIT_S = 1.0
BATCH = 256
RETRY_AFTER_MS = 1000
"""How long a message whose re-delivery failed waits before the next try."""
Send = Callable[[list[MessageInner], str, int], Awaitable[SendOutcome]]


class PopReviveService:
    def __init__(self, ctx: BrokerContext, state: PopState, send: Send) -> None:
        self.ctx, self.state, self.send = ctx, state, send
        self._wake = asyncio.Event()
        self.order_attempts: dict[Key, int] = {}
        self.revived = 0
        self.dead = 0
        self.failures = 0
        self.lateness_ms: list[int] = []
        """How late each of the last revives was after its invisible time lapsed (figures, tests)."""
        state.on_added = self.notify

    def notify(self) -> None:
        self._wake.set()

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

    async def revive_due(self) -> int:
        """Re-deliver what is due now; how many entries were handled. One that fails (the store
        refused it, or a bug) is tried again RETRY_AFTER_MS later and the rest go on: one bad
        message never stops the revive (apache/rocketmq #9956)."""
        due = self.state.index.take_due(BATCH)
        for entry in due:
            try:
                records = await self._revive(entry)
            except Exception as e:  # not stored: back in the index, tried again later
                log.warning("pop revive of %s failed, again in %d ms: %s", entry.key, RETRY_AFTER_MS, e,
                            exc_info=not isinstance(e, (MQServerError, OSError)))
                self.failures += 1
                self.state.index.restore(entry, self.ctx.clock() + RETRY_AFTER_MS)
                continue
            await self.state.record(*records)
            self.lateness_ms = [*self.lateness_ms[-9_999:], self.ctx.clock() - entry.due_at]
        return len(due)

    async def _revive(self, entry: InFlight) -> list[dict[str, object]]:
        """Deliver one lapsed message again; the journal records that say so."""
        ctx = self.ctx
        found = await asyncio.to_thread(ctx.store.read_messages, entry.topic, entry.queue_id, entry.offset, 1)
        message = found.messages[0] if found.messages and found.messages[0].queue_offset == entry.offset else None
        done = [ack_record(entry, "rev")]
        if message is None:
            log.warning("pop revive: %s is no longer in the store", entry.key)
            return done
        group = ctx.subscription_groups.find(entry.group)
        max_times = group.retry_max_times if group is not None else 16
        if entry.order:
            attempts = self.order_attempts.get(entry.key, 0) + 1
            if attempts <= max_times:
                self.order_attempts[entry.key] = attempts
                ctx.hold.notify(entry.origin_topic, entry.queue_id)  # the queue is free again
                return done
            self.order_attempts.pop(entry.key, None)
            await self._put(entry, message, f"{DLQ_GROUP_TOPIC_PREFIX}{entry.group}", attempts)
            q = (entry.group, entry.topic, entry.queue_id)
            lowest = self.state.index.lowest_in_flight(*q)
            nxt = lowest if lowest is not None else entry.offset + 1
            if nxt > ctx.offsets.query_offset(*q):
                ctx.offsets.commit_offset(*q, nxt)
                done.append(pop_record([], (*q, nxt)))
            return done
        times = message.reconsume_times + 1
        if times > max_times:
            await self._put(entry, message, f"{DLQ_GROUP_TOPIC_PREFIX}{entry.group}", times)
        else:
            retry = entry.topic if entry.topic.startswith(RETRY_GROUP_TOPIC_PREFIX) \
                else pop_retry_topic(entry.origin_topic, entry.group)
            await self._put(entry, message, retry, times)
        ctx.hold.notify(entry.origin_topic, -1)  # held pops of the topic read its retry topic too
        return done

    async def _put(self, entry: InFlight, message: StoredMessage, topic: str, times: int) -> None:
        ctx = self.ctx
        props = {k: v for k, v in message.properties.items() if k != POP_CK}
        if message.reconsume_times == 0 or FIRST_POP_TIME not in props:
            props[FIRST_POP_TIME] = str(entry.pop_time)
        dead = topic.startswith(DLQ_GROUP_TOPIC_PREFIX)
        if dead:
            props.setdefault("RETRY_TOPIC", entry.origin_topic)
        if ctx.topics.create_topic_in_send_message_back_method(topic, 1) is not None:
            ctx.on_topic_created(topic)
        inner = MessageInner(topic, 0, message.body, props, message.msg_id, message.flag, message.sys_flag,
                             message.born_timestamp, ctx.identity.broker_addr, times)
        await self.send([inner], topic, 1)
        if dead:
            self.dead += 1
        else:
            self.revived += 1
