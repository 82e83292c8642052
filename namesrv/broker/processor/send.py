"""RocketMQ's SendMessageProcessor: SEND_MESSAGE, SEND_MESSAGE_V2, SEND_BATCH_MESSAGE and
CONSUMER_SEND_MSG_BACK (a message a consumer failed on, into its retry or dead-letter topic).

Pure: no Ray, no sockets. A send is answered once its records are stored (under SYNC_FLUSH, once
flushed); a refused send raises MQServerError, which `namesrv.broker.processor.dispatcher` answers. Adding a
send-side request code means writing its handler here and adding one line to `handlers`.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable

from namesrv.broker.context import BrokerContext
from namesrv.broker.processor.types import SendOutcome
from namesrv.broker.role import DEPOSED_REMARK, FLUSH_SLAVE_TIMEOUT_REMARK
from namesrv.broker.schedule import delivery as schedule
from namesrv.broker.schedule.delivery import TIMER_PROPERTIES
from namesrv.broker.transaction import service as transaction
from namesrv.protocol.broker_headers import ConsumerSendMsgBackRequestHeader, SendMessageRequestHeader, request_header
from namesrv.protocol.codes import BrokerRequestCode, ResponseCode
from namesrv.protocol.constants import (
    DLQ_GROUP_TOPIC_PREFIX,
    NOT_ALLOWED_SEND_TOPICS,
    RETRY_GROUP_TOPIC_PREFIX,
    is_writeable,
)
from namesrv.protocol.message.codec import decode_batch, offset_msg_id
from namesrv.protocol.message.properties import REAL_TOPIC, UNIQ_KEY, MessageIllegal, string_to_properties
from namesrv.protocol.message.recall import TIMER_DEL_UNIQKEY, RecallHandle
from namesrv.protocol.message.types import MessageInner
from namesrv.protocol.models import TopicConfig
from namesrv.remoting.command import MQServerError, RemotingRequest, RemotingResponse
from namesrv.remoting.pipeline import Handler, RequestContext
from namesrv.store.types import DISK_FULL_REMARK, DiskFullError

DLQ_NUMS_PER_GROUP = 1
"""Queues of a group's %DLQ% topic (RocketMQ's DLQ_NUMS_PER_GROUP)."""


class SendMessageProcessor:
    def __init__(self, ctx: BrokerContext) -> None:
        self.ctx = ctx
        self.handlers: dict[int, Handler] = {
            BrokerRequestCode.SEND_MESSAGE: self._send_message,
            BrokerRequestCode.SEND_MESSAGE_V2: self._send_message,
            BrokerRequestCode.SEND_BATCH_MESSAGE: self._send_message,
            BrokerRequestCode.CONSUMER_SEND_MSG_BACK: self._consumer_send_msg_back,
        }

    # ------------------------------------------------------------------ checks
    def _topic_for_send(self, topic: str, default_topic: str, default_queue_nums: int, queue_id: int) -> TopicConfig:
        """The topic's config, auto-created when allowed; a bad queue id answers SYSTEM_ERROR, as
        RocketMQ 4.9's broker does (5.x says INVALID_PARAMETER, which 4.x clients do not retry)."""
        ctx = self.ctx
        if not is_writeable(ctx.config.broker_permission):
            raise MQServerError(ResponseCode.NO_PERMISSION,
                                f"the broker[{ctx.identity.broker_addr}] sending message is forbidden")
        if topic in NOT_ALLOWED_SEND_TOPICS:
            raise MQServerError(ResponseCode.NO_PERMISSION, f"Sending message to topic[{topic}] is forbidden.")
        tc = ctx.topics.topic_config_table.get(topic)
        if tc is None:
            default = ctx.topics.topic_config_table.get(default_topic)
            cap = min(default_queue_nums, default.write_queue_nums) if default else default_queue_nums
            if queue_id >= cap:
                raise MQServerError(ResponseCode.SYSTEM_ERROR,
                                    f"request queueId[{queue_id}] is illegal, topic[{topic}] would get {cap} queues")
            tc = ctx.topics.create_topic_in_send_message_method(topic, default_topic, default_queue_nums)
            if tc is None and topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
                tc = ctx.topics.create_topic_in_send_message_back_method(topic, 1)
            if tc is None:
                raise MQServerError(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist, apply first please!")
            ctx.on_topic_created(topic)
        if not is_writeable(tc.perm):
            raise MQServerError(ResponseCode.NO_PERMISSION, f"the topic[{topic}] sending message is forbidden")
        if queue_id >= max(tc.write_queue_nums, tc.read_queue_nums):
            raise MQServerError(ResponseCode.SYSTEM_ERROR,
                                f"request queueId[{queue_id}] is illegal, {tc} Producer: {ctx.identity.broker_addr}")
        return tc

    def _check_body(self, body: bytes | None) -> bytes:
        if not body:
            raise MQServerError(ResponseCode.MESSAGE_ILLEGAL, "message body is empty")
        if len(body) > self.ctx.config.max_message_size:
            limit = self.ctx.config.max_message_size
            raise MQServerError(ResponseCode.MESSAGE_ILLEGAL,
                                f"the message body size {len(body)} exceeds the limit {limit}")
        return body

    def _parked(self, message: MessageInner) -> MessageInner:
        """What is stored for a message with a delay level or a timer (namesrv.broker.schedule.delivery)."""
        if message.properties.keys().isdisjoint(schedule.SCHEDULE_PROPERTIES):  # the usual message: not delayed
            return message
        cfg = self.ctx.config
        if not cfg.timer_wheel_enable and any(p in message.properties for p in TIMER_PROPERTIES):
            raise MQServerError(ResponseCode.MESSAGE_ILLEGAL, "timer messages are not enabled on this broker "
                                                              "(timerWheelEnable is false)")
        try:
            return schedule.transform(message, len(self.ctx.delay_levels_ms), self.ctx.clock(),
                                      cfg.timer_precision_ms, cfg.timer_max_delay_sec)
        except schedule.ScheduleError as e:
            raise MQServerError(ResponseCode.MESSAGE_ILLEGAL, str(e)) from None

    def _check_stored(self, message: MessageInner) -> None:
        """A message the store would refuse (properties over 32,767 bytes, a topic over 127, ...)
        is MESSAGE_ILLEGAL with the reason, as RocketMQ's PROPERTIES_SIZE_EXCEEDED."""
        try:
            self.ctx.store.check(message)
        except MessageIllegal as e:
            raise MQServerError(ResponseCode.MESSAGE_ILLEGAL, str(e)) from None

    def _disk_full_remark(self) -> str:
        """RocketMQ's answer when the store is not writable, with its disk use (a ratio, as diskUtil)."""
        ratio = self.ctx.store.disk_ratio
        return DISK_FULL_REMARK.format(ratio=f"CL: {ratio:5.2f} CQ: {ratio:5.2f} INDEX: {ratio:5.2f}")

    # ------------------------------------------------------------------ send (both paths)
    async def send(self, messages: list[MessageInner], default_topic: str, default_queue_nums: int) -> SendOutcome:
        """Store messages of one topic and queue (a batch shares both); raises MQServerError."""
        ctx = self.ctx
        if ctx.closed:
            raise MQServerError(ResponseCode.SERVICE_NOT_AVAILABLE,
                                f"broker {ctx.identity.broker_addr} is shutting down")
        guard = ctx.guard
        guard.check_send()
        if ctx.store.refuse_writes() is not None:
            raise MQServerError(ResponseCode.SERVICE_NOT_AVAILABLE, self._disk_full_remark())
        parked: list[MessageInner] = []
        prepared = False
        for m in messages:  # every one, before anything changes (a topic created, a record written)
            self._check_body(m.body)
            m.properties.setdefault("CLUSTER", ctx.identity.cluster_name)
            self._check_stored(m)
            parked.append(self._parked(m))  # a timer it cannot take is refused here, before anything changes
            prepared = transaction.is_prepared(m)
            if prepared and (len(messages) > 1 or ctx.config.reject_transaction_message):
                raise MQServerError(ResponseCode.NO_PERMISSION if len(messages) == 1 else ResponseCode.MESSAGE_ILLEGAL,
                                    "batch message does not support transaction" if len(messages) > 1 else
                                    f"the broker[{ctx.identity.broker_addr}] sending transaction message is forbidden")
        first = messages[0]
        tc = self._topic_for_send(first.topic, default_topic, default_queue_nums, max(first.queue_id, 0))
        if first.queue_id < 0:  # "any queue": the broker picks one, as RocketMQ does
            queue_id = ctx.clock() % max(1, tc.write_queue_nums)
            for m in messages:
                m.queue_id = queue_id
            parked = [self._parked(m) for m in messages]  # parked with the queue it now has
        stored = [transaction.half_of(messages[0])] if prepared else parked  # a prepared send is alone
        ctx.sends_waiting += len(messages)
        checked = all(s is m for s, m in zip(stored, messages, strict=True))  # not parked nor a half
        try:  # the store does not check again what `_check_stored` did
            results = await ctx.store.put_all(stored, checked=checked)
        except DiskFullError:  # marked full while the send waited for the writer: nothing of it stored
            raise MQServerError(ResponseCode.SERVICE_NOT_AVAILABLE, self._disk_full_remark()) from None
        finally:
            ctx.sends_waiting -= len(messages)
        if any(s.topic != m.topic for s, m in zip(stored, messages, strict=True)):  # parked or half: not yet
            ctx.on_parked()
        else:  # its held pulls are woken once it is readable (namesrv.broker.read_fence)
            ctx.fence.written(max(r.commit_log_offset + r.store_size for r in results), first.topic,
                              messages[0].queue_id)
        code = await guard.replicated(max(r.commit_log_offset + r.store_size for r in results))
        if code == ResponseCode.SERVICE_NOT_AVAILABLE:
            ctx.stats[("sends", ResponseCode(code).name)] += len(messages)
            raise MQServerError(code, DEPOSED_REMARK)
        ctx.stats[("sends", ResponseCode(code).name)] += len(messages)
        ctx.stats_items.inc_topic_put_nums(first.topic, len(messages))
        return SendOutcome(results, [offset_msg_id(ctx.identity.broker_addr, r.commit_log_offset) for r in results],
                           code, self._recall_handle(stored) if len(stored) == 1 else None)

    def _recall_handle(self, stored: list[MessageInner]) -> str | None:
        """What recalls a timed message before it is due (SendMessageProcessor.attachRecallHandle):
        its real topic, this broker, its timer slot + 1 ms (the slot is rounded down) and its id."""
        props = stored[0].properties
        slot, real_topic = props.get(schedule.TIMER_OUT_MS), props.get(REAL_TOPIC)
        if stored[0].topic != schedule.TIMER_TOPIC or not slot or not real_topic \
                or real_topic.startswith(RETRY_GROUP_TOPIC_PREFIX) or TIMER_DEL_UNIQKEY in props:
            return None
        return RecallHandle(real_topic, self.ctx.identity.broker_name, str(int(slot) + 1),
                            props.get(UNIQ_KEY) or stored[0].msg_id).encode()


    def _send_message(self, cmd: RemotingRequest, client: RequestContext) -> Awaitable[RemotingResponse]:
        h, messages = self.decode(cmd, client)
        return self._send_answer(cmd, messages, h)

    def decode(self, cmd: RemotingRequest,
               client: RequestContext) -> tuple[SendMessageRequestHeader, list[MessageInner]]:
        """A SEND_MESSAGE(_V2) or SEND_BATCH_MESSAGE request's header and the messages it carries,
        nothing checked but their header and bodies (raises MQServerError or a validation error)."""
        h = request_header(cmd, SendMessageRequestHeader)
        base = string_to_properties(h.properties)
        born_host = client.address_or(self.ctx.identity.broker_addr)
        if cmd.code == BrokerRequestCode.SEND_BATCH_MESSAGE:
            entries = [(e.flag, e.body, base | e.properties if base else e.properties)
                       for e in decode_batch(self._check_body(cmd.body))]
        else:
            entries = [(h.flag, self._check_body(cmd.body), base)]
        topic, queue_id, sys_flag, born, times = (h.topic, h.queue_id, h.sys_flag, h.born_timestamp or self.ctx.clock(),
                                                  h.reconsume_times)
        return h, [MessageInner(topic, queue_id, body, props, props.get("UNIQ_KEY", ""), flag, sys_flag, born,
                                born_host, times) for flag, body, props in entries]

    async def _send_answer(self, cmd: RemotingRequest, messages: list[MessageInner],
                           h: SendMessageRequestHeader) -> RemotingResponse:
        outcome = await self.send(messages, h.default_topic, h.default_topic_queue_nums)
        first = outcome.results[0]
        ext = {"msgId": ",".join(outcome.msg_ids), "queueId": str(first.queue_id),
               "queueOffset": str(first.queue_offset), "MSG_REGION": "DefaultRegion", "TRACE_ON": "true"}
        tx = messages[0].properties.get("__transactionId__")
        if tx:
            ext["transactionId"] = tx
        if outcome.recall_handle is not None and cmd.code != BrokerRequestCode.SEND_BATCH_MESSAGE:
            ext["recallHandle"] = outcome.recall_handle
        return cmd.response(outcome.code, None if outcome.code == ResponseCode.SUCCESS else FLUSH_SLAVE_TIMEOUT_REMARK,
                            ext)

    # ------------------------------------------------------------------ retries
    def _consumer_send_msg_back(self, cmd: RemotingRequest, client: RequestContext) -> Awaitable[RemotingResponse]:
        h = request_header(cmd, ConsumerSendMsgBackRequestHeader)
        return self._send_back(cmd, client, h)

    async def _send_back(self, cmd: RemotingRequest, client: RequestContext,
                         h: ConsumerSendMsgBackRequestHeader) -> RemotingResponse:
        """Put a message a consumer failed to process into its group's retry topic, back off by
        delay level 3 + how often it was consumed (or the level it asks for), or, past the retry
        limit, into its dead-letter topic at once.
        The group's config (namesrv.broker.subscription) gives the retry topic's queues
        (retryQueueNums; 0: the message is dropped, as RocketMQ) and the retry limit when the
        request does not carry one (retryMaxTimes).
        Only a message of the group's own retry topic or of a topic the group subscribes to or has
        offsets of (a pop consumer's, its pop retry topic's), and (ACL) that the caller may read, is
        sent back: RocketMQ checks only the group, which lets a
        caller copy any message into a retry topic it reads."""
        ctx = self.ctx
        original = await asyncio.to_thread(ctx.store.get_by_commit_offset, h.offset)
        if original is None:  # looked up first: a bad offset auto-creates no group
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"look message by offset failed, {h.offset}")
        group = ctx.subscription_groups.find(h.group)
        if group is None:
            return cmd.response(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, f"subscription group not exist, {h.group}")
        if group.retry_queue_nums <= 0:  # as RocketMQ: the group keeps no retries, the message is dropped
            return cmd.response(ResponseCode.SUCCESS)
        if (original.topic != f"{RETRY_GROUP_TOPIC_PREFIX}{h.group}"
                and ctx.consumers.subscription(h.group, original.topic) is None
                and original.topic not in ctx.offsets.topics_of(h.group)):  # a pop consumer's (gRPC proxy)
            return cmd.response(ResponseCode.NO_PERMISSION, f"the message at offset {h.offset} is not of a topic "
                                                            f"consumer group {h.group} subscribes to")
        denied = ctx.may_read(cmd, client, original.topic)
        if denied is not None:
            return cmd.response(ResponseCode.NO_PERMISSION, denied)
        times = original.reconsume_times + 1
        limit = h.max_reconsume_times if h.max_reconsume_times is not None else group.retry_max_times
        props = dict(original.properties)
        props.setdefault("RETRY_TOPIC", original.topic)
        props.setdefault("ORIGIN_MESSAGE_ID", h.origin_msg_id or original.msg_id)
        if times > limit or h.delay_level < 0:
            topic, queues = f"{DLQ_GROUP_TOPIC_PREFIX}{h.group}", DLQ_NUMS_PER_GROUP
        else:
            topic, queues = f"{RETRY_GROUP_TOPIC_PREFIX}{h.group}", group.retry_queue_nums
            props[schedule.DELAY] = str(schedule.retry_delay_level(original.reconsume_times, h.delay_level))
        if ctx.topics.create_topic_in_send_message_back_method(topic, queues) is not None:
            ctx.on_topic_created(topic)
        tc = ctx.topics.topic_config_table.get(topic)
        queue_id = random.randrange(min(queues, tc.write_queue_nums) if tc is not None else 1) if queues > 0 else 0
        message = MessageInner(topic, queue_id, original.body, props, original.msg_id, original.flag, original.sys_flag,
                               original.born_timestamp, original.born_host, times)
        await self.send([message], topic, queues)
        return cmd.response(ResponseCode.SUCCESS)
