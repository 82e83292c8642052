"""Batch sends (RocketMQ's MessageBatch and DefaultMQProducer.batch): messages of one topic sent as
ONE SEND_BATCH_MESSAGE, their bodies and properties in MessageDecoder.encodeMessages' layout, each
with its own client message id (UNIQ_KEY).

RocketMQ's limits, checked before anything is sent: at least one message, every one valid on its
own, one topic, no delay level or timer, not a retry topic, and the whole encoded batch at most
the producer's max message size (4 MiB); a batch is never compressed (as RocketMQ's client).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from namesrv.client.errors import MQClientError
from namesrv.client.message import Message, check_message
from namesrv.protocol.constants import MAX_MESSAGE_SIZE, RETRY_GROUP_TOPIC_PREFIX
from namesrv.protocol.message.codec import BatchEntry, encode_batch

DELAY_PROPERTIES = ("DELAY", "TIMER_DELIVER_MS", "TIMER_DELAY_SEC", "TIMER_DELAY_MS", "__STARTDELIVERTIME")


@dataclass
class MessageBatch(Message):
    """What the send engine sends for a batch: its topic, the encoded batch as its body."""

    messages: list[Message] = field(default_factory=list)
    unique_ids: list[str] = field(default_factory=list)
    """Each message's client id (UNIQ_KEY), in order: the SendResult's msg_id joins them."""


def batch_of(messages: list[Message], next_id: Callable[[], str],
             max_message_size: int = MAX_MESSAGE_SIZE) -> MessageBatch:
    """The batch of `messages` (each given a new client id from `next_id`), or MQClientError with
    RocketMQ's wording for the first limit broken."""
    if not messages:
        raise MQClientError("the batch has no message")
    topic = messages[0].topic if isinstance(messages[0], Message) else None
    for msg in messages:
        check_message(msg, max_message_size)
        if msg.topic != topic:
            raise MQClientError("The topic of the messages in one batch should be the same")
        if any(p in msg.properties for p in DELAY_PROPERTIES):
            raise MQClientError("TimeDelayLevel is not supported for batching")
        if msg.topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            raise MQClientError("Retry Group is not supported for batching")
    assert topic is not None
    ids = [next_id() for _ in messages]
    body = encode_batch([BatchEntry(0, bytes(m.body), m.wire_properties() | {"UNIQ_KEY": uid})
                         for m, uid in zip(messages, ids, strict=True)])
    if len(body) > max_message_size:
        raise MQClientError(f"the message body size over max value, MAX: {max_message_size} "
                            f"(the batch of {len(messages)} messages encodes to {len(body)} bytes)")
    return MessageBatch(topic, body, messages=list(messages), unique_ids=ids)
