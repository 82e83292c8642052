"""RocketMQ's remoting command as it travels (`RemotingCommand`), its flags, serialization and
language codes, and the error a malformed frame raises. The codec (namesrv.remoting.codec) reads
and writes it."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

from namesrv.protocol.constants import MAX_FRAME_SIZE

RESPONSE_FLAG = 1 << 0
ONEWAY_FLAG = 1 << 1


class SerializeType(IntEnum):
    JSON = 0
    ROCKETMQ = 1


CURRENT_VERSION = 479
CURRENT_VERSION_DESC = "V5_3_3"
"""MQVersion.CURRENT_VERSION (V5_3_3's ordinal) and its name: the version every server and client of
this project announces (a frame's `version`, a broker's runtime info, a consumer's running info)."""


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

    @classmethod
    def request(cls, code: int, opaque: int, ext: Mapping[str, Any] | None = None, body: bytes | None = None,
                flag: int = 0, language: int = LanguageCode.PYTHON, version: int = CURRENT_VERSION,
                serialize_type: SerializeType = SerializeType.JSON) -> RemotingCommand:
        """A request from this project's clients: `ext` values turned into the strings RocketMQ's
        extFields hold (`ext_value`; None values left out), no extFields when there are none."""
        fields = {k: ext_value(v) for k, v in (ext or {}).items() if v is not None}
        return cls(code, opaque, flag, language, version, None, fields or None, body, serialize_type)

    def response(self, code: int, remark: str | None = None, ext_fields: dict[str, str] | None = None,
                 body: bytes | None = None, version: int = 0) -> RemotingCommand:
        """The answer to this request: same opaque and serialization, the response flag set."""
        return RemotingCommand(code, self.opaque, RESPONSE_FLAG, LanguageCode.JAVA, version, remark, ext_fields,
                               body, self.serialize_type)

MAX_LENGTH_FIELD = MAX_FRAME_SIZE - 4
"""Netty's LengthFieldBasedFrameDecoder counts the length field itself against the 16 MiB limit."""


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

