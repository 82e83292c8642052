"""JSON the way RocketMQ's fastjson writes and reads it.

Writing (`dumps`): object fields in alphabetical order, null fields and null map values omitted,
non-string map keys written bare (`{0:"10.0.0.1:10911"}`) — what RocketMQ's Java clients expect from
a NameServer talking to an old client. With `standard=True` (a request `version` >= 401 or
`acceptStandardJsonOnly`) every key is quoted and non-ASCII characters are escaped, as RocketMQ's
BrowserCompatible + QuoteFieldNames + MapSortField encoding does.

Reading (`loads`): standard JSON, and fastjson's bare integer keys for the bodies that carry them.
Maps keyed by objects (a MessageQueue) are written here too; `namesrv.protocol.keyed_json` reads them.
"""

from __future__ import annotations

import json
import re
from typing import Any

_encode_str = json.JSONEncoder(ensure_ascii=False).encode
_encode_ascii = json.JSONEncoder(ensure_ascii=True).encode

JS_SAFE_INTEGER = 2**53 - 1
"""Beyond this a browser-compatible encoding writes integers as strings (JavaScript's limit)."""


class JsonError(ValueError):
    """A body is not JSON (not even fastjson's dialect of it)."""


def dumps(obj: Any, *, standard: bool = False) -> bytes:
    out: list[str] = []
    _write(obj, out, standard)
    return "".join(out).encode("utf-8")


def _key(key: object, standard: bool) -> str:
    if isinstance(key, str):
        return _encode_ascii(key) if standard else _encode_str(key)
    to_wire = getattr(key, "to_wire", None)
    fields: Any = to_wire() if to_wire is not None else dict(key) if isinstance(key, tuple) else None
    if fields is not None:  # an object key (a MessageQueue): fastjson writes it bare
        out: list[str] = []
        _write(fields, out, standard)
        text = "".join(out)
        return _encode_ascii(text) if standard else text  # standard JSON: the object as a string key
    if isinstance(key, bool) or not isinstance(key, int):
        raise TypeError(f"map keys must be strings, integers or objects, got {type(key).__name__}")
    return f'"{key}"' if standard else str(key)


def _sort_key(item: tuple[Any, Any]) -> tuple[int, Any]:
    """Integer keys first, numerically; then string keys (fields) alphabetically; object keys
    (`namesrv.protocol.keyed_json`) last, by their fields."""
    key = item[0]
    if isinstance(key, str):
        return (1, key)
    if isinstance(key, int):
        return (0, key)
    return (2, repr(key.to_wire() if hasattr(key, "to_wire") else key))


def _write(obj: Any, out: list[str], standard: bool) -> None:
    if obj is None:
        out.append("null")
    elif obj is True:
        out.append("true")
    elif obj is False:
        out.append("false")
    elif isinstance(obj, str):
        out.append(_encode_ascii(obj) if standard else _encode_str(obj))
    elif isinstance(obj, int):
        out.append(f'"{obj}"' if standard and abs(obj) > JS_SAFE_INTEGER else str(obj))
    elif isinstance(obj, float):
        out.append(json.dumps(obj))
    elif isinstance(obj, dict):
        items = sorted(((k, v) for k, v in obj.items() if v is not None), key=_sort_key)
        out.append("{")
        for i, (k, v) in enumerate(items):
            if i:
                out.append(",")
            out.append(_key(k, standard))
            out.append(":")
            _write(v, out, standard)
        out.append("}")
    elif isinstance(obj, (list, tuple, set, frozenset)):
        seq = sorted(obj) if isinstance(obj, (set, frozenset)) else obj
        out.append("[")
        for i, v in enumerate(seq):
            if i:
                out.append(",")
            _write(v, out, standard)
        out.append("]")
    else:
        raise TypeError(f"cannot write {type(obj).__name__} as JSON")


# A string (closed, or running to the end of the text) or a bare integer key after "{" or ",". Every
# repetition is possessive (Python 3.11): nothing is scanned twice, so a scan is linear in the body
# whatever the body (an unterminated string ends it; it is not re-entered at its inner quotes).
_TOKEN = re.compile(r'"(?:[^"\\]++|\\.)*+(?:"|\\?\Z)|([{,]\s*+)(-?\d++)(\s*+:)', re.S)
_BARE_KEY = re.compile(r"[{,]\s*+-?\d++\s*+:")


def _quote_key(m: re.Match[str]) -> str:
    if m.group(1) is None:  # a string: left as it is
        return m.group(0)
    return f'{m.group(1)}"{m.group(2)}"{m.group(3)}'


def _quote_bare_keys(text: str) -> str | None:
    """Quote fastjson's bare integer map keys, leaving string contents alone; None when nothing in
    the text looks like one (it is then simply not JSON: refused at C speed)."""
    if _BARE_KEY.search(text) is None:
        return None
    return _TOKEN.sub(_quote_key, text)


def loads(data: bytes | bytearray | memoryview | str) -> Any:
    """Parse a JSON body (standard, or with fastjson's bare integer keys)."""
    try:
        text = data if isinstance(data, str) else bytes(data).decode("utf-8")
    except UnicodeDecodeError as e:
        raise JsonError(f"body is not UTF-8: {e}") from None
    try:
        try:
            return json.loads(text)
        except json.JSONDecodeError as first:
            quoted = _quote_bare_keys(text)
            try:
                if quoted is None:
                    raise first
                return json.loads(quoted)
            except json.JSONDecodeError:
                raise JsonError(f"body is not JSON: {first.msg} at position {first.pos}") from None
    except RecursionError:
        raise JsonError("body is nested too deeply") from None
