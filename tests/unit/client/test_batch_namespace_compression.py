"""The producer's batch encoding and RocketMQ's batch limits, RocketMQ namespaces, and body
compression with the one decoder that inflates (pure: no Ray, no sockets)."""

from __future__ import annotations

import itertools
import zlib

import pytest

from namesrv.client.batch import MessageBatch, batch_of
from namesrv.client.errors import MQClientError
from namesrv.client.message import Message
from namesrv.client.namespace import without_namespace, wrap_namespace
from namesrv.protocol.constants import MAX_MESSAGE_SIZE
from namesrv.protocol.message.codec import decode_batch, encode_message_ext
from namesrv.protocol.message.compression import (
    COMPRESSED_FLAG,
    COMPRESSION_ZLIB_TYPE,
    compress_body,
    uncompressed_body,
)
from namesrv.protocol.message.decoder import decode_messages
from namesrv.protocol.message.types import StoredMessage
from namesrv.protocol.types import InvalidInput


def ids() -> itertools.count[int]:
    return itertools.count()


def next_id_of(counter: itertools.count[int]) -> str:
    return f"ID{next(counter)}"


# ============================================================================ batches
def test_a_batch_encodes_every_message_with_its_own_id() -> None:
    counter = ids()
    batch = batch_of([Message("T", b"one", tags="A", keys="k1"), Message("T", b"two", properties={"p": "v"})],
                     lambda: next_id_of(counter))
    assert isinstance(batch, MessageBatch) and batch.topic == "T" and batch.unique_ids == ["ID0", "ID1"]
    one, two = decode_batch(batch.body)
    assert (one.body, one.properties) == (b"one", {"TAGS": "A", "KEYS": "k1", "UNIQ_KEY": "ID0"})
    assert (two.body, two.properties) == (b"two", {"p": "v", "UNIQ_KEY": "ID1"})


@pytest.mark.parametrize(("messages", "why"), [
    ([], "the batch has no message"),
    ([Message("T", b"a"), Message("U", b"b")], "The topic of the messages in one batch should be the same"),
    ([Message("T", b"a", properties={"DELAY": "3"})], "TimeDelayLevel is not supported for batching"),
    ([Message("%RETRY%G", b"a")], "Retry Group is not supported for batching"),
    ([Message("T", b"")], "the message body length is zero"),
    ([Message("T", b"x" * (MAX_MESSAGE_SIZE // 2)), Message("T", b"y" * (MAX_MESSAGE_SIZE // 2))],
     f"the message body size over max value, MAX: {MAX_MESSAGE_SIZE}"),
])
def test_rocketmqs_batch_limits_refuse_before_anything_is_sent(messages: list[Message], why: str) -> None:
    counter = ids()
    with pytest.raises(MQClientError) as e:
        batch_of(messages, lambda: next_id_of(counter))
    assert why in str(e.value)


# ============================================================================ namespaces
@pytest.mark.parametrize(("resource", "wrapped"), [
    ("T", "ns%T"), ("ns%T", "ns%T"), ("%RETRY%G", "%RETRY%ns%G"), ("%DLQ%G", "%DLQ%ns%G"),
    ("TBW102", "TBW102"), ("rmq_sys_wheel_timer", "rmq_sys_wheel_timer"), ("CID_RMQ_SYS_TRANS", "CID_RMQ_SYS_TRANS"),
])
def test_namespaces_wrap_and_strip_as_rocketmq(resource: str, wrapped: str) -> None:
    assert wrap_namespace("ns", resource) == wrapped
    assert without_namespace("ns", wrapped) == (resource if not resource.startswith("ns%") else "T")
    assert wrap_namespace(None, resource) == resource and without_namespace("other", wrapped) == wrapped


# ============================================================================ compression
def test_bodies_of_4_kib_and_more_are_deflated_with_rocketmqs_flags() -> None:
    small, big = b"s" * 4095, b"b" * 4096
    assert compress_body(small) == (small, 0)
    packed, flags = compress_body(big)
    assert flags == COMPRESSED_FLAG | COMPRESSION_ZLIB_TYPE and len(packed) < len(big)
    assert zlib.decompress(packed) == big
    assert uncompressed_body(packed, flags) == big
    assert uncompressed_body(packed, COMPRESSED_FLAG) == big, "a 4.x client sets no type bits: zlib"
    assert uncompressed_body(packed, 0) == packed, "not marked: as stored"
    with pytest.raises(InvalidInput, match="does not inflate"):
        uncompressed_body(b"not zlib", COMPRESSED_FLAG)


def test_the_message_decoder_hands_every_reader_the_plain_body() -> None:
    plain = b"{'json': 'like'} " * 1000
    packed, flags = compress_body(plain)
    stored = [StoredMessage(topic="T", queue_id=0, queue_offset=i, store_timestamp=1, msg_id="u", body=body,
                            properties={"UNIQ_KEY": "u"}, sys_flag=flag, commit_log_offset=i * 100)
              for i, (body, flag) in enumerate([(packed, flags), (b"small", 0)])]
    wire = b"".join(encode_message_ext(m, "127.0.0.1:10911") for m in stored)
    big, small = decode_messages(wire)
    assert (big.body, big.sys_flag) == (plain, flags) and small.body == b"small"
