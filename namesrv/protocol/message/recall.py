"""A recall handle (RocketMQ 5.3's RecallMessageHandle, version 1): what a broker answers a timed
send with, and what RECALL_MESSAGE takes back to cancel that message before it is due.

The handle is the URL-safe base64 of `v1 <topic> <brokerName> <timestamp> <uniqKey>`: the topic and
broker the message was sent to, its deliver time (the timer slot the broker parked it in, plus one
millisecond) and the client's message id. The broker cancels a timer by parking a delete marker for
the same slot; `delete_key` is what both carry (TIMER_DEL_UNIQKEY)."""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass

VERSION_1 = "v1"
TIMER_DEL_UNIQKEY = "TIMER_DEL_UNIQKEY"
"""The property naming the timer a delete marker cancels: `delete_key(topic, uniq_key)`."""
RECALL_MESSAGE_TAG = "_RECALL_TAG_"


class RecallHandleInvalid(ValueError):
    """A handle that does not decode (RocketMQ answers ILLEGAL_OPERATION "recall handle is invalid")."""


@dataclass(frozen=True, slots=True)
class RecallHandle:
    topic: str
    broker_name: str
    timestamp: str
    message_id: str

    def encode(self) -> str:
        raw = " ".join((VERSION_1, self.topic, self.broker_name, self.timestamp, self.message_id))
        return base64.urlsafe_b64encode(raw.encode("utf-8")).decode("ascii")

    @staticmethod
    def decode(handle: str) -> RecallHandle:
        if not handle:
            raise RecallHandleInvalid("recall handle is invalid")
        try:
            raw = base64.urlsafe_b64decode(handle.encode("ascii")).decode("utf-8")
        except (binascii.Error, UnicodeError, ValueError):
            raise RecallHandleInvalid("recall handle is invalid") from None
        items = raw.split(" ")
        if len(items) < 5 or items[0] != VERSION_1 or not all(items[1:5]):
            raise RecallHandleInvalid("recall handle is invalid")
        return RecallHandle(items[1], items[2], items[3], items[4])


def delete_key(topic: str, uniq_key: str) -> str:
    """What a delete marker names and the timer it cancels is known by (TimerMessageStore.buildDeleteKey)."""
    return f"{topic}+{uniq_key}"
