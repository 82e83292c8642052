"""Message body compression as RocketMQ's clients do it (MessageSysFlag): a producer deflates a body
of at least `compressMsgBodyOverHowmuch` bytes (4 KiB) with zlib, level 5, and marks the message's
sysFlag with COMPRESSED_FLAG (0x1) and, as RocketMQ 5 does, the zlib type (0x3 << 8; a 4.x client
sets no type bits, which also means zlib). The broker stores the body as it came; whoever reads a
message (a pull, an admin query) inflates it here, the one place a body is decompressed.

A RocketMQ 5 client set to LZ4 (0x1 << 8) or ZSTD (0x2 << 8) instead of its zlib default: such a
body is handed on as stored (its sysFlag says so); neither codec is a dependency here.
"""

from __future__ import annotations

import logging
import zlib

from namesrv.protocol.types import InvalidInput

log = logging.getLogger(__name__)

COMPRESSED_FLAG = 0x1
COMPRESSION_LZ4_TYPE = 0x1 << 8
COMPRESSION_ZSTD_TYPE = 0x2 << 8
COMPRESSION_ZLIB_TYPE = 0x3 << 8
COMPRESSION_TYPE_MASK = 0x7 << 8
COMPRESS_MSG_BODY_OVER_HOWMUCH = 4 * 1024
"""RocketMQ's DefaultMQProducer.compressMsgBodyOverHowmuch."""
COMPRESS_LEVEL = 5
"""RocketMQ's DefaultMQProducer.compressLevel (rocketmq.message.compressLevel)."""


def compress_body(body: bytes, over_howmuch: int = COMPRESS_MSG_BODY_OVER_HOWMUCH,
                  level: int = COMPRESS_LEVEL) -> tuple[bytes, int]:
    """(the body to send, the sysFlag bits to add): deflated with the zlib flags when the body has
    at least `over_howmuch` bytes (RocketMQ's tryToCompressMessage), else as it is with none."""
    if len(body) < over_howmuch:
        return body, 0
    return zlib.compress(body, level), COMPRESSED_FLAG | COMPRESSION_ZLIB_TYPE


def uncompressed_body(body: bytes, sys_flag: int) -> bytes:
    """A stored body as its producer wrote it: inflated when its sysFlag says it was zlib-compressed
    (InvalidInput when it does not inflate); an LZ4 or ZSTD body is handed on as stored."""
    if not sys_flag & COMPRESSED_FLAG:
        return body
    kind = sys_flag & COMPRESSION_TYPE_MASK
    if kind not in (0, COMPRESSION_ZLIB_TYPE):
        log.warning("a body compressed with type %#x is handed on as stored (only zlib is inflated)", kind)
        return body
    try:
        return zlib.decompress(body)
    except zlib.error as e:
        raise InvalidInput(f"a body marked compressed does not inflate: {e}") from None
