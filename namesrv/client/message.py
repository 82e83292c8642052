"""Messages, queues and the checks a producer runs before any network call (RocketMQ's Validators)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from namesrv.constants import (
    AUTO_CREATE_TOPIC_KEY_TOPIC,
    SCHEDULE_TOPIC,
    SYSTEM_TOPICS,
    TOPIC_MAX_LENGTH,
    TOPIC_PATTERN,
)

MAX_MESSAGE_SIZE = 4 * 1024 * 1024
MAX_PROPERTIES_SIZE = 32 * 1024
GROUP_MAX_LENGTH = 255
GROUP_PATTERN = re.compile(r"^[%|a-zA-Z0-9_-]+\Z")  # \Z: "$" would accept a trailing newline
DEFAULT_PRODUCER_GROUP = "DEFAULT_PRODUCER"
RESERVED_PROPERTIES = frozenset({"UNIQ_KEY", "__STARTDELIVERTIME", "MSG_REGION", "TRACE_ON"})
NOT_ALLOWED_SEND_TOPICS = frozenset({SCHEDULE_TOPIC, AUTO_CREATE_TOPIC_KEY_TOPIC}) | SYSTEM_TOPICS


class MQClientError(Exception):
    """A client-side error (bad message or group, no route, no name server); nothing was sent."""


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


@dataclass(frozen=True, slots=True)
class MessageQueue:
    topic: str
    broker_name: str
    queue_id: int


def check_group(group: object) -> str:
    if not isinstance(group, str) or not group.strip():
        raise MQClientError("the specified group is blank")
    if len(group) > GROUP_MAX_LENGTH:
        raise MQClientError(f"the specified group is longer than group max length {GROUP_MAX_LENGTH}")
    if not GROUP_PATTERN.match(group):
        raise MQClientError(
            f"the specified group[{group}] contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$"
        )
    return group


def check_topic(topic: object) -> str:
    if not isinstance(topic, str) or not topic.strip():
        raise MQClientError("The specified topic is blank")
    if len(topic) > TOPIC_MAX_LENGTH:
        raise MQClientError(f"The specified topic is longer than topic max length {TOPIC_MAX_LENGTH}")
    if not TOPIC_PATTERN.match(topic):
        raise MQClientError(
            f"The specified topic[{topic}] contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$"
        )
    if topic in NOT_ALLOWED_SEND_TOPICS or topic.startswith("rmq_sys_"):
        raise MQClientError(f"Sending message to topic[{topic}] is forbidden (reserved system topic)")
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
