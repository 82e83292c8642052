"""The store's read path (DefaultMessageStore.getMessage and the offset queries), a mixin of
`MessageStore`: a queue read is one pread of its consume-queue entries, then one pread per record.
Readers never take the write lock, so they never wait for the disk writer."""

from __future__ import annotations

import os
import threading
import zlib
from collections.abc import Callable
from typing import Any

import msgpack

from namesrv.protocol.message.types import StoredMessage
from namesrv.store.index.index_service import IndexService, message_keys
from namesrv.store.mapped_file_queue import MappedFileQueue
from namesrv.store.queue.consume_queue import ConsumeQueueStore
from namesrv.store.records import HEADER, MAGIC
from namesrv.store.transfer_caps import DEFAULT_CAPS, MAX_SCAN_ENTRIES, TransferCaps
from namesrv.store.types import ReadResult

MAX_QUERY_CANDIDATES = 4096
"""Index entries a key query reads at most (matches and hash collisions together)."""


class CommitLogReads:
    _lock: threading.Lock
    files: MappedFileQueue
    consume_queues: ConsumeQueueStore
    _write_pos: int
    index: IndexService

    def max_offset(self, topic: str, queue_id: int) -> int:
        cq = self.consume_queues.get(topic, queue_id)
        return cq.max_offset if cq is not None else 0

    def min_offset(self, topic: str, queue_id: int) -> int:
        """The queue's first offset still kept (RocketMQ's getMinOffsetInQueue): 0 until retention
        deleted the segments holding its first messages."""
        cq = self.consume_queues.get(topic, queue_id)
        return cq.min_offset if cq is not None else 0

    def min_physical_offset(self) -> int:
        """The commit log's first kept offset (RocketMQ's getMinPhyOffset)."""
        return self.files.min_offset()

    def earliest_store_time(self) -> int:
        """Store time of the oldest message kept (RocketMQ's getEarliestMessageTime), -1 when empty."""
        first = self.files.min_offset()
        if first >= self._write_pos:
            return -1
        message = self._read_at(first)
        return message.store_timestamp if message is not None else -1

    def size_bytes(self) -> int:
        """Where the commit log ends (its max physical offset; segments deleted by retention included)."""
        with self._lock:
            return self._write_pos

    def queues(self) -> dict[tuple[str, int], int]:
        return {k: cq.max_offset for k, cq in list(self.consume_queues.queues.items()) if cq.max_offset > 0}

    def search_offset_by_timestamp(self, topic: str, queue_id: int, timestamp: int) -> int:
        """The first queue offset stored at or after `timestamp` (the max offset if none): a binary
        search over the consume queue, reading the probed records' store times."""
        cq = self.consume_queues.get(topic, queue_id)
        if cq is None:
            return 0
        lo, hi = cq.min_offset, cq.max_offset
        while lo < hi:
            mid = (lo + hi) // 2
            e = cq.entry(mid)
            message = self._read_at(e[0], e[1]) if e is not None and e[0] >= 0 else None
            if message is not None and message.store_timestamp >= timestamp:
                hi = mid
            else:  # lost to corruption counts as stored at time 0
                lo = mid + 1
        return lo

    def get_message(self, topic: str, queue_id: int, offset: int, max_nums: int = 32) -> list[StoredMessage]:
        """Up to `max_nums` messages from `offset` (a record lost to corruption is skipped), without
        the transfer caps: for tools, tests and single messages; a pull reads with `read_messages`."""
        cq = self.consume_queues.get(topic, queue_id)
        if cq is None or offset < 0:
            return []
        entries = cq.entries(offset, max(0, max_nums))
        return [m for m in (self._read_at(p, n) for p, n, _ in entries if p >= 0) if m is not None]

    def read_messages(self, topic: str, queue_id: int, offset: int, max_nums: int,
                      caps: TransferCaps = DEFAULT_CAPS,
                      matches: Callable[[StoredMessage], bool] | None = None) -> ReadResult:
        """DefaultMessageStore.getMessage: messages of one queue from `offset` that `matches`,
        stopping before the one that would go past a cap (see transfer_caps). Each entry's record
        size is checked against the caps before its record is read, and entries filtered out are
        read and dropped one at a time, so a read holds no more than the caps allow."""
        cq = self.consume_queues.get(topic, queue_id)
        if cq is None or offset < 0 or max_nums <= 0:
            return ReadResult([], offset, 0)
        offset = max(offset, cq.min_offset)
        entries = cq.entries(offset, min(max_nums, MAX_SCAN_ENTRIES))
        max_pos = self._write_pos
        memory = caps.in_memory_window()
        found: list[StoredMessage] = []
        total = records = 0
        next_offset = offset
        for pos, size, _ in entries:
            if caps.batch_full(size, max_nums, total, len(found), max_pos - pos <= memory):
                break
            next_offset += 1
            message = self._read_at(pos, size) if pos >= 0 else None
            if message is None:  # lost to corruption (or deleted by retention meanwhile): skipped
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
        return self._read_at(pos)

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

    def _read_at(self, pos: int, size: int = 0) -> StoredMessage | None:
        """The record at commit-log offset `pos` (one pread when its `size` is known), or None when
        there is none (lost to corruption, padding, or deleted by retention)."""
        seg = self.files.find(pos)
        if seg is None:
            return None
        try:
            data = os.pread(seg.fd, size if size >= HEADER.size else HEADER.size, pos - seg.base)
        except FileNotFoundError:  # deleted by retention before this reader first opened it
            return None
        if len(data) < HEADER.size:
            return None
        magic, length, crc = HEADER.unpack_from(data)
        if magic != MAGIC:
            return None
        if len(data) != HEADER.size + length:
            data = os.pread(seg.fd, HEADER.size + length, pos - seg.base)
        payload = data[HEADER.size:]
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

