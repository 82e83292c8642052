"""RocketMQ 5's PopMessageProcessor: POP_MESSAGE (200050).

A pop reads a topic's queues (one, or all of them for queueId -1) from the group's consumer offset,
and its pop retry topic `%RETRY%<group>_<topic>` (where re-delivered messages go), within the read
fence like a pull (namesrv.broker.read_fence). Each message found is in flight for invisibleTime
(namesrv.broker.pop.inflight), journalled before the answer, and the group's offset moves past it at
once: a message not acked in time comes back through revive (namesrv.broker.pop.revive), not
through the offset. Each message carries its handle in the `POP_CK` property
(namesrv.broker.pop.extra_info); a retry topic's message is delivered under the popped topic.

An orderly pop (order=true) takes a queue only when the group has nothing of it in flight, and
never reads its retry topic: a lapsed message is re-delivered from the queue itself, in order.

Nothing found: held for pollTime (the broker's held-pull machinery, woken by a send to any queue
of the topic) and tried again; still nothing: POLLING_TIMEOUT, as RocketMQ answers. The answer's
header: popTime, invisibleTime, reviveQid, restNum, startOffsetInfo, msgOffsetInfo and, for an
orderly pop, orderCountInfo.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from namesrv.broker.client.consumer_manager import SubscriptionData
from namesrv.broker.client.pull_hold import LONG_POLLING_CHECK_INTERVAL_S
from namesrv.broker.client.subscription_filter import pull_subscription
from namesrv.broker.context import BrokerContext
from namesrv.broker.pop.extra_info import (
    POP_ORDER_REVIVE_QUEUE,
    ExtraInfo,
    offset_info_entry,
    pop_retry_topic,
    retry_flag,
)
from namesrv.broker.pop.headers import MAX_POP_NUMS, PopMessageRequestHeader
from namesrv.broker.pop.inflight import InFlight
from namesrv.broker.pop.journal import pop_record
from namesrv.broker.pop.state import PopState
from namesrv.protocol.broker_headers import request_header
from namesrv.protocol.codes import BrokerRequestCode, ResponseCode
from namesrv.protocol.constants import is_readable
from namesrv.protocol.message.properties import POP_CK
from namesrv.protocol.message.types import StoredMessage
from namesrv.remoting.command import MQServerError, RemotingRequest, RemotingResponse
from namesrv.remoting.pipeline import Handler, RequestContext
from namesrv.store.types import ReadResult

FIRST_POP_TIME = "1ST_POP_TIME"
POP_FROM_RETRY_PROBABILITY = 20
"""BrokerConfig.popFromRetryProbability (%): how often a pop reads the retry topic first."""
ANY_QUEUE = -1
INIT_MODE_MIN = 0


@dataclass(slots=True)
class PopOutcome:
    """What a pop found: the messages as delivered (handle set, retry messages under the popped
    topic), for the wire encoder and for Ray callers alike."""

    messages: list[StoredMessage] = field(default_factory=list)
    rest_num: int = 0
    start_offset_info: list[str] = field(default_factory=list)
    msg_offset_info: list[str] = field(default_factory=list)
    order_count_info: list[str] = field(default_factory=list)


class PopMessageProcessor:
    def __init__(self, ctx: BrokerContext, state: PopState) -> None:
        self.ctx = ctx
        self.state = state
        self.handlers: dict[int, Handler] = {BrokerRequestCode.POP_MESSAGE: self._pop_message}

    # ------------------------------------------------------------------ checks
    def _pop_message(self, cmd: RemotingRequest, client: RequestContext) -> Awaitable[RemotingResponse]:
        ctx = self.ctx
        h = request_header(cmd, PopMessageRequestHeader)
        addr = ctx.identity.broker_addr
        if not is_readable(ctx.config.broker_permission):
            raise MQServerError(ResponseCode.NO_PERMISSION, f"the broker[{addr}] pop message is forbidden")
        if not ctx.guard.writable:  # a pop writes its check points: masters only, as RocketMQ
            raise MQServerError(ResponseCode.SERVICE_NOT_AVAILABLE, f"the broker[{addr}] is not a master: no pop")
        if h.max_msg_nums > MAX_POP_NUMS:
            raise MQServerError(ResponseCode.INVALID_PARAMETER,
                                f"the broker[{addr}] pop message's num is greater than {MAX_POP_NUMS}")
        tc = ctx.topics.topic_config_table.get(h.topic)
        if tc is None:
            raise MQServerError(ResponseCode.TOPIC_NOT_EXIST, f"topic[{h.topic}] not exist, apply first please!")
        if not is_readable(tc.perm):
            raise MQServerError(ResponseCode.NO_PERMISSION, f"the topic[{h.topic}] peeking message is forbidden")
        if h.queue_id >= tc.read_queue_nums:
            raise MQServerError(ResponseCode.INVALID_PARAMETER,
                                f"queueId[{h.queue_id}] is illegal, topic:[{h.topic}] topicConfig.readQueueNums:"
                                f"[{tc.read_queue_nums}] consumer:[{client.remote}]")
        group = ctx.subscription_groups.find(h.consumer_group)
        if group is None:
            raise MQServerError(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                                f"subscription group [{h.consumer_group}] does not exist")
        if not group.consume_enable:
            raise MQServerError(ResponseCode.NO_PERMISSION, f"subscription group no permission, {h.consumer_group}")
        denied = ctx.may_read(cmd, client, h.topic)
        if denied is not None:
            raise MQServerError(ResponseCode.NO_PERMISSION, denied)
        sub = pull_subscription(h.topic, h.exp, h.exp_type, None, ctx.config.enable_property_filter) \
            if h.exp else None
        return self._pop_answer(cmd, h, sub)

    # ------------------------------------------------------------------ the pop
    async def _pop_answer(self, cmd: RemotingRequest, h: PopMessageRequestHeader,
                          sub: SubscriptionData | None) -> RemotingResponse:
        ctx = self.ctx
        pop_time = ctx.clock()
        outcome = await self.pop(h, sub, pop_time)
        if not outcome.messages and h.poll_time > 0 and not ctx.closed:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + h.poll_time / 1000
            hold_queue = h.queue_id if h.queue_id >= 0 and h.order else ANY_QUEUE
            while not outcome.messages and not ctx.closed:
                remaining = deadline - loop.time()
                if remaining <= 0:
                    break
                await ctx.hold.wait(h.topic, hold_queue, remaining, lambda: ctx.closed or self._anything_new(h),
                                    LONG_POLLING_CHECK_INTERVAL_S)
                pop_time = ctx.clock()
                outcome = await self.pop(h, sub, pop_time)
        revive_qid = POP_ORDER_REVIVE_QUEUE if h.order else 0
        ext = {"popTime": str(pop_time), "invisibleTime": str(h.invisible_time), "reviveQid": str(revive_qid),
               "restNum": str(outcome.rest_num), "startOffsetInfo": ";".join(outcome.start_offset_info),
               "msgOffsetInfo": ";".join(outcome.msg_offset_info)}
        if h.order:
            ext["orderCountInfo"] = ";".join(outcome.order_count_info)
        ctx.stats[("pops", "FOUND" if outcome.messages else "NO_MESSAGE")] += 1
        ctx.stats_items.inc_group_get_nums(h.consumer_group, h.topic, len(outcome.messages))
        if not outcome.messages:
            return cmd.response(ResponseCode.POLLING_TIMEOUT, "NO_MESSAGE_IN_QUEUE", ext)
        return cmd.response(ResponseCode.SUCCESS, "FOUND", ext, None, outcome)

    def _queues(self, h: PopMessageRequestHeader) -> list[tuple[str, int]]:
        """(topic, queue id) to read, in order: the popped queue(s), the retry topic's before them
        one time in five (RocketMQ's popFromRetryProbability), after them otherwise."""
        topics = self.ctx.topics.topic_config_table
        tc = topics[h.topic]
        if h.queue_id >= 0:
            own = [(h.topic, h.queue_id)]
        else:
            start = random.randrange(max(tc.read_queue_nums, 1))
            own = [(h.topic, (start + i) % tc.read_queue_nums) for i in range(tc.read_queue_nums)]
        if h.order:
            return own
        retry_tc = topics.get(pop_retry_topic(h.topic, h.consumer_group))
        retry = [(retry_tc.topic_name, q) for q in range(retry_tc.read_queue_nums)] if retry_tc is not None else []
        return retry + own if random.randrange(100) < POP_FROM_RETRY_PROBABILITY else own + retry

    def _start_offset(self, group: str, topic: str, queue_id: int, init_mode: int) -> tuple[int, bool]:
        """Where the group's pop of the queue starts, and whether that was just decided (no
        offset yet: the queue's start for MIN or a retry topic; else its end, or its start while
        the queue still holds its first message, as RocketMQ's initPopOffsetByCheckMsgInMem)."""
        ctx = self.ctx
        offset = ctx.offsets.query_offset(group, topic, queue_id)
        min_offset = ctx.store.min_offset(topic, queue_id)
        if offset >= 0:
            return max(offset, min_offset), False
        if init_mode == INIT_MODE_MIN or topic != self._origin(topic, group) or min_offset <= 0:
            return min_offset, True
        return max(ctx.fence.max_offset(topic, queue_id) - 1, min_offset), True

    @staticmethod
    def _origin(topic: str, group: str) -> str:
        prefix = pop_retry_topic("", group)
        return topic[len(prefix):] if topic.startswith(prefix) else topic

    def _anything_new(self, h: PopMessageRequestHeader) -> bool:
        """Whether a queue this pop may take holds something past the group's offset (the held
        pop's wake-up check)."""
        for topic, queue_id in self._queues(h):
            if h.order and self.state.index.in_flight(h.consumer_group, topic, queue_id):
                continue  # held by the group's batch in flight: its ack or revive wakes this pop
            offset, _ = self._start_offset(h.consumer_group, topic, queue_id, h.init_mode)
            if self.ctx.fence.max_offset(topic, queue_id) > offset:
                return True
        return False

    async def pop(self, h: PopMessageRequestHeader, sub: SubscriptionData | None, pop_time: int) -> PopOutcome:
        """One pass over the queues; the messages found are in flight (journalled) when it returns."""
        ctx, state = self.ctx, self.state
        outcome = PopOutcome()
        matches: Callable[[StoredMessage], bool] | None = None
        if sub is not None:
            matches = lambda m: sub.accepts(m.properties)  # noqa: E731
        for topic, queue_id in self._queues(h):
            qkey = (h.consumer_group, topic, queue_id)
            offset, _ = self._start_offset(h.consumer_group, topic, queue_id, h.init_mode)
            max_offset = ctx.fence.max_offset(topic, queue_id)
            want = h.max_msg_nums - len(outcome.messages)
            if want <= 0 or qkey in state.busy or (h.order and state.index.in_flight(*qkey)):
                outcome.rest_num += max(max_offset - offset, 0)
                continue
            if offset >= max_offset:
                continue
            state.busy.add(qkey)
            try:
                result = await asyncio.to_thread(ctx.store.read_messages, topic, queue_id, offset,
                                                 min(want, max_offset - offset), ctx.config.transfer_caps(),
                                                 self._retry_matches(topic, h.topic, matches))
                await self._taken(h, topic, queue_id, offset, result, pop_time, outcome)
            finally:
                state.busy.discard(qkey)
            outcome.rest_num += max(max_offset - result.next_offset, 0)
        return outcome

    @staticmethod
    def _retry_matches(topic: str, popped: str,
                       matches: Callable[[StoredMessage], bool] | None) -> Callable[[StoredMessage], bool] | None:
        """The filter of the popped topic applies to its own messages; a retry topic's were matched
        when first delivered (RocketMQ subscribes the retry topic to everything)."""
        return matches if topic == popped else None

    async def _taken(self, h: PopMessageRequestHeader, topic: str, queue_id: int, offset: int, result: ReadResult,
                     pop_time: int, outcome: PopOutcome) -> None:
        """Record what one queue's read took: in flight, journalled, the group's offset past it."""
        ctx, state = self.ctx, self.state
        group = h.consumer_group
        # an orderly pop's offset stays at its batch until the batch is acked (namesrv.broker.pop.ack)
        next_offset = offset if h.order and result.messages else result.next_offset
        entries = [InFlight(group, topic, queue_id, m.queue_offset, h.topic, offset, pop_time, h.invisible_time,
                            h.order) for m in result.messages]
        for e in entries:
            state.index.add(e)
        if entries:
            state.on_added()
        if entries or next_offset != offset:
            await state.record(pop_record(entries, (group, topic, queue_id, next_offset)))
            if next_offset > ctx.offsets.query_offset(group, topic, queue_id):
                ctx.offsets.commit_offset(group, topic, queue_id, next_offset)
        if not result.messages:
            return
        revive_qid = POP_ORDER_REVIVE_QUEUE if h.order else 0
        broker = ctx.identity.broker_name
        for m in result.messages:
            info = ExtraInfo(offset, pop_time, h.invisible_time, revive_qid, retry_flag(topic), broker, queue_id,
                             m.queue_offset)
            props = dict(m.properties)
            props[POP_CK] = info.encode()
            outcome.messages.append(dataclasses.replace(m, topic=h.topic, properties=props))
        outcome.start_offset_info.append(offset_info_entry(topic, queue_id, str(offset)))
        outcome.msg_offset_info.append(offset_info_entry(topic, queue_id,
                                                         ",".join(str(m.queue_offset) for m in result.messages)))
        if h.order:
            counts = ",".join(str(self.state.order_attempts.get((h.consumer_group, topic, queue_id, m.queue_offset), 0))
                              for m in result.messages)
            outcome.order_count_info.append(offset_info_entry(topic, queue_id, counts))
