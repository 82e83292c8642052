"""A message as a broker keeps it: what it stores (RocketMQ's MessageExtBrokerInner) and what it
reads back with its place in the log (RocketMQ's MessageExt). The store, the codec and the
processors all speak these."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class MessageInner:
    """A message as the broker stores it (RocketMQ's MessageExtBrokerInner, the parts kept)."""

    topic: str
    queue_id: int
    body: bytes
    properties: dict[str, str] = field(default_factory=dict)
    msg_id: str = ""
    """The client's unique id (UNIQ_KEY); empty: the message is known by its offset id."""
    flag: int = 0
    sys_flag: int = 0
    born_timestamp: int = 0
    born_host: str = ""
    reconsume_times: int = 0


@dataclass(slots=True)
class StoredMessage:
    topic: str
    queue_id: int
    queue_offset: int
    store_timestamp: int
    msg_id: str
    properties: dict[str, str]
    body: bytes
    commit_log_offset: int = 0
    flag: int = 0
    sys_flag: int = 0
    born_timestamp: int = 0
    born_host: str = ""
    reconsume_times: int = 0
    store_size: int = 0
