"""RocketMQ's remoting protocol on the wire: the frame and both header serializations.

Frame, big-endian: `int32 total (4 + headerLength + bodyLength) | int32 (serializeType << 24 |
headerLength) | header | body`. Headers are JSON (serializeType 0) or ROCKETMQ binary (1):
`int16 code | int8 language | int16 version | int32 opaque | int32 flag | int32 remarkLength + remark
| int32 extLength + (int16 keyLength, key, int32 valueLength, value)*`. flag bit 0 marks a
response, bit 1 a oneway request. A response is written in the serialization of its request.

`FrameDecoder` takes bytes as they arrive and hands back whole commands; anything malformed raises
`FrameError`, after which the connection is closed (as RocketMQ's NettyDecoder does).
"""

from __future__ import annotations

import json
import json.scanner
import re
import struct
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

from namesrv.protocol.constants import MAX_FRAME_SIZE

RESPONSE_FLAG = 1 << 0
ONEWAY_FLAG = 1 << 1


class SerializeType(IntEnum):
    JSON = 0
    ROCKETMQ = 1


class LanguageCode(IntEnum):
    JAVA = 0
    CPP = 1
    DOTNET = 2
    PYTHON = 3
    DELPHI = 4
    ERLANG = 5
    RUBY = 6
    OTHER = 7
    HTTP = 8
    GO = 9
    PHP = 10
    OMS = 11
    RUST = 12
    NODE_JS = 13


class FrameError(ValueError):
    """The bytes on a connection are not a RocketMQ frame: the connection is closed."""


@dataclass(slots=True)
class RemotingCommand:
    """One request or response as it travels. `ext_fields` values are strings, as RocketMQ's
    HashMap<String, String>; `language` keeps the sender's code even when RocketMQ has no name for it."""

    code: int
    opaque: int = 0
    flag: int = 0
    language: int = LanguageCode.JAVA
    version: int = 0
    remark: str | None = None
    ext_fields: dict[str, str] | None = None
    body: bytes | None = None
    serialize_type: SerializeType = SerializeType.JSON

    @property
    def is_response(self) -> bool:
        return bool(self.flag & RESPONSE_FLAG)

    @property
    def is_oneway(self) -> bool:
        return bool(self.flag & ONEWAY_FLAG)

    def response(self, code: int, remark: str | None = None, ext_fields: dict[str, str] | None = None,
                 body: bytes | None = None, version: int = 0) -> RemotingCommand:
        """The answer to this request: same opaque and serialization, the response flag set."""
        return RemotingCommand(code, self.opaque, RESPONSE_FLAG, LanguageCode.JAVA, version, remark, ext_fields,
                               body, self.serialize_type)


_INT = struct.Struct(">i")
_FRAME_HEAD = struct.Struct(">ii")
_BIN_FIXED = struct.Struct(">hbhii")
_U16 = struct.Struct(">h")

MAX_LENGTH_FIELD = MAX_FRAME_SIZE - 4
"""Netty's LengthFieldBasedFrameDecoder counts the length field itself against the 16 MiB limit."""


# ---------------------------------------------------------------------------- ext field values
def ext_value(value: Any) -> str:
    """An extFields value as the string RocketMQ's HashMap<String, String> would hold: fastjson turns
    `true` into "true", 5 into "5", a nested object into its JSON."""
    if isinstance(value, str):
        return value
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, (int, float)):
        return str(value)
    return json.dumps(value, separators=(",", ":"))


# ---------------------------------------------------------------------------- headers
_JSON_INT_FIELDS = ("code", "version", "opaque", "flag")
_LANGUAGE_BY_NAME: dict[str, int] = {m.name: int(m) for m in LanguageCode}
_LANGUAGE_NAME: dict[int, str] = {int(m): m.name for m in LanguageCode}
_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1
# The C scanner under json.loads, called directly: a header is one JSON object, and json.loads'
# Python wrappers (encoding detection, the trailing-blank check) cost as much as the parse.
_SCAN_JSON: Any = json.scanner.make_scanner(json.JSONDecoder())  # type: ignore[arg-type]


