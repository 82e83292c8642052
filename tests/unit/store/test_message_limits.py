"""The store never holds a record its own reader rejects (issue 22, point 4): a message whose
properties, topic or body are over the stored layout's limits is refused at send with
MESSAGE_ILLEGAL and the reason, before anything is written; anything accepted pulls back exactly."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from namesrv.protocol.codes import BrokerRequestCode as Code
from namesrv.protocol.codes import ResponseCode
from namesrv.protocol.message.properties import (
    INT_FIELDS,
    PROPERTIES_MAX_BYTES,
    MessageIllegal,
    check_message,
    properties_to_string,
    stored_properties,
    string_to_properties,
)
from namesrv.protocol.message.types import MessageInner
from namesrv.remoting.command import MQServerError
from namesrv.store.message_store import MessageStore
from tests.support.broker import Broker, decode_messages

MAX_BODY = 4096

topics = st.text(alphabet="%|abcXYZ019_-", min_size=1, max_size=140)
keys = st.text(alphabet=st.characters(exclude_characters="\x01\x02", exclude_categories=("Cs",)),
               min_size=1, max_size=12)
values = st.text(alphabet=st.characters(exclude_characters="\x02", exclude_categories=("Cs",)), max_size=40)
big_value = st.one_of(st.integers(0, 200), st.integers(PROPERTIES_MAX_BYTES - 300, PROPERTIES_MAX_BYTES + 50),
                      st.integers(0, 40_000))


def send_ext(topic: str, props: dict[str, str]) -> dict[str, Any]:
    return {"producerGroup": "PG", "topic": topic, "defaultTopic": "TBW102", "defaultTopicQueueNums": 4,
            "queueId": 0, "sysFlag": 0, "bornTimestamp": 1, "flag": 0, "properties": properties_to_string(props)}


def state(broker: Broker) -> tuple[Any, ...]:
    return broker.store.size_bytes(), broker.state()


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Broker:
    return Broker(tmp_path_factory.mktemp("limits"), max_message_size=MAX_BODY)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(topic=topics, props=st.dictionaries(keys, values, max_size=6), big=big_value, pad=st.sampled_from("aé€"),
       body=st.binary(max_size=MAX_BODY + 200))
def test_a_send_is_refused_before_anything_is_written_or_pulls_back_exactly(
        shared: Broker, topic: str, props: dict[str, str], big: int, pad: str, body: bytes) -> None:
    props = props | {"UNIQ_KEY": f"U{shared.store.size_bytes()}", "big": pad * (big // len(pad.encode()))}
    before = state(shared)
    answer = shared.call(Code.SEND_MESSAGE, send_ext(topic, props), body)
    if answer.code != ResponseCode.SUCCESS:
        assert answer.code in (ResponseCode.MESSAGE_ILLEGAL, ResponseCode.SYSTEM_ERROR), answer.remark
        assert answer.remark, "a refusal says why"
        assert state(shared) == before, f"refused ({answer.remark}) but something changed"
        return
    assert answer.ext_fields is not None
    offset = int(answer.ext_fields["queueOffset"])
    pulled = shared.pull(offset, topic=topic, maxMsgNums=1)
    assert pulled.code == ResponseCode.SUCCESS, pulled.remark
    [message] = decode_messages(pulled.body or b"")
    assert (message["topic"], message["body"], message["queue_offset"]) == (topic, body, offset)
    assert message["props"] == props | {"CLUSTER": "DefaultCluster"}


def test_properties_over_32767_bytes_are_message_illegal_and_nothing_is_stored(tmp_path: Path) -> None:
    broker = Broker(tmp_path)
    before = state(broker)
    answer = broker.call(Code.SEND_MESSAGE, send_ext("T", {"big": "x" * 32_800}), b"body")
    assert answer.code == ResponseCode.MESSAGE_ILLEGAL
    assert "properties length" in (answer.remark or "") and "32767" in (answer.remark or "")
    assert state(broker) == before
    answer = broker.call(Code.SEND_MESSAGE, send_ext("NewTopic", {"big": "x" * 32_800}), b"body")
    assert answer.code == ResponseCode.MESSAGE_ILLEGAL
    assert "NewTopic" not in broker.topics.topic_config_table, "an illegal message created its topic"
    ok = broker.call(Code.SEND_MESSAGE, send_ext("T", {"k": "v"}), b"next")
    assert ok.code == ResponseCode.SUCCESS
    assert broker.pull(0).code == ResponseCode.SUCCESS, "the queue is not blocked"


def test_a_batch_with_one_illegal_message_stores_none_of_it(tmp_path: Path) -> None:
    from namesrv.protocol.message.codec import BatchEntry, encode_batch

    broker = Broker(tmp_path)
    before = state(broker)
    # each entry fits its batch format; with the header's properties merged in, the second does not
    body = encode_batch([BatchEntry(0, b"fine", {"UNIQ_KEY": "A"}),
                         BatchEntry(0, b"too big", {"UNIQ_KEY": "B", "p": "y" * 20_000})])
    answer = broker.call(Code.SEND_BATCH_MESSAGE, send_ext("T", {"q": "w" * 20_000}), body)
    assert answer.code == ResponseCode.MESSAGE_ILLEGAL and state(broker) == before


def test_the_ray_path_refuses_what_the_wire_cannot_express(tmp_path: Path) -> None:
    """Through `send` (what the broker actor calls): keys with separators, non-int32 flags."""
    broker = Broker(tmp_path)
    before = state(broker)
    for bad in (MessageInner("T", 0, b"x", {"a\x02b": "v"}), MessageInner("T", 0, b"x", {"k": "v\x02w"}),
                MessageInner("T", 0, b"x", flag=1 << 31), MessageInner("T", 0, b"x", born_host="\udc80")):
        with pytest.raises(MQServerError) as refused:
            asyncio.run(broker.processor.send([bad], "TBW102", 4))
        assert refused.value.code == ResponseCode.MESSAGE_ILLEGAL
    assert state(broker) == before


def test_the_store_refuses_a_message_it_could_not_read_back(tmp_path: Path) -> None:
    """Below the processor too: the store checks at encoding, writing nothing for the refused one
    (and the rest of a group-commit batch normally)."""
    log = MessageStore(tmp_path / "store")
    with pytest.raises(MessageIllegal, match="properties length"):
        log.append(MessageInner("T", 0, b"x", {"p": "z" * 40_000}))
    with pytest.raises(MessageIllegal, match="topic length"):
        log.append(MessageInner("T" * 128, 0, b"x"))
    assert log.size_bytes() == 0 and log.queues() == {}

    async def group() -> list[Any]:
        puts = [log.put(MessageInner("T", 0, b"a")), log.put(MessageInner("T", 0, b"b", {"p": "z" * 40_000})),
                log.put(MessageInner("T", 0, b"c"))]
        return list(await asyncio.gather(*puts, return_exceptions=True))

    first, refused, last = asyncio.run(group())
    assert isinstance(refused, MessageIllegal)
    assert [m.body for m in log.get_message("T", 0, 0)] == [b"a", b"c"]
    assert (first.queue_offset, last.queue_offset) == (0, 1)
    log.close()
    (tmp_path / "store" / "checkpoint").unlink()  # scan the whole log again: every record it holds reads back
    reopened = MessageStore(tmp_path / "store")
    assert reopened.recovery.records == 2 and not reopened.recovery.corrupt_ranges


def reference_refusal(props: dict[Any, Any], msg_id: str) -> str | None:
    """The properties' rule as the store states it, pair by pair (what check_message's fast
    path must agree with): why they are refused, or None."""
    for key, value in props.items():
        if not isinstance(key, str) or not isinstance(value, str):
            return "must map a string to a string"
        if not key or "\x01" in key or "\x02" in key or "\x02" in value:
            return "separator"
    try:
        size = len(stored_properties(props, msg_id))
    except UnicodeError:
        return "not valid UTF-8"
    return "exceeds the limit" if size > PROPERTIES_MAX_BYTES else None


any_text = st.one_of(st.just("UNIQ_KEY"),
                     st.text(alphabet=st.sampled_from(["a", "\x01", "\x02", "é", "\ud800", "€"]), max_size=6))


@settings(max_examples=400, deadline=None)
@given(props=st.dictionaries(st.one_of(any_text, st.integers(0, 3)),
                             st.one_of(any_text, st.binary(max_size=2), st.integers(0, 3)), max_size=5),
       msg_id=st.sampled_from(["", "ID1", "é"]), pad=st.sampled_from([0, PROPERTIES_MAX_BYTES - 40, 20_000]))
def test_the_properties_check_agrees_with_the_rule_pair_by_pair(props: dict[Any, Any], msg_id: str,
                                                                pad: int) -> None:
    if pad:
        props["PAD"] = "x" * pad
    expected = reference_refusal(props, msg_id)
    try:
        check_message("T", props, msg_id, b"body", 100, (0, 0, 0, 0, 0))
    except MessageIllegal as e:
        assert expected is not None and expected in str(e), (expected, str(e))
    else:
        assert expected is None


@settings(max_examples=300, deadline=None)
@given(text=st.one_of(st.none(), st.text(alphabet=st.sampled_from(["a", "b", "\x01", "\x02", "é"]), max_size=14)))
def test_properties_text_parses_as_rocketmq_reads_it_pair_by_pair(text: str | None) -> None:
    """string2messageProperties: a pair without a separator or with an empty key is skipped, the
    value is everything after the first separator, a later key wins (the fast path agrees)."""
    expected: dict[str, str] = {}
    for item in (text or "").split("\x02"):
        key, sep, value = item.partition("\x01")
        if sep and key:
            expected[key] = value
    assert string_to_properties(text) == expected


@pytest.mark.parametrize("field", range(5))
def test_each_int_field_is_held_to_its_width_by_name(field: int) -> None:
    """The stored layout's int fields (queueId, flag, sysFlag, reconsumeTimes: 32 bits, bornTimestamp:
    64): both ends fit, one past either end, a bool or a float is refused naming the field."""
    name, wide = INT_FIELDS[field]
    bits = 64 if wide else 32
    low, high = -(1 << (bits - 1)), (1 << (bits - 1)) - 1

    def check(value: object) -> None:
        ints = [0, 0, 0, 0, 0]
        ints[field] = value  # type: ignore[call-overload]
        check_message("T", {}, "", b"x", 10, tuple(ints))  # type: ignore[arg-type]

    check(low)
    check(high)
    for bad in (low - 1, high + 1, True, 1.0):
        with pytest.raises(MessageIllegal, match=f"message {name} .* is not a {bits}-bit integer"):
            check(bad)
