"""RocketMQ's frame and both header serializations, fastjson bodies and the compressed registration."""

from __future__ import annotations

import json
import struct
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from namesrv.protocol import fastjson
from namesrv.protocol.bodies import (
    body_crc32,
    encode_compressed_register_body,
    format_properties,
    parse_properties,
)
from namesrv.protocol.constants import MAX_FRAME_SIZE
from namesrv.protocol.register_body import read_register_body
from namesrv.protocol.types import InvalidInput
from namesrv.remoting.codec import encode_command, encode_plain_response
from namesrv.remoting.frame_decoder import FrameDecoder, decode_frame
from namesrv.remoting.json_header import decode_json_header
from namesrv.remoting.wire_command import RESPONSE_FLAG, FrameError, LanguageCode, RemotingCommand, SerializeType

# A request exactly as rocketmq-client-cpp 2.x (the PyPI `rocketmq` package) sends it, captured off the wire.
CPP_ROUTE_REQUEST_HEADER = (
    b'{"code":105,"extFields":{"AccessKey":"","OnsChannel":"ALIYUN","Signature":"LOAJMmPMgpivmghNjm3lrHrbrK8=",'
    b'"topic":"TopicProbe"},"flag":0,"language":"CPP","opaque":0,"remark":"","version":63}\n'
)


def frame(header: bytes, body: bytes = b"", kind: int = 0) -> bytes:
    return struct.pack(">ii", 4 + len(header) + len(body), (kind << 24) | len(header)) + header + body


# ---------------------------------------------------------------------------- frames and headers
def test_the_cpp_clients_request_decodes() -> None:
    [cmd] = FrameDecoder().feed(frame(CPP_ROUTE_REQUEST_HEADER))
    assert (cmd.code, cmd.opaque, cmd.flag, cmd.version) == (105, 0, 0, 63)
    assert cmd.language == LanguageCode.CPP and cmd.serialize_type is SerializeType.JSON
    assert cmd.ext_fields is not None and cmd.ext_fields["topic"] == "TopicProbe"
    assert cmd.remark == "" and cmd.body is None and not cmd.is_oneway and not cmd.is_response


@pytest.mark.parametrize("kind", list(SerializeType))
def test_response_round_trips_in_the_requests_serialization(kind: SerializeType) -> None:
    request = RemotingCommand(105, opaque=0, ext_fields={"topic": "T"}, serialize_type=kind)
    answer = request.response(17, "No topic route info in name server for the topic: T", {"a": "b"}, b"\x00\x01", 479)
    [decoded] = FrameDecoder().feed(encode_command(answer))
    assert decoded.serialize_type is kind
    assert (decoded.code, decoded.opaque, decoded.flag, decoded.remark, decoded.body, decoded.version) == (
        17, 0, 1, "No topic route info in name server for the topic: T", b"\x00\x01", 479)
    assert decoded.ext_fields == {"a": "b"} and decoded.is_response


def test_json_response_header_is_written_as_fastjson_writes_it() -> None:
    answer = RemotingCommand(105, opaque=7).response(0, None, None, None, 479)
    raw = encode_command(answer)
    header = raw[8:]
    assert header == b'{"code":0,"flag":1,"language":"JAVA","opaque":7,"serializeTypeCurrentRPC":"JSON","version":479}'
    assert struct.unpack(">ii", raw[:8]) == (4 + len(header), len(header))


def test_rocketmq_binary_header_layout() -> None:
    cmd = RemotingCommand(103, opaque=9, flag=2, language=LanguageCode.JAVA, version=401, remark="hi",
                          ext_fields={"k": "vv"}, body=b"B", serialize_type=SerializeType.ROCKETMQ)
    raw = encode_command(cmd)
    total, mark = struct.unpack(">ii", raw[:8])
    assert mark >> 24 == 1 and total == len(raw) - 4
    header = raw[8 : 8 + (mark & 0xFFFFFF)]
    assert header == (struct.pack(">hbhii", 103, 0, 401, 9, 2) + struct.pack(">i", 2) + b"hi"
                      + struct.pack(">i", 2 + 1 + 4 + 2) + struct.pack(">h", 1) + b"k" + struct.pack(">i", 2) + b"vv")
    assert raw[-1:] == b"B"
    assert decode_frame(raw[4:]).is_oneway


def test_non_string_ext_values_are_accepted_as_fastjson_does() -> None:
    header = json.dumps({"code": 105, "opaque": 3, "extFields": {"topic": "T", "acceptStandardJsonOnly": True,
                                                                 "n": 5, "gone": None}}).encode()
    [cmd] = FrameDecoder().feed(frame(header))
    assert cmd.ext_fields == {"topic": "T", "acceptStandardJsonOnly": "true", "n": "5"}


def test_frames_arrive_in_pieces_and_in_batches() -> None:
    frames = b"".join(encode_command(RemotingCommand(105, opaque=i, ext_fields={"topic": f"T{i}"})) for i in range(5))
    decoder = FrameDecoder()
    seen = []
    for i in range(0, len(frames), 7):  # 7-byte slices: every boundary lands mid-frame somewhere
        seen += decoder.feed(frames[i : i + 7])
    assert [c.opaque for c in seen] == list(range(5)) and decoder.pending_bytes == 0
    assert [c.opaque for c in FrameDecoder().feed(frames)] == list(range(5))