def _parse_json(data: bytes | bytearray) -> Any:
    try:
        text = data.decode("utf-8")
        obj, end = _SCAN_JSON(text, 0)
        if end == len(text) or not text[end:].strip(" \t\n\r"):  # JSON's blanks: jsoncpp (C++ client) ends with \n
            return obj
    except (UnicodeDecodeError, StopIteration, ValueError, RecursionError):
        pass
    try:  # anything but a bare object in UTF-8: json.loads decides, and words the error
        return json.loads(data)
    except (ValueError, RecursionError) as e:
        raise FrameError(f"JSON header does not parse: {e}") from None


def decode_json_header(data: bytes | bytearray) -> RemotingCommand:
    obj = _parse_json(data)
    if type(obj) is not dict:
        raise FrameError("JSON header is not an object")
    get = obj.get
    code, opaque, flag, version = get("code"), get("opaque", 0), get("flag", 0), get("version", 0)
    # the common case in one test (exact ints in range); anything else is checked field by field
    if not (type(code) is int and type(opaque) is int and type(flag) is int and type(version) is int
            and _INT32_MIN <= code <= _INT32_MAX and _INT32_MIN <= opaque <= _INT32_MAX
            and _INT32_MIN <= flag <= _INT32_MAX and _INT32_MIN <= version <= _INT32_MAX):
        if "code" not in obj:
            raise FrameError("JSON header has no code")
        for name in _JSON_INT_FIELDS:
            value = get(name, 0)
            if isinstance(value, bool) or not isinstance(value, int) or not _INT32_MIN <= value <= _INT32_MAX:
                raise FrameError(f"JSON header field {name} is not a 32-bit integer: {value!r}")
        code, opaque, flag, version = (int(get(name, 0)) for name in ("code", "opaque", "flag", "version"))
    language = get("language", "JAVA")
    lang = _LANGUAGE_BY_NAME.get(language) if type(language) is str else language if type(language) is int else None
    lang = int(LanguageCode.OTHER) if lang is None else lang
    remark = get("remark")
    if remark is not None and type(remark) is not str:
        remark = ext_value(remark)
    ext = get("extFields")
    if ext is not None:
        if type(ext) is not dict:
            raise FrameError("JSON header extFields is not an object")
        for v in ext.values():
            if type(v) is not str:
                ext = {k: ext_value(v) for k, v in ext.items() if v is not None}
                break
    return RemotingCommand(code, opaque, flag, lang, version, remark, ext)


def encode_json_header(cmd: RemotingCommand) -> bytes:
    """fastjson's field order (alphabetical), null fields omitted."""
    language = _LANGUAGE_NAME.get(cmd.language, "OTHER")
    if cmd.ext_fields is None and cmd.remark is None:  # most answers: one format, no list
        return (f'{{"code":{cmd.code},"flag":{cmd.flag},"language":"{language}","opaque":{cmd.opaque}'
                f',"serializeTypeCurrentRPC":"JSON","version":{cmd.version}}}').encode()
    parts = [f'{{"code":{cmd.code}']
    if cmd.ext_fields is not None:
        parts.append(',"extFields":' + json.dumps(cmd.ext_fields, ensure_ascii=False, separators=(",", ":")))
    parts.append(f',"flag":{cmd.flag},"language":"{language}","opaque":{cmd.opaque}')
    if cmd.remark is not None:
        parts.append(',"remark":' + json.dumps(cmd.remark, ensure_ascii=False))
    parts.append(f',"serializeTypeCurrentRPC":"JSON","version":{cmd.version}}}')
    return "".join(parts).encode("utf-8")


def _read_str(data: bytes | bytearray, pos: int, short: bool, limit: int, what: str) -> tuple[str | None, int]:
    if short:
        if pos + 2 > len(data):
            raise FrameError(f"ROCKETMQ header truncated in {what} length")
        (length,) = _U16.unpack_from(data, pos)
        pos += 2
    else:
        if pos + 4 > len(data):
            raise FrameError(f"ROCKETMQ header truncated in {what} length")
        (length,) = _INT.unpack_from(data, pos)
        pos += 4
    if length == 0:
        return None, pos
    if length < 0 or length > limit or pos + length > len(data):
        raise FrameError(f"ROCKETMQ header {what} length {length} exceeds the header")
    try:
        return data[pos : pos + length].decode("utf-8"), pos + length
    except UnicodeDecodeError:
        raise FrameError(f"ROCKETMQ header {what} is not UTF-8") from None


