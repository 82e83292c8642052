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

Writes (RocketMQ's CommitLog + GroupCommitService): `put` queues a message; one writer task takes
every message queued so far as a batch, and a worker thread writes the batch and, with SYNC_FLUSH,
fsyncs once for all of it; each sender is acknowledged after the fsync that covers its record. While
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
"""
from __future__ import annotations

import asyncio
import logging
import os
import threading
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import msgpack

from namesrv.common.clock import Clock, system_clock
from namesrv.common.persist import fsync_dir as _fsync_dir  # the one directory fsync (tests patch this name)
from namesrv.protocol.constants import MAX_MESSAGE_SIZE
from namesrv.protocol.message.properties import MessageIllegal, check_message
from namesrv.protocol.message.types import MessageInner
from namesrv.store.checkpoint import StoreCheckpoint
from namesrv.store.dispatch import CommitLogDispatch
from namesrv.store.index.index_service import IndexService
from namesrv.store.mapped_file_queue import MappedFileQueue, Segment
from namesrv.store.queue.consume_queue import ConsumeQueueStore
from namesrv.store.reads import CommitLogReads
from namesrv.store.records import HEADER, MAGIC, MAX_RECORD, blank_record
from namesrv.store.replica import CommitLogReplica
from namesrv.store.types import (
    MAPPED_FILE_SIZE_COMMIT_LOG,
    MAPPED_FILE_SIZE_CONSUME_QUEUE,
    MIN_SEGMENT_SIZE,
    AppendResult,
    DiskFullError,
    Dispatcher,
    FlushDiskType,
    StoreFormatError,
)

log = logging.getLogger(__name__)

MAX_BATCH = 1024
"""Messages written (and fsynced) together at most."""


_Pending = tuple[MessageInner, "asyncio.Future[AppendResult]"]
"""A message waiting for the group-commit writer, and its sender's future."""


class MessageStore(CommitLogDispatch, CommitLogReads, CommitLogReplica):
    """Thread-safe for readers, who never wait for the disk; writes go through `put` (async,
    batched) or `append` (sync). A batch's records are written, fsynced and dispatched under the
    write lock only; the short lock publishes the write position once that is done."""

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
        `dispatchers`: added after the consume queues, before recovery, so they see the records
        recovery re-reads (`add_dispatcher` adds one later, for the records written from then on)."""
        self.dir = Path(store_dir)
        _make_dirs_durably(self.dir)
        if (self.dir / "commitlog.dat").exists():
            raise StoreFormatError(f"{self.dir / 'commitlog.dat'} is a single-file commit log of an older version; "
                                   f"this store keeps segments in {self.dir / 'commitlog'}/ (move it away to start)")
        _make_dirs_durably(self.dir / "commitlog")
        _make_dirs_durably(self.dir / "consumequeue")
        if segment_size < MIN_SEGMENT_SIZE:
            raise ValueError(f"mappedFileSizeCommitLog {segment_size} is below the minimum {MIN_SEGMENT_SIZE}")
        self.segment_size = segment_size
        self.flush_disk_type = flush_disk_type
        self.clock = clock
        self.group_commit = group_commit
        """False: fsync once per message even in a batch (the baseline the benchmark compares)."""
        self._lock = threading.Lock()
        """Guards the write position and the segment and queue tables' publication: held for memory
        work only, never disk I/O, so a reader on an event loop never waits for the disk."""
        self._write_lock = threading.Lock()
        """One writer at a time (a batch's write, fsync and dispatch, a flush, a clean-up step, the
        close); readers never take it."""
        self._checkpoint_lock = threading.Lock()
        """Held across a checkpoint (its fsyncs run outside the write lock) and a truncate_to;
        taken before the write lock."""
        self.files = MappedFileQueue(self.dir / "commitlog", segment_size)
        self.consume_queues = ConsumeQueueStore(self.dir / "consumequeue", consume_queue_file_size)
        self.index = IndexService(self.dir / "index")
        """Messages by key and unique key (QUERY_MESSAGE): the second dispatcher."""
        self._dispatchers: list[Dispatcher] = [
            Dispatcher(self.consume_queues.dispatch, self.consume_queues.flush, self.consume_queues.truncate),
            Dispatcher(self.index.dispatch, self.index.flush, self.index.truncate_to, self.index.delete_expired,
                       lambda: self.index.recovery.resume_offset if self.index.recovery.deleted else None),
            *dispatchers]
        self._checkpoint = StoreCheckpoint(self.dir / "checkpoint")
        self._fd = 0  # >= 0 while open (the segments hold the real descriptors); -1 once closed
        self.recovery = self._recover()
        self._write_pos = self.files.file_end()
        self.consume_queues.correct_min_offsets(self.files.min_offset())
        self.disk_full = False
        """Set by retention (store_cleanup) while the disk is fuller than diskSpaceWarningLevelRatio."""
        self.dispatch_failed: OSError | None = self.dispatch_failed  # set by recovery when the disk was full
        """Set when writing a consume queue failed: writes and checkpoints stop (see _dispatch_all)."""
        self.disk_ratio = 0.0
        """The store disk's used ratio (0..1) retention last saw."""
        self._dirty: dict[int, Segment] = {}
        """Segments written but not fsynced yet (ASYNC_FLUSH, or a replica's unsynced append)."""
        self._queue: asyncio.Queue[_Pending | None] | None = None
        self._writer: asyncio.Task[None] | None = None
        self._writer_loop: asyncio.AbstractEventLoop | None = None
        self._closed = False
        self.fsyncs = 0
        self.batches = 0
        self.listeners: list[Callable[[], None]] = []
        """Called on the writer's event loop after every batch `put` wrote (replication waits on it)."""

    # ------------------------------------------------------------------ write
    @staticmethod
    def check(msg: MessageInner) -> None:
        """Raise MessageIllegal (with the reason) for a message this store must not hold: one its
        pull path could not hand back (see message_properties), or a record its recovery rejects."""
        try:
            msg.msg_id.encode("utf-8")
            msg.born_host.encode("utf-8")
        except (AttributeError, UnicodeError):
            raise MessageIllegal("message id and born host must be UTF-8 strings") from None
        check_message(msg.topic, msg.properties, msg.msg_id, msg.body, MAX_MESSAGE_SIZE,
                      {"queueId": (msg.queue_id, False), "flag": (msg.flag, False), "sysFlag": (msg.sys_flag, False),
                       "bornTimestamp": (msg.born_timestamp, True), "reconsumeTimes": (msg.reconsume_times, False)})

    def _encode(self, msg: MessageInner, queue_offset: int, now: int) -> tuple[list[Any], bytes]:
        """The fields and record of one `check`ed message; MessageIllegal when it would not fit a
        record or a segment."""
        fields = [msg.topic, msg.queue_id, queue_offset, now, msg.msg_id, msg.properties, msg.body, msg.flag,
                  msg.sys_flag, msg.born_timestamp, msg.born_host, msg.reconsume_times]
        try:
            payload: bytes = msgpack.packb(fields, use_bin_type=True)
        except (TypeError, ValueError, OverflowError) as e:
            raise MessageIllegal(f"message cannot be stored: {e}") from None
        if len(payload) > MAX_RECORD:
            raise MessageIllegal(f"message record of {len(payload)} bytes exceeds the store's {MAX_RECORD}")
        if len(payload) + 2 * HEADER.size > self.segment_size:
            raise MessageIllegal(f"message record of {len(payload)} bytes does not fit a commit-log segment "
                                 f"(mappedFileSizeCommitLog {self.segment_size})")
        return fields, HEADER.pack(MAGIC, len(payload), zlib.crc32(payload)) + payload

    def _write_batch(self, batch: list[MessageInner]) -> list[AppendResult | Exception]:
        """Write a batch (one write per segment it lands in), fsync per the flush policy, dispatch
        it. Runs in a thread."""
        out: list[AppendResult | Exception] = []
        with self._write_lock:  # one writer at a time, across write and fsync; readers never take it
            if self._fd < 0:  # closed under a batch already queued: nothing of it is written
                return [OSError(f"commit log {self.dir} is closed") for _ in batch]
            refusal = self.refuse_writes()
            if refusal is not None:
                return [refusal for _ in batch]
            chunks: list[bytes] = []
            fields_of: list[list[Any]] = []
            now = self.clock()
            start = pos = self._write_pos
            room = self.files.room_at(pos)
            planned: dict[tuple[str, int], int] = {}
            for msg in batch:
                try:
                    self.check(msg)
                    key = (msg.topic, msg.queue_id)
                    cq = self.consume_queues.get(msg.topic, msg.queue_id)
                    offset = planned.get(key, cq.max_offset if cq is not None else 0)
                    fields, record = self._encode(msg, offset, now)
                except MessageIllegal as e:  # refused alone: the others of the batch are written
                    out.append(e)
                    continue
                if len(record) + HEADER.size > room:  # the segment's end: pad it, the record opens the next
                    chunks.append(blank_record(room))
                    pos += room
                    room = self.segment_size
                planned[key] = offset + 1
                chunks.append(record)
                fields_of.append(fields)
                out.append(AppendResult(msg.topic, msg.queue_id, offset, pos, now, msg.msg_id, len(record)))
                pos += len(record)
                room -= len(record)
            if not fields_of:
                return out
            data = b"".join(chunks)
            try:
                touched = self.files.write(start, data)  # an error leaves nothing of it on disk
                self._sync(touched, len(fields_of))
            except OSError as e:
                self.files.truncate(start)
                return [e if isinstance(r, AppendResult) else r for r in out]
            self.batches += 1
            results = [r for r in out if isinstance(r, AppendResult)]
            failed = self._dispatch_all([(f, r.commit_log_offset, r.store_size)
                                         for f, r in zip(fields_of, results, strict=True)], pos)
        return out if failed is None else [failed if isinstance(r, AppendResult) else r for r in out]

    def _sync(self, touched: list[Segment], records: int) -> None:
        """fsync what a batch wrote per the flush policy (the write lock held)."""
        if self.flush_disk_type is not FlushDiskType.SYNC_FLUSH:
            self._dirty.update((id(s), s) for s in touched)
            return
        for seg in touched[:-1]:
            os.fsync(seg.fd)
            self.fsyncs += 1
        for _ in range(records if not self.group_commit else 1):  # per message: the benchmark's baseline
            os.fsync(touched[-1].fd)
            self.fsyncs += 1

    def refuse_writes(self) -> OSError | None:
        """Why the store takes no write now (its disk is marked full by retention, or a consume
        queue could not be written: a restart rebuilds it), or None."""
        if self.dispatch_failed is not None:
            return OSError(f"commit log {self.dir}: refusing writes until a restart rebuilds the consume queues "
                           f"({self.dispatch_failed})")
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
        if self._closed:
            raise OSError(f"commit log {self.dir} is closed")
        loop = asyncio.get_running_loop()
        if self._queue is None or self._writer_loop is not loop:  # first put, or a new event loop
            self._queue = asyncio.Queue()
            self._writer_loop = loop
            self._writer = loop.create_task(self._write_loop(self._queue), name="commit-log-writer")
        future: asyncio.Future[AppendResult] = loop.create_future()
        self._queue.put_nowait((msg, future))
        return await future

    async def _write_loop(self, queue: asyncio.Queue[_Pending | None]) -> None:
        """Batches until `close` queues the end marker; whatever is queued after it (or while the
        log is closed) fails with OSError, so no sender waits forever on a closed store."""
        stopping = False
        while not stopping:
            batch: list[_Pending] = []
            item = await queue.get()
            while item is not None:
                batch.append(item)
                if len(batch) >= MAX_BATCH or queue.empty():
                    break
                item = queue.get_nowait()
            stopping = item is None
            if not batch:
                continue
            try:
                results = await asyncio.to_thread(self._write_batch, [m for m, _ in batch])
            except Exception as e:  # a bug: fail every waiter rather than leave them hanging
                results = [e] * len(batch)
            for (_, future), result in zip(batch, results, strict=True):
                if future.done():
                    continue
                if isinstance(result, Exception):
                    future.set_exception(result)
                else:
                    future.set_result(result)
            for listener in self.listeners:
                listener()
        while not queue.empty():  # put() refuses once closed; this drains a put that raced it
            left = queue.get_nowait()
            if left is not None and not left[1].done():
                left[1].set_exception(OSError(f"commit log {self.dir} is closed"))

    def flush(self) -> None:
        """fsync what was written but not yet synced. The write lock is held only to take the list
        (each segment's fd duplicated, so a segment closed meanwhile is still synced), never across
        the fsyncs: a replica's appends and the acknowledgements behind them go on while they run."""
        with self._write_lock:
            dirty, self._dirty = self._dirty, {}
            fds = [os.dup(seg.fd) for seg in dirty.values() if seg.fd >= 0]
        try:
            for fd in fds:
                os.fsync(fd)
                self.fsyncs += 1
        finally:
            for fd in fds:
                os.close(fd)

    def close(self) -> None:
        """Stop taking writes, checkpoint and close; callable from any thread. A batch being
        written finishes (its senders are acknowledged); messages still queued fail with OSError."""
        self._closed = True
        if self._fd >= 0:
            try:
                self.checkpoint()
            except OSError as e:  # the log itself is durable per its policy; recovery scans more next time
                log.error("commit log %s: checkpoint at close failed: %s", self.dir, e)
        with self._write_lock:
            if self._fd >= 0:
                for seg in self.files.segments[-1:]:
                    os.fsync(seg.fd)
                    self.fsyncs += 1
                with self._lock:
                    self._fd = -1
                self.files.close()
                self.consume_queues.close()
        self.index.close()
        loop, queue = self._writer_loop, self._queue
        if loop is not None and queue is not None and not loop.is_closed():
            try:
                running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
            except RuntimeError:
                running = None
            if running is loop:
                queue.put_nowait(None)
            else:
                loop.call_soon_threadsafe(queue.put_nowait, None)


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