@pytest.mark.parametrize(
    "data, reason",
    [
        (struct.pack(">i", -1), "shorter than"),
        (struct.pack(">i", 3) + b"abc", "shorter than"),
        (struct.pack(">i", MAX_FRAME_SIZE), "exceeds"),
        (struct.pack(">ii", 8, 100) + b"{}{}", "header length 100 exceeds"),
        (frame(b"{}", kind=7), "unknown serialize type"),
        (frame(b"{not json"), "does not parse"),
        (frame(b"[1,2]"), "not an object"),
        (frame(b'{"opaque":1}'), "no code"),
        (frame(b'{"code":"105"}'), "code is not a 32-bit integer"),
        (frame(b'{"code":105,"opaque":4294967296}'), "opaque"),
        (frame(b'{"code":105,"extFields":[1]}'), "extFields"),
        (frame(b"\x00\x69\x00", kind=1), "shorter than its fixed part"),
        (frame(struct.pack(">hbhii", 105, 0, 0, 1, 0) + struct.pack(">i", 99) + b"x" * 4, kind=1), "remark length"),
        (frame(struct.pack(">hbhii", 105, 0, 0, 1, 0) + struct.pack(">ii", 0, 50), kind=1), "extFields length"),
        (frame(struct.pack(">hbhii", 105, 0, 0, 1, 0) + struct.pack(">ii", 0, 0) + b"zz", kind=1), "trailing"),
    ],
)
def test_malformed_frames_are_refused_with_a_reason(data: bytes, reason: str) -> None:
    with pytest.raises(FrameError, match=reason):
        FrameDecoder().feed(data)


def test_half_a_frame_waits_and_costs_only_its_bytes() -> None:
    decoder = FrameDecoder()
    whole = encode_command(RemotingCommand(105, ext_fields={"topic": "T"}))
    assert decoder.feed(whole[:-1]) == [] and decoder.pending_bytes == len(whole) - 1
    assert len(decoder.feed(whole[-1:])) == 1


commands = st.builds(
    RemotingCommand,
    code=st.integers(-(2**15), 2**15 - 1),
    opaque=st.integers(-(2**31), 2**31 - 1),
    flag=st.integers(0, 3),
    language=st.sampled_from(list(LanguageCode)),
    version=st.integers(0, 2**15 - 1),
    remark=st.one_of(st.none(), st.text(min_size=1, max_size=50)),
    ext_fields=st.one_of(st.none(), st.dictionaries(st.text(min_size=1, max_size=20), st.text(max_size=40),
                                                    min_size=1, max_size=6)),
    body=st.one_of(st.none(), st.binary(min_size=1, max_size=200)),
    serialize_type=st.sampled_from(list(SerializeType)),
)


@given(commands)
@settings(max_examples=300, deadline=None)
def test_every_command_round_trips(cmd: RemotingCommand) -> None:
    [decoded] = FrameDecoder().feed(encode_command(cmd))
    assert decoded == cmd


@given(st.binary(max_size=300))
@settings(max_examples=500, deadline=None)
def test_the_decoder_never_fails_but_with_a_frame_error(data: bytes) -> None:
    try:
        FrameDecoder().feed(data)
    except FrameError:
        pass


@given(commands, st.binary(min_size=1, max_size=40), st.integers(0, 60))
@settings(max_examples=300, deadline=None)
def test_corrupting_a_frame_only_ever_raises_frame_error(cmd: RemotingCommand, junk: bytes, at: int) -> None:
    raw = bytearray(encode_command(cmd))
    pos = min(at, len(raw) - 1)
    raw[pos : pos + len(junk)] = junk
    try:
        FrameDecoder().feed(bytes(raw))
    except FrameError:
        pass


# ---------------------------------------------------------------------------- fastjson
def test_fastjson_writes_bare_integer_keys_sorted_fields_and_no_nulls() -> None:
    route = {"queueDatas": [{"brokerName": "b", "perm": 6}], "orderTopicConf": None,
             "brokerDatas": [{"cluster": "C", "brokerName": "b", "brokerAddrs": {1: "h:2", 0: "h:1"}}]}
    assert fastjson.dumps(route) == (
        b'{"brokerDatas":[{"brokerAddrs":{0:"h:1",1:"h:2"},"brokerName":"b","cluster":"C"}],'
        b'"queueDatas":[{"brokerName":"b","perm":6}]}')
    assert fastjson.dumps(route, standard=True) == (
        b'{"brokerDatas":[{"brokerAddrs":{"0":"h:1","1":"h:2"},"brokerName":"b","cluster":"C"}],'
        b'"queueDatas":[{"brokerName":"b","perm":6}]}')
    assert fastjson.dumps({"t": "é"}, standard=True) == b'{"t":"\\u00e9"}'
    assert fastjson.dumps({"t": "é"}) == '{"t":"é"}'.encode()


