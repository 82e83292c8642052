"""A compressed REGISTER_BROKER body (RocketMQ 4.9+, the ``compressed`` header; see `register_body`):
a deflate stream of ``int32 length + DataVersion JSON``, ``int32 count``, per topic ``int32 length +
TopicConfig.encode()`` (space separated: name, read queues, write queues, perm, filter type,
attributes JSON), ``int32 length + filter server list JSON`` and, from brokers of 5.0 on, ``int32
count`` + queue mapping infos (which a NameServer ignores).

Inflation is bounded (a deflate bomb costs at most MAX_INFLATED_SIZE bytes, then is refused); the
topic records are skipped by their lengths when the body is opened and decoded only if the
registration needs them.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator
from typing import Any

from namesrv.protocol import fastjson
from namesrv.protocol.bodies import json_object
from namesrv.protocol.constants import MAX_FRAME_SIZE
from namesrv.protocol.models import parse_data_version
from namesrv.protocol.register_body_base import SLICE, Opening, RegisterBody, TopicEntry, filter_servers
from namesrv.protocol.types import InvalidInput

V5_0_0 = 413
"""MQVersion.Version.V5_0_0.ordinal(): brokers from here on append queue mappings to compressed bodies."""

MAX_INFLATED_SIZE = MAX_FRAME_SIZE
"""A compressed registration may not inflate beyond what would fit in a frame uncompressed: the
inflation stops at the first byte past it (a deflate bomb costs at most this much, then is refused)."""

_INT = struct.Struct(">i")


class _Records:
    """int32-length-prefixed records of an inflated body."""

    def __init__(self, data: bytes | bytearray, pos: int = 0) -> None:
        self.data = data
        self.pos = pos

    def int32(self, what: str) -> int:
        if self.pos + 4 > len(self.data):
            raise InvalidInput(f"compressed register body ends inside {what}")
        value: int = _INT.unpack_from(self.data, self.pos)[0]
        self.pos += 4
        if value < 0:
            raise InvalidInput(f"compressed register body has a negative {what}: {value}")
        return value

    def chunk(self, what: str) -> bytes | bytearray:
        length = self.int32(f"the length of {what}")
        if self.pos + length > len(self.data):
            raise InvalidInput(f"compressed register body ends inside {what}")
        out = self.data[self.pos : self.pos + length]
        self.pos += length
        return out

    def skip(self, what: str) -> None:
        length = self.int32(f"the length of {what}")
        if self.pos + length > len(self.data):
            raise InvalidInput(f"compressed register body ends inside {what}")
        self.pos += length


INFLATE_STEP = 1024 * 1024
"""Bytes inflated per step: the output grows by this much at a time, never by a doubling."""


def _inflate(data: bytes) -> bytearray:
    """Inflate in steps, stopping at the first byte past MAX_INFLATED_SIZE (which refuses it)."""
    inflater = zlib.decompressobj()
    out = bytearray()
    tail = data
    try:
        while not inflater.eof and len(out) <= MAX_INFLATED_SIZE:
            step = inflater.decompress(tail, min(INFLATE_STEP, MAX_INFLATED_SIZE + 1 - len(out)))
            if not step and not inflater.unconsumed_tail:
                break  # the input ended before the stream did
            out += step
            tail = inflater.unconsumed_tail
    except zlib.error as e:
        raise InvalidInput(f"compressed register body is not a deflate stream: {e}") from None
    if len(out) > MAX_INFLATED_SIZE:
        raise InvalidInput(f"compressed register body inflates beyond {MAX_INFLATED_SIZE} bytes")
    if not inflater.eof:
        raise InvalidInput("compressed register body is truncated")
    return out


def _compressed_topic(text: str) -> dict[str, Any]:
    """TopicConfig.decode: at least five space-separated fields."""
    parts = text.split(" ")
    if len(parts) < 5:
        raise InvalidInput(f"compressed topic config {text[:80]!r} has fewer than 5 fields")
    try:
        read, write, perm = int(parts[1]), int(parts[2]), int(parts[3])
    except ValueError:
        raise InvalidInput(f"compressed topic config {text[:80]!r} has a non-integer queue count or perm") from None
    return {"topicName": parts[0], "readQueueNums": read, "writeQueueNums": write, "perm": perm,
            "topicFilterType": parts[4]}


def open_compressed(data: bytes, broker_version: int) -> Opening:
    records = _Records(_inflate(data))
    yield
    version = parse_data_version(json_object(records.chunk("the data version"), "dataVersion"))
    count = records.int32("the topic count")
    table_at = records.pos
    for i in range(count):  # skipped by their lengths; decoded only if the registration needs them
        records.skip(f"topic config {i}")
        if (i + 1) % (8 * SLICE) == 0:
            yield
    try:
        filters = filter_servers(fastjson.loads(records.chunk("the filter server list")))
    except fastjson.JsonError as e:
        raise InvalidInput(f"filterServerList: {e}") from None
    if broker_version >= V5_0_0:
        for i in range(records.int32("the queue mapping count")):
            records.skip(f"queue mapping {i}")  # static-topic mappings: a NameServer has no use for them
    inflated = records.data
    return RegisterBody(version, filters, lambda: _compressed_entries(inflated, table_at, count))


def _compressed_entries(data: bytes | bytearray, pos: int, count: int) -> Iterator[TopicEntry]:
    records = _Records(data, pos)
    for i in range(count):
        try:
            text = records.chunk(f"topic config {i}").decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidInput(f"compressed topic config {i} is not UTF-8") from None
        tc = _compressed_topic(text)
        yield tc["topicName"], tc
