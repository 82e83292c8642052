"""RocketMQ 5.3's RecallMessageProcessor: RECALL_MESSAGE (370) cancels a timed message before it is
due, by the recall handle its send was answered with (namesrv.protocol.message.recall).

The recall is a delete marker parked in the same timer slot as the message it names; the schedule
service skips that message when the slot falls due (namesrv.broker.schedule.service). The marker is
stored, replicated and acknowledged as a send is, so a recall survives a restart and a failover as
the message it cancels does. A recall that reaches the broker after the message was delivered
changes nothing, as in RocketMQ.

Refused as RocketMQ refuses it: NO_PERMISSION unless `recall_message_enable` (off by default, as
RocketMQ's recallMessageEnable), SLAVE_NOT_AVAILABLE on a slave, TOPIC_NOT_EXIST, ILLEGAL_OPERATION
for a handle that does not decode, names another topic or broker, or a time already past or beyond
`timer_max_delay_sec`. Unlike RocketMQ (allowRecallWhenBrokerNotWriteable), a broker that is not
writable refuses recalls with its sends.
"""

from __future__ import annotations

from namesrv.broker.context import BrokerContext
from namesrv.broker.processor.send import SendMessageProcessor
from namesrv.broker.schedule.delivery import TIMER_DELIVER_MS
from namesrv.protocol.broker_headers import RecallMessageRequestHeader, request_header
from namesrv.protocol.codes import BrokerRequestCode, ResponseCode
from namesrv.protocol.message.properties import UNIQ_KEY
from namesrv.protocol.message.recall import (
    RECALL_MESSAGE_TAG,
    TIMER_DEL_UNIQKEY,
    RecallHandle,
    RecallHandleInvalid,
    delete_key,
)
from namesrv.protocol.message.types import MessageInner
from namesrv.remoting.command import MQServerError, RemotingRequest, RemotingResponse
from namesrv.remoting.pipeline import Handler, RequestContext


class RecallMessageProcessor:
    def __init__(self, ctx: BrokerContext, sender: SendMessageProcessor) -> None:
        self.ctx = ctx
        self.sender = sender
        self.handlers: dict[int, Handler] = {BrokerRequestCode.RECALL_MESSAGE: self.recall_message}

    def _handle(self, h: RecallMessageRequestHeader) -> RecallHandle:
        """The handle, checked against this broker and the topic asked for; raises MQServerError."""
        ctx = self.ctx
        if not ctx.config.recall_message_enable:
            raise MQServerError(ResponseCode.NO_PERMISSION, "recall failed, operation is forbidden")
        if not ctx.guard.writable:
            raise MQServerError(ResponseCode.SLAVE_NOT_AVAILABLE, "recall failed, broker service not available")
        if h.topic not in ctx.topics.topic_config_table:
            raise MQServerError(ResponseCode.TOPIC_NOT_EXIST, f"recall failed, the topic[{h.topic}] not exist")
        try:
            handle = RecallHandle.decode(h.recall_handle)
        except RecallHandleInvalid as e:
            raise MQServerError(ResponseCode.ILLEGAL_OPERATION, str(e)) from None
        if handle.topic != h.topic:
            raise MQServerError(ResponseCode.ILLEGAL_OPERATION, "recall failed, topic not match")
        if handle.broker_name != ctx.identity.broker_name:
            raise MQServerError(ResponseCode.ILLEGAL_OPERATION, "recall failed, broker service not available")
        left_ms = int(handle.timestamp) - ctx.clock() if handle.timestamp.isdigit() else -1
        if left_ms <= 0 or left_ms >= ctx.config.timer_max_delay_sec * 1000:
            raise MQServerError(ResponseCode.ILLEGAL_OPERATION, "recall failed, timestamp invalid")
        return handle

    async def recall_message(self, cmd: RemotingRequest, client: RequestContext) -> RemotingResponse:
        h = request_header(cmd, RecallMessageRequestHeader)
        handle = self._handle(h)
        props = {"TAGS": RECALL_MESSAGE_TAG, TIMER_DEL_UNIQKEY: delete_key(handle.topic, handle.message_id),
                 UNIQ_KEY: handle.message_id, TIMER_DELIVER_MS: handle.timestamp}
        if h.producer_group:
            props["PGROUP"] = h.producer_group
        born_host = client.address_or(self.ctx.identity.broker_addr)
        marker = MessageInner(handle.topic, 0, b"0", props, handle.message_id, 0, 0, self.ctx.clock(), born_host, 0)
        await self.sender.send([marker], handle.topic, 1)
        return cmd.response(ResponseCode.SUCCESS, None, {"msgId": handle.message_id})
