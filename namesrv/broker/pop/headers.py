"""The pop codes' request headers and bodies (RocketMQ's PopMessageRequestHeader,
AckMessageRequestHeader, ChangeInvisibleTimeRequestHeader, BatchAckMessageRequestBody), under
RocketMQ's wire names (camelCase), and the body a BATCH_ACK_MESSAGE answer carries when some of its
messages were not in flight (this project's addition: RocketMQ answers SUCCESS with no body, and its
clients read no body there)."""

from __future__ import annotations

import base64
import binascii
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from namesrv.protocol.headers import Header
from namesrv.protocol.types import GroupName, InvalidInput, TopicName

MAX_POP_NUMS = 32
"""PopMessageProcessor refuses a pop of more messages (INVALID_PARAMETER)."""
MAX_INVISIBLE_MS = 7 * 24 * 3600 * 1000
MAX_POLL_MS = 24 * 3600 * 1000


class PopMessageRequestHeader(Header):
    consumer_group: GroupName
    topic: TopicName
    queue_id: int = Field(ge=-1)
    """-1: any readable queue of the topic."""
    max_msg_nums: int = Field(gt=0)
    invisible_time: int = Field(gt=0, le=MAX_INVISIBLE_MS)
    poll_time: int = Field(default=0, ge=0, le=MAX_POLL_MS)
    """How long a pop that finds nothing is held for a message (ms); 0: answered at once."""
    born_time: int = 0
    init_mode: int = Field(default=0, ge=0, le=1)
    """ConsumeInitMode of a group with no offset yet: 0 MIN (the queue's start), 1 MAX (its end)."""
    exp_type: str | None = None
    exp: str | None = None
    order: bool = False
    attempt_id: str | None = None


class AckMessageRequestHeader(Header):
    consumer_group: GroupName
    topic: TopicName
    queue_id: int = Field(ge=0)
    extra_info: str = Field(min_length=1, max_length=1024)
    offset: int = Field(ge=0)


class ChangeInvisibleTimeRequestHeader(AckMessageRequestHeader):
    invisible_time: int = Field(gt=0, le=MAX_INVISIBLE_MS)


class BatchAck(BaseModel):
    """One entry of a BATCH_ACK_MESSAGE body: the messages of one pop of one queue, by the bits of
    `bitSet` over offsets from `startOffset` (RocketMQ's BatchAck, one-letter JSON names)."""

    model_config = ConfigDict(populate_by_name=True, extra="ignore", frozen=True)

    consumer_group: GroupName = Field(alias="c")
    topic: TopicName = Field(alias="t")
    retry: str = Field(alias="r", pattern="^[012]$")
    start_offset: int = Field(alias="so", ge=0)
    queue_id: int = Field(alias="q", ge=0)
    revive_queue_id: int = Field(default=0, alias="rq", ge=0)
    pop_time: int = Field(alias="pt", ge=0)
    invisible_time: int = Field(default=0, alias="it", ge=0)
    bit_set: list[int] = Field(alias="b", max_length=4096)
    """The offsets acked, relative to startOffset (decoded from Java's BitSet bytes, base64)."""

    @field_validator("bit_set", mode="before")
    @classmethod
    def _bits(cls, value: Any) -> list[int]:
        if isinstance(value, list):
            return value
        if not isinstance(value, str):
            raise ValueError("bitSet must be base64 bytes")
        try:
            raw = base64.b64decode(value, validate=True)
        except binascii.Error as e:
            raise ValueError(f"bitSet is not base64: {e}") from None
        if len(raw) > 512:
            raise ValueError("bitSet longer than 4096 bits")
        return [i * 8 + b for i, byte in enumerate(raw) for b in range(8) if byte >> b & 1]

    @classmethod
    def alias_for(cls, name: str) -> str:
        return str(cls.model_fields[name].alias)


class BatchAckMessageRequestBody(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    broker_name: str | None = Field(default=None, alias="brokerName")
    acks: list[BatchAck] = Field(min_length=1, max_length=1024)


class NotInFlight(BaseModel):
    """A message of a batch ack that was not in flight under its handle: the index of its BatchAck
    in the request's `acks`, its queue offset, and what ACK_MESSAGE would have answered (remark)."""

    model_config = ConfigDict(populate_by_name=True, extra="ignore", frozen=True)

    ack: int = Field(ge=0)
    offset: int = Field(ge=0)
    remark: str = ""


class BatchAckAnswerBody(BaseModel):
    """A BATCH_ACK_MESSAGE answer's body (sent only when something was not in flight), so a caller
    acking many clients' entries at once can tell each entry's fate."""

    model_config = ConfigDict(populate_by_name=True, extra="ignore", frozen=True)

    not_in_flight: list[NotInFlight] = Field(default_factory=list, alias="notInFlight")

    def encode(self) -> bytes:
        return self.model_dump_json(by_alias=True).encode()


def batch_ack_body(data: object) -> BatchAckMessageRequestBody:
    """A BATCH_ACK_MESSAGE body (parsed JSON); InvalidInput when it is not one."""
    if not isinstance(data, dict):
        raise InvalidInput("batch ack body must be a JSON object")
    try:
        return BatchAckMessageRequestBody.model_validate(data)
    except ValueError as e:
        raise InvalidInput(f"batch ack body: {e}") from None


def encode_bit_set(offsets: list[int]) -> str:
    """Java's BitSet.toByteArray of relative offsets, base64 (what fastjson writes)."""
    if not offsets:
        return ""
    raw = bytearray(max(offsets) // 8 + 1)
    for o in offsets:
        raw[o // 8] |= 1 << (o % 8)
    return base64.b64encode(bytes(raw)).decode()
