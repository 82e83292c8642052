"""SendMessage mapped onto SEND_MESSAGE_V2 as RocketMQ's proxy does it (SendMessageActivity): the
v2 Message checked (each refusal its Code and wording), then turned into the remoting header and
properties: tag, keys, the client's message id as UNIQ_KEY, the message group as the sharding key
(and the queue picked by it), the delivery timestamp as the timer property TIMER_DELIVER_MS, a
transactional message as a prepared half of producer group = its topic (the proxy's convention, so
check-backs find a producer of it). The request messages are protobuf objects (read only)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from namesrv.protocol.constants import RMQ_SYS_PREFIX, SYSTEM_TOPICS, TOPIC_MAX_LENGTH
from namesrv.protocol.message.compression import COMPRESSED_FLAG
from namesrv.protocol.message.properties import properties_to_string
from namesrv.proxy.settings import ProxyConfig
from namesrv.proxy.status import ProxyError

TRANSACTION_PREPARED_TYPE = 0x1 << 2
"""MessageSysFlag.TRANSACTION_PREPARED_TYPE."""
MESSAGE_TYPE_TRANSACTION = 4
ENCODING_GZIP = 2
_TOPIC = re.compile(r"[%|a-zA-Z0-9_-]+")
SYSTEM_PROPERTY_KEYS = frozenset({
    "KEYS", "TAGS", "WAIT", "DELAY", "RETRY_TOPIC", "REAL_TOPIC", "REAL_QID", "TRAN_MSG", "PGROUP", "MIN_OFFSET",
    "MAX_OFFSET", "BUYER_ID", "ORIGIN_MESSAGE_ID", "TRANSFER_FLAG", "CORRECTION_FLAG", "MQ2_FLAG", "RECONSUME_TIME",
    "MSG_REGION", "TRACE_ON", "UNIQ_KEY", "MAX_RECONSUME_TIMES", "CONSUME_START_TIME", "__transactionId__",
    "TRANSACTION_CHECK_TIMES", "CHECK_IMMUNITY_TIME_IN_SECONDS", "INSTANCE_ID", "CORRELATION_ID", "REPLY_TO_CLIENT",
    "TTL", "ARRIVE_TIME", "PUSH_REPLY_TIME", "CLUSTER", "MSG_TYPE", "__STARTDELIVERTIME", "__SHARDINGKEY",
    "TIMER_DELIVER_MS", "TIMER_DELAY_SEC", "TIMER_DELAY_MS", "TIMER_OUT_MS", "TIMER_ENQUEUE_MS", "TIMER_DEQUEUE_MS",
    "TIMER_ROLL_TIMES", "TIMER_DEL_UNIQKEY", "__BORNHOST", "BORN_TIMESTAMP", "POP_CK", "POP_CK_OFFSET",
    "1ST_POP_TIME", "TRACE_CONTEXT", "DLQ_ORIGIN_TOPIC", "DLQ_ORIGIN_MESSAGE_ID", "INNER_NUM", "INNER_BASE",
    "INNER_MULTI_DISPATCH", "INNER_MULTI_QUEUE_OFFSET", "PRODUCER_GROUP",
})
"""MessageConst.STRING_HASH_SET: names a user property may not take."""


def has_control(text: str) -> bool:
    """Guava's CharMatcher.javaIsoControl: U+0000..U+001F and U+007F..U+009F."""
    return any(c <= "\x1f" or "\x7f" <= c <= "\x9f" for c in text)


def check_topic(name: str) -> str:
    """GrpcValidator.validateTopic: RocketMQ's Validators.checkTopic, and no system topic."""
    if not name or not name.strip():
        raise ProxyError("ILLEGAL_TOPIC", "The specified topic is blank")
    if len(name) > TOPIC_MAX_LENGTH:
        raise ProxyError("ILLEGAL_TOPIC", "The specified topic is longer than topic max length.")
    if not _TOPIC.fullmatch(name):
        raise ProxyError("ILLEGAL_TOPIC", f"The specified topic[{name}] contains illegal characters, "
                                          "allowing only ^[%|a-zA-Z0-9_-]+$")
    if name in SYSTEM_TOPICS or name.startswith(RMQ_SYS_PREFIX):
        raise ProxyError("ILLEGAL_TOPIC", "cannot access system topic")
    return name


def check_tag(tag: str) -> None:
    if tag:
        if not tag.strip():
            raise ProxyError("ILLEGAL_MESSAGE_TAG", "tag cannot be the char sequence of whitespace")
        if "|" in tag:
            raise ProxyError("ILLEGAL_MESSAGE_TAG", "tag cannot contain '|'")
        if has_control(tag):
            raise ProxyError("ILLEGAL_MESSAGE_TAG", "tag cannot contain control character")


@dataclass(frozen=True)
class OutgoingMessage:
    """One v2 message as the remoting send carries it."""

    topic: str
    body: bytes
    sys_flag: int
    properties: dict[str, str]
    message_id: str
    born_timestamp: int
    reconsume_times: int
    transactional: bool

    def header(self, queue_id: int) -> dict[str, str]:
        """SEND_MESSAGE_V2's one-letter header (producer group = topic, as the proxy sends)."""
        return {"a": self.topic, "b": self.topic, "c": "TBW102", "d": "4", "e": str(queue_id),
                "f": str(self.sys_flag), "g": str(self.born_timestamp), "h": "0",
                "i": properties_to_string(self.properties), "j": str(self.reconsume_times), "k": "false",
                "m": "false"}


@dataclass(frozen=True)
class SendPlan:
    topic: str
    messages: list[OutgoingMessage] = field(default_factory=list)
    sharding_key: str | None = None
    """The message group of a one-message request: picks the queue by consistent hash."""


