"""The commit log's record format and per-queue index, shared by the log, its recovery and
replication (namesrv.store.ha.transfer).

Record layout: magic (4 B) | payload length (4 B) | crc32 of payload (4 B) | payload (msgpack list:
topic, queue id, queue offset, store time, msg id, properties, body, then flag, sysFlag, born time,
born host, reconsume times).

A record never spans two commit-log segments: the end of a segment a record does not fit in is
filled by one BLANK record (RocketMQ's BLANK_MAGIC_CODE end-of-file record): magic BLANK_MAGIC, the
length of the zero bytes that follow, crc 0. RocketMQ writes only its 8-byte header into a file that
is already zeros; ours is written in full (at most one record's size, so bounded), so a segment's
bytes are the same on a master and its slaves.
"""

from __future__ import annotations

import struct
import zlib
from typing import Any

import msgpack

from namesrv.protocol.constants import MAX_MESSAGE_SIZE

MAGIC = 0x524D5131  # "RMQ1"
BLANK_MAGIC = 0xCBD43194
"""RocketMQ's BLANK_MAGIC_CODE (-875286124 as an unsigned int): the rest of this segment is padding."""
HEADER = struct.Struct(">III")
MAX_RECORD = MAX_MESSAGE_SIZE + 64 * 1024
"""A record longer than this cannot be ours (body limit plus properties and fields)."""
SCAN_CHUNK = 1 << 20


BLANK: list[Any] = []
"""The fields `read_record` gives for a BLANK record (test with `is`)."""


def blank_record(room: int) -> bytes:
    """The BLANK record filling the last `room` bytes of a segment (room >= HEADER.size)."""
    return HEADER.pack(BLANK_MAGIC, room - HEADER.size, 0) + bytes(room - HEADER.size)


def read_record(f: Any, pos: int, size: int) -> tuple[list[Any], int] | str:
    """The record at `pos` as (fields, end), or why it is not one; a BLANK record's fields are
    `BLANK` (its zero padding is not checked)."""
    if size - pos < HEADER.size:
        return "short header"
    f.seek(pos)
    magic, length, crc = HEADER.unpack(f.read(HEADER.size))
    if magic == BLANK_MAGIC and crc == 0 and pos + HEADER.size + length <= size:
        return BLANK, pos + HEADER.size + length
    if magic != MAGIC:
        return "bad magic"
    if length > MAX_RECORD:
        return "bad length"
    end = pos + HEADER.size + length
    if end > size:
        return "short payload"
    payload = f.read(length)
    if zlib.crc32(payload) != crc:
        return "bad checksum"
    fields = decode_payload(payload)
    return fields if isinstance(fields, str) else (fields, end)


def decode_payload(payload: bytes) -> list[Any] | str:
    """A record's fields, or why its payload is not one of ours."""
    try:
        fields = msgpack.unpackb(payload, raw=False)
    except (ValueError, msgpack.UnpackException):
        return "bad payload"
    if not (isinstance(fields, list) and len(fields) >= 7 and isinstance(fields[0], str)
            and isinstance(fields[1], int) and isinstance(fields[2], int) and isinstance(fields[3], int)):
        return "bad payload"
    return fields


def parse_records(data: bytes, base: int) -> list[tuple[list[Any], int, int]]:
    """Every record of `data`, which must hold whole valid records only (a replicated batch), as
    (fields, position, size) with positions counted from `base`; ValueError names the first fault.
    BLANK records (segment padding) are checked and left out."""
    out: list[tuple[list[Any], int, int]] = []
    pos, view = 0, memoryview(data)
    while pos < len(data):
        if len(data) - pos < HEADER.size:
            raise ValueError(f"short header at {base + pos}")
        magic, length, crc = HEADER.unpack_from(data, pos)
        if magic == BLANK_MAGIC and crc == 0:
            if pos + HEADER.size + length > len(data):
                raise ValueError(f"blank record at {base + pos} ends past the batch")
            pos += HEADER.size + length
            continue
        if magic != MAGIC or length > MAX_RECORD:
            raise ValueError(f"bad {'magic' if magic != MAGIC else 'length'} at {base + pos}")
        end = pos + HEADER.size + length
        if end > len(data):
            raise ValueError(f"record at {base + pos} ends past the batch ({end - len(data)} bytes missing)")
        payload = bytes(view[pos + HEADER.size : end])
        if zlib.crc32(payload) != crc:
            raise ValueError(f"bad checksum at {base + pos}")
        fields = decode_payload(payload)
        if isinstance(fields, str):
            raise ValueError(f"{fields} at {base + pos}")
        out.append((fields, base + pos, end - pos))
        pos = end
    return out


def whole_records_prefix(data: bytes) -> int:
    """Length of the longest prefix of `data` made of whole records (by their headers alone);
    0 when even the first record is not whole."""
    pos = 0
    while len(data) - pos >= HEADER.size:
        _, length, _ = HEADER.unpack_from(data, pos)
        end = pos + HEADER.size + length
        if end > len(data):
            break
        pos = end
    return pos


_MAGIC_BYTES = struct.pack(">I", MAGIC)


def resync(f: Any, start: int, size: int) -> int | None:
    """Position of the next valid record after a corrupt one, or None (found by its magic, then
    checked in full: length, CRC and payload)."""
    pos = start
    while pos < size:
        f.seek(pos)
        chunk: bytes = f.read(SCAN_CHUNK + 3)
        i = chunk.find(_MAGIC_BYTES)
        while i >= 0:
            candidate = pos + i
            if not isinstance(read_record(f, candidate, size), str):
                return candidate
            i = chunk.find(_MAGIC_BYTES, i + 1)
        pos += SCAN_CHUNK
    return None
