"""The store's read path (DefaultMessageStore.getMessage, queryMessage and the search by time), a
part of the message store given the parts it reads (the commit log, the consume queues, the index):
a queue read is one pread of its consume-queue entries, then one pread per record (CommitLog.read_at).
Readers never take the write lock, so they never wait for the disk writer."""

from __future__ import annotations

from collections.abc import Callable

from namesrv.protocol.message.types import StoredMessage
from namesrv.store.commit_log import CommitLog
from namesrv.store.index.index_service import IndexService, message_keys
from namesrv.store.queue.consume_queue import ConsumeQueueStore
from namesrv.store.transfer_caps import DEFAULT_CAPS, MAX_SCAN_ENTRIES, TransferCaps
from namesrv.store.types import ReadResult

MAX_QUERY_CANDIDATES = 4096
"""Index entries a key query reads at most (matches and hash collisions together)."""


class MessageReader:
    def __init__(self, commit_log: CommitLog, consume_queues: ConsumeQueueStore, index: IndexService) -> None:
        self.commit_log = commit_log
        self.consume_queues = consume_queues
        self.index = index

    def earliest_store_time(self) -> int:
        """Store time of the oldest message kept (RocketMQ's getEarliestMessageTime), -1 when empty."""
        first = self.commit_log.files.min_offset()
        if first >= self.commit_log.write_pos:
            return -1
        message = self.commit_log.read_at(first)
        return message.store_timestamp if message is not None else -1

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
            message = self.commit_log.read_at(e[0], e[1]) if e is not None and e[0] >= 0 else None
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
        return [m for m in (self.commit_log.read_at(p, n) for p, n, _ in entries if p >= 0) if m is not None]

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
        max_pos = self.commit_log.write_pos
        memory = caps.in_memory_window()
        found: list[StoredMessage] = []
        total = records = 0
        next_offset = offset
        for pos, size, _ in entries:
            if caps.batch_full(size, max_nums, total, len(found), max_pos - pos <= memory):
                break
            next_offset += 1
            message = self.commit_log.read_at(pos, size) if pos >= 0 else None
            if message is None:  # lost to corruption (or deleted by retention meanwhile): skipped
                continue
            records += 1
            if matches is None or matches(message):
                found.append(message)
                total += size
        return ReadResult(found, next_offset, records)

    def get_by_commit_offset(self, pos: int) -> StoredMessage | None:
        """The message at commit-log offset `pos`, if the published log holds one there."""
        if pos < 0 or pos >= self.commit_log.max_offset():
            return None
        return self.commit_log.read_at(pos)

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


def stored_keys(m: StoredMessage) -> list[str]:
    """What a stored message is filed under in the index (see index_service.message_keys)."""
    return message_keys([m.topic, m.queue_id, m.queue_offset, m.store_timestamp, m.msg_id, m.properties, m.body,
                         m.flag, m.sys_flag])

