"""A broker's message store: one append-only commit log on disk and per-queue offset indexes.

Record layout: magic (4 B) | payload length (4 B) | crc32 of payload (4 B) | payload (msgpack list:
topic, queue id, queue offset, store time, msg id, properties, body, then flag, sysFlag, born time,
born host, reconsume times).

Writes (RocketMQ's CommitLog + GroupCommitService): `put` queues a message; one writer task takes
every message queued so far as a batch, and a worker thread writes the batch and, with SYNC_FLUSH,
fsyncs once for all of it; each sender is acknowledged after the fsync that covers its record. While
one batch is on disk the next one gathers, so concurrent senders share fsyncs. With ASYNC_FLUSH a
send is acknowledged after write() (it survives a process kill, the page cache outliving the
process, but not a machine crash) and a periodic `flush` fsyncs. Disk I/O never runs on the caller's
event loop.

Recovery streams the log (never holding it in memory): a torn tail from a kill -9 mid-write is cut
off; a corrupt record in the middle is skipped by re-synchronising on the next record whose magic,
length and CRC check out, so later acknowledged records stay readable, and the damaged range is
reported. The per-queue indexes (RocketMQ's consume queues: commit-log position, record size and store
time per queue offset) are rebuilt from the scan, holding 20 bytes per message.

Every record published (a batch once durable, a replica's append, each record recovery finds) goes
through `_index_record`: its queue index entry, then the message index by key (`index`,
namesrv.broker.index_service), which skips what it already holds and so resumes from its own end.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgpack

from namesrv.broker.commit_log_reads import CommitLogReads
from namesrv.broker.commit_log_replica import CommitLogReplica
from namesrv.broker.index_service import IndexService
from namesrv.broker.message_properties import MessageIllegal, check_message
from namesrv.broker.store_records import (
    HEADER,
    MAGIC,
    MAX_RECORD,
    QueueIndex,
    read_record,
    resync,
)
from namesrv.broker.store_types import (
    AppendResult,
    FlushDiskType,
    MessageInner,
    ReadResult,
    RecoveryReport,
    StoredMessage,
)
from namesrv.clock import Clock, system_clock
from namesrv.persist import fsync_dir as _fsync_dir  # the one directory fsync (tests patch this name)
from namesrv.protocol.constants import MAX_MESSAGE_SIZE

__all__ = ["HEADER", "MAGIC", "MAX_RECORD", "AppendResult", "CommitLog", "FlushDiskType", "MessageInner", "ReadResult",
           "RecoveryReport", "StoredMessage"]
"""The store's types live in store_types / store_records; importing them from here keeps working."""

log = logging.getLogger(__name__)

MAX_BATCH = 1024
"""Messages written (and fsynced) together at most."""


_Pending = tuple[MessageInner, "asyncio.Future[AppendResult]"]
"""A message waiting for the group-commit writer, and its sender's future."""


