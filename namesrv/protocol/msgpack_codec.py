"""The msgpack body codec of the Ray path (request bodies such as a broker's registration).

Bodies are decoded with a size limit and refused when truncated or followed by trailing bytes,
before any handler sees them.
"""

from __future__ import annotations

from typing import Any

import msgpack

from namesrv.protocol.constants import MAX_FRAME_SIZE


class CodecError(ValueError):
    """A body is not valid msgpack, is truncated, or exceeds the size limit."""


def encode_body(obj: Any) -> bytes:
    data: bytes = msgpack.packb(obj, use_bin_type=True)
    return data


def decode_body(data: bytes, max_size: int = MAX_FRAME_SIZE) -> Any:
    """Decode one msgpack object, refusing oversized, truncated or trailing-garbage input."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise CodecError(f"body must be bytes, got {type(data).__name__}")
    if len(data) > max_size:
        raise CodecError(f"body of {len(data)} bytes exceeds the {max_size}-byte limit")
    try:
        return msgpack.unpackb(data, raw=False, strict_map_key=False)
    except msgpack.ExtraData as e:
        raise CodecError("body has trailing bytes after one msgpack object") from e
    except (ValueError, msgpack.UnpackException, TypeError) as e:
        raise CodecError(f"body is not valid msgpack: {e or type(e).__name__}") from e