def _millis(ts: Any) -> int:
    return int(ts.seconds) * 1000 + int(ts.nanos) // 1_000_000


def _message(msg: Any, topic: str, config: ProxyConfig, now_ms: int) -> OutgoingMessage:
    body = bytes(msg.body)
    if not body:
        raise ProxyError("MESSAGE_BODY_EMPTY", "message body cannot be empty")
    if len(body) > config.max_message_size:
        raise ProxyError("MESSAGE_BODY_TOO_LARGE", f"message body cannot exceed the max {config.max_message_size}")
    sp = msg.system_properties
    user = dict(msg.user_properties)
    if len(user) > config.user_property_max_num:
        raise ProxyError("MESSAGE_PROPERTIES_TOO_LARGE",
                         f"too many user properties, max is {config.user_property_max_num}")
    size = 0
    for k, v in user.items():
        if k in SYSTEM_PROPERTY_KEYS:
            raise ProxyError("ILLEGAL_MESSAGE_PROPERTY_KEY", f"property is used by system: {k}")
        if has_control(k):
            raise ProxyError("ILLEGAL_MESSAGE_PROPERTY_KEY", "the key of property cannot contain control character")
        if has_control(v):
            raise ProxyError("ILLEGAL_MESSAGE_PROPERTY_KEY", "the value of property cannot contain control character")
        if not k:
            raise ProxyError("ILLEGAL_MESSAGE_PROPERTY_KEY", "the key of property cannot be empty")
        size += len(k.encode()) + len(v.encode())
    props = dict(user)
    tag = str(sp.tag)
    check_tag(tag)
    if tag:
        props["TAGS"] = tag
    size += len(tag.encode())
    keys = [str(k) for k in sp.keys]
    for key in keys:
        if key and not key.strip():
            raise ProxyError("ILLEGAL_MESSAGE_KEY", "key cannot be the char sequence of whitespace")
        if has_control(key):
            raise ProxyError("ILLEGAL_MESSAGE_KEY", "key cannot contain control character")
        size += len(key.encode())
    if keys:
        props["KEYS"] = " ".join(keys)
    if size > config.max_user_property_size:
        raise ProxyError("MESSAGE_PROPERTIES_TOO_LARGE",
                         f"the total size of user property is too large, max is {config.max_user_property_size}")
    message_id = str(sp.message_id)
    if not message_id.strip():
        raise ProxyError("ILLEGAL_MESSAGE_ID", "message id cannot be empty")
    if has_control(message_id) or len(message_id) > 128:
        raise ProxyError("ILLEGAL_MESSAGE_ID", "message id is illegal")
    props["UNIQ_KEY"] = message_id
    transactional = int(sp.message_type) == MESSAGE_TYPE_TRANSACTION
    sys_flag = COMPRESSED_FLAG if int(sp.body_encoding) == ENCODING_GZIP else 0
    if transactional:
        sys_flag |= TRANSACTION_PREPARED_TYPE
        props["TRAN_MSG"] = "true"
        if sp.HasField("orphaned_transaction_recovery_duration"):
            seconds = int(sp.orphaned_transaction_recovery_duration.seconds)
            if seconds > config.max_transaction_recovery_second:
                raise ProxyError("BAD_REQUEST", "the max transaction recovery time of message is too large, max is "
                                 f"{config.max_transaction_recovery_second}")
            props["CHECK_IMMUNITY_TIME_IN_SECONDS"] = str(max(seconds, 0))
    if sp.HasField("delivery_timestamp"):
        deliver_ms = _millis(sp.delivery_timestamp)
        if deliver_ms - now_ms > config.max_delay_time_ms:
            raise ProxyError("ILLEGAL_DELIVERY_TIME",
                             f"the max delay time of message is too large, max is {config.max_delay_time_ms}")
        props["TIMER_DELIVER_MS"] = str(deliver_ms)
    attempts = int(sp.delivery_attempt)
    props["RECONSUME_TIME"] = str(max(attempts, 0))
    props["PGROUP"] = topic
    group = str(sp.message_group)
    if group:
        if not group.strip():
            raise ProxyError("ILLEGAL_MESSAGE_GROUP", "message group cannot be the char sequence of whitespace")
        if len(group.encode()) >= config.max_message_group_size:
            raise ProxyError("ILLEGAL_MESSAGE_GROUP",
                             f"message group exceed the max size {config.max_message_group_size}")
        if has_control(group):
            raise ProxyError("ILLEGAL_MESSAGE_GROUP", "message group cannot contain control character")
        props["__SHARDINGKEY"] = group
    if sp.trace_context:
        props["TRACE_CONTEXT"] = str(sp.trace_context)
    if sp.born_host:
        props["__BORNHOST"] = str(sp.born_host)
    born = _millis(sp.born_timestamp) if sp.HasField("born_timestamp") else now_ms
    if born > 0:
        props["BORN_TIMESTAMP"] = str(born)
    return OutgoingMessage(topic, body, sys_flag, props, message_id, max(born, 0), max(attempts, 0), transactional)


def plan_send(messages: list[Any], config: ProxyConfig, now_ms: int) -> SendPlan:
    """The remoting messages for a SendMessageRequest's messages, or ProxyError (nothing sent)."""
    if not messages:
        raise ProxyError("MESSAGE_CORRUPTED", "no message to send")
    first = messages[0]
    topic = check_topic(str(first.topic.name))
    out = []
    for msg in messages:
        if msg.topic.name != first.topic.name or msg.topic.resource_namespace != first.topic.resource_namespace:
            raise ProxyError("MESSAGE_CORRUPTED", "topic in message is not same")
        out.append(_message(msg, topic, config, now_ms))
    key = str(first.system_properties.message_group) if len(messages) == 1 else ""
    return SendPlan(topic, out, key or None)
