"""A REGISTER_BROKER body read in slices (RegisterBrokerBody.decode, made incremental).

A broker with 10,000 topics sends a body of 1-2 MB; decoding and validating it in one go holds a
NameServer's event loop for tens of milliseconds while every route query waits. Here a body is
*opened* first, which reads its DataVersion and filter servers and finds the topic table without
building it (msgpack skips it at C speed, the compressed format skips its length-prefixed records;
only JSON, which cannot be skipped without scanning, is decoded here, one topic at a time). The
topic table is then read lazily, entry by entry, and only when the registration needs it (a
broker's unchanged DataVersion means its topics are not looked at, as in RocketMQ).

`open_register_body` is a generator: it yields between slices of work and returns the opened body,
so the caller decides what to do between slices (an event loop answers other requests; a test just
runs it to the end). Every encoding a broker may use:

- ``msgpack``: the Ray path, ``{"topicConfigSerializeWrapper": {...}, "filterServerList": [...]}``.
- ``json``: the TCP path, the same map as fastjson writes it (fields in alphabetical order).
- ``compressed``: the TCP path with the ``compressed`` header (RocketMQ 4.9+): a deflate stream of
  ``int32 length + DataVersion JSON``, ``int32 count``, per topic ``int32 length +
  TopicConfig.encode()`` (space separated: name, read queues, write queues, perm, filter type,
  attributes JSON), ``int32 length + filter server list JSON`` and, from brokers of 5.0 on, ``int32
  count`` + queue mapping infos (which a NameServer ignores).

Fields may come in any order and use RocketMQ's camelCase or snake_case names; unknown fields are
ignored (RocketMQ 5's static-topic mappings among them). Malformed input raises
:class:`InvalidInput` naming what is wrong; nothing is applied by this module.
"""

from __future__ import annotations

import json
import re
import struct
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

import msgpack

from namesrv.protocol import fastjson
from namesrv.protocol.bodies import json_object
from namesrv.protocol.constants import MAX_FRAME_SIZE
from namesrv.protocol.models import DataVersion, parse_data_version
from namesrv.protocol.types import InvalidInput
from namesrv.slices import Steps, run_to_end

BodyEncoding = Literal["msgpack", "json", "compressed"]

SLICE = 128
"""Topics read, validated or written between two yields: a fraction of a millisecond of work."""

V5_0_0 = 413
"""MQVersion.Version.V5_0_0.ordinal(): brokers from here on append queue mappings to compressed bodies."""

MAX_INFLATED_SIZE = MAX_FRAME_SIZE
"""A compressed registration may not inflate beyond what would fit in a frame uncompressed: the
inflation stops at the first byte past it (a deflate bomb costs at most this much, then is refused)."""

WRAPPER = ("topicConfigSerializeWrapper", "topic_config_serialize_wrapper")
FILTERS = ("filterServerList", "filter_server_list")
TABLE = ("topicConfigTable", "topic_config_table")
VERSION = ("dataVersion", "data_version")

TopicEntry = tuple[object, object]
"""(key in topicConfigTable, the raw topic config) as the body holds them, not yet validated."""

Opening = Steps["RegisterBody"]


@dataclass(slots=True)
class RegisterBody:
    """An opened REGISTER_BROKER body: its version and filter servers, and its topics on demand."""

    data_version: DataVersion
    filter_server_list: list[str]
    _entries: Callable[[], Iterator[TopicEntry]]

    def topics(self) -> Iterator[TopicEntry]:
        """Each topic of the table in body order; raises InvalidInput on a malformed entry."""
        return self._entries()


def open_register_body(body: bytes | None, encoding: BodyEncoding, broker_version: int = 0) -> Opening:
    """Open `body` (None: a registration without topics), yielding between slices of work."""
    if not body:
        return RegisterBody(DataVersion(), [], lambda: iter(()))
    if encoding == "msgpack":
        return _open_msgpack(bytes(body))
    if encoding == "compressed":
        return (yield from _open_compressed(bytes(body), broker_version))
    return (yield from _open_json(bytes(body)))


