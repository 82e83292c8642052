"""The client side of RocketMQ's stored-message layout (MessageDecoder.decodes): what a pull,
QUERY_MESSAGE or VIEW_MESSAGE_BY_ID answer body holds, one message after another (the layout is in
`message_codec`'s docstring). The admin tools read query answers with it.

A message's `msg_id` is its offset message id (store host + commit-log offset), as MessageExt's
getMsgId() gives on a broker-side decode; the client's id is `unique_key` (UNIQ_KEY). A body its
producer compressed (sysFlag COMPRESSED_FLAG) is inflated (namesrv.protocol.message.compression), as
MessageDecoder.decodes does for clients; `sys_flag` stays as stored. A body that is not whole
messages raises InvalidInput naming the byte where it went wrong.
"""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass, field

from namesrv.protocol.message.codec import MESSAGE_MAGIC_CODE, offset_msg_id
from namesrv.protocol.message.compression import uncompressed_body
from namesrv.protocol.message.properties import UNIQ_KEY, string_to_properties
from namesrv.protocol.types import InvalidInput

_FIXED = struct.Struct(">iiiiiqqiq")
_HOST = struct.Struct(">4si")
_MIDDLE = struct.Struct(">q")
_TAIL = struct.Struct(">iqi")


@dataclass(slots=True)
class MessageExt:
    topic: str
    queue_id: int
    queue_offset: int
    commit_log_offset: int
    store_timestamp: int
    born_timestamp: int
    born_host: str
    store_host: str
    body: bytes
    properties: dict[str, str] = field(default_factory=dict)
    flag: int = 0
    sys_flag: int = 0
    reconsume_times: int = 0
    body_crc: int = 0

    @property
    def msg_id(self) -> str:
        """The offset message id (what queryMsgById takes)."""
        return offset_msg_id(self.store_host, self.commit_log_offset)

    @property
    def unique_key(self) -> str:
        """The client's message id (UNIQ_KEY), '' when the message has none."""
        return self.properties.get(UNIQ_KEY, "")

    @property
    def keys(self) -> list[str]:
        return [k for k in self.properties.get("KEYS", "").split(" ") if k]

    @property
    def tags(self) -> str:
        return self.properties.get("TAGS", "")


def _host(raw: bytes, port: int) -> str:
    return f"{socket.inet_ntoa(raw)}:{port}"


def decode_messages(body: bytes) -> list[MessageExt]:
    """Every message of `body`; InvalidInput when it is not whole messages of this layout."""
    out: list[MessageExt] = []
    pos = 0
    try:
        while pos < len(body):
            size, magic, crc, queue_id, flag, queue_offset, phy, sys_flag, born_ts = _FIXED.unpack_from(body, pos)
            if magic != MESSAGE_MAGIC_CODE or size <= _FIXED.size or pos + size > len(body):
                raise InvalidInput(f"message at byte {pos}: bad magic code or size {size}")
            end = pos + size
            p = pos + _FIXED.size
            born_addr, born_port = _HOST.unpack_from(body, p)
            p += _HOST.size
            (store_ts,) = _MIDDLE.unpack_from(body, p)
            p += _MIDDLE.size
            store_addr, store_port = _HOST.unpack_from(body, p)
            p += _HOST.size
            reconsume, _prepared, body_len = _TAIL.unpack_from(body, p)
            p += _TAIL.size
            if body_len < 0 or p + body_len + 1 > end:
                raise InvalidInput(f"message at byte {pos}: body length {body_len} runs past it")
            payload = body[p : p + body_len]
            p += body_len
            topic_len = body[p]
            topic = body[p + 1 : p + 1 + topic_len].decode("utf-8")
            p += 1 + topic_len
            (props_len,) = struct.unpack_from(">h", body, p)
            p += 2
            if props_len < 0 or p + props_len != end:
                raise InvalidInput(f"message at byte {pos}: properties length {props_len} does not end it")
            props = string_to_properties(body[p:end].decode("utf-8"))
            out.append(MessageExt(topic, queue_id, queue_offset, phy, store_ts, born_ts, _host(born_addr, born_port),
                                  _host(store_addr, store_port), uncompressed_body(payload, sys_flag), props, flag,
                                  sys_flag, reconsume, crc))
            pos = end
    except (struct.error, IndexError, UnicodeDecodeError) as e:
        raise InvalidInput(f"message at byte {pos} is cut short or not UTF-8 ({e})") from None
    return out

