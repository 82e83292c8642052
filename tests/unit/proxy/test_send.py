"""SendMessage's mapping onto SEND_MESSAGE_V2 (namesrv.proxy.send): what a v2 message becomes, and
the refusals RocketMQ's proxy answers (each with its Code), fuzzed with hypothesis."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from google.protobuf import json_format
from google.protobuf.message import DecodeError
from hypothesis import given, settings
from hypothesis import strategies as st

from namesrv.protocol.broker_headers import SendMessageRequestHeader
from namesrv.protocol.message.properties import string_to_properties
from namesrv.proxy.descriptors import load
from namesrv.proxy.send import TRANSACTION_PREPARED_TYPE, plan_send
from namesrv.proxy.settings import ProxyConfig
from namesrv.proxy.status import ProxyError

P = load()
CONFIG = ProxyConfig()
NOW = 1_700_000_000_000
CODES = {v.name for v in P.pool.FindEnumTypeByName("apache.rocketmq.v2.Code").values}


def message(topic: str = "T", body: bytes = b"hi", user: dict[str, str] | None = None, **system: Any) -> Any:
    msg = P.new("Message")
    json_format.ParseDict({"topic": {"name": topic}, "user_properties": user or {},
                           "system_properties": {"message_id": "0102AB", "message_type": "NORMAL", **system}}, msg)
    msg.body = body
    return msg


def refused(*msgs: Any) -> str:
    with pytest.raises(ProxyError) as e:
        plan_send(list(msgs), CONFIG, NOW)
    return e.value.code


def test_a_normal_message_becomes_a_v2_send_header() -> None:
    plan = plan_send([message(tag="TagA", keys=["k1", "k2"], user={"color": "red"})], CONFIG, NOW)
    out = plan.messages[0]
    assert plan.sharding_key is None and out.sys_flag == 0 and out.body == b"hi"
    header = SendMessageRequestHeader.from_v2(out.header(3))
    props = string_to_properties(header["properties"])
    assert (header["topic"], header["producerGroup"], header["queueId"]) == ("T", "T", "3")
    assert props["TAGS"] == "TagA" and props["KEYS"] == "k1 k2" and props["color"] == "red"
    assert props["UNIQ_KEY"] == "0102AB" and props["PGROUP"] == "T"


def test_fifo_delay_and_transaction() -> None:
    fifo = plan_send([message(message_group="order-1")], CONFIG, NOW)
    assert fifo.sharding_key == "order-1" and fifo.messages[0].properties["__SHARDINGKEY"] == "order-1"
    delayed = plan_send([message(delivery_timestamp="2023-11-14T22:13:25.500Z")], CONFIG, NOW)
    assert delayed.messages[0].properties["TIMER_DELIVER_MS"] == "1700000005500"
    tx = plan_send([message(message_type="TRANSACTION", orphaned_transaction_recovery_duration="5s")], CONFIG, NOW)
    out = tx.messages[0]
    assert out.transactional and out.sys_flag & TRANSACTION_PREPARED_TYPE
    assert out.properties["TRAN_MSG"] == "true" and out.properties["CHECK_IMMUNITY_TIME_IN_SECONDS"] == "5"
    assert len(plan_send([message(message_group="g"), message(message_group="g")], CONFIG, NOW).messages) == 2
    assert plan_send([message(message_group="g"), message()], CONFIG, NOW).sharding_key is None


@pytest.mark.parametrize(("kwargs", "code"), [
    ({"topic": ""}, "ILLEGAL_TOPIC"),
    ({"topic": "a b"}, "ILLEGAL_TOPIC"),
    ({"topic": "x" * 128}, "ILLEGAL_TOPIC"),
    ({"topic": "TBW102"}, "ILLEGAL_TOPIC"),
    ({"topic": "rmq_sys_wheel_timer"}, "ILLEGAL_TOPIC"),
    ({"body": b""}, "MESSAGE_BODY_EMPTY"),
    ({"body": b"x" * (4 * 1024 * 1024 + 1)}, "MESSAGE_BODY_TOO_LARGE"),
    ({"tag": "a|b"}, "ILLEGAL_MESSAGE_TAG"),
    ({"tag": "  "}, "ILLEGAL_MESSAGE_TAG"),
    ({"keys": ["a\x01"]}, "ILLEGAL_MESSAGE_KEY"),
    ({"user": {"TAGS": "x"}}, "ILLEGAL_MESSAGE_PROPERTY_KEY"),
    ({"user": {"k": "v\n"}}, "ILLEGAL_MESSAGE_PROPERTY_KEY"),
    ({"user": {"k": "v" * 17_000}}, "MESSAGE_PROPERTIES_TOO_LARGE"),
    ({"message_id": ""}, "ILLEGAL_MESSAGE_ID"),
    ({"message_group": "g" * 64}, "ILLEGAL_MESSAGE_GROUP"),
    ({"delivery_timestamp": "2030-01-01T00:00:00Z"}, "ILLEGAL_DELIVERY_TIME"),
    ({"message_type": "TRANSACTION", "orphaned_transaction_recovery_duration": "7200s"}, "BAD_REQUEST"),
])
def test_bad_messages_are_refused_with_the_proxys_code(kwargs: dict[str, Any], code: str) -> None:
    assert refused(message(**kwargs)) == code


def test_an_empty_request_and_mixed_topics_are_corrupted() -> None:
    with pytest.raises(ProxyError) as e:
        plan_send([], CONFIG, NOW)
    assert e.value.code == "MESSAGE_CORRUPTED"
    assert refused(message("A"), message("B")) == "MESSAGE_CORRUPTED"


@settings(max_examples=300, deadline=None)
@given(topic=st.text(max_size=140), body=st.binary(max_size=64), tag=st.text(max_size=20),
       keys=st.lists(st.text(max_size=10), max_size=3), group=st.text(max_size=70),
       user=st.dictionaries(st.text(max_size=12), st.text(max_size=12), max_size=4),
       message_id=st.text(max_size=40))
def test_any_message_is_planned_or_refused_with_a_v2_code(topic: str, body: bytes, tag: str, keys: list[str],
                                                          group: str, user: dict[str, str], message_id: str) -> None:
    msg = message(topic, body, user, tag=tag, keys=keys, message_group=group, message_id=message_id)
    try:
        plan = plan_send([msg], CONFIG, NOW)
    except ProxyError as e:
        assert e.code in CODES and e.message
        return
    out = plan.messages[0]
    props = string_to_properties(out.header(0)["i"])
    assert props == out.properties, "the properties survive the wire's encoding"
    assert props["UNIQ_KEY"] == message_id and out.body == body and plan.topic == topic


@settings(max_examples=300, deadline=None)
@given(raw=st.binary(max_size=200))
def test_any_request_bytes_decode_to_a_plan_or_a_refusal(raw: bytes) -> None:
    """The servicer boundary: grpc hands the handler whatever FromString makes of the bytes."""
    try:
        request = P.cls("SendMessageRequest").FromString(raw)
    except DecodeError:
        return
    try:
        plan_send(list(request.messages), CONFIG, NOW)
    except ProxyError as e:
        assert e.code in CODES


def test_ids_are_kept_as_given() -> None:
    mid = uuid.uuid4().hex
    assert plan_send([message(message_id=mid)], CONFIG, NOW).messages[0].message_id == mid
