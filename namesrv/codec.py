"""Request/response envelopes and the msgpack body codec.

A request is (code, ext_fields, body): the same three parts as RocketMQ's RemotingCommand, with
msgpack in place of JSON. Bodies are decoded with size limits before any handler sees them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import msgpack

from namesrv.constants import DEFAULT_MAX_BODY_SIZE, ResponseCode


class CodecError(ValueError):
    """A body is not valid msgpack, is truncated, or exceeds the size limit."""


@dataclass(slots=True)
class RemotingRequest:
    code: int
    ext_fields: dict[str, Any] = field(default_factory=dict)
    body: bytes | None = None


@dataclass(slots=True)
class RemotingResponse:
    code: int = ResponseCode.SUCCESS
    remark: str | None = None
    ext_fields: dict[str, Any] = field(default_factory=dict)
    body: bytes | None = None

    @property
    def ok(self) -> bool:
        return self.code == ResponseCode.SUCCESS

    def decode_body(self) -> Any:
        return decode_body(self.body) if self.body is not None else None


def encode_body(obj: Any) -> bytes:
    return msgpack.packb(obj, use_bin_type=True)


def decode_body(data: bytes, max_size: int = DEFAULT_MAX_BODY_SIZE) -> Any:
    """Decode one msgpack object, refusing oversized, truncated or trailing-garbage input."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise CodecError(f"body must be bytes, got {type(data).__name__}")
    if len(data) > max_size:
        raise CodecError(f"body of {len(data)} bytes exceeds the {max_size}-byte limit")
    try:
        return msgpack.unpackb(
            data,
            raw=False,
            strict_map_key=False,
        )
    except msgpack.ExtraData as e:
        raise CodecError("body has trailing bytes after one msgpack object") from e
    except (ValueError, msgpack.UnpackException, TypeError) as e:
        raise CodecError(f"body is not valid msgpack: {e or type(e).__name__}") from e


def encode_request(request: RemotingRequest) -> bytes:
    """Whole-frame form for a future network front end; Ray passes the dataclass directly."""
    return encode_body([request.code, request.ext_fields, request.body])


def decode_request(frame: bytes, max_size: int = DEFAULT_MAX_BODY_SIZE) -> RemotingRequest:
    obj = decode_body(frame, max_size)
    if not (isinstance(obj, list) and len(obj) == 3):
        raise CodecError("a request frame is [code, extFields, body]")
    code, ext, body = obj
    if not isinstance(code, int) or isinstance(code, bool):
        raise CodecError("request code must be an integer")
    if not isinstance(ext, dict):
        raise CodecError("extFields must be a map")
    if body is not None and not isinstance(body, bytes):
        raise CodecError("body must be bytes or nil")
    return RemotingRequest(code, ext, body)