def decode_rocketmq_header(data: bytes | bytearray) -> RemotingCommand:
    if len(data) < _BIN_FIXED.size + 8:
        raise FrameError(f"ROCKETMQ header of {len(data)} bytes is shorter than its fixed part")
    code, language, version, opaque, flag = _BIN_FIXED.unpack_from(data, 0)
    pos = _BIN_FIXED.size
    remark, pos = _read_str(data, pos, False, len(data), "remark")
    if pos + 4 > len(data):
        raise FrameError("ROCKETMQ header truncated before extFields")
    (ext_len,) = _INT.unpack_from(data, pos)
    pos += 4
    if ext_len < 0 or pos + ext_len > len(data):
        raise FrameError(f"ROCKETMQ header extFields length {ext_len} exceeds the header")
    ext_fields: dict[str, str] | None = None
    if ext_len > 0:
        ext_fields = {}
        end = pos + ext_len
        while pos < end:
            key, pos = _read_str(data, pos, True, ext_len, "extFields key")
            value, pos = _read_str(data, pos, False, ext_len, "extFields value")
            if pos > end:
                raise FrameError("ROCKETMQ header extFields entry runs past its length")
            if key is not None:
                ext_fields[key] = value if value is not None else ""
    if pos != len(data):
        raise FrameError(f"ROCKETMQ header has {len(data) - pos} trailing bytes")
    return RemotingCommand(code, opaque, flag, language, version, remark, ext_fields,
                           serialize_type=SerializeType.ROCKETMQ)


def encode_rocketmq_header(cmd: RemotingCommand) -> bytes:
    parts = [_BIN_FIXED.pack(cmd.code, cmd.language, cmd.version, cmd.opaque, cmd.flag)]
    if cmd.remark:
        remark = cmd.remark.encode("utf-8")
        parts += [_INT.pack(len(remark)), remark]
    else:
        parts.append(_INT.pack(0))
    ext = bytearray()
    for k, v in (cmd.ext_fields or {}).items():
        kb, vb = k.encode("utf-8"), v.encode("utf-8")
        ext += _U16.pack(len(kb)) + kb + _INT.pack(len(vb)) + vb
    parts += [_INT.pack(len(ext)), bytes(ext)]
    return b"".join(parts)


# ---------------------------------------------------------------------------- frames
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


def decode_frame(frame: bytes | bytearray) -> RemotingCommand:
    """One frame without its length field: `int32 type|headerLength`, header, body."""
    return _decode_at(frame, 0, len(frame))


def _decode_at(buf: bytes | bytearray, start: int, end: int) -> RemotingCommand:
    """The frame in `buf[start:end]` (without its length field), header and body each copied out
    once."""
    size = end - start
    if size < 4:
        raise FrameError(f"frame of {size} bytes has no header length")
    (mark,) = _INT.unpack_from(buf, start)
    header_len = mark & 0xFFFFFF
    kind = (mark >> 24) & 0xFF
    if header_len > size - 4:
        raise FrameError(f"header length {header_len} exceeds the frame ({size - 4} bytes left)")
    header = buf[start + 4 : start + 4 + header_len]  # bytes, or a bytearray copy: both parse
    if kind == SerializeType.JSON:
        cmd = decode_json_header(header)
    elif kind == SerializeType.ROCKETMQ:
        cmd = decode_rocketmq_header(header)
    else:
        raise FrameError(f"unknown serialize type {kind}")
    if start + 4 + header_len < end:
        with memoryview(buf) as view:  # one copy of a (maybe megabytes) body, not two
            cmd.body = bytes(view[start + 4 + header_len : end])
    return cmd


_JSON_CODE_FIRST = re.compile(rb'\{\s*+"code"\s*+:\s*+(-?\d{1,10})\s*+[,}]')
"""A JSON header that names its code first, as fastjson and jsoncpp (sorted keys) write it."""


