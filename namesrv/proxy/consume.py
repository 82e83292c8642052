"""The consumption RPCs' mapping onto the brokers' pop codes, as RocketMQ's Java proxy does it
(ReceiveMessageActivity, AckMessageActivity, ChangeInvisibleDurationActivity,
ForwardMessageToDLQActivity, GrpcConverter.buildMessage). Pure: no I/O, no generated classes.

**The v2 receipt handle** is RocketMQ's common ReceiptHandle string: the broker's extraInfo (the
popped message's `POP_CK`, namesrv.broker.pop.extra_info) followed by the message's commit-log
offset, all separated by one space:

    ckQueueOffset popTime invisibleTime reviveQid retryFlag brokerName queueId queueOffset commitLogOffset

It names the broker, queue and offset, so any proxy routes an ack back without state; the broker
is handed the first eight fields (its extraInfo) and the commit-log offset serves
ForwardMessageToDeadLetterQueue's CONSUMER_SEND_MSG_BACK. A handle RocketMQ's ReceiptHandle.decode
would refuse (fewer than 8 fields, not numbers) is INVALID_RECEIPT_HANDLE, and so is one whose
invisible time has passed (ConsumerProcessor's "receipt handle is expired").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from namesrv.broker.pop.extra_info import (
    ExtraInfo,
    decode_extra_info,
    parse_offset_info,
    real_topic,
    retry_flag,
)
from namesrv.protocol import fastjson
from namesrv.protocol.message.decoder import MessageExt
from namesrv.protocol.message.properties import KEY_SEPARATOR, POP_CK
from namesrv.protocol.types import InvalidInput
from namesrv.proxy.send import SYSTEM_PROPERTY_KEYS, check_topic
from namesrv.proxy.status import ProxyError

MAX_BATCH = 32
"""The brokers refuse a pop of more (PopMessageProcessor); a bigger batch_size is cut to it."""
FILTER_TYPES = {0: "TAG", 1: "TAG", 2: "SQL92"}
"""v2 FilterType (UNSPECIFIED, TAG, SQL) -> the remoting expression type."""
CONSUME_INIT_MAX = 1
"""ConsumeInitMode.MAX: a new group starts at the queue's end (what the Java proxy pops with)."""


@dataclass(frozen=True, slots=True)
class ReceiptHandle:
    extra: ExtraInfo
    commit_log_offset: int = -1

    def encode(self) -> str:
        return f"{self.extra.encode()}{KEY_SEPARATOR}{self.commit_log_offset}"

    @property
    def extra_info(self) -> str:
        """What the broker takes (ACK_MESSAGE's and CHANGE_MESSAGE_INVISIBLETIME's extraInfo)."""
        return self.extra.encode()

    @property
    def next_visible_ms(self) -> int:
        return self.extra.pop_time + self.extra.invisible_time

    def expired(self, now_ms: int) -> bool:
        return self.next_visible_ms <= now_ms


def decode_receipt_handle(text: str) -> ReceiptHandle:
    """A client's receipt handle; INVALID_RECEIPT_HANDLE unless it is one this proxy would give."""
    parts = text.split(KEY_SEPARATOR) if isinstance(text, str) else []
    if len(parts) not in (8, 9):
        raise ProxyError("INVALID_RECEIPT_HANDLE", f"receipt handle is invalid: {len(parts)} fields, expected 9")
    try:
        extra = decode_extra_info(KEY_SEPARATOR.join(parts[:8]))
        clo = int(parts[8]) if len(parts) == 9 and parts[8].lstrip("-").isdigit() and len(parts[8]) <= 19 else None
    except InvalidInput as e:
        raise ProxyError("INVALID_RECEIPT_HANDLE", f"receipt handle is invalid: {e}") from None
    if len(parts) == 9 and (clo is None or clo < -1):
        raise ProxyError("INVALID_RECEIPT_HANDLE", f"receipt handle is invalid: commit log offset {parts[8]!r}")
    return ReceiptHandle(extra, -1 if clo is None else clo)


def live_handle(text: str, now_ms: int) -> ReceiptHandle:
    handle = decode_receipt_handle(text)
    if handle.expired(now_ms):
        raise ProxyError("INVALID_RECEIPT_HANDLE", "receipt handle is expired")
    return handle


