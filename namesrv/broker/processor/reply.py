"""Request-reply on the broker (RocketMQ's ReplyMessageProcessor): SEND_REPLY_MESSAGE (324) and
SEND_REPLY_MESSAGE_V2 (325), a responder's reply to a request message.

The reply names its requester by client id (property REPLY_TO_CLIENT); the broker finds that
client's connection among its producers (ProducerManager.findChannel: the requester heartbeats as a
producer), pushes the reply to it as PUSH_REPLY_MESSAGE_TO_CLIENT (326) with RocketMQ's
ReplyMessageRequestHeader and awaits its answer (Broker2Client.callClient), and, as RocketMQ's
storeReplyMessageEnable (default true), stores the reply in its topic too. The answer is SUCCESS
once pushed (msgId "0", queueOffset 0, as RocketMQ's), else SYSTEM_ERROR with RocketMQ's remark
("push reply message fail, channel of <id> not found.", "push reply message to <id>fail.", or no
REPLY_TO_CLIENT at all). Adding a reply code means writing its handler here and one line in `handlers`.
"""

from __future__ import annotations

import logging

from namesrv.broker.context import BrokerContext
from namesrv.protocol.broker_headers import SendMessageRequestHeader, request_header
from namesrv.protocol.codes import BrokerRequestCode, ResponseCode
from namesrv.protocol.message.properties import REPLY_TO_CLIENT, properties_to_string, string_to_properties
from namesrv.protocol.message.types import MessageInner
from namesrv.remoting.command import RemotingRequest, RemotingResponse, error
from namesrv.remoting.invoke import CallClient, ClientCallError
from namesrv.remoting.pipeline import Answer, Handler, RequestContext
from namesrv.remoting.wire_command import RemotingCommand, ext_value

log = logging.getLogger(__name__)

PUSH_REPLY_TIME = "PUSH_REPLY_TIME"
PUSH_TIMEOUT_S = 3.0
"""How long the broker awaits the requester's answer to the push (RocketMQ's callClient: 3 s)."""


async def _no_call(token: str, request: RemotingCommand, timeout_s: float) -> RemotingCommand:
    raise ClientCallError("this broker has no client connections")


class ReplyMessageProcessor:
    def __init__(self, ctx: BrokerContext, call_client: CallClient = _no_call, store_reply: bool = True) -> None:
        self.ctx = ctx
        self.call_client = call_client
        self.store_reply = store_reply
        self.handlers: dict[int, Handler] = {
            BrokerRequestCode.SEND_REPLY_MESSAGE: self.send_reply_message,
            BrokerRequestCode.SEND_REPLY_MESSAGE_V2: self.send_reply_message,
        }

    def send_reply_message(self, request: RemotingRequest, client: RequestContext) -> Answer:
        h = request_header(request, SendMessageRequestHeader)
        body = request.body or b""
        if len(body) > self.ctx.config.max_message_size:
            return error(ResponseCode.MESSAGE_ILLEGAL, f"the message body size {len(body)} exceeds the limit "
                                                       f"{self.ctx.config.max_message_size}")
        return self._reply(h, body, client)

    async def _reply(self, h: SendMessageRequestHeader, body: bytes, client: RequestContext) -> RemotingResponse:
        ctx = self.ctx
        props = string_to_properties(h.properties)
        props.setdefault("CLUSTER", ctx.identity.cluster_name)
        queue_id = max(h.queue_id, 0)
        pushed, remark = await self._push(h, props, body, client)
        if self.store_reply:
            message = MessageInner(h.topic, queue_id, body, props, props.get("UNIQ_KEY", ""), h.flag, h.sys_flag,
                                   h.born_timestamp or ctx.clock(), client.remote, h.reconsume_times)
            try:
                ctx.store.check(message)
                await ctx.store.put(message)
            except Exception as e:  # as RocketMQ: a reply not stored is logged; the push decided the answer
                log.warning("reply to %s not stored: %s", props.get(REPLY_TO_CLIENT), e)
        if not pushed:
            return error(ResponseCode.SYSTEM_ERROR, remark)
        return RemotingResponse(ext_fields={"msgId": "0", "queueId": str(queue_id), "queueOffset": "0"})

    async def _push(self, h: SendMessageRequestHeader, props: dict[str, str], body: bytes,
                    client: RequestContext) -> tuple[bool, str]:
        """Push the reply to its requester's connection: (pushed, why not)."""
        sender = props.get(REPLY_TO_CLIENT)
        if not sender:
            return False, f"reply message properties[{REPLY_TO_CLIENT}] is null"
        channel = self.ctx.producers.find_channel(sender)
        if channel is None:
            return False, f"push reply message fail, channel of <{sender}> not found."
        now = self.ctx.clock()
        props[PUSH_REPLY_TIME] = str(now)
        header = {"producerGroup": h.producer_group, "topic": h.topic, "defaultTopic": h.default_topic,
                  "defaultTopicQueueNums": h.default_topic_queue_nums, "queueId": h.queue_id,
                  "sysFlag": h.sys_flag, "bornTimestamp": h.born_timestamp, "flag": h.flag,
                  "properties": properties_to_string(props), "reconsumeTimes": h.reconsume_times,
                  "unitMode": h.unit_mode, "bornHost": client.remote, "storeHost": self.ctx.identity.broker_addr,
                  "storeTimestamp": now}
        push = RemotingCommand(BrokerRequestCode.PUSH_REPLY_MESSAGE_TO_CLIENT,
                               ext_fields={k: ext_value(v) for k, v in header.items()}, body=body)
        try:
            answer = await self.call_client(channel, push, PUSH_TIMEOUT_S)
        except (TimeoutError, ClientCallError) as e:
            log.warning("push reply message to <%s> fail: %s", sender, e)
            return False, f"push reply message to {sender}fail."
        if answer.code != ResponseCode.SUCCESS:
            log.warning("push reply message to <%s> return fail: %s", sender, answer.remark)
            return False, f"push reply message to {sender}fail."
        return True, ""
