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
  length-prefixed records, read by `register_body_compressed`.

Fields may come in any order and use RocketMQ's camelCase or snake_case names; unknown fields are
ignored (RocketMQ 5's static-topic mappings among them). Malformed input raises
:class:`InvalidInput` naming what is wrong; nothing is applied by this module.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import msgpack

from namesrv.common.slices import run_to_end
from namesrv.protocol.bodies import json_object
from namesrv.protocol.models import DataVersion, parse_data_version
from namesrv.protocol.register_body_base import (
    FILTERS,
    SLICE,
    TABLE,
    VERSION,
    WRAPPER,
    BodyEncoding,
    Opening,
    RegisterBody,
    TopicEntry,
    filter_servers,
)
from namesrv.protocol.register_body_compressed import open_compressed
from namesrv.protocol.types import InvalidInput


def open_register_body(body: bytes | None, encoding: BodyEncoding, broker_version: int = 0) -> Opening:
    """Open `body` (None: a registration without topics), yielding between slices of work."""
    if not body:
        return RegisterBody(DataVersion(), [], lambda: iter(()))
    if encoding == "msgpack":
        return _open_msgpack(bytes(body))
    if encoding == "compressed":
        return (yield from open_compressed(bytes(body), broker_version))
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
                filters = filter_servers(up.unpack())
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
            yield "filters", filter_servers(cur.value())
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
            filters = filter_servers(value)
    entries = list(table.items())
    return RegisterBody(version, filters, lambda: iter(entries))
