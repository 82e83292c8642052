"""RocketMQ's remoting protocol on the wire: the frame and both header serializations.

Frame, big-endian: `int32 total (4 + headerLength + bodyLength) | int32 (serializeType << 24 |
headerLength) | header | body`. Headers are JSON (serializeType 0) or ROCKETMQ binary (1):
`int16 code | int8 language | int16 version | int32 opaque | int32 flag | int32 remarkLength + remark
| int32 extLength + (int16 keyLength, key, int32 valueLength, value)*`. flag bit 0 marks a
response, bit 1 a oneway request. A response is written in the serialization of its request.

`FrameDecoder` takes bytes as they arrive and hands back whole commands; anything malformed raises
`FrameError`, after which the connection is closed (as RocketMQ's NettyDecoder does).

This module is the codec's one import home; its parts live in `wire_command` (the command, its
flags and codes), `json_header`, `rocketmq_header` and `frame_decoder`; encoding a whole frame is
here, the common plain answer (no remark, no extFields) without building its command first.
"""

from __future__ import annotations

import struct

from namesrv.protocol.constants import MAX_FRAME_SIZE
from namesrv.remoting.json_header import encode_json_header
from namesrv.remoting.rocketmq_header import encode_rocketmq_header
from namesrv.remoting.wire_command import (
    MAX_LENGTH_FIELD,
    RESPONSE_FLAG,
    FrameError,
    LanguageCode,
    RemotingCommand,
    SerializeType,
)

_FRAME_HEAD = struct.Struct(">ii")


def encode_command(cmd: RemotingCommand) -> bytes:
    """One whole frame for `cmd`, in its serialization."""
    head, body = encode_command_parts(cmd)
    return head + body if body else head


def encode_command_parts(cmd: RemotingCommand) -> tuple[bytes, bytes]:
    """`cmd`'s frame as (length fields + header, body): a server hands both to one vectored write,
    so a cached body (a route's JSON) is not copied into a frame of its own first."""
    if cmd.serialize_type is SerializeType.ROCKETMQ:
        header = encode_rocketmq_header(cmd)
    else:
        header = encode_json_header(cmd)
    body = cmd.body or b""
    total = 4 + len(header) + len(body)
    if total > MAX_LENGTH_FIELD:
        raise FrameError(f"frame of {total} bytes exceeds the {MAX_FRAME_SIZE}-byte limit")
    return _FRAME_HEAD.pack(total, (int(cmd.serialize_type) << 24) | len(header)) + header, body


EncodedFrame = tuple[bytes, bytes]
"""An answer already encoded as (length fields + header, body), as `encode_command_parts` gives it:
what a server writes as it is."""

_PLAIN_JSON_HEADER = b'{"code":%d,"flag":1,"language":"JAVA","opaque":%d,"serializeTypeCurrentRPC":"JSON","version":%d}'
"""`encode_json_header` of a response with no remark and no extFields (fastjson's field order)."""
_PLAIN_ROCKETMQ_HEADER = struct.Struct(">hbhiiii")
"""`encode_rocketmq_header` of the same: the fixed part, then remark length 0, extFields length 0."""
_ROCKETMQ_MARK = int(SerializeType.ROCKETMQ) << 24
PLAIN_BODY_MAX = MAX_LENGTH_FIELD - 256
"""The longest body `encode_plain_response` takes (its header is under 128 bytes)."""


def encode_plain_response(code: int, opaque: int, version: int, serialize_type: SerializeType,
                          body: bytes) -> EncodedFrame:
    """The frame of a response with no remark and no extFields (flag RESPONSE, language JAVA): the
    same bytes `encode_command_parts` writes for it, without building the command first. `body` is
    at most PLAIN_BODY_MAX bytes (the caller checks)."""
    if serialize_type is SerializeType.ROCKETMQ:
        header = _PLAIN_ROCKETMQ_HEADER.pack(code, LanguageCode.JAVA, version, opaque, RESPONSE_FLAG, 0, 0)
        return _FRAME_HEAD.pack(4 + len(header) + len(body), _ROCKETMQ_MARK | len(header)) + header, body
    header = _PLAIN_JSON_HEADER % (code, opaque, version)
    return _FRAME_HEAD.pack(4 + len(header) + len(body), len(header)) + header, body