class CommitLog(CommitLogReads, CommitLogReplica):
    """Thread-safe for readers, who never wait for the disk; writes go through `put` (async,
    batched) or `append` (sync). A batch's records are written and fsynced under the write lock
    only; the short index lock publishes them (index entries, write position) once durable."""

    def __init__(
        self,
        store_dir: str | Path,
        flush_disk_type: FlushDiskType = FlushDiskType.SYNC_FLUSH,
        clock: Clock = system_clock,
        group_commit: bool = True,
    ) -> None:
        self.dir = Path(store_dir)
        _make_dirs_durably(self.dir)
        self.path = self.dir / "commitlog.dat"
        self.flush_disk_type = flush_disk_type
        self.clock = clock
        self.group_commit = group_commit
        """False: fsync once per message even in a batch (the baseline the benchmark compares)."""
        self._lock = threading.Lock()
        """Guards the indexes and the write position: held for memory work only, never disk I/O,
        so a reader on an event loop never waits for the disk."""
        self._write_lock = threading.Lock()
        """One writer at a time (a batch's write and fsync, a flush, the close); readers never take it."""
        self._index: dict[tuple[str, int], QueueIndex] = {}
        self.index = IndexService(self.dir / "index")
        """Messages by key and unique key (QUERY_MESSAGE); fed by `_index_record`."""
        self.recovery = self._recover()
        self.index.truncate_to(self.recovery.valid_bytes)  # an index ahead of a torn tail forgets it
        new_file = not self.path.exists()
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        if new_file:
            _fsync_dir(self.dir)  # the file's name is durable, not only its contents
        self._write_pos = os.fstat(self._fd).st_size
        self._dirty = False
        self._queue: asyncio.Queue[_Pending | None] | None = None
        self._writer: asyncio.Task[None] | None = None
        self._writer_loop: asyncio.AbstractEventLoop | None = None
        self._closed = False
        self.fsyncs = 0
        self.batches = 0
        self.listeners: list[Callable[[], None]] = []
        """Called on the writer's event loop after every batch `put` wrote (replication waits on it)."""

    # ------------------------------------------------------------------ recovery
    def _recover(self) -> RecoveryReport:
        report = RecoveryReport()
        if not self.path.exists():
            return report
        size = self.path.stat().st_size
        with open(self.path, "rb") as f:
            pos = 0
            last_good_end = 0
            while pos < size:
                record = read_record(f, pos, size)
                if isinstance(record, str):
                    nxt = resync(f, pos + 1, size)
                    if nxt is None:  # nothing valid follows: a torn or garbage tail
                        report.reason = record
                        break
                    report.corrupt_ranges.append((pos, nxt, record))
                    log.error("commit log %s: skipping corrupt bytes [%d, %d) (%s); later records kept",
                              self.path, pos, nxt, record)
                    pos = nxt
                    continue
                fields, end = record
                self._index_record(fields, pos, end - pos)
                report.records += 1
                pos = last_good_end = end
        report.valid_bytes = last_good_end
        report.truncated_bytes = size - last_good_end
        if report.truncated_bytes:
            log.warning("commit log %s: truncating %d torn bytes at %d (%s)",
                        self.path, report.truncated_bytes, last_good_end, report.reason)
            with open(self.path, "r+b") as f:
                f.truncate(last_good_end)
                f.flush()
                os.fsync(f.fileno())
        report.queues = {k: len(v.positions) for k, v in self._index.items()}
        return report

    def _index_record(self, fields: list[Any], pos: int, size: int) -> None:
        topic, queue_id, queue_offset, store_time = fields[0], fields[1], fields[2], fields[3]
        idx = self._index.get((topic, queue_id))
        if idx is None:
            idx = self._index[(topic, queue_id)] = QueueIndex()
        idx.put(queue_offset, pos, size, store_time)
        self.index.dispatch(fields, pos, size)

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
        """The fields and record of one `check`ed message; MessageIllegal when it would not fit a record."""
        fields = [msg.topic, msg.queue_id, queue_offset, now, msg.msg_id, msg.properties, msg.body, msg.flag,
                  msg.sys_flag, msg.born_timestamp, msg.born_host, msg.reconsume_times]
        try:
            payload: bytes = msgpack.packb(fields, use_bin_type=True)
        except (TypeError, ValueError, OverflowError) as e:
            raise MessageIllegal(f"message cannot be stored: {e}") from None
        if len(payload) > MAX_RECORD:
            raise MessageIllegal(f"message record of {len(payload)} bytes exceeds the store's {MAX_RECORD}")
        return fields, HEADER.pack(MAGIC, len(payload), zlib.crc32(payload)) + payload

    def _write_batch(self, batch: list[MessageInner]) -> list[AppendResult | Exception]:
        """Write a batch (one write() call), fsync per the flush policy, index it. Runs in a thread."""
        out: list[AppendResult | Exception] = []
        with self._write_lock:  # one writer at a time, across write and fsync; readers never take it
            if self._fd < 0:  # closed under a batch already queued: nothing of it is written
                return [OSError(f"commit log {self.path} is closed") for _ in batch]
            records: list[bytes] = []
            written_fields: list[list[Any]] = []
            now = self.clock()
            start = self._write_pos
            pos = start
            planned: dict[tuple[str, int], int] = {}
            for msg in batch:
                try:
                    self.check(msg)
                    key = (msg.topic, msg.queue_id)
                    idx = self._index.get(key)
                    offset = planned.get(key, len(idx.positions) if idx is not None else 0)
                    fields, record = self._encode(msg, offset, now)
                except MessageIllegal as e:  # refused alone: the others of the batch are written
                    out.append(e)
                    continue
                planned[key] = offset + 1
                records.append(record)
                written_fields.append(fields)
                out.append(AppendResult(msg.topic, msg.queue_id, offset, pos, now, msg.msg_id, len(record)))
                pos += len(record)
            if not records:
                return out
            data = b"".join(records)
            try:
                written = os.write(self._fd, data)
                if written != len(data):  # a short write (full disk): put the file back as it was
                    os.ftruncate(self._fd, start)
                    raise OSError(f"short write to commit log: {written} of {len(data)} bytes")
                if self.flush_disk_type is FlushDiskType.SYNC_FLUSH:
                    if self.group_commit:
                        os.fsync(self._fd)
                        self.fsyncs += 1
                    else:
                        for _ in records:  # the one-fsync-per-message baseline
                            os.fsync(self._fd)
                            self.fsyncs += 1
                else:
                    self._dirty = True
            except OSError as e:
                os.ftruncate(self._fd, start)
                return [e if isinstance(r, AppendResult) else r for r in out]
            self.batches += 1
            with self._lock:  # published once durable (per the policy): a reader waits only for this
                self._write_pos = pos
                appended = (r for r in out if isinstance(r, AppendResult))
                for r, fields in zip(appended, written_fields, strict=True):
                    self._index_record(fields, r.commit_log_offset, r.store_size)
        return out

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
            raise OSError(f"commit log {self.path} is closed")
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
                left[1].set_exception(OSError(f"commit log {self.path} is closed"))

    def flush(self) -> None:
        with self._write_lock:
            if self._dirty and self._fd >= 0:
                os.fsync(self._fd)
                self.fsyncs += 1
                self._dirty = False

    def close(self) -> None:
        """Stop taking writes, fsync and close; callable from any thread. A batch being written
        finishes (its senders are acknowledged); messages still queued fail with OSError."""
        self._closed = True
        with self._write_lock:
            if self._fd >= 0:
                os.fsync(self._fd)
                with self._lock:
                    fd, self._fd = self._fd, -1
                os.close(fd)
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