def test_fastjson_reads_bare_keys_outside_strings_only() -> None:
    assert fastjson.loads(b'{"a":{0:"x",12 : "y"},"s":"{0:1}"}') == {"a": {"0": "x", "12": "y"}, "s": "{0:1}"}
    for bad in (b"{", b"\xff", b"[" * 100_000):
        with pytest.raises(fastjson.JsonError):
            fastjson.loads(bad)


# ---------------------------------------------------------------------------- bodies
def test_compressed_registration_round_trips() -> None:
    body = {"topicConfigSerializeWrapper": {
        "dataVersion": {"counter": 3, "stateVersion": 0, "timestamp": 99},
        "topicConfigTable": {"T": {"topicName": "T", "readQueueNums": 4, "writeQueueNums": 2, "perm": 6,
                                   "topicFilterType": "SINGLE_TAG"}}},
        "filterServerList": ["f:1"]}
    decoded = read_register_body(encode_compressed_register_body(body), "compressed", 479)
    assert decoded["topicConfigSerializeWrapper"]["topicConfigTable"]["T"] == {
        "topicName": "T", "readQueueNums": 4, "writeQueueNums": 2, "perm": 6, "topicFilterType": "SINGLE_TAG"}
    assert decoded["topicConfigSerializeWrapper"]["dataVersion"]["counter"] == 3
    assert decoded["filterServerList"] == ["f:1"]


VERSION = b'{"counter":1,"timestamp":1}'


@pytest.mark.parametrize(
    "data, reason",
    [
        (b"not deflate", "not a deflate stream"),
        (zlib.compress(struct.pack(">i", 50) + b"{}"), "ends inside"),
        (zlib.compress(b"x" * 10)[:-4], "truncated"),
        (zlib.compress(struct.pack(">i", -3)), "negative"),
        (zlib.compress(struct.pack(">i", len(VERSION)) + VERSION + struct.pack(">i", 1) + struct.pack(">i", 3)
                       + b"a b" + struct.pack(">i", 2) + b"[]" + struct.pack(">i", 0)), "fewer than 5 fields"),
    ],
)
def test_bad_compressed_registrations_are_refused(data: bytes, reason: str) -> None:
    with pytest.raises(InvalidInput, match=reason):
        read_register_body(data, "compressed", 479)


def test_a_deflate_bomb_is_refused_before_it_is_unpacked() -> None:
    bomb = zlib.compress(b"\x00" * (300 * 1024 * 1024), 9)
    assert len(bomb) < 1024 * 1024
    with pytest.raises(InvalidInput, match="inflates beyond"):
        read_register_body(bomb, "compressed", 479)


def test_body_crc32_is_rocketmqs() -> None:
    data = b"registration"
    assert body_crc32(data) == zlib.crc32(data) & 0x7FFFFFFF
    assert body_crc32(None) == 0 and body_crc32(b"") == 0


def test_properties_text() -> None:
    assert parse_properties(b"# comment\na=1\n\nb : two\nc\n") == {"a": "1", "b": "two", "c": ""}
    assert format_properties({"b": "2", "a": "x=y"}) == b"a=x=y\nb=2\n"
    assert parse_properties(format_properties({"k": "v"})) == {"k": "v"}


def test_json_headers_parse_as_json_loads_does_around_the_object() -> None:
    """The fast parse takes what json.loads takes (jsoncpp's trailing newline, JSON's own blanks)
    and refuses what it refuses (any other trailing character, even a Unicode space)."""
    assert decode_json_header(CPP_ROUTE_REQUEST_HEADER).ext_fields == {
        "AccessKey": "", "OnsChannel": "ALIYUN", "Signature": "LOAJMmPMgpivmghNjm3lrHrbrK8=", "topic": "TopicProbe"}
    assert decode_json_header(b' \t{"code":10}\r\n').code == 10
    for bad in (b'{"code":10} x', '{"code":10}\u2003'.encode(), b'{"code":10}\x1c', b'{"code":10}{}'):
        with pytest.raises(FrameError, match="does not parse"):
            decode_json_header(bad)


@pytest.mark.parametrize("kind", list(SerializeType))
@pytest.mark.parametrize("code, opaque, version, body", [
    (0, 0, 479, b""), (0, 123_456, 479, b'{"queueDatas":[]}'), (17, -1, 0, b"x" * 1000),
    (0, 2**31 - 1, 401, b"{}"), (1, -(2**31), 32767, b""),
])
def test_a_plain_response_frame_is_what_the_general_encoder_writes(kind: SerializeType, code: int, opaque: int,
                                                                    version: int, body: bytes) -> None:
    cmd = RemotingCommand(code, opaque, RESPONSE_FLAG, LanguageCode.JAVA, version, None, None, body or None, kind)
    head, out_body = encode_plain_response(code, opaque, version, kind, body)
    assert head + out_body == encode_command(cmd)
    [back] = FrameDecoder().feed(head + out_body)
    assert (back.code, back.opaque, back.flag, back.version, back.serialize_type) == (code, opaque, 1, version, kind)
