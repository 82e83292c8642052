"""The commit log's read path (DefaultMessageStore.getMessage and the offset queries), a mixin of
`CommitLog`: readers take the short index lock for memory work only and read with pread, so they
never wait for the disk writer."""

from __future__ import annotations

import bisect
import os
import threading
import zlib
from collections.abc import Callable
from typing import Any

import msgpack

from namesrv.broker.index_service import IndexService, message_keys
from namesrv.broker.store_records import HEADER, MAGIC, QueueIndex
from namesrv.broker.store_types import ReadResult, StoredMessage
from namesrv.broker.transfer_caps import DEFAULT_CAPS, MAX_SCAN_ENTRIES, TransferCaps

MAX_QUERY_CANDIDATES = 4096
"""Index entries a key query reads at most (matches and hash collisions together)."""


class CommitLogReads:
    _lock: threading.Lock
    _index: dict[tuple[str, int], QueueIndex]
    _fd: int
    _write_pos: int
    index: IndexService

    def max_offset(self, topic: str, queue_id: int) -> int:
        with self._lock:
            idx = self._index.get((topic, queue_id))
            return len(idx.positions) if idx is not None else 0

    def min_offset(self, topic: str, queue_id: int) -> int:
        """Messages are never deleted here: 0 (RocketMQ's minOffset once nothing was cleaned)."""
        return 0

    def earliest_store_time(self) -> int:
        """Store time of the oldest message kept (RocketMQ's getEarliestMessageTime), -1 when empty."""
        with self._lock:
            first = [idx.store_times[0] for idx in self._index.values() if idx.store_times and idx.store_times[0] >= 0]
        return min(first, default=-1)

    def size_bytes(self) -> int:
        with self._lock:
            return self._write_pos

    def queues(self) -> dict[tuple[str, int], int]:
        with self._lock:
            return {k: len(v.positions) for k, v in self._index.items()}

    def search_offset_by_timestamp(self, topic: str, queue_id: int, timestamp: int) -> int:
        """The first queue offset stored at or after `timestamp` (the max offset if none)."""
        with self._lock:
            idx = self._index.get((topic, queue_id))
            if idx is None:
                return 0
            return bisect.bisect_left(idx.store_times, timestamp, key=_lost_as_zero)

    def get_message(self, topic: str, queue_id: int, offset: int, max_nums: int = 32) -> list[StoredMessage]:
        """Up to `max_nums` messages from `offset` (a record lost to corruption is skipped), without
        the transfer caps: for tools, tests and single messages; a pull reads with `read_messages`."""
        with self._lock:
            idx = self._index.get((topic, queue_id))
            if idx is None or offset < 0:
                return []
            positions = list(idx.positions[offset : offset + max(0, max_nums)])
            fd = self._fd
        return [m for m in (self._read_at(fd, p) for p in positions if p >= 0) if m is not None]

    def read_messages(self, topic: str, queue_id: int, offset: int, max_nums: int,
                      caps: TransferCaps = DEFAULT_CAPS,
                      matches: Callable[[StoredMessage], bool] | None = None) -> ReadResult:
        """DefaultMessageStore.getMessage: messages of one queue from `offset` that `matches`,
        stopping before the one that would go past a cap (see transfer_caps). Each entry's record
        size is checked against the caps before its record is read, and entries filtered out are
        read and dropped one at a time, so a read holds no more than the caps allow."""
        with self._lock:
            idx = self._index.get((topic, queue_id))
            if idx is None or offset < 0 or max_nums <= 0:
                return ReadResult([], offset, 0)
            end = min(len(idx.positions), offset + min(max_nums, MAX_SCAN_ENTRIES))
            positions, sizes = idx.positions[offset:end], idx.sizes[offset:end]
            fd, max_pos = self._fd, self._write_pos
        memory = caps.in_memory_window()
        found: list[StoredMessage] = []
        total = records = 0
        next_offset = offset
        for pos, size in zip(positions, sizes, strict=True):
            if caps.batch_full(size, max_nums, total, len(found), max_pos - pos <= memory):
                break
            next_offset += 1
            message = self._read_at(fd, pos) if pos >= 0 else None
            if message is None:  # lost to corruption: skipped
                continue
            records += 1
            if matches is None or matches(message):
                found.append(message)
                total += size
        return ReadResult(found, next_offset, records)

    def get_by_commit_offset(self, pos: int) -> StoredMessage | None:
        with self._lock:
            if pos < 0 or pos >= self._write_pos:
                return None
            fd = self._fd
        return self._read_at(fd, pos)

    def query_message(self, topic: str, key: str, max_num: int, begin: int, end: int) -> list[StoredMessage]:
        """DefaultMessageStore.queryMessage: up to `max_num` messages of `topic` whose unique key or
        one of whose KEYS is `key`, stored within [begin, end], newest first. Each message the index
        points at is read and checked (RocketMQ leaves hash collisions to the client); when
        collisions crowd out the matches the index is asked again for more. Blocking: off the loop."""
        limit = max(1, max_num)
        while True:
            offsets = self.index.query(topic, key, limit, begin, end)
            found: list[StoredMessage] = []
            for pos in offsets:
                m = self.get_by_commit_offset(pos)
                if m is not None and m.topic == topic and begin <= m.store_timestamp <= end and key in stored_keys(m):
                    found.append(m)
                    if len(found) >= max_num:
                        return found
            if len(offsets) < limit or limit >= MAX_QUERY_CANDIDATES:
                return found
            limit = min(limit * 4, MAX_QUERY_CANDIDATES)

    def _read_at(self, fd: int, pos: int) -> StoredMessage | None:
        header = os.pread(fd, HEADER.size, pos)
        if len(header) < HEADER.size:
            return None
        magic, length, crc = HEADER.unpack(header)
        if magic != MAGIC:
            return None
        payload = os.pread(fd, length, pos + HEADER.size)
        if len(payload) != length or zlib.crc32(payload) != crc:
            return None
        f: list[Any] = msgpack.unpackb(payload, raw=False)
        extra = f[7:12] + [0, 0, 0, "", 0][len(f[7:12]) :]
        return StoredMessage(f[0], f[1], f[2], f[3], f[4], f[5], f[6], pos, extra[0], extra[1], extra[2], extra[3],
                             extra[4], HEADER.size + length)


def stored_keys(m: StoredMessage) -> list[str]:
    """What a stored message is filed under in the index (see index_service.message_keys)."""
    return message_keys([m.topic, m.queue_id, m.queue_offset, m.store_timestamp, m.msg_id, m.properties, m.body,
                         m.flag, m.sys_flag])


def _lost_as_zero(store_time: int) -> int:
    return store_time if store_time >= 0 else 0
