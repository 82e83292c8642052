"""Request and response bodies in RocketMQ's own encodings (the TCP path; the Ray path passes
typed objects and msgpack).

- JSON bodies, written as fastjson writes them (`namesrv.protocol.fastjson`).
- REGISTER_BROKER with `compressed=true`: written here as a broker writes it (the format and its
  sliced reader are in `namesrv.protocol.register_body`).
- UPDATE_NAMESRV_CONFIG / GET_NAMESRV_CONFIG: Java properties text, one `key=value` per line.
- `body_crc32`: RocketMQ's UtilAll.crc32, the CRC-32 with its top bit cleared.
"""

from __future__ import annotations

import struct
import zlib
from typing import Any

from namesrv.protocol import fastjson
from namesrv.protocol.types import InvalidInput

_INT = struct.Struct(">i")


def body_crc32(data: bytes | None) -> int:
    """RocketMQ's body checksum (UtilAll.crc32): CRC-32 & 0x7FFFFFFF; 0 for no body."""
    return zlib.crc32(data) & 0x7FFFFFFF if data else 0


def json_object(body: bytes | bytearray, what: str) -> dict[str, Any]:
    try:
        obj = fastjson.loads(body)
    except fastjson.JsonError as e:
        raise InvalidInput(f"{what}: {e}") from None
    if not isinstance(obj, dict):
        raise InvalidInput(f"{what} must be a JSON object, got {type(obj).__name__}")
    return obj


# ---------------------------------------------------------------------------- compressed registration
def encode_compressed_register_body(body: dict[str, Any]) -> bytes:
    """The broker side of the compressed format (what a RocketMQ broker sends; tests and benchmarks
    use it as a real broker would)."""
    wrapper = body.get("topicConfigSerializeWrapper", {})
    parts = []
    version = fastjson.dumps(wrapper.get("dataVersion", {"counter": 0, "timestamp": 0}))
    parts += [_INT.pack(len(version)), version]
    table = wrapper.get("topicConfigTable", {})
    parts.append(_INT.pack(len(table)))
    for tc in table.values():
        text = " ".join(str(tc[k]) for k in ("topicName", "readQueueNums", "writeQueueNums", "perm"))
        line = f"{text} {tc.get('topicFilterType', 'SINGLE_TAG')} {{}}".encode()
        parts += [_INT.pack(len(line)), line]
    filters = fastjson.dumps(body.get("filterServerList", []))
    parts += [_INT.pack(len(filters)), filters, _INT.pack(0)]
    return zlib.compress(b"".join(parts), 9)


# ---------------------------------------------------------------------------- properties text
def parse_properties(body: bytes) -> dict[str, str]:
    """Java properties text (MixAll.string2Properties): `key=value` (or `key:value`) per line,
    blank lines and #/! comments skipped."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidInput("config body is not UTF-8") from None
    props: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        cut = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        key, value = (line[:cut], line[cut + 1 :]) if cut >= 0 else (line, "")
        props[key.strip()] = value.strip()
    return props


def format_properties(props: dict[str, str]) -> bytes:
    """MixAll.properties2String: `key=value\\n` per entry."""
    return "".join(f"{k}={v}\n" for k, v in sorted(props.items())).encode("utf-8")
