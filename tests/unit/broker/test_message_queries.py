"""QUERY_MESSAGE (12) and VIEW_MESSAGE_BY_ID (33) through a broker pipeline and RocketMQ's wire
format: messages by key, by unique key and by offset message id, decoded as a RocketMQ client
decodes them; bad headers and ids get a clear error and change nothing."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from namesrv.acl.plain_acl import SessionCredentials
from namesrv.broker.config import BrokerConfig
from namesrv.broker.processor import admin_queries
from namesrv.protocol.codes import BrokerRequestCode as Code
from namesrv.protocol.codes import ResponseCode
from namesrv.protocol.message.codec import decode_offset_msg_id, offset_msg_id
from namesrv.protocol.message.decoder import decode_messages
from namesrv.protocol.types import InvalidInput
from tests.support.broker import ADDR, Admin, Broker

FOREVER = str(2**63 - 1)


@pytest.fixture
def setup(tmp_path: Path) -> tuple[Broker, Admin]:
    broker = Broker(tmp_path)
    return broker, Admin(broker, BrokerConfig(credentials=SessionCredentials(access_key="a", secret_key="s")))


def send(broker: Broker, body: bytes, uniq: str, keys: str, queue_id: int = 0, topic: str = "T") -> str:
    answer = broker.send(body, queue_id, topic, UNIQ_KEY=uniq, KEYS=keys)
    assert answer.code == ResponseCode.SUCCESS
    return (answer.ext_fields or {})["msgId"]


def test_query_by_key_and_unique_key(setup: tuple[Broker, Admin]) -> None:
    broker, admin = setup
    ids = [send(broker, f"m{i}".encode(), f"UID{i}", f"order-{i % 3} all", i % 2) for i in range(9)]
    answer = admin.call(Code.QUERY_MESSAGE, topic="T", key="order-1", maxNum="10", beginTimestamp="0",
                        endTimestamp=FOREVER)
    assert answer.code == ResponseCode.SUCCESS
    found = decode_messages(answer.body or b"")
    assert [m.body for m in found] == [b"m7", b"m4", b"m1"]  # newest first
    assert [m.msg_id for m in found] == [ids[7], ids[4], ids[1]]
    assert found[0].unique_key == "UID7" and found[0].keys == ["order-1", "all"] and found[0].store_host == ADDR
    ext = answer.ext_fields or {}
    assert int(ext["indexLastUpdatePhyoffset"]) == broker.store.size_bytes()
    assert int(ext["indexLastUpdateTimestamp"]) == found[0].store_timestamp
    capped = admin.call(Code.QUERY_MESSAGE, topic="T", key="all", maxNum="4", beginTimestamp="0", endTimestamp=FOREVER)
    assert [m.body for m in decode_messages(capped.body or b"")] == [b"m8", b"m7", b"m6", b"m5"]
    uniq = admin.call(Code.QUERY_MESSAGE, topic="T", key="UID5", maxNum="1", beginTimestamp="0", endTimestamp=FOREVER,
                      _UNIQUE_KEY_QUERY="true")
    assert [m.body for m in decode_messages(uniq.body or b"")] == [b"m5"]


def test_query_answer_stays_within_one_frame(setup: tuple[Broker, Admin], monkeypatch: pytest.MonkeyPatch) -> None:
    broker, admin = setup
    for i in range(5):
        send(broker, bytes([65 + i]) * 1000, f"B{i}", "big")
    monkeypatch.setattr(admin_queries, "QUERY_BODY_MAX", 2500)
    answer = admin.call(Code.QUERY_MESSAGE, topic="T", key="big", maxNum="5", beginTimestamp="0", endTimestamp=FOREVER)
    assert [m.body[:1] for m in decode_messages(answer.body or b"")] == [b"E", b"D"]  # the newest that fit
    monkeypatch.setattr(admin_queries, "QUERY_BODY_MAX", 10)
    answer = admin.call(Code.QUERY_MESSAGE, topic="T", key="big", maxNum="5", beginTimestamp="0", endTimestamp=FOREVER)
    assert [m.body[:1] for m in decode_messages(answer.body or b"")] == [b"E"]  # one always


def test_query_time_range_topic_and_not_found(setup: tuple[Broker, Admin]) -> None:
    broker, admin = setup
    send(broker, b"early", "E", "k")
    broker.clock.advance(10_000)
    t = broker.clock()
    send(broker, b"late", "L", "k")
    in_range = admin.call(Code.QUERY_MESSAGE, topic="T", key="k", maxNum="5", beginTimestamp=str(t),
                          endTimestamp=FOREVER)
    assert [m.body for m in decode_messages(in_range.body or b"")] == [b"late"]
    before = admin.call(Code.QUERY_MESSAGE, topic="T", key="k", maxNum="5", beginTimestamp="0",
                        endTimestamp=str(t - 1))
    assert [m.body for m in decode_messages(before.body or b"")] == [b"early"]
    none = admin.call(Code.QUERY_MESSAGE, topic="Other", key="k", maxNum="5", beginTimestamp="0", endTimestamp=FOREVER)
    assert (none.code, none.remark) == (ResponseCode.QUERY_NOT_FOUND,
                                        "can not find message, maybe time range not correct")


def test_bad_query_headers_are_refused(setup: tuple[Broker, Admin]) -> None:
    broker, admin = setup
    send(broker, b"x", "U", "k")
    before = broker.state()
    for ext in ({"topic": "T", "key": "k"}, {"topic": "T", "key": "", "maxNum": "1", "beginTimestamp": "0",
                                             "endTimestamp": "1"},
                {"topic": "T", "key": "k", "maxNum": "-1", "beginTimestamp": "0", "endTimestamp": "1"},
                {"topic": "T", "key": "k", "maxNum": "x", "beginTimestamp": "0", "endTimestamp": "1"}):
        answer = admin.call(Code.QUERY_MESSAGE, **ext)
        assert answer.code == ResponseCode.SYSTEM_ERROR and "invalid request" in (answer.remark or "")
    for ext in ({}, {"offset": "-5"}, {"offset": "abc"}):
        answer = admin.call(Code.VIEW_MESSAGE_BY_ID, **ext)
        assert answer.code == ResponseCode.SYSTEM_ERROR and "invalid request" in (answer.remark or "")
    assert broker.state() == before


def test_view_message_by_offset_id(setup: tuple[Broker, Admin]) -> None:
    broker, admin = setup
    send(broker, b"first", "A", "")
    msg_id = send(broker, b"second", "B", "k2", 1)
    host, offset = decode_offset_msg_id(msg_id)
    assert host == ADDR
    answer = admin.call(Code.VIEW_MESSAGE_BY_ID, offset=str(offset))
    [m] = decode_messages(answer.body or b"")
    assert (m.body, m.queue_id, m.msg_id, m.unique_key, m.topic) == (b"second", 1, msg_id, "B", "T")
    for wrong in (offset + 1, broker.store.size_bytes(), 10**12):
        missing = admin.call(Code.VIEW_MESSAGE_BY_ID, offset=str(wrong))
        assert (missing.code, missing.remark) == (ResponseCode.SYSTEM_ERROR,
                                                  f"can not find message by the offset, {wrong}")


def test_offset_msg_id_round_trip_and_refusals() -> None:
    assert decode_offset_msg_id(offset_msg_id("10.0.0.7:10911", 123456)) == ("10.0.0.7:10911", 123456)
    for bad in ("", "zz" * 16, "0A" * 15, "0A" * 17, " " + "0" * 31, "0" * 8 + "FFFFFFFF" + "0" * 16,
                "0" * 16 + "8" + "0" * 15):
        with pytest.raises(InvalidInput):
            decode_offset_msg_id(bad)


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(max_size=40), st.binary(min_size=16, max_size=16).map(lambda b: b.hex()),
                 st.text(alphabet="0123456789abcdefABCDEF", min_size=30, max_size=34)))
def test_offset_msg_id_decoder_fuzz(text: str) -> None:
    """Any string: an (ip:port, offset) that encodes back to the same id, or InvalidInput."""
    try:
        host, offset = decode_offset_msg_id(text)
    except InvalidInput:
        return
    assert offset >= 0 and offset_msg_id(host, offset) == text.upper()


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200))
def test_message_decoder_fuzz(body: bytes) -> None:
    """Garbage is InvalidInput, never another exception."""
    try:
        decode_messages(body)
    except InvalidInput:
        pass
