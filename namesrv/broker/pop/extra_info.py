"""A popped message's handle (RocketMQ's ExtraInfoUtil) and the pop answer's offset summaries.

A pop gives each message an extraInfo, carried in its `POP_CK` property, which the client hands back
to ack it or change its invisible time. Its fields, separated by single spaces (MessageConst's
KEY_SEPARATOR), in RocketMQ's order:

    ckQueueOffset popTime invisibleTime reviveQid retryFlag brokerName queueId msgQueueOffset

- ckQueueOffset: the queue offset the pop started reading at (the check point's start);
- popTime, invisibleTime: when it was popped (ms since the epoch) and for how long it is hidden;
- reviveQid: 0 here (RocketMQ's revive queue); 999 (POP_ORDER_REVIVE_QUEUE) for an orderly pop;
- retryFlag: "0" the topic itself, "1" its pop retry topic `%RETRY%<group>_<topic>`, "2" the V2
  spelling `%RETRY%<group>+<topic>`;
- brokerName, queueId, msgQueueOffset: where the message is (the queue of the real topic).

RocketMQ's clients send the 8-field form; the 7-field one (without msgQueueOffset) is accepted too.
Anything else is refused (`InvalidInput`): a handle is parsed whole or not at all.

The pop answer's summaries (`startOffsetInfo`, `msgOffsetInfo`, `orderCountInfo`) are `;`-joined
entries of `retryFlag queueId value`, as RocketMQ builds them. Pure.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from namesrv.protocol.constants import RETRY_GROUP_TOPIC_PREFIX
from namesrv.protocol.message.properties import KEY_SEPARATOR
from namesrv.protocol.types import InvalidInput

NORMAL_TOPIC, RETRY_TOPIC, RETRY_TOPIC_V2 = "0", "1", "2"
POP_ORDER_REVIVE_QUEUE = 999
"""RocketMQ's KeyBuilder.POP_ORDER_REVIVE_QUEUE: the reviveQid of an orderly pop's messages."""
MAX_HANDLE_CHARS = 1024
_NUMBER = re.compile(r"-?[0-9]{1,18}")


def pop_retry_topic(topic: str, group: str) -> str:
    """RocketMQ 5's pop retry topic of a group and topic (KeyBuilder.buildPopRetryTopicV1)."""
    return f"{RETRY_GROUP_TOPIC_PREFIX}{group}_{topic}"


def retry_flag(topic: str) -> str:
    """ExtraInfoUtil.getRetry: which kind of topic `topic` is."""
    if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
        return RETRY_TOPIC_V2 if "+" in topic else RETRY_TOPIC
    return NORMAL_TOPIC


def real_topic(topic: str, group: str, flag: str) -> str:
    """The topic a handle's message is in, from the topic a client names (the original one, or
    the retry topic itself) and the handle's retry flag (ExtraInfoUtil.getRealTopic)."""
    if flag == NORMAL_TOPIC or topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
        return topic
    if flag == RETRY_TOPIC:
        return pop_retry_topic(topic, group)
    return f"{RETRY_GROUP_TOPIC_PREFIX}{group}+{topic}"


@dataclass(frozen=True, slots=True)
class ExtraInfo:
    ck_queue_offset: int
    pop_time: int
    invisible_time: int
    revive_qid: int
    retry: str
    broker_name: str
    queue_id: int
    msg_queue_offset: int | None = None

    def encode(self) -> str:
        fields = [str(self.ck_queue_offset), str(self.pop_time), str(self.invisible_time), str(self.revive_qid),
                  self.retry, self.broker_name, str(self.queue_id)]
        if self.msg_queue_offset is not None:
            fields.append(str(self.msg_queue_offset))
        return KEY_SEPARATOR.join(fields)

    @property
    def order(self) -> bool:
        return self.revive_qid == POP_ORDER_REVIVE_QUEUE


def _number(text: str, what: str, low: int = 0) -> int:
    if _NUMBER.fullmatch(text) is None:
        raise InvalidInput(f"illegal extraInfo: {what} {text!r} is not a number")
    value = int(text)
    if value < low:
        raise InvalidInput(f"illegal extraInfo: {what} {value} is below {low}")
    return value


def decode_extra_info(text: str) -> ExtraInfo:
    """A handle as a client hands it back; InvalidInput unless it is one RocketMQ would build."""
    if not isinstance(text, str) or not text or len(text) > MAX_HANDLE_CHARS:
        raise InvalidInput("illegal extraInfo: empty or longer than 1024 characters")
    parts = text.split(KEY_SEPARATOR)
    if len(parts) not in (7, 8):
        raise InvalidInput(f"illegal extraInfo: {len(parts)} fields, expected 8 "
                           "(ckQueueOffset popTime invisibleTime reviveQid retry brokerName queueId queueOffset)")
    if parts[4] not in (NORMAL_TOPIC, RETRY_TOPIC, RETRY_TOPIC_V2):
        raise InvalidInput(f"illegal extraInfo: retry flag {parts[4]!r} is not 0, 1 or 2")
    if not parts[5] or not parts[5].isprintable():
        raise InvalidInput("illegal extraInfo: no broker name")
    return ExtraInfo(_number(parts[0], "ckQueueOffset"), _number(parts[1], "popTime"),
                     _number(parts[2], "invisibleTime"), _number(parts[3], "reviveQid"), parts[4], parts[5],
                     _number(parts[6], "queueId"),
                     _number(parts[7], "queueOffset") if len(parts) == 8 else None)


def offset_info_entry(topic: str, queue_id: int, value: str) -> str:
    """One entry of startOffsetInfo / msgOffsetInfo / orderCountInfo."""
    return f"{retry_flag(topic)}{KEY_SEPARATOR}{queue_id}{KEY_SEPARATOR}{value}"


def parse_offset_info(text: str) -> dict[str, str]:
    """`retryFlag@queueId` -> value of a summary (ExtraInfoUtil.parseStartOffsetInfo and kin);
    InvalidInput on a malformed or duplicated entry."""
    out: dict[str, str] = {}
    if not text:
        return out
    for one in text.split(";"):
        parts = one.split(KEY_SEPARATOR)
        if len(parts) != 3:
            raise InvalidInput(f"parse offset info error, {text!r}")
        key = f"{parts[0]}@{parts[1]}"
        if key in out:
            raise InvalidInput(f"parse offset info error, duplicate, {text!r}")
        out[key] = parts[2]
    return out
