"""A broker's message store (RocketMQ's DefaultMessageStore, the parts we model): the commit log in
fixed-size segment files, per-queue consume queues and a checkpoint, under `store_dir`:

    commitlog/00000000000000000000    segments named by their first commit-log offset
    consumequeue/<topic>/<queueId>/…  20-byte entries per queue offset (namesrv.store.queue.consume_queue)
    checkpoint                        how far the consume queues are durable (store_checkpoint)

Record layout: magic (4 B) | payload length (4 B) | crc32 of payload (4 B) | payload (msgpack list:
topic, queue id, queue offset, store time, msg id, properties, body, then flag, sysFlag, born time,
born host, reconsume times). A record never spans two segments: a segment's tail it does not fit in
is a BLANK record (store_records). Commit-log offsets are global across segments, so replication
(`read_raw`, `append_raw`, `truncate_to`) reads and writes the log as one byte stream.

`MessageStore` owns its parts as fields, as DefaultMessageStore does, each holding its own state
and given the parts it needs: `commit_log` (namesrv.store.commit_log: the segments, the write
position, the write path and the replica's raw reads and writes), `consume_queues`, `index`
(namesrv.store.index.index_service), `store_checkpoint` (namesrv.store.checkpoint), `dispatchers`
(namesrv.store.dispatch: the dispatcher list and recovery), `writer` (namesrv.store.group_commit)
and `reader` (namesrv.store.reads). The store runs what spans parts: a batch's write and dispatch,
the checkpoint, a replica's append and truncation, the close.

Writes (RocketMQ's CommitLog + GroupCommitService): `put` queues a message; the store's writer
thread takes every message queued so far as a batch, writes it and, with SYNC_FLUSH, fsyncs once
for all of it; each sender is acknowledged after the fsync that covers its record. While
one batch is on disk the next one gathers, so concurrent senders share fsyncs. With ASYNC_FLUSH a
send is acknowledged after write() (it survives a process kill, the page cache outliving the
process, but not a machine crash) and a periodic `flush` fsyncs. Disk I/O never runs on the caller's
event loop.

Dispatch (RocketMQ's CommitLogDispatcher): every record written (by `put`/`append`, by a replica's
`append_raw`, and by recovery past the checkpoint) is handed, in commit-log order, to each
dispatcher: the consume queues first, then the message index by key (`index`,
namesrv.store.index.index_service), then those added with `add_dispatcher`. `checkpoint()` fsyncs
the log and every dispatcher's output, then writes the checkpoint; a restart re-reads only the log
after it (store_recovery), so its time does not grow with the log.

Locks, taken in this order: the checkpoint lock (the store's: across a checkpoint, whose fsyncs run
outside the write lock, and a truncate_to), the commit log's write lock (one writer at a time: a
batch's write, fsync and dispatch, a flush, a clean-up step, the close; readers never take it), the
commit log's position lock (memory work only: publishing the write position).
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

from namesrv.common.clock import Clock, system_clock
from namesrv.common.persist import fsync_dir as _fsync_dir  # the one directory fsync (tests patch this name)
from namesrv.protocol.message.types import MessageInner, StoredMessage
from namesrv.store.checkpoint import Checkpoint, StoreCheckpoint
from namesrv.store.commit_log import CommitLog
from namesrv.store.dispatch import Dispatchers
from namesrv.store.group_commit import GroupCommitService, Results
from namesrv.store.ha.transfer import Transfer
from namesrv.store.index.index_service import IndexService
from namesrv.store.queue.consume_queue import ConsumeQueueStore
from namesrv.store.reads import MessageReader
from namesrv.store.transfer_caps import DEFAULT_CAPS, TransferCaps
from namesrv.store.types import (
    MAPPED_FILE_SIZE_COMMIT_LOG,
    MAPPED_FILE_SIZE_CONSUME_QUEUE,
    AppendResult,
    DiskFullError,
    Dispatcher,
    DispatchFn,
    FlushDiskType,
    ReadResult,
    StoreFormatError,
)

log = logging.getLogger(__name__)


class MessageStore:
    """Thread-safe for readers, who never wait for the disk; writes go through `put` (async,
    batched) or `append` (sync). A batch's records are written, fsynced and dispatched under the
    write lock only; the short position lock publishes the write position once that is done."""

    def __init__(
        self,
        store_dir: str | Path,
        flush_disk_type: FlushDiskType = FlushDiskType.SYNC_FLUSH,
        clock: Clock = system_clock,
        group_commit: bool = True,
        *,
        segment_size: int = MAPPED_FILE_SIZE_COMMIT_LOG,
        consume_queue_file_size: int = MAPPED_FILE_SIZE_CONSUME_QUEUE,
        dispatchers: Sequence[Dispatcher] = (),
    ) -> None:
        """`segment_size`: RocketMQ's mappedFileSizeCommitLog (a record must fit in one segment);
        `group_commit` False: fsync once per message even in a batch (the benchmark's baseline);
        `dispatchers`: added after the consume queues, before recovery, so they see the records
        recovery re-reads (`add_dispatcher` adds one later, for the records written from then on)."""
        self.dir = Path(store_dir)
        _make_dirs_durably(self.dir)
        if (self.dir / "commitlog.dat").exists():
            raise StoreFormatError(f"{self.dir / 'commitlog.dat'} is a single-file commit log of an older version; "
                                   f"this store keeps segments in {self.dir / 'commitlog'}/ (move it away to start)")
        _make_dirs_durably(self.dir / "commitlog")
        _make_dirs_durably(self.dir / "consumequeue")
        self.clock = clock
        self.commit_log = CommitLog(self.dir, segment_size, flush_disk_type, group_commit)
        self._checkpoint_lock = threading.Lock()
        """Held across a checkpoint (its fsyncs run outside the write lock) and a truncate_to;
        taken before the write lock."""
        self.consume_queues = ConsumeQueueStore(self.dir / "consumequeue", consume_queue_file_size)
        self.index = IndexService(self.dir / "index")
        """Messages by key and unique key (QUERY_MESSAGE): the second dispatcher."""
        index = self.index
        self.dispatchers = Dispatchers(self.commit_log, self.consume_queues, [
            Dispatcher(index.dispatch, index.flush, index.truncate_to, index.delete_expired,
                       lambda: index.recovery.resume_offset if index.recovery.deleted else None, index.dispatch_batch),
            *dispatchers])
        self.store_checkpoint = StoreCheckpoint(self.dir / "checkpoint")
        self.recovery = self.dispatchers.recover(self.store_checkpoint.current.physic_offset)
        self.commit_log.publish(self.commit_log.files.file_end())
        self.consume_queues.correct_min_offsets(self.commit_log.files.min_offset())
        self.reader = MessageReader(self.commit_log, self.consume_queues, self.index)
        self.disk_full = False
        """Set by retention (store_cleanup) while the disk is fuller than diskSpaceWarningLevelRatio."""
        self.disk_ratio = 0.0
        """The store disk's used ratio (0..1) retention last saw."""
        self.listeners: list[Callable[[], None]] = []
        """Called on the writer's event loop after every batch `put` wrote (replication waits on it)."""
        self.writer = GroupCommitService(self.dir, self._write_batch, self.listeners)
        self.truncation_listeners: list[Callable[[int], None]] = []
        """Called on the event loop after `truncate` cut the log, with the offset it now ends at:
        what was read out of the log (topic records, transaction decisions) goes back with it."""

    @property
    def dispatch_failed(self) -> OSError | None:
        """Set when writing a consume queue failed: writes and checkpoints stop (see Dispatchers.dispatch_all)."""
        return self.dispatchers.failed

    # ------------------------------------------------------------------ write
    @staticmethod
    def check(msg: MessageInner) -> None:
        """Raise MessageIllegal (with the reason) for a message this store must not hold (CommitLog.check)."""
        CommitLog.check(msg)

    def _write_batch(self, batch: list[MessageInner], checked: list[bool] | None = None) -> Results:
        """Write a batch (one write per segment it lands in), fsync per the flush policy, dispatch
        it; `checked[i]`: the caller ran `check` on message i already. Runs in a thread."""
        with self.commit_log.write_lock:  # one writer at a time, across write and fsync; readers never take it
            if not self.commit_log.is_open:  # closed under a batch already queued: nothing of it is written
                return [OSError(f"commit log {self.dir} is closed") for _ in batch]
            refusal = self.refuse_writes()
            if refusal is not None:
                return [refusal for _ in batch]
            out, records, end = self.commit_log.write_batch(batch, self.max_offset, self.clock(), checked)
            if not records:  # all refused, or the write failed (nothing of it is on disk)
                return out
            failed = self.dispatchers.dispatch_all(records, end)
        return out if failed is None else [failed if isinstance(r, AppendResult) else r for r in out]

    def refuse_writes(self) -> OSError | None:
        """Why the store takes no write now (its disk is marked full by retention, or a consume
        queue could not be written: a restart rebuilds it), or None."""
        if self.dispatchers.failed is not None:
            return OSError(f"commit log {self.dir}: refusing writes until a restart rebuilds the consume queues "
                           f"({self.dispatchers.failed})")
        if not self.disk_full:
            return None
        return DiskFullError(f"commit log {self.dir}: the disk is nearly full, writes are refused until retention "
                             f"frees space")

    def append(self, msg: MessageInner) -> AppendResult:
        """Store one message now, in the calling thread (acknowledged after its own fsync with SYNC)."""
        [result] = self._write_batch([msg])
        if isinstance(result, Exception):
            raise result
        return result

    async def put(self, msg: MessageInner) -> AppendResult:
        """Store one message through the group-commit writer; returns once it is durable per the
        flush policy. Call from one event loop."""
        return await self.writer.put(msg)

    def submit(self, msg: MessageInner) -> asyncio.Future[AppendResult]:
        """`put`, queued now: it reaches the log before anything put or submitted after this call
        (see GroupCommitService.submit)."""
        return self.writer.submit(msg)

    async def put_all(self, messages: list[MessageInner], checked: bool = False) -> list[AppendResult]:
        """Store messages together through the group-commit writer (one submission, one future);
        returns once they are durable per the flush policy, or raises the first one's reason it
        was not stored (the others may be). `checked`: the caller ran `check` on each of them."""
        results = await self.writer.submit_all(messages, checked)
        for result in results:
            if isinstance(result, Exception):
                raise result
        return results  # type: ignore[return-value]  # no exception among them

    def flush(self) -> None:
        """fsync what was written but not yet synced (see CommitLog.flush: not under the write lock)."""
        self.commit_log.flush()

    # ------------------------------------------------------------------ dispatch and checkpoint
    def add_dispatcher(self, dispatch: DispatchFn, flush: Callable[[], None] | None = None,
                       truncate: Callable[[int], object] | None = None) -> None:
        """Register a CommitLogDispatcher, called after the consume queues for every record written
        from now on: `dispatch(fields, commit_log_offset, record_size)` with the record's fields
        (store_records' layout: topic, queue id, queue offset, store time, msg id, properties, body,
        flag, sysFlag, born time, born host, reconsume times). It runs in the store's writer thread
        under the write lock, after the record is durable per the flush policy and before readers
        see it; it must not call the store's write methods. `flush()` makes what it built durable
        (called before every checkpoint from the checkpoint's thread, outside the write lock, so
        concurrently with `dispatch`: it must cover what was dispatched before the call);
        `truncate(offset)` forgets what it built for records at or after `offset` (a replica
        cutting its log, recovery cutting a torn tail). To see the records recovery re-reads, pass
        it to the constructor's `dispatchers` instead."""
        self.dispatchers.add(dispatch, flush, truncate)

    def retry_dispatch(self) -> bool:
        """Dispatch again the records a failed consume-queue write left out; True when the store
        takes writes again (see Dispatchers.retry). Blocking: retention calls it off the event loop."""
        return self.dispatchers.retry()

    def checkpoint(self) -> int:
        """Make the log and every dispatcher's output durable up to the current end, then record
        that end in the checkpoint file (write, fsync, rename); returns it. Blocking: run it off
        the event loop (the broker does so every flushIntervalConsumeQueue)."""
        with self._checkpoint_lock:  # one at a time, and never across a replica's truncate_to
            with self.commit_log.write_lock:  # memory work only
                if not self.commit_log.is_open or self.dispatchers.failed is not None:
                    return self.store_checkpoint.current.physic_offset
                end, first = self.commit_log.write_pos, self.commit_log.files.min_offset()
                dirty = self.commit_log.take_dirty()
            for seg in dirty:  # outside the write lock: sends go on while these fsyncs run
                if seg.fd >= 0:
                    os.fsync(seg.fd)
            self.dispatchers.flush()  # all they built for records before `end` was built before it was read
            last = self.store_checkpoint.current
            if end != last.physic_offset or last.min_physic_offset != first:
                self.store_checkpoint.write(Checkpoint(end, self.clock(), first))
        return end

    # ------------------------------------------------------------------ replica side
    def read_raw(self, from_offset: int, max_bytes: int) -> Transfer:
        """A master's answer to a replica asking from `from_offset` (see CommitLog.read_raw).
        Blocking (pread): run it off the event loop."""
        return self.commit_log.read_raw(from_offset, max_bytes)

    def append_raw(self, offset: int, data: bytes, fsync: bool = True) -> set[tuple[str, int]]:
        """A replica appends its master's records at `offset`, verbatim: checked (ha.new_bytes: no
        gap, no disagreeing overlap; whole valid records), written, fsynced per the flush policy
        (with `fsync` False only written: the caller flushes later), then dispatched as recovery
        would. Returns the queues that grew. Nothing of a refused batch is written. Blocking: run it
        off the event loop."""
        with self.commit_log.write_lock:
            written = self.commit_log.append_raw(offset, data, fsync)
            if written is None:
                return set()
            records, end = written
            failed = self.dispatchers.dispatch_all(records, end)
            if failed is not None:
                raise failed
        return {(fields[0], fields[1]) for fields, _, _ in records}

    def truncate_to(self, offset: int) -> int:
        """Cut the log back to `offset`, a record boundary at or before its end (a returning old
        master's consistent point): later segments are deleted, the one holding `offset` is cut, and
        every dispatcher forgets what was cut; returns the bytes cut. The checkpoint is lowered to
        `offset` first, so a crash part-way recovers from there. Blocking: run it off the event loop."""
        with self._checkpoint_lock, self.commit_log.write_lock:
            end = self.commit_log.truncation_end(offset)
            if offset == end:
                return 0
            cp = self.store_checkpoint.current
            if cp.physic_offset > offset:
                self.store_checkpoint.write(Checkpoint(offset, cp.physic_msg_timestamp, cp.min_physic_offset))
            self.commit_log.truncate(offset)
            self.dispatchers.truncate(offset)
        return end - offset

    async def truncate(self, offset: int) -> int:
        """`truncate_to` off the event loop, then every truncation listener on it; returns the bytes cut."""
        cut = await asyncio.to_thread(self.truncate_to, offset)
        if cut:
            for listener in self.truncation_listeners:
                listener(offset)
        return cut

    # ------------------------------------------------------------------ read
    def max_offset(self, topic: str, queue_id: int) -> int:
        cq = self.consume_queues.get(topic, queue_id)
        return cq.max_offset if cq is not None else 0

    def confirmed_max_offset(self, topic: str, queue_id: int, confirm_offset: int) -> int:
        """The queue's max offset as a reader bounded by `confirm_offset` sees it (RocketMQ 5's
        getMaxOffsetInQueue(committed)): only entries whose record ends at or before it count.
        (Never shortcut by `size_bytes()`: a batch's entries are dispatched before its end is
        published.)"""
        cq = self.consume_queues.get(topic, queue_id)
        return cq.offset_within(confirm_offset) if cq is not None else 0

    def min_offset(self, topic: str, queue_id: int) -> int:
        """The queue's first offset still kept (RocketMQ's getMinOffsetInQueue): 0 until retention
        deleted the segments holding its first messages."""
        cq = self.consume_queues.get(topic, queue_id)
        return cq.min_offset if cq is not None else 0

    def queues(self) -> dict[tuple[str, int], int]:
        return {k: cq.max_offset for k, cq in list(self.consume_queues.queues.items()) if cq.max_offset > 0}

    def min_physical_offset(self) -> int:
        """The commit log's first kept offset (RocketMQ's getMinPhyOffset)."""
        return self.commit_log.files.min_offset()

    def size_bytes(self) -> int:
        """Where the commit log ends (its max physical offset; segments deleted by retention included)."""
        return self.commit_log.max_offset()

    def earliest_store_time(self) -> int:
        """Store time of the oldest message kept (RocketMQ's getEarliestMessageTime), -1 when empty."""
        return self.reader.earliest_store_time()

    def search_offset_by_timestamp(self, topic: str, queue_id: int, timestamp: int) -> int:
        """The first queue offset stored at or after `timestamp` (the max offset if none)."""
        return self.reader.search_offset_by_timestamp(topic, queue_id, timestamp)

    def get_message(self, topic: str, queue_id: int, offset: int, max_nums: int = 32) -> list[StoredMessage]:
        """Up to `max_nums` messages from `offset`, without the transfer caps (see MessageReader.get_message)."""
        return self.reader.get_message(topic, queue_id, offset, max_nums)

    def read_messages(self, topic: str, queue_id: int, offset: int, max_nums: int,
                      caps: TransferCaps = DEFAULT_CAPS,
                      matches: Callable[[StoredMessage], bool] | None = None) -> ReadResult:
        """DefaultMessageStore.getMessage: a pull's read of one queue, within the transfer caps
        (see MessageReader.read_messages)."""
        return self.reader.read_messages(topic, queue_id, offset, max_nums, caps, matches)

    def get_by_commit_offset(self, pos: int) -> StoredMessage | None:
        return self.reader.get_by_commit_offset(pos)

    def query_message(self, topic: str, key: str, max_num: int, begin: int, end: int) -> list[StoredMessage]:
        """DefaultMessageStore.queryMessage: messages of `topic` by key or unique key, newest first
        (see MessageReader.query_message). Blocking: off the loop."""
        return self.reader.query_message(topic, key, max_num, begin, end)

    # ------------------------------------------------------------------ close
    def close(self) -> None:
        """Stop taking writes, checkpoint and close; callable from any thread. A batch being
        written finishes (its senders are acknowledged); messages still queued fail with OSError."""
        self.writer.refuse_puts()
        if self.commit_log.is_open:
            try:
                self.checkpoint()
            except OSError as e:  # the log itself is durable per its policy; recovery scans more next time
                log.error("commit log %s: checkpoint at close failed: %s", self.dir, e)
        with self.commit_log.write_lock:
            if self.commit_log.is_open:
                self.commit_log.close()
                self.consume_queues.close()
        self.index.close()
        self.writer.stop()


def _make_dirs_durably(path: Path) -> None:
    """mkdir -p, then fsync the parent of every directory created, so the new directories' names
    survive a machine crash (as the log file's own name does, by fsyncing its directory)."""
    missing: list[Path] = []
    p = path
    while not p.exists():
        missing.append(p)
        p = p.parent
    path.mkdir(parents=True, exist_ok=True)
    for created in reversed(missing):
        _fsync_dir(created.parent)
