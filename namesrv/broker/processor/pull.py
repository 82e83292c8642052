"""RocketMQ's PullMessageProcessor: PULL_MESSAGE, read from the store within the transfer caps, and
held (PullRequestHoldService, see namesrv.broker.client.pull_hold) when there is nothing new yet.

Pure: no Ray, no sockets. The reads are blocking (pread) and run off the event loop; a refused pull
raises MQServerError, which `namesrv.broker.processor.dispatcher` answers. Adding a pull-side request code means
writing its handler here and adding one line to `handlers`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable

from namesrv.broker.client.consumer_manager import SubscriptionData
from namesrv.broker.client.pull_hold import LONG_POLLING_CHECK_INTERVAL_S
from namesrv.broker.client.subscription_filter import pull_subscription
from namesrv.broker.context import BrokerContext
from namesrv.broker.processor.types import PullOutcome
from namesrv.protocol.broker_headers import PullMessageRequestHeader, request_header
from namesrv.protocol.codes import BrokerRequestCode, ResponseCode
from namesrv.protocol.constants import is_readable
from namesrv.remoting.command import MQServerError, RemotingRequest, RemotingResponse
from namesrv.remoting.pipeline import Handler, RequestContext

FLAG_COMMIT_OFFSET = 1
FLAG_SUSPEND = 2


class PullMessageProcessor:
    def __init__(self, ctx: BrokerContext) -> None:
        self.ctx = ctx
        self.handlers: dict[int, Handler] = {
            BrokerRequestCode.PULL_MESSAGE: self._pull_message,
        }

    def read(self, topic: str, queue_id: int, offset: int, max_nums: int, sub: SubscriptionData | None) -> PullOutcome:
        """DefaultMessageStore.getMessage + PullMessageProcessor's code mapping (blocking: pread),
        within the broker's transfer caps (see namesrv.store.transfer_caps)."""
        store = self.ctx.store
        max_offset = self.ctx.fence.max_offset(topic, queue_id)  # never past what the replicas hold
        min_offset = store.min_offset(topic, queue_id)
        if max_offset == 0:  # NO_MESSAGE_IN_QUEUE
            code = ResponseCode.PULL_OFFSET_MOVED if offset != 0 else ResponseCode.PULL_NOT_FOUND
            return PullOutcome(code, "NO_MESSAGE_IN_QUEUE", [], 0, min_offset, max_offset)
        if offset < min_offset:  # OFFSET_TOO_SMALL
            return PullOutcome(ResponseCode.PULL_OFFSET_MOVED, "OFFSET_TOO_SMALL", [], min_offset, min_offset,
                               max_offset)
        if offset == max_offset:  # OFFSET_OVERFLOW_ONE
            return PullOutcome(ResponseCode.PULL_NOT_FOUND, "OFFSET_OVERFLOW_ONE", [], offset, min_offset, max_offset)
        if offset > max_offset:  # OFFSET_OVERFLOW_BADLY
            return PullOutcome(ResponseCode.PULL_OFFSET_MOVED, "OFFSET_OVERFLOW_BADLY", [], max_offset, min_offset,
                               max_offset)
        matches = None if sub is None else (lambda m: sub.accepts(m.properties))
        result = store.read_messages(topic, queue_id, offset, min(max_nums, max_offset - offset),
                                     self.ctx.config.transfer_caps(), matches)
        if result.records == 0:  # the records there were lost to corruption: skip past them
            return PullOutcome(ResponseCode.PULL_RETRY_IMMEDIATELY, "OFFSET_FOUND_NULL", [],
                               result.next_offset, min_offset, max_offset)
        if result.messages:
            return PullOutcome(ResponseCode.SUCCESS, "FOUND", result.messages, result.next_offset, min_offset,
                               max_offset)
        return PullOutcome(ResponseCode.PULL_RETRY_IMMEDIATELY, "NO_MATCHED_MESSAGE", [], result.next_offset,
                           min_offset, max_offset)

    def _pull_message(self, cmd: RemotingRequest, client: RequestContext) -> Awaitable[RemotingResponse]:
        ctx = self.ctx
        h = request_header(cmd, PullMessageRequestHeader)
        self.ctx.guard.check_pull()
        if not is_readable(ctx.config.broker_permission):
            raise MQServerError(ResponseCode.NO_PERMISSION,
                                f"the broker[{ctx.identity.broker_addr}] pulling message is forbidden")
        self._check_group(h.consumer_group)
        tc = ctx.topics.topic_config_table.get(h.topic)
        if tc is None:
            raise MQServerError(ResponseCode.TOPIC_NOT_EXIST, f"topic[{h.topic}] not exist, apply first please!")
        if not is_readable(tc.perm):
            raise MQServerError(ResponseCode.NO_PERMISSION, f"the topic[{h.topic}] pulling message is forbidden")
        if not 0 <= h.queue_id < tc.read_queue_nums:
            raise MQServerError(ResponseCode.SYSTEM_ERROR,
                                f"queueId[{h.queue_id}] is illegal, topic:[{h.topic}] topicConfig.readQueueNums:"
                                f"[{tc.read_queue_nums}] consumer:[{client.remote}]")
        sub = pull_subscription(h.topic, h.subscription, h.expression_type, ctx.consumers.subscription(
            h.consumer_group, h.topic), ctx.config.enable_property_filter)
        if h.sys_flag & FLAG_COMMIT_OFFSET and h.commit_offset >= 0:
            ctx.offsets.commit_offset(h.consumer_group, h.topic, h.queue_id, h.commit_offset)
        return self._pull_answer(cmd, h, sub)

    def _check_group(self, group: str) -> None:
        """The group's config allows this pull (RocketMQ's PullMessageProcessor): it exists (made
        with the defaults on first use when autoCreateSubscriptionGroup is on), consumeEnable, and
        consumeBroadcastEnable for a broadcasting member."""
        ctx = self.ctx
        config = ctx.subscription_groups.find(group)
        if config is None:
            raise MQServerError(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                                f"subscription group [{group}] does not exist")
        if not config.consume_enable:
            raise MQServerError(ResponseCode.NO_PERMISSION, f"subscription group no permission, {group}")
        info = ctx.consumers.groups.get(group)
        if info is not None and info.message_model == "BROADCASTING" and not config.consume_broadcast_enable:
            raise MQServerError(ResponseCode.NO_PERMISSION,
                                f"the consumer group[{group}] can not consume by broadcast way")

    async def _pull_answer(self, cmd: RemotingRequest, h: PullMessageRequestHeader,
                           sub: SubscriptionData | None) -> RemotingResponse:
        ctx = self.ctx
        outcome = await asyncio.to_thread(self.read, h.topic, h.queue_id, h.queue_offset, h.max_msg_nums, sub)
        code, suggest = self._advice(outcome)
        if (code == ResponseCode.PULL_NOT_FOUND and h.sys_flag & FLAG_SUSPEND
                and h.suspend_timeout_millis > 0 and not ctx.closed):
            # As PullMessageProcessor: held for the pull's suspend timeout with long polling, for
            # shortPollingTimeMills without; re-checked as PullRequestHoldService (see pull_hold).
            short_s = ctx.config.short_polling_time_mills / 1000
            long_polling = ctx.config.long_polling_enable
            await ctx.hold.wait(h.topic, h.queue_id, h.suspend_timeout_millis / 1000 if long_polling else short_s,
                                lambda: ctx.closed or ctx.fence.max_offset(h.topic, h.queue_id) > h.queue_offset,
                                LONG_POLLING_CHECK_INTERVAL_S if long_polling else short_s)
            outcome = await asyncio.to_thread(self.read, h.topic, h.queue_id, h.queue_offset, h.max_msg_nums, sub)
            code, suggest = self._advice(outcome)
        ctx.stats[("pulls", outcome.status)] += 1
        ctx.stats[("pulled_messages", "")] += len(outcome.messages)
        ctx.stats_items.inc_group_get_nums(h.consumer_group, h.topic, len(outcome.messages))
        ext = {"nextBeginOffset": str(outcome.next_begin_offset), "minOffset": str(outcome.min_offset),
               "maxOffset": str(outcome.max_offset), "suggestWhichBrokerId": str(suggest)}
        # the messages travel as they are over Ray; namesrv.broker.processor.wire encodes them for TCP
        return cmd.response(code, outcome.status, ext, None, outcome)


    def _advice(self, outcome: PullOutcome) -> tuple[int, int]:
        """The role's say on a pull's answer: (code, suggestWhichBrokerId); see namesrv.broker.role."""
        store = self.ctx.store
        last = outcome.messages[-1].commit_log_offset if outcome.messages else store.size_bytes()
        return self.ctx.guard.pull_advice(outcome.code, bool(outcome.messages), store.size_bytes() - last,
                                        self.ctx.config.transfer_caps().in_memory_window())
