"""The sliced REGISTER_BROKER body reader: the same topics, version and filter servers as decoding the
whole body at once, in every encoding and field order; malformed bodies are InvalidInput, nothing else."""

from __future__ import annotations

import json
import struct
import zlib
from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from namesrv.protocol import fastjson
from namesrv.protocol.bodies import encode_compressed_register_body
from namesrv.protocol.register_body import open_register_body, read_register_body
from namesrv.protocol.register_body_base import SLICE
from namesrv.protocol.types import InvalidInput


def topic(name: str, queues: int = 8, perm: int = 6) -> dict[str, Any]:
    return {"topicName": name, "readQueueNums": queues, "writeQueueNums": queues, "perm": perm,
            "topicFilterType": "SINGLE_TAG"}


def body(n: int, counter: int = 1, filters: list[str] | None = None) -> dict[str, Any]:
    return {
        "filterServerList": filters or [],
        "topicConfigSerializeWrapper": {
            "dataVersion": {"counter": counter, "timestamp": 1700000000000},
            "topicConfigTable": {f"T{i}": topic(f"T{i}", 1 + i % 16) for i in range(n)},
        },
    }


def encode(raw: dict[str, Any], encoding: str) -> bytes:
    if encoding == "msgpack":
        return msgpack.packb(raw, use_bin_type=True)
    if encoding == "json":
        return fastjson.dumps(raw)
    return encode_compressed_register_body(raw)


def count_yields(data: bytes, encoding: str) -> int:
    steps = open_register_body(data, encoding, 479)  # type: ignore[arg-type]
    n = 0
    while True:
        try:
            next(steps)
        except StopIteration:
            return n
        n += 1


@pytest.mark.parametrize("encoding", ["msgpack", "json", "compressed"])
def test_reads_what_the_broker_wrote(encoding: str) -> None:
    raw = body(1500, counter=7, filters=["10.0.0.9:30000"])
    got = read_register_body(encode(raw, encoding), encoding, 479)  # type: ignore[arg-type]
    assert got["topicConfigSerializeWrapper"]["dataVersion"] == {"counter": 7, "stateVersion": 0,
                                                                  "timestamp": 1700000000000}
    assert got["filterServerList"] == ["10.0.0.9:30000"]
    assert got["topicConfigSerializeWrapper"]["topicConfigTable"] == raw["topicConfigSerializeWrapper"][
        "topicConfigTable"]


def test_json_and_msgpack_fields_may_come_in_any_order_and_either_case() -> None:
    table = {"A": topic("A"), "B": topic("B", 2)}
    raw = {"topic_config_serialize_wrapper": {"topicConfigTable": table, "stateVersion": 3,
                                              "data_version": {"timestamp": 5, "counter": 2}},
           "unknown": [1, {"x": 2}], "filter_server_list": ["f:1"]}
    for data, encoding in ((json.dumps(raw).encode(), "json"), (msgpack.packb(raw), "msgpack")):
        got = read_register_body(data, encoding)  # type: ignore[arg-type]
        assert got["topicConfigSerializeWrapper"] == {"dataVersion": {"timestamp": 5, "counter": 2, "stateVersion": 0},
                                                      "topicConfigTable": table}, encoding
        assert got["filterServerList"] == ["f:1"]


def test_fastjson_bare_integer_keys_fall_back_to_the_whole_body_decoder() -> None:
    data = b'{"filterServerList":[],"odd":{0:"x"},"topicConfigSerializeWrapper":{"dataVersion":' \
           b'{"counter":1,"timestamp":2},"topicConfigTable":{"A":' + json.dumps(topic("A")).encode() + b"}}}"
    got = read_register_body(data, "json")
    assert got["topicConfigSerializeWrapper"]["topicConfigTable"] == {"A": topic("A")}


def test_opening_a_big_body_reads_no_topic_unless_the_version_comes_after_the_table() -> None:
    raw = body(10 * SLICE)
    assert count_yields(encode(raw, "json"), "json") == 0  # fastjson's order: the version comes first
    wrapper = raw["topicConfigSerializeWrapper"]
    table_first = {"topicConfigSerializeWrapper": {"topicConfigTable": wrapper["topicConfigTable"],
                                                   "dataVersion": wrapper["dataVersion"]}, "filterServerList": []}
    assert count_yields(json.dumps(table_first).encode(), "json") >= 10  # decoded in slices to find it
    assert count_yields(encode(raw, "msgpack"), "msgpack") == 0  # the table is skipped at C speed
    assert count_yields(encode(raw, "compressed"), "compressed") >= 1  # inflated, records skipped
    assert read_register_body(None, "json")["topicConfigSerializeWrapper"]["topicConfigTable"] == {}


@pytest.mark.parametrize(
    "data, encoding, reason",
    [
        (b"[1, 2]", "json", "must be a JSON object"),
        (b'{"topicConfigSerializeWrapper": []}', "json", "must be a map"),
        (b'{"topicConfigSerializeWrapper": {"topicConfigTable": 5}}', "json", "must be a map"),
        (b'{"filterServerList": [""]}', "json", "non-blank"),
        (b'{"topicConfigSerializeWrapper": {"dataVersion": {"counter": -1, "timestamp": 1}}}', "json",
         "dataVersion"),
        (b'{"a": 1} trailing', "json", "trailing|JSON"),
        (b"\xff\xfe", "json", "UTF-8"),
        (msgpack.packb({"a": 1}) + b"\x00", "msgpack", "trailing"),
        (msgpack.packb([1]), "msgpack", "must be a map"),
        (msgpack.packb({"topicConfigSerializeWrapper": {"topicConfigTable": [1]}}), "msgpack", "must be a map"),
        (msgpack.packb(body(3))[:-5], "msgpack", "not valid msgpack"),
        (zlib.compress(struct.pack(">i", 50) + b"{}"), "compressed", "ends inside"),
    ],
)
def test_malformed_bodies_are_invalid_input(data: bytes, encoding: str, reason: str) -> None:
    with pytest.raises(InvalidInput, match=reason):
        read_register_body(data, encoding)  # type: ignore[arg-type]


def test_a_truncated_json_table_is_found_before_any_topic_is_returned() -> None:
    data = encode(body(3 * SLICE), "json")
    with pytest.raises(InvalidInput):
        read_register_body(data[: len(data) // 2], "json")


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=512), st.sampled_from(["msgpack", "json", "compressed"]))
def test_any_bytes_are_read_or_refused_as_invalid_input(data: bytes, encoding: str) -> None:
    try:
        read_register_body(data, encoding, 479)  # type: ignore[arg-type]
    except InvalidInput:
        pass


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 40), st.sampled_from(["msgpack", "json", "compressed"]), st.data())
def test_a_damaged_body_is_read_or_refused_as_invalid_input(n: int, encoding: str, data: st.DataObject) -> None:
    good = bytearray(encode(body(n), encoding))
    cut = data.draw(st.integers(0, len(good)))
    flips = data.draw(st.lists(st.tuples(st.integers(0, max(len(good) - 1, 0)), st.integers(0, 255)), max_size=3))
    for at, value in flips:
        if at < len(good):
            good[at] = value
    try:
        read_register_body(bytes(good[:cut]), encoding, 479)  # type: ignore[arg-type]
    except InvalidInput:
        pass
