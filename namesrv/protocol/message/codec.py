"""Messages in RocketMQ's own binary forms (MessageDecoder): what a PULL_MESSAGE body holds, what a
SEND_BATCH_MESSAGE body holds, message properties and message ids.

Stored-message layout, big-endian: totalSize int | magicCode int | bodyCRC int | queueId int |
flag int | queueOffset long | physicalOffset long | sysFlag int | bornTimestamp long | bornHost
(4-byte IPv4 + int port) | storeTimestamp long | storeHost (4 + 4) | reconsumeTimes int |
preparedTransactionOffset long | bodyLength int + body | topicLength byte + topic |
propertiesLength short + properties. Properties are `key\\x01value\\x02` pairs.
"""

from __future__ import annotations

import functools
import ipaddress
import socket
import struct
import zlib
from dataclasses import dataclass

from namesrv.protocol.broker_headers import send_message_ext
from namesrv.protocol.constants import AUTO_CREATE_TOPIC_KEY_TOPIC, DEFAULT_TOPIC_QUEUE_NUMS
from namesrv.protocol.message.properties import NAME_VALUE_SEPARATOR as NAME_VALUE_SEPARATOR
from namesrv.protocol.message.properties import PROPERTIES_MAX_BYTES, TOPIC_MAX_BYTES, stored_properties
from namesrv.protocol.message.properties import PROPERTY_SEPARATOR as PROPERTY_SEPARATOR
from namesrv.protocol.message.properties import properties_to_string as properties_to_string
from namesrv.protocol.message.properties import string_to_properties as string_to_properties
from namesrv.protocol.message.types import StoredMessage
from namesrv.protocol.types import InvalidInput

MESSAGE_MAGIC_CODE = -626843481
"""MessageDecoder.MESSAGE_MAGIC_CODE (V1: one-byte topic length)."""
BATCH_MAGIC_CODE = MESSAGE_MAGIC_CODE

_FIXED = struct.Struct(">iiiiiqqiq")  # totalSize .. bornTimestamp
_HOST = struct.Struct(">4si")
_BATCH_HEAD = struct.Struct(">iiii")  # totalSize, magicCode, bodyCRC, flag
_BATCH_HEAD_BODY = struct.Struct(">iiiii")  # the same, then bodyLength
_SHORT = struct.Struct(">h")


def body_crc(body: bytes) -> int:
    """UtilAll.crc32: CRC-32 with the top bit cleared (0 for no body)."""
    return zlib.crc32(body) & 0x7FFFFFFF if body else 0


def ray_send_ext(topic: str, queue_id: int, properties: dict[str, str] | None, msg_id: str | None,
                 default_topic: str = AUTO_CREATE_TOPIC_KEY_TOPIC,
                 default_topic_queue_nums: int = DEFAULT_TOPIC_QUEUE_NUMS) -> dict[str, str]:
    """The SEND_MESSAGE header a broker's Ray `send_message` builds from its arguments, and what a
    Ray-native producer signs (ACL): the client message id travels as UNIQ_KEY, as RocketMQ's does."""
    props = dict(properties or {})
    if msg_id:
        props.setdefault("UNIQ_KEY", msg_id)
    return send_message_ext(topic, queue_id, properties_to_string(props), default_topic, default_topic_queue_nums)


@functools.lru_cache(maxsize=1024)
def host_bytes(host: str) -> tuple[bytes, int]:
    """'1.2.3.4:10911' -> (4 address bytes, port); anything not IPv4 becomes 0.0.0.0:0. Cached: a
    broker stores and reads every message with a handful of hosts."""
    ip, _, port = host.rpartition(":")
    try:
        return ipaddress.IPv4Address(ip).packed, int(port)
    except ValueError:
        return b"\x00\x00\x00\x00", 0


def offset_msg_id(store_host: str, commit_log_offset: int) -> str:
    """RocketMQ's offset message id: store host (4 + 4 bytes) and commit-log offset, as 32 hex chars."""
    addr, port = host_bytes(store_host)
    return (addr + struct.pack(">iq", port, commit_log_offset)).hex().upper()