def _peek_code(kind: int, header_start: bytes | bytearray, header_len: int) -> int | None:
    """The request code of a frame from the start of its header, once enough of it is in (None:
    not yet). A JSON header must name its code first, or be whole, to be read early."""
    if kind == SerializeType.ROCKETMQ:
        return None if len(header_start) < 2 else int(_U16.unpack_from(header_start, 0)[0])
    if kind != SerializeType.JSON:
        raise FrameError(f"unknown serialize type {kind}")
    m = _JSON_CODE_FIRST.match(header_start)
    if m is not None:
        return int(m.group(1))
    if len(header_start) < header_len:
        return None
    return decode_json_header(bytes(header_start)).code


@dataclass
class FrameDecoder:
    """Splits a byte stream into commands. `feed` returns every command completed by the new bytes;
    a half frame waits for the rest (and costs only its buffer).

    With `small_frame_limit` set (a server), a frame longer than that (length field included) must
    be a request whose code is in `large_codes` (registrations, sends: the codes that carry big
    bodies); its code is read from the start of its header, within the first `small_frame_limit`
    bytes, before its body is buffered, and anything else is a FrameError right there."""

    max_length: int = MAX_LENGTH_FIELD
    small_frame_limit: int | None = None
    large_codes: frozenset[int] = frozenset()
    _buffer: bytearray = field(default_factory=bytearray)
    _head_code: int | None = None
    """The code read early from the large frame at the head of the buffer (None: not read)."""
    completed: int = 0
    """Frames decoded so far."""

    @property
    def pending_bytes(self) -> int:
        return len(self._buffer)

    @property
    def head_frame_size(self) -> int:
        """Bytes of the partial frame at the head of the buffer, length field included, once its
        length is known and (for a large one) its code was allowed; 0 otherwise."""
        buf = self._buffer
        if len(buf) < 4:
            return 0
        size = 4 + int(_INT.unpack_from(buf, 0)[0])
        limit = self.small_frame_limit
        return size if limit is None or size <= limit or self._head_code is not None else 0

    def clear(self) -> None:
        """Drop what is buffered (the connection is gone): the memory goes back at once."""
        self._buffer = bytearray()
        self._head_code = None

    def _large_frame_allowed(self, buf: bytearray, pos: int, length: int) -> bool:
        """Read the code of a frame longer than the small-frame limit; False: not enough of its
        header is in yet. Raises FrameError for a code that may not send big frames."""
        limit = self.small_frame_limit
        assert limit is not None
        if len(buf) - pos < 8:
            return False
        (mark,) = _INT.unpack_from(buf, pos + 4)
        header_len = mark & 0xFFFFFF
        if header_len > length - 4:
            raise FrameError(f"header length {header_len} exceeds the frame ({length - 4} bytes left)")
        start = buf[pos + 8 : pos + 8 + min(header_len, limit - 8)]
        code = _peek_code((mark >> 24) & 0xFF, start, header_len)
        if code is None:
            if len(start) == limit - 8:
                raise FrameError(f"a frame of {4 + length} bytes must name its request code within its first "
                                 f"{limit} bytes")
            return False
        if code not in self.large_codes:
            raise FrameError(f"a frame of {4 + length} bytes exceeds the {limit}-byte limit for request code {code}")
        self._head_code = code
        return True

    def feed(self, data: bytes | bytearray | memoryview) -> list[RemotingCommand]:
        buf = self._buffer
        buf += data
        out: list[RemotingCommand] = []
        pos = 0
        limit = self.small_frame_limit
        while len(buf) - pos >= 4:
            (length,) = _INT.unpack_from(buf, pos)
            if length < 4:
                raise FrameError(f"frame length {length} is shorter than its header length field")
            if length > self.max_length:
                raise FrameError(f"frame length {length} exceeds the {MAX_FRAME_SIZE}-byte limit")
            large = limit is not None and 4 + length > limit
            if large and self._head_code is None and not self._large_frame_allowed(buf, pos, length):
                break
            if len(buf) - pos - 4 < length:
                break
            cmd = _decode_at(buf, pos + 4, pos + 4 + length)
            if large and cmd.code != self._head_code:
                raise FrameError(f"a frame read early as request code {self._head_code} decodes as {cmd.code}")
            out.append(cmd)
            self._head_code = None
            self.completed += 1
            pos += 4 + length
        if pos:
            del buf[:pos]
        return out