def check_group(group: str) -> str:
    if not group or not group.strip():
        raise ProxyError("ILLEGAL_CONSUMER_GROUP", "the specified group is blank")
    try:
        check_topic(group)  # the same name rule (Validators.checkGroup)
    except ProxyError:
        raise ProxyError("ILLEGAL_CONSUMER_GROUP", f"the specified group[{group}] contains illegal characters, "
                                                   "allowing only ^[%|a-zA-Z0-9_-]+$") from None
    return group


def check_invisible(ms: int, min_ms: int, max_ms: int) -> int:
    """GrpcValidator.validateInvisibleTime."""
    if ms < min_ms:
        raise ProxyError("ILLEGAL_INVISIBLE_TIME", f"the invisibleTime is too small. min is {min_ms}")
    if ms > max_ms:
        raise ProxyError("ILLEGAL_INVISIBLE_TIME", f"the invisibleTime is too large. max is {max_ms}")
    return ms


def polling_ms(requested: int | None, remaining_ms: int | None, min_ms: int, max_ms: int) -> int:
    """ReceiveMessageActivity's long-polling time: the request's (else what the deadline leaves),
    within [min, max], and no longer than the call's deadline allows (ILLEGAL_POLLING_TIME)."""
    poll = requested if requested is not None else (max_ms if remaining_ms is None else remaining_ms // 2)
    poll = min(max(poll, min_ms), max_ms)
    if remaining_ms is not None and poll > remaining_ms:
        if remaining_ms < min_ms:
            raise ProxyError("ILLEGAL_POLLING_TIME", "The deadline time remaining is not enough for polling, "
                                                     "please check network condition")
        poll = remaining_ms
    return poll


@dataclass(frozen=True, slots=True)
class GroupPolicy:
    """What the proxy takes from a consumer group's config (SubscriptionGroupConfig): whether it is
    FIFO (consumeMessageOrderly) and how often a message is retried before the DLQ."""

    fifo: bool = False
    retry_max_times: int = 16


def group_policy(body: bytes | None) -> GroupPolicy:
    """The policy in a GET_SUBSCRIPTIONGROUP_CONFIG answer's body; InvalidInput if it is not one."""
    try:
        config = fastjson.loads(body or b"")
    except fastjson.JsonError as e:
        raise InvalidInput(f"subscription group config: {e}") from None
    if not isinstance(config, dict):
        raise InvalidInput("subscription group config is not a JSON object")
    fifo, retries = config.get("consumeMessageOrderly", False), config.get("retryMaxTimes", 16)
    if not isinstance(fifo, bool) or not isinstance(retries, int) or isinstance(retries, bool) or retries < 0:
        raise InvalidInput(f"subscription group config has consumeMessageOrderly={fifo!r}, retryMaxTimes={retries!r}")
    return GroupPolicy(fifo, retries)


def order_attempts(ext: dict[str, str], messages: list[MessageExt]) -> list[int]:
    """Each message's earlier deliveries from an orderly pop's `orderCountInfo` (per queue, the
    counts of that queue's messages in the answer's order: RocketMQ's ConsumerOrderInfoManager);
    0 where the answer says nothing. InvalidInput on a malformed summary."""
    counts = {k: v.split(",") for k, v in parse_offset_info(ext.get("orderCountInfo", "")).items()}
    seen: dict[str, int] = {}
    out = []
    for m in messages:
        key = f"{retry_flag(m.topic)}@{m.queue_id}"
        i = seen.get(key, 0)
        seen[key] = i + 1
        values = counts.get(key, [])
        out.append(int(values[i]) if i < len(values) and values[i].isdigit() else 0)
    return out


def pop_header(group: str, topic: str, batch_size: int, invisible_ms: int, poll_ms: int, filter_type: int,
               expression: str, now_ms: int, fifo: bool = False) -> dict[str, str]:
    """POP_MESSAGE's header: any readable queue (-1) of the broker; a FIFO group's pop is orderly
    (a queue is taken only when the group has nothing of it in flight)."""
    if filter_type not in FILTER_TYPES:
        raise ProxyError("ILLEGAL_FILTER_EXPRESSION", f"filter type {filter_type} is not supported")
    exp_type = FILTER_TYPES[filter_type]
    exp = expression.strip() or ("*" if exp_type == "TAG" else "")
    if not exp:
        raise ProxyError("ILLEGAL_FILTER_EXPRESSION", "SQL filter expression is blank")
    if batch_size <= 0:
        raise ProxyError("BAD_REQUEST", f"batch size {batch_size} must be positive")
    return {"consumerGroup": group, "topic": topic, "queueId": "-1", "maxMsgNums": str(min(batch_size, MAX_BATCH)),
            "invisibleTime": str(invisible_ms), "pollTime": str(poll_ms), "bornTime": str(now_ms),
            "initMode": str(CONSUME_INIT_MAX), "expType": exp_type, "exp": exp, "order": "true" if fifo else "false"}


def ack_header(group: str, topic: str, handle: ReceiptHandle) -> dict[str, str]:
    offset = handle.extra.msg_queue_offset
    return {"consumerGroup": group, "topic": topic, "queueId": str(handle.extra.queue_id),
            "offset": str(offset if offset is not None else handle.extra.ck_queue_offset),
            "extraInfo": handle.extra_info}


def change_header(group: str, topic: str, handle: ReceiptHandle, invisible_ms: int) -> dict[str, str]:
    return ack_header(group, topic, handle) | {"invisibleTime": str(invisible_ms)}


def changed_handle(old: ReceiptHandle, ext: dict[str, Any]) -> ReceiptHandle:
    """The handle after CHANGE_MESSAGE_INVISIBLETIME: the old one with the answer's popTime and
    invisibleTime (and revive queue), as the Java proxy's MQClientAPIExt builds it."""
    try:
        extra = ExtraInfo(old.extra.ck_queue_offset, int(ext["popTime"]), int(ext["invisibleTime"]),
                          int(ext.get("reviveQid", old.extra.revive_qid)), old.extra.retry, old.extra.broker_name,
                          old.extra.queue_id, old.extra.msg_queue_offset)
    except (KeyError, ValueError) as e:
        raise ProxyError("INTERNAL_SERVER_ERROR", f"change invisible time answered without {e}") from None
    return ReceiptHandle(extra, old.commit_log_offset)


def send_back_header(group: str, topic: str, handle: ReceiptHandle, message_id: str) -> dict[str, str]:
    """CONSUMER_SEND_MSG_BACK into the group's DLQ (ProducerProcessor.forwardMessageToDeadLetterQueue:
    delay level -1, max reconsume times 0, the topic the message is really in)."""
    if handle.commit_log_offset < 0:
        raise ProxyError("INVALID_RECEIPT_HANDLE", "commit log offset is empty")
    return {"offset": str(handle.commit_log_offset), "group": group, "delayLevel": "-1",
            "originMsgId": message_id, "originTopic": real_topic(topic, group, handle.extra.retry),
            "maxReconsumeTimes": "0"}


def message_type(props: dict[str, str]) -> str:
    """The v2 MessageType name of a stored message, by its properties."""
    if props.get("TRAN_MSG") == "true":
        return "TRANSACTION"
    if "DELAY" in props or "TIMER_DELIVER_MS" in props or "TIMER_DELAY_SEC" in props:
        return "DELAY"
    if "__SHARDINGKEY" in props:
        return "FIFO"
    return "NORMAL"


def popped_handle(m: MessageExt) -> ReceiptHandle:
    """A popped message's receipt handle (its POP_CK and commit-log offset); ProxyError when the
    broker gave it none."""
    ck = m.properties.get(POP_CK)
    if not ck:
        raise ProxyError("INTERNAL_SERVER_ERROR", f"popped message {m.msg_id} carries no POP_CK")
    try:
        return ReceiptHandle(decode_extra_info(ck), m.commit_log_offset)
    except InvalidInput as e:
        raise ProxyError("INTERNAL_SERVER_ERROR", f"popped message {m.msg_id}: {e}") from None


def user_properties(props: dict[str, str]) -> dict[str, str]:
    """What a v2 Message shows as user properties: every property no system one."""
    return {k: v for k, v in props.items() if k not in SYSTEM_PROPERTY_KEYS}