def decode_offset_msg_id(msg_id: str) -> tuple[str, int]:
    """(store host 'ip:port', commit-log offset) of an offset message id (MessageDecoder.decodeMessageId):
    exactly 32 hex digits; a port outside 0..65535 or a negative offset is not one."""
    if not isinstance(msg_id, str) or len(msg_id) != 32 or not all(c in _HEX for c in msg_id):
        raise InvalidInput(f"message id {msg_id!r} is not 32 hex digits (an offset message id)")
    raw = bytes.fromhex(msg_id)
    port, offset = struct.unpack(">iq", raw[4:])
    if not 0 <= port <= 65535 or offset < 0:
        raise InvalidInput(f"message id {msg_id!r} holds port {port} and offset {offset}: not an offset message id")
    return f"{socket.inet_ntoa(raw[:4])}:{port}", offset


_HEX = frozenset("0123456789abcdefABCDEF")


def encode_message_ext(msg: StoredMessage, store_host: str) -> bytes:
    """One stored message in RocketMQ's layout (what a consumer's MessageDecoder.decodes reads)."""
    topic = msg.topic.encode("utf-8")
    properties = stored_properties(msg.properties, msg.msg_id)
    if len(topic) > TOPIC_MAX_BYTES or len(properties) > PROPERTIES_MAX_BYTES:  # the store never holds one
        raise InvalidInput(f"message {msg.queue_offset} of {msg.topic}: topic or properties too long to encode")
    born_addr, born_port = host_bytes(msg.born_host)
    store_addr, store_port = host_bytes(store_host)
    size = (_FIXED.size + _HOST.size + 8 + _HOST.size + 4 + 8 + 4 + len(msg.body) + 1 + len(topic) + 2
            + len(properties))
    return b"".join((
        _FIXED.pack(size, MESSAGE_MAGIC_CODE, body_crc(msg.body), msg.queue_id, msg.flag, msg.queue_offset,
                    msg.commit_log_offset, msg.sys_flag, msg.born_timestamp),
        _HOST.pack(born_addr, born_port),
        struct.pack(">q", msg.store_timestamp),
        _HOST.pack(store_addr, store_port),
        struct.pack(">iqi", msg.reconsume_times, 0, len(msg.body)),
        msg.body,
        struct.pack(">b", len(topic)),
        topic,
        struct.pack(">h", len(properties)),
        properties,
    ))


@dataclass(slots=True)
class BatchEntry:
    flag: int
    body: bytes
    properties: dict[str, str]


def decode_batch(data: bytes) -> list[BatchEntry]:
    """SEND_BATCH_MESSAGE's body (MessageDecoder.encodeMessages): per message totalSize, magicCode,
    bodyCRC, flag, bodyLength + body, propertiesLength (short) + properties."""
    out: list[BatchEntry] = []
    pos, size = 0, len(data)
    head, short, head_size = _BATCH_HEAD_BODY.unpack_from, _SHORT.unpack_from, _BATCH_HEAD_BODY.size
    while pos < size:
        if size - pos < head_size:
            raise InvalidInput(f"batch body truncated at byte {pos}")
        total, _magic, crc, flag, body_len = head(data, pos)
        end = pos + total
        if total < head_size + 2 or end > size:
            raise InvalidInput(f"batch message at byte {pos} claims {total} bytes")
        body_start = pos + head_size
        props_at = body_start + body_len
        if body_len < 0 or props_at + 2 > end:
            raise InvalidInput(f"batch message at byte {pos} has a body length of {body_len}")
        (props_len,) = short(data, props_at)
        if props_len < 0 or props_at + 2 + props_len != end:
            raise InvalidInput(f"batch message at byte {pos} has a properties length of {props_len}")
        body = data[body_start:props_at]
        if crc and crc != body_crc(body):
            raise InvalidInput(f"batch message at byte {pos}: body CRC does not match")
        try:
            props = string_to_properties(data[props_at + 2:end].decode("utf-8"))
        except UnicodeDecodeError:
            raise InvalidInput(f"batch message at byte {pos}: properties are not UTF-8") from None
        out.append(BatchEntry(flag, body, props))
        pos = end
    if not out:
        raise InvalidInput("batch body holds no message")
    return out


def encode_batch(entries: list[BatchEntry]) -> bytes:
    """The producer side of a batch body (what RocketMQ's client sends; tests and tools use it)."""
    parts = []
    for e in entries:
        props = properties_to_string(e.properties).encode("utf-8")
        total = _BATCH_HEAD.size + 4 + len(e.body) + 2 + len(props)
        parts.append(_BATCH_HEAD.pack(total, BATCH_MAGIC_CODE, body_crc(e.body), e.flag)
                     + struct.pack(">i", len(e.body)) + e.body + struct.pack(">h", len(props)) + props)
    return b"".join(parts)
