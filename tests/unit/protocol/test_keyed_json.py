"""Maps keyed by MessageQueue objects, as RocketMQ's fastjson writes them (TopicStatsTable,
ConsumeStats): read from a body Java wrote, written as Java writes it, and round-tripped; anything
else is refused with JsonError only."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from namesrv.protocol import fastjson
from namesrv.protocol.admin_bodies import (
    Connection,
    ConsumerConnection,
    ConsumeStats,
    GroupList,
    OffsetWrapper,
    TopicOffset,
    TopicStatsTable,
)
from namesrv.protocol.fastjson import JsonError
from namesrv.protocol.keyed_json import loads_keyed
from namesrv.protocol.models import MessageQueue
from namesrv.protocol.types import InvalidInput

JAVA_TOPIC_STATS = (
    b'{"offsetTable":{{"brokerName":"rocketmq-broker-a","queueId":2,"topic":"test"}:'
    b'{"lastUpdateTimestamp":0,"maxOffset":0,"minOffset":0},{"brokerName":"rocketmq-broker-a","queueId":3,'
    b'"topic":"test"}:{"lastUpdateTimestamp":1700000000000,"maxOffset":42,"minOffset":7}},"topicPutTps":0.0}'
)
"""A TopicStatsTable as RocketMQ 4.9's broker encodes it (RemotingSerializable.encode: fastjson, no
features): MessageQueue keys written as bare objects, fields in alphabetical order."""


def test_a_body_java_wrote_is_read() -> None:
    stats = TopicStatsTable.from_wire(loads_keyed(JAVA_TOPIC_STATS))
    assert stats.offset_table == {
        MessageQueue("test", "rocketmq-broker-a", 2): TopicOffset(0, 0, 0),
        MessageQueue("test", "rocketmq-broker-a", 3): TopicOffset(7, 42, 1700000000000),
    }


def test_it_is_written_as_java_writes_it() -> None:
    stats = TopicStatsTable({MessageQueue("test", "rocketmq-broker-a", 2): TopicOffset(0, 0, 0),
                             MessageQueue("test", "rocketmq-broker-a", 3): TopicOffset(7, 42, 1700000000000)})
    assert fastjson.dumps(stats.to_wire()) == JAVA_TOPIC_STATS


def test_consume_stats_connections_and_groups_round_trip() -> None:
    consume = ConsumeStats({MessageQueue("T", "b", 0): OffsetWrapper(10, 4, 6, 1700000000000),
                            MessageQueue("T", "b", 1): OffsetWrapper(3, 3)}, 1.5)
    again = ConsumeStats.from_wire(loads_keyed(fastjson.dumps(consume.to_wire())))
    assert again == consume and again.diff_total() == 6
    conn = ConsumerConnection([Connection("c1@1", "127.0.0.1:5555", "CPP", 401)],
                              {"T": {"subString": "*", "topic": "T"}}, "CONSUME_PASSIVELY", "CLUSTERING",
                              "CONSUME_FROM_LAST_OFFSET")
    assert ConsumerConnection.from_wire(loads_keyed(fastjson.dumps(conn.to_wire()))) == conn
    assert GroupList.from_wire(loads_keyed(fastjson.dumps(GroupList(["b", "a"]).to_wire()))) == GroupList(["a", "b"])


def test_integer_keys_and_standard_json_still_read() -> None:
    assert loads_keyed(b'{"brokerAddrs":{0:"h:1",1:"h:2"}}') == {"brokerAddrs": {0: "h:1", 1: "h:2"}}
    assert loads_keyed(b'[null, true, false, -1.5e3, "\\u00e9", [], {}]') == [None, True, False, -1500.0, "é", [], {}]


@pytest.mark.parametrize("bad", [b"", b"{", b'{"a" 1}', b"[1,]", b"{1.5:2}", b"nul", b'"\\x"', b"\xff",
                                 b'{"offsetTable":{{"a":1}:}}'])
def test_what_is_not_the_dialect_is_refused(bad: bytes) -> None:
    with pytest.raises(JsonError):
        loads_keyed(bad)


def test_a_key_that_is_no_message_queue_is_refused() -> None:
    with pytest.raises(InvalidInput):
        TopicStatsTable.from_wire(loads_keyed(b'{"offsetTable":{{"topic":"T"}:{"maxOffset":1}}}'))
    with pytest.raises(InvalidInput):
        TopicStatsTable.from_wire(loads_keyed(b'{"offsetTable":{"T":{"maxOffset":1}}}'))


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200) | st.text(max_size=200).map(str.encode))
def test_any_bytes_parse_or_raise_json_error(data: bytes) -> None:
    try:
        loads_keyed(data)
    except JsonError:
        pass


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(JSON_VALUES, st.lists(st.tuples(st.text(min_size=1, max_size=10), st.text(max_size=10),
                                       st.integers(0, 1023)), max_size=5))
def test_what_fastjson_writes_reads_back(value: object, queues: list[tuple[str, str, int]]) -> None:
    body = {"value": value, "offsetTable": {MessageQueue(*q): {"maxOffset": q[2]} for q in queues}}
    back = loads_keyed(fastjson.dumps(body))
    expected = json.loads(json.dumps(value)) if value is not None else None
    assert _drop_nulls(back.get("value")) == _drop_nulls(expected)
    assert {MessageQueue.from_wire(k.fields()): v for k, v in back["offsetTable"].items()} == {
        MessageQueue(*q): {"maxOffset": q[2]} for q in queues}


def _drop_nulls(value: object) -> object:
    """fastjson leaves null map values out."""
    if isinstance(value, dict):
        return {k: _drop_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_drop_nulls(v) for v in value]
    return value
