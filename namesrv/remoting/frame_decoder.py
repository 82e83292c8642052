"""Splitting a connection's byte stream into RocketMQ frames, decoded into commands, with the
server's guard on how much of a large frame it buffers before the frame's code is known."""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass, field

from namesrv.protocol.constants import MAX_FRAME_SIZE
from namesrv.remoting.json_header import decode_json_header
from namesrv.remoting.rocketmq_header import decode_rocketmq_header
from namesrv.remoting.wire_command import MAX_LENGTH_FIELD, FrameError, RemotingCommand, SerializeType

_INT = struct.Struct(">i")
_U16 = struct.Struct(">h")


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
