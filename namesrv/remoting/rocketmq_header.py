"""RocketMQ's binary remoting header (serializeType 1, ROCKETMQ): `int16 code | int8 language |
int16 version | int32 opaque | int32 flag | int32 remarkLength + remark | int32 extLength + (int16
keyLength, key, int32 valueLength, value)*`."""

from __future__ import annotations

import struct

from namesrv.remoting.wire_command import FrameError, RemotingCommand, SerializeType

_INT = struct.Struct(">i")
_BIN_FIXED = struct.Struct(">hbhii")
_U16 = struct.Struct(">h")


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
