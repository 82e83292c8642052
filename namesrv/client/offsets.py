"""Where a consumer group is in each queue (RocketMQ's OffsetStore): the next offset to consume.

Two stores, as RocketMQ's client has, chosen by the message model:

- `RemoteBrokerOffsetStore` (clustering): the group's offsets live on the broker of each queue;
  read with QUERY_CONSUMER_OFFSET when a queue is assigned, committed with UPDATE_CONSUMER_OFFSET by
  `persist_all` (the consumer calls it every persistConsumerOffsetInterval, 5 s, and on shutdown).
- `LocalFileOffsetStore` (broadcasting, and the verification PullConsumer): every member keeps its
  own, in a file written whole (temp file, fsync, rename) in RocketMQ's OffsetSerializeWrapper form
  `{"offsetTable":{{"brokerName":..,"queueId":..,"topic":..}:offset}}`; no path keeps it in memory.

Offsets of -1 mean "none known". Pure: the broker calls go through an `OffsetBroker`.
"""

from __future__ import annotations

import enum
import logging
import threading
from pathlib import Path
from typing import Protocol

from namesrv.common.persist import atomic_write
from namesrv.protocol import fastjson
from namesrv.protocol.keyed_json import JsonKey, loads_keyed
from namesrv.protocol.models import MessageQueue

log = logging.getLogger(__name__)

NO_OFFSET = -1
"""None known (RocketMQ's -1: not found)."""
OFFSET_QUERY_FAILED = -2
"""The broker could not be asked (RocketMQ's -2); the queue is not pulled until it can."""


class ReadOffsetType(enum.Enum):
    READ_FROM_MEMORY = "READ_FROM_MEMORY"
    READ_FROM_STORE = "READ_FROM_STORE"
    MEMORY_FIRST_THEN_STORE = "MEMORY_FIRST_THEN_STORE"


class OffsetNotFound(LookupError):
    """The broker holds no offset of the group for the queue (QUERY_NOT_FOUND)."""


class OffsetBroker(Protocol):
    """The broker calls a remote offset store makes (the consumer's broker client)."""

    def query_consumer_offset(self, group: str, mq: MessageQueue) -> int:
        """The group's committed offset (OffsetNotFound when it has none; any other failure raises)."""
        ...

    def update_consumer_offset(self, group: str, mq: MessageQueue, offset: int) -> None:
        ...


class OffsetStore:
    """The offsets in memory (shared by both stores)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.offset_table: dict[MessageQueue, int] = {}

    def update_offset(self, mq: MessageQueue, offset: int, increase_only: bool = False) -> None:
        with self._lock:
            old = self.offset_table.get(mq)
            if old is None or not increase_only or offset > old:
                self.offset_table[mq] = offset

    def read_offset(self, mq: MessageQueue, how: ReadOffsetType = ReadOffsetType.MEMORY_FIRST_THEN_STORE) -> int:
        with self._lock:
            held = self.offset_table.get(mq)
        if held is not None and how is not ReadOffsetType.READ_FROM_STORE:
            return held
        if how is ReadOffsetType.READ_FROM_MEMORY:
            return NO_OFFSET
        return self._read_from_store(mq)

    def _read_from_store(self, mq: MessageQueue) -> int:
        with self._lock:
            return self.offset_table.get(mq, NO_OFFSET)

    def remove_offset(self, mq: MessageQueue) -> None:
        with self._lock:
            self.offset_table.pop(mq, None)

    def clone_offset_table(self, topic: str | None = None) -> dict[MessageQueue, int]:
        with self._lock:
            return {mq: o for mq, o in self.offset_table.items() if topic is None or mq.topic == topic}

    def persist_all(self, mqs: set[MessageQueue]) -> None:
        """Commit the offsets of `mqs` (the queues the member holds)."""
        raise NotImplementedError

    def persist(self, mq: MessageQueue) -> None:
        self.persist_all({mq})


class RemoteBrokerOffsetStore(OffsetStore):
    """The group's offsets on the brokers (clustering)."""

    def __init__(self, group: str, broker: OffsetBroker) -> None:
        super().__init__()
        self.group = group
        self.broker = broker

    def _read_from_store(self, mq: MessageQueue) -> int:
        try:
            offset = self.broker.query_consumer_offset(self.group, mq)
        except OffsetNotFound:
            return NO_OFFSET
        except Exception as e:
            log.warning("fetching the consumer offset of %s for %s failed: %s", self.group, mq, e)
            return OFFSET_QUERY_FAILED
        self.update_offset(mq, offset)
        return offset

    def persist_all(self, mqs: set[MessageQueue]) -> None:
        """Commit the offsets of `mqs` (the queues the member holds); the others are dropped from
        memory, as RocketMQ's persistAll does."""
        for mq, offset in self.clone_offset_table().items():
            if mq not in mqs:
                self.remove_offset(mq)
            else:
                self._commit(mq, offset)

    def persist(self, mq: MessageQueue) -> None:
        """Commit one queue's offset (the others stay as they are)."""
        offset = self.read_offset(mq, ReadOffsetType.READ_FROM_MEMORY)
        if offset >= 0:
            self._commit(mq, offset)

    def _commit(self, mq: MessageQueue, offset: int) -> None:
        try:
            self.broker.update_consumer_offset(self.group, mq, offset)
        except Exception as e:
            log.warning("committing offset %d of %s for %s failed: %s", offset, mq, self.group, e)


class LocalFileOffsetStore(OffsetStore):
    """Offsets of this member alone, in a file when `path` is given (broadcasting)."""

    def __init__(self, path: str | Path | None = None) -> None:
        super().__init__()
        self.path = Path(path) if path is not None else None
        if self.path is not None and self.path.exists():
            self.offset_table.update(read_offset_file(self.path))

    def persist_all(self, mqs: set[MessageQueue] | None = None) -> None:
        """Write the offsets of `mqs` (every queue held when None) to the file."""
        if self.path is None:
            return
        table = {mq: o for mq, o in self.clone_offset_table().items() if mqs is None or mq in mqs}
        atomic_write(self.path, fastjson.dumps({"offsetTable": table}))

    def persist(self, mq: MessageQueue) -> None:
        """The file holds every queue: written whole, with this queue's offset as it is now."""
        self.persist_all(None)


def mq_of_key(key: JsonKey) -> MessageQueue:
    """A MessageQueue written as a fastjson map key."""
    return MessageQueue.from_wire(key.fields())


def offset_table_of(body: bytes) -> dict[MessageQueue, int]:
    """`{"offsetTable":{mq:offset}}` (OffsetSerializeWrapper, ResetOffsetBody) as a dict."""
    data = loads_keyed(body)
    table = data.get("offsetTable") if isinstance(data, dict) else None
    if not isinstance(table, dict):
        raise ValueError("no offsetTable in the body")
    return {mq_of_key(k): int(v) for k, v in table.items() if isinstance(k, JsonKey)}


def read_offset_file(path: Path) -> dict[MessageQueue, int]:
    return offset_table_of(path.read_bytes())
