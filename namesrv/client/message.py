"""Messages, queues and the checks a producer runs before any network call (RocketMQ's Validators).

The name rules are the protocol's constrained types (`TopicName`, `GroupName`); only the wording of
the errors is the client's own, as RocketMQ's client words them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from namesrv.client.errors import MQClientError
from namesrv.protocol.constants import (
    GROUP_MAX_LENGTH,
    MAX_MESSAGE_SIZE,
    NOT_ALLOWED_SEND_TOPICS,
    TOPIC_MAX_LENGTH,
    TOPIC_REGEX,
)
from namesrv.protocol.models import MessageQueue as MessageQueue
from namesrv.protocol.types import GroupName, InvalidInput, TopicName, check

MAX_PROPERTIES_SIZE = 32 * 1024
RESERVED_PROPERTIES = frozenset({"UNIQ_KEY", "__STARTDELIVERTIME", "MSG_REGION", "TRACE_ON"})


@dataclass
class Message:
    topic: str
    body: bytes
    tags: str | None = None
    keys: str | None = None
    properties: dict[str, str] = field(default_factory=dict)

    def wire_properties(self) -> dict[str, str]:
        props = dict(self.properties)
        if self.tags:
            props["TAGS"] = self.tags
        if self.keys:
            props["KEYS"] = self.keys
        return props



def _check_name(tp: object, value: object, what: str, max_length: int, prefix: str) -> str:
    """RocketMQ's Validators wording (`prefix` is "The specified topic" or "the specified group",
    capitalised as RocketMQ does) for a name that breaks the protocol's rule."""
    if not isinstance(value, str) or not value.strip():
        raise MQClientError(f"{prefix} is blank")
    try:
        checked: str = check(tp, value, what)
    except InvalidInput as e:
        if e.kind == "string_too_long":
            raise MQClientError(f"{prefix} is longer than {what} max length {max_length}") from None
        raise MQClientError(f"{prefix}[{value}] contains illegal characters, allowing only {TOPIC_REGEX}") from None
    return checked


def check_group(group: object) -> str:
    return _check_name(GroupName, group, "group", GROUP_MAX_LENGTH, "the specified group")


def check_topic(topic: object) -> str:
    topic = _check_name(TopicName, topic, "topic", TOPIC_MAX_LENGTH, "The specified topic")
    if topic in NOT_ALLOWED_SEND_TOPICS:  # RocketMQ's Validators.isNotAllowedSendTopic
        raise MQClientError(f"Sending message to topic[{topic}] is forbidden.")
    return topic


def check_message(msg: object, max_message_size: int = MAX_MESSAGE_SIZE) -> Message:
    if not isinstance(msg, Message):
        raise MQClientError("the message is null" if msg is None else f"expected a Message, got {type(msg).__name__}")
    check_topic(msg.topic)
    if not isinstance(msg.body, (bytes, bytearray)):
        raise MQClientError(f"the message body must be bytes, got {type(msg.body).__name__}")
    if len(msg.body) == 0:
        raise MQClientError("the message body length is zero")
    if len(msg.body) > max_message_size:
        raise MQClientError(f"the message body size over max value, MAX: {max_message_size}")
    for what, value in (("tags", msg.tags), ("keys", msg.keys)):
        if value is not None and not isinstance(value, str):
            raise MQClientError(f"message {what} must be a string")
    if not isinstance(msg.properties, dict):
        raise MQClientError("message properties must be a dict of strings")
    size = 0
    for k, v in msg.properties.items():
        if not isinstance(k, str) or not isinstance(v, str) or not k:
            raise MQClientError("message properties must map non-empty strings to strings")
        if "\x01" in k + v or "\x02" in k + v:
            raise MQClientError(f"message property {k!r} contains a separator character (\\x01 or \\x02)")
        if k in RESERVED_PROPERTIES:
            raise MQClientError(f"message property {k!r} is reserved for the system")
        size += len(k) + len(v)
    if size > MAX_PROPERTIES_SIZE:
        raise MQClientError(f"the message properties size over max value, MAX: {MAX_PROPERTIES_SIZE}")
    return msg
