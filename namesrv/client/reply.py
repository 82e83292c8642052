"""Request-reply on the client side (RocketMQ's RequestResponseFuture properties and MessageUtil):
a request carries CORRELATION_ID, REPLY_TO_CLIENT (the requester's client id) and TTL; the broker
stamps CLUSTER on it; a responder answers with `create_reply_message`, a message of
`<cluster>_REPLY_TOPIC` with MSG_TYPE=reply that its producer sends as SEND_REPLY_MESSAGE, and the
broker pushes it to the requester (PUSH_REPLY_MESSAGE_TO_CLIENT)."""

from __future__ import annotations

from collections.abc import Mapping

from namesrv.client.errors import MQClientError
from namesrv.client.message import Message
from namesrv.protocol.message.properties import REPLY_TO_CLIENT

CORRELATION_ID = "CORRELATION_ID"
TTL = "TTL"
MSG_TYPE = "MSG_TYPE"
CLUSTER = "CLUSTER"
REPLY_MESSAGE_FLAG = "reply"
REPLY_TOPIC_POSTFIX = "REPLY_TOPIC"


class RequestTimeoutError(MQClientError):
    """A request was sent but no reply came in time (RocketMQ's RequestTimeoutException)."""


def reply_topic(cluster: str) -> str:
    """MixAll.getReplyTopic."""
    return f"{cluster}_{REPLY_TOPIC_POSTFIX}"


def request_properties(correlation_id: str, client_id: str, timeout_ms: int) -> dict[str, str]:
    """What a request message carries (DefaultMQProducerImpl.prepareSendRequest)."""
    return {CORRELATION_ID: correlation_id, REPLY_TO_CLIENT: client_id, TTL: str(timeout_ms)}


def create_reply_message(request_properties: Mapping[str, str], body: bytes) -> Message:
    """The reply to a request message (by its properties, as a consumer received it), RocketMQ's
    MessageUtil.createReplyMessage: MQClientError when the request has no CLUSTER (it never went
    through a broker)."""
    cluster = request_properties.get(CLUSTER)
    if not cluster:
        raise MQClientError(f"create reply message fail, requestMessage error, property[{CLUSTER}] is null.")
    return Message(reply_topic(cluster), body, properties={
        MSG_TYPE: REPLY_MESSAGE_FLAG, CORRELATION_ID: request_properties.get(CORRELATION_ID, ""),
        REPLY_TO_CLIENT: request_properties.get(REPLY_TO_CLIENT, ""), TTL: request_properties.get(TTL, "")})
