"""AckMessage's entries grouped into BATCH_ACK_MESSAGE (200151) requests, as RocketMQ's proxy does
with `enableBatchAck` (ConsumerProcessor.batchAckMessage: the handles by broker, one request per
broker; MQClientAPIImpl.batchAckMessageAsync: one BatchAck per retry flag, queue, check point and pop
time, its messages the bits of a BitSet over offsets from the check point's start). Pure: the actor
(actors.proxy.consumer) sends what `plan_acks` says and answers each entry by `batch_results`.

An entry goes alone (ACK_MESSAGE) when a batch cannot carry it or would change its answer: a handle
without a queue offset (the 7-field form), an offset more than the brokers' 4096 bits past its check
point, a message already in its group (the second ack of one message is refused, as one by one),
and a broker named by one entry only (one request either way, and ACK_MESSAGE's answer is exact).
The BatchAck also keys on invisible time and revive queue, which RocketMQ takes from its first
handle: two handles of one pop differing there are not of one check point.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field

from pydantic import ValidationError

from namesrv.broker.pop.headers import BatchAckAnswerBody, encode_bit_set
from namesrv.protocol.types import InvalidInput
from namesrv.proxy.consume import ReceiptHandle
from namesrv.proxy.status import Status

MAX_BITS = 4096
"""The brokers refuse a BatchAck whose bitSet is longer (namesrv.broker.pop.headers.BatchAck)."""
OK = Status("OK", "OK")


@dataclass(frozen=True, slots=True)
class Pending:
    """An entry to ack: its place in the request and its live handle."""

    index: int
    handle: ReceiptHandle


GroupKey = tuple[str, int, int, int, int, int]
"""retry flag, queue id, check point start (ckQueueOffset), pop time, invisible time, revive queue."""


@dataclass(frozen=True, slots=True)
class AckGroup:
    """One BatchAck: messages of one pop of one queue, each by its entry's index and queue offset."""

    key: GroupKey
    entries: tuple[tuple[int, int], ...]

    @property
    def start_offset(self) -> int:
        return self.key[2]


@dataclass(frozen=True, slots=True)
class BrokerAcks:
    """What one broker is sent: one BATCH_ACK_MESSAGE of `groups` (none when empty), then an
    ACK_MESSAGE for each of `alone`, in the request's order."""

    broker_name: str
    groups: tuple[AckGroup, ...] = ()
    alone: tuple[int, ...] = ()

    @property
    def batched(self) -> list[int]:
        return [i for g in self.groups for i, _ in g.entries]


@dataclass
class _Building:
    groups: dict[GroupKey, dict[int, int]] = field(default_factory=dict)
    """key -> queue offset -> entry index."""
    alone: list[int] = field(default_factory=list)


def _key(handle: ReceiptHandle) -> GroupKey:
    x = handle.extra
    return (x.retry, x.queue_id, x.ck_queue_offset, x.pop_time, x.invisible_time, x.revive_qid)


def plan_acks(pending: Sequence[Pending], batch: bool = True) -> list[BrokerAcks]:
    """Each broker's share of `pending` (brokers in the order first named); every entry is in
    exactly one plan, batched or alone. `batch` False: every entry alone (one by one)."""
    building: dict[str, _Building] = {}
    for p in pending:
        b = building.setdefault(p.handle.extra.broker_name, _Building())
        offset = p.handle.extra.msg_queue_offset
        key = _key(p.handle)
        offsets = b.groups.get(key, {})
        if (not batch or offset is None or not 0 <= offset - key[2] < MAX_BITS) or offset in offsets:
            b.alone.append(p.index)
            continue
        b.groups.setdefault(key, offsets)[offset] = p.index
    out = []
    for name, b in building.items():
        groups = tuple(AckGroup(k, tuple((i, o) for o, i in offs.items())) for k, offs in b.groups.items())
        if sum(len(g.entries) for g in groups) < 2:  # one message: ACK_MESSAGE says exactly what happened
            out.append(BrokerAcks(name, (), tuple(sorted(b.alone + [i for g in groups for i, _ in g.entries]))))
        else:
            out.append(BrokerAcks(name, groups, tuple(b.alone)))
    return out


def batch_ack_request(group: str, topic: str, acks: BrokerAcks) -> bytes:
    """The BATCH_ACK_MESSAGE body of `acks.groups` (RocketMQ's BatchAckMessageRequestBody: BatchAck
    under its one-letter JSON names, the bitSet as base64 of Java's BitSet.toByteArray). `topic` is
    the one the client names: the broker finds the retry topic by the flag."""
    entries = [{"c": group, "t": topic, "r": g.key[0], "so": g.start_offset, "q": g.key[1], "rq": g.key[5],
                "pt": g.key[3], "it": g.key[4], "b": encode_bit_set([o - g.start_offset for _, o in g.entries])}
               for g in acks.groups]
    return json.dumps({"brokerName": acks.broker_name, "acks": entries}, separators=(",", ":")).encode()


def batch_results(acks: BrokerAcks, answer_body: bytes | None) -> dict[int, Status]:
    """Each batched entry's status from a SUCCESS answer: INVALID_RECEIPT_HANDLE for what the body
    says was not in flight (with the broker's remark, as its ACK_MESSAGE refusal), OK for the rest.
    InvalidInput when the body is not a BatchAckAnswerBody."""
    missed: dict[tuple[int, int], str] = {}
    if answer_body:
        try:
            body = BatchAckAnswerBody.model_validate_json(answer_body)
        except ValidationError as e:
            raise InvalidInput(f"batch ack answer: {e.error_count()} errors, {e.errors()[0]['msg']}") from None
        missed = {(m.ack, m.offset): m.remark for m in body.not_in_flight}
    out: dict[int, Status] = {}
    for n, g in enumerate(acks.groups):
        for i, offset in g.entries:
            remark = missed.get((n, offset))
            out[i] = OK if remark is None else Status("INVALID_RECEIPT_HANDLE", remark or "receipt handle is invalid")
    return out
