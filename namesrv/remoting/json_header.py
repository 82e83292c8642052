"""RocketMQ's JSON remoting header (serializeType 0): fastjson's fields, read and written."""

from __future__ import annotations

import json
import json.scanner
from typing import Any

from namesrv.remoting.wire_command import FrameError, LanguageCode, RemotingCommand, ext_value

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
