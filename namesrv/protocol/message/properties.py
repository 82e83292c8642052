"""Message properties in RocketMQ's string form, and the limits of a message the store can hold.

The store writes a record only if the pull path can hand it back: RocketMQ's stored-message layout
gives a topic one length byte (127 bytes at most, Byte.MAX_VALUE) and properties one length short
(32,767 bytes, Short.MAX_VALUE), and its int fields 32 or 64 bits. `check_message` says why a
message breaks one of these; the store refuses such a message before writing anything, and the
send path answers MESSAGE_ILLEGAL with the reason (as RocketMQ's CommitLog answers
PROPERTIES_SIZE_EXCEEDED / MESSAGE_SIZE_EXCEEDED).
"""

from __future__ import annotations

from collections.abc import Mapping

from namesrv.protocol.types import InvalidInput

NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"
TOPIC_MAX_BYTES = 127
"""Byte.MAX_VALUE: the stored layout's one-byte topic length."""
PROPERTIES_MAX_BYTES = 32767
"""Short.MAX_VALUE: the stored layout's two-byte properties length."""
UNIQ_KEY = "UNIQ_KEY"
# Property keys more than one module reads (RocketMQ's MessageConst.PROPERTY_*).
REAL_TOPIC = "REAL_TOPIC"
REAL_QID = "REAL_QID"
"""Where a parked message (delayed, timed, a transaction's half) is delivered to in the end."""
RETRY_TOPIC = "RETRY_TOPIC"
"""The topic a message was consumed from before it went to a retry topic."""
POP_CK = "POP_CK"
"""A popped message's receipt (its extra info)."""
REPLY_TO_CLIENT = "REPLY_TO_CLIENT"
"""The requester a reply message goes back to."""
KEY_SEPARATOR = " "
"""MessageConst.KEY_SEPARATOR: between the keys of KEYS, and the fields of a pop's extra info."""
_INT32 = (-(1 << 31), (1 << 31) - 1)
_INT64 = (-(1 << 63), (1 << 63) - 1)
INT_FIELDS = (("queueId", False), ("flag", False), ("sysFlag", False), ("bornTimestamp", True),
              ("reconsumeTimes", False))
"""The stored layout's int fields, in `check_message`'s order, and whether each is 64-bit."""


class MessageIllegal(InvalidInput):
    """A message the store cannot hold (and a pull could not hand back): refused, nothing written."""


def properties_to_string(props: Mapping[str, str]) -> str:
    return "".join(f"{k}{NAME_VALUE_SEPARATOR}{v}{PROPERTY_SEPARATOR}" for k, v in props.items())


def string_to_properties(text: str | None) -> dict[str, str]:
    """MessageDecoder.string2messageProperties: pairs without a separator are skipped."""
    if not text:
        return {}
    items = text.split(PROPERTY_SEPARATOR)
    if not items[-1]:
        items.pop()
    try:  # the usual text: every pair has its separator and a key
        props = dict([item.split(NAME_VALUE_SEPARATOR, 1) for item in items])
    except ValueError:
        props = {"": ""}
    if "" not in props:
        return props
    props = {}
    for item in items:
        key, sep, value = item.partition(NAME_VALUE_SEPARATOR)
        if sep and key:
            props[key] = value
    return props


def stored_properties(props: Mapping[str, str], msg_id: str) -> bytes:
    """The properties as a pull hands them back: the message's own, plus UNIQ_KEY from its id."""
    if msg_id and UNIQ_KEY not in props:
        props = {**props, UNIQ_KEY: msg_id}
    return properties_to_string(props).encode("utf-8")


def check_message(topic: str, properties: Mapping[str, str], msg_id: str, body: bytes, max_body: int,
                  ints: tuple[object, object, object, object, object]) -> None:
    """Raise MessageIllegal (with the reason) for a message the store must not hold. `ints`: the
    stored layout's int fields, as INT_FIELDS names them."""
    if not isinstance(body, bytes | bytearray):
        raise MessageIllegal(f"message body must be bytes, not {type(body).__name__}")
    if len(body) > max_body:
        raise MessageIllegal(f"the message body size {len(body)} exceeds the limit {max_body}")
    try:
        topic_bytes = len(topic.encode("utf-8"))
    except (AttributeError, UnicodeError):
        raise MessageIllegal(f"message topic {topic!r} is not a UTF-8 string") from None
    if not 0 < topic_bytes <= TOPIC_MAX_BYTES:
        raise MessageIllegal(f"message topic length {topic_bytes} bytes is outside 1..{TOPIC_MAX_BYTES}")
    size = _properties_size(properties, msg_id)
    if size > PROPERTIES_MAX_BYTES:
        raise MessageIllegal(f"the message properties length {size} bytes exceeds the limit {PROPERTIES_MAX_BYTES}")
    q, f, sf, bt, rt = ints
    low, high = _INT32
    if (type(q) is int and type(f) is int and type(sf) is int and type(bt) is int and type(rt) is int
            and low <= q <= high and low <= f <= high and low <= sf <= high and low <= rt <= high
            and _INT64[0] <= bt <= _INT64[1]):
        return  # the usual message: which field, and why, only when one does not fit
    for (name, wide), number in zip(INT_FIELDS, ints, strict=True):
        low, high = _INT64 if wide else _INT32
        if not isinstance(number, int) or isinstance(number, bool) or not low <= number <= high:
            raise MessageIllegal(f"message {name} {number!r} is not a {64 if wide else 32}-bit integer")


def _properties_size(properties: Mapping[str, str], msg_id: str) -> int:
    """The stored properties' length in bytes (`stored_properties`), or MessageIllegal for a
    property that is not a string pair, has an empty key or holds a separator it must not."""
    try:  # the usual properties: strings, each pair holding exactly one of each separator (its own)
        text = "".join([key + NAME_VALUE_SEPARATOR + value + PROPERTY_SEPARATOR for key, value in properties.items()])
    except TypeError:
        text = None
    count = len(properties)
    if (text is None or text.count(NAME_VALUE_SEPARATOR) != count or text.count(PROPERTY_SEPARATOR) != count
            or text.startswith(NAME_VALUE_SEPARATOR) or PROPERTY_SEPARATOR + NAME_VALUE_SEPARATOR in text):
        for key, value in properties.items():  # which pair, and why (a value may hold \x01)
            if not isinstance(key, str) or not isinstance(value, str):
                raise MessageIllegal(f"message property {key!r} must map a string to a string")
            if not key or NAME_VALUE_SEPARATOR in key or PROPERTY_SEPARATOR in key or PROPERTY_SEPARATOR in value:
                raise MessageIllegal(f"message property {key!r} is empty or holds a separator (\\x01 / \\x02)")
        text = properties_to_string(properties)
    if msg_id and UNIQ_KEY not in properties:
        text += f"{UNIQ_KEY}{NAME_VALUE_SEPARATOR}{msg_id}{PROPERTY_SEPARATOR}"
    if text.isascii():
        return len(text)
    try:
        return len(text.encode("utf-8"))
    except UnicodeError:
        raise MessageIllegal("message properties are not valid UTF-8 text") from None