def read_register_body(body: bytes | None, encoding: BodyEncoding, broker_version: int = 0) -> dict[str, Any]:
    """The whole body as its wire map (tests, tools): open it, then read every topic."""
    opened = run_to_end(open_register_body(body, encoding, broker_version))
    return {
        "topicConfigSerializeWrapper": {
            "dataVersion": opened.data_version.to_wire(),
            "topicConfigTable": dict(opened.topics()),
        },
        "filterServerList": opened.filter_server_list,
    }


def _filters(value: object) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(a, str) and a for a in value):
        raise InvalidInput("filterServerList must be a list of non-blank addresses")
    return list(value)


# ---------------------------------------------------------------------------- msgpack (Ray path)
_MSGPACK_ERRORS = (ValueError, TypeError, msgpack.UnpackException, msgpack.OutOfData)


def _unpacker(data: bytes | memoryview) -> msgpack.Unpacker:
    unpacker = msgpack.Unpacker(raw=False, strict_map_key=False, max_buffer_size=max(len(data), 1))
    unpacker.feed(data)
    return unpacker


def _open_msgpack(data: bytes) -> RegisterBody:
    """One pass over the structure, skipping the topic table (C speed); topics are unpacked later
    from where the table starts."""
    version, filters, table_at = DataVersion(), [], -1
    up = _unpacker(data)
    try:
        for _ in range(_map_header(up, "the register body")):
            key = up.unpack()
            if key in WRAPPER:
                for _ in range(_map_header(up, key)):
                    field_name = up.unpack()
                    if field_name in TABLE:
                        table_at = up.tell()
                        up.skip()
                    elif field_name in VERSION:
                        version = parse_data_version(up.unpack())
                    else:
                        up.skip()
            elif key in FILTERS:
                filters = _filters(up.unpack())
            else:
                up.skip()
        end = up.tell()
    except _MSGPACK_ERRORS as e:
        raise InvalidInput(f"register body is not valid msgpack: {e or type(e).__name__}") from None
    if end != len(data):
        raise InvalidInput("register body has trailing bytes after one msgpack object")
    if table_at < 0:
        return RegisterBody(version, filters, lambda: iter(()))
    view = memoryview(data)[table_at:]
    return RegisterBody(version, filters, lambda: _msgpack_entries(view))


def _map_header(up: msgpack.Unpacker, what: object) -> int:
    try:
        return int(up.read_map_header())
    except ValueError:
        raise InvalidInput(f"{str(what)[:80]} must be a map") from None


def _msgpack_entries(view: memoryview) -> Iterator[TopicEntry]:
    up = _unpacker(view)
    try:
        for _ in range(_map_header(up, "topicConfigTable")):
            key = up.unpack()
            yield key, up.unpack()
    except _MSGPACK_ERRORS as e:
        raise InvalidInput(f"topicConfigTable is not valid msgpack: {e or type(e).__name__}") from None


# ---------------------------------------------------------------------------- JSON (TCP path)
_WS = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()


class _NotPlainJson(Exception):
    """The body is not standard JSON: fall back to fastjson's dialect, all at once."""


class _JsonCursor:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def skip_ws(self) -> None:
        match = _WS.match(self.text, self.pos)
        assert match is not None  # the pattern matches the empty string
        self.pos = match.end()

    def char(self) -> str:
        self.skip_ws()
        return self.text[self.pos : self.pos + 1]

    def value(self) -> object:
        self.skip_ws()
        try:
            value, self.pos = _DECODER.raw_decode(self.text, self.pos)
        except json.JSONDecodeError:
            raise _NotPlainJson from None
        return value

    def members(self) -> Iterator[str]:
        """Keys of the object at the cursor; after each, the caller consumes the value."""
        if self.char() != "{":
            raise _NotPlainJson
        self.pos += 1
        if self.char() == "}":
            self.pos += 1
            return
        while True:
            if self.char() != '"':
                raise _NotPlainJson
            try:
                key, self.pos = json.decoder.scanstring(self.text, self.pos + 1)  # type: ignore[attr-defined]
            except json.JSONDecodeError:
                raise _NotPlainJson from None
            if self.char() != ":":
                raise _NotPlainJson
            self.pos += 1
            yield key
            sep = self.char()
            self.pos += 1
            if sep == "}":
                return
            if sep != ",":
                raise _NotPlainJson


def _open_json(data: bytes) -> Opening:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidInput("register body is not UTF-8") from None
    cursor = _JsonCursor(text)
    events = _json_events(cursor)
    version: DataVersion | None = None
    filters: list[str] | None = None
    read: list[TopicEntry] = []
    try:
        for kind, value in events:
            if kind == "version":
                version = value
            elif kind == "filters":
                filters = value
            elif kind == "table" and version is not None and filters is not None:
                # fastjson's order (filterServerList, then dataVersion before topicConfigTable):
                # everything a registration decides on is known; the topics wait until asked for.
                return RegisterBody(version, filters, _JsonTopics(events, text, cursor.pos).__iter__)
            elif kind == "topic":
                read.append(value)
                if len(read) % SLICE == 0:
                    yield
    except _NotPlainJson:
        # fastjson's dialect (bare integer keys) or not JSON at all: decode it whole, as before.
        return _from_map(json_object(data, "register body"))
    return RegisterBody(version or DataVersion(), filters or [], lambda: iter(read))


class _JsonTopics:
    """The rest of a JSON body, from the start of its topic table (at `table_pos` of `text`). The
    first pass also checks the rest of the body; a later one decodes the table again rather than
    keeping 10,000s of decoded topics alive (and freeing them all at once at the end)."""

    def __init__(self, events: Iterator[tuple[str, Any]], text: str, table_pos: int) -> None:
        self.events: Iterator[tuple[str, Any]] | None = events
        self.text = text
        self.table_pos = table_pos

    def __iter__(self) -> Iterator[TopicEntry]:
        return self._stream() if self.events is not None else self._again()

    def _stream(self) -> Iterator[TopicEntry]:
        assert self.events is not None
        events, self.events = self.events, None
        try:
            for kind, value in events:
                if kind == "topic":
                    yield value
        except _NotPlainJson:
            raise InvalidInput("topicConfigTable is not valid JSON") from None

    def _again(self) -> Iterator[TopicEntry]:
        cur = _JsonCursor(self.text)
        cur.pos = self.table_pos
        try:
            for topic in cur.members():
                yield topic, cur.value()
        except _NotPlainJson:
            raise InvalidInput("topicConfigTable is not valid JSON") from None


def _json_events(cur: _JsonCursor) -> Iterator[tuple[str, Any]]:
    """The body as events: ("filters", list), ("version", DataVersion), ("table", None) where the
    topic table starts, ("topic", (key, raw)) per entry; ends once the whole body was checked."""
    if cur.char() != "{":
        raise InvalidInput("register body must be a JSON object")
    for key in cur.members():
        if key in WRAPPER:
            if cur.char() != "{":
                raise InvalidInput(f"{key} must be a map")
            for field_name in cur.members():
                if field_name in TABLE:
                    if cur.char() != "{":
                        raise InvalidInput("topicConfigTable must be a map")
                    yield "table", None
                    for topic in cur.members():
                        yield "topic", (topic, cur.value())
                elif field_name in VERSION:
                    yield "version", parse_data_version(cur.value())
                else:
                    cur.value()
        elif key in FILTERS:
            yield "filters", _filters(cur.value())
        else:
            cur.value()
    cur.skip_ws()
    if cur.pos != len(cur.text):
        raise InvalidInput("register body has trailing characters after the JSON object")


def _from_map(raw: dict[Any, Any]) -> RegisterBody:
    version, filters, table = DataVersion(), [], {}
    for key, value in raw.items():
        if key in WRAPPER:
            if not isinstance(value, dict):
                raise InvalidInput(f"{key} must be a map")
            for field_name, field_value in value.items():
                if field_name in TABLE:
                    if not isinstance(field_value, dict):
                        raise InvalidInput("topicConfigTable must be a map")
                    table = field_value
                elif field_name in VERSION:
                    version = parse_data_version(field_value)
        elif key in FILTERS:
            filters = _filters(value)
    entries = list(table.items())
    return RegisterBody(version, filters, lambda: iter(entries))


# ---------------------------------------------------------------------------- compressed (TCP path)
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


def _open_compressed(data: bytes, broker_version: int) -> Opening:
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
        filters = _filters(fastjson.loads(records.chunk("the filter server list")))
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
