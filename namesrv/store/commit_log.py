"""The commit log (RocketMQ's CommitLog), a part of the message store (namesrv.store.message_store):
its segment files (`files`, a MappedFileQueue under `<store_dir>/commitlog`), the write position,
the write path (a batch laid out, written with one pwrite per segment it touches and fsynced per the
flush policy), reads of one record, and the replica side (namesrv.store.ha.transfer): a master reads
whole records from an offset for its slaves; a slave appends its master's records verbatim at an
offset (segment padding included, so both hold the same segments) and cuts its log back to a
consistent point (an old master's unreplicated tail) before copying. Offsets are global across
segments.

Locks: `write_lock` (RocketMQ's putMessageLock) lets one writer at a time write, fsync and, in the
store, dispatch; the store holds it across all three, so the methods below that write say "the
write lock held" and leave taking it to the caller. The position lock, this part's own, guards the
write position's publication only (memory work, never disk I/O), so a reader never waits for the
disk: a batch is readable once the store `publish`es its end.
"""

from __future__ import annotations

import os
import threading
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgpack

from namesrv.protocol.constants import MAX_MESSAGE_SIZE
from namesrv.protocol.message.properties import MessageIllegal, check_message
from namesrv.protocol.message.types import MessageInner, StoredMessage
from namesrv.store.ha.transfer import ReplicationError, Transfer, new_bytes, transfer_slice
from namesrv.store.mapped_file_queue import MappedFileQueue, Segment
from namesrv.store.records import HEADER, MAGIC, MAX_RECORD, blank_record, parse_records
from namesrv.store.types import MIN_SEGMENT_SIZE, AppendResult, FlushDiskType

Record = tuple[list[Any], int, int]
"""A record written: its fields, commit-log offset and size (what the dispatchers are given)."""


class CommitLog:
    def __init__(self, store_dir: Path, segment_size: int, flush_disk_type: FlushDiskType,
                 group_commit: bool = True) -> None:
        """The commit log of the store in `store_dir` (its segments in `store_dir/commitlog`);
        `segment_size`: RocketMQ's mappedFileSizeCommitLog (a record must fit in one segment). Its
        write position is 0 until the store, having recovered the log, `publish`es its end."""
        if segment_size < MIN_SEGMENT_SIZE:
            raise ValueError(f"mappedFileSizeCommitLog {segment_size} is below the minimum {MIN_SEGMENT_SIZE}")
        self.store_dir = store_dir
        self.segment_size = segment_size
        self.flush_disk_type = flush_disk_type
        self.group_commit = group_commit
        """False: fsync once per message even in a batch (the baseline the benchmark compares)."""
        self._lock = threading.Lock()
        """Guards the write position and the segment and queue tables' publication: held for memory
        work only, never disk I/O, so a reader on an event loop never waits for the disk."""
        self.write_lock = threading.Lock()
        """One writer at a time (a batch's write, fsync and dispatch, a flush, a clean-up step, the
        close); readers never take it."""
        self.files = MappedFileQueue(store_dir / "commitlog", segment_size)
        self._packer = msgpack.Packer(use_bin_type=True)
        """Encodes records (the write lock held: one writer at a time)."""
        self._closed = False
        self._write_pos = 0
        self._dirty: dict[int, Segment] = {}
        """Segments written but not fsynced yet (ASYNC_FLUSH, or a replica's unsynced append)."""
        self.fsyncs = 0
        self.batches = 0

    # ------------------------------------------------------------------ position
    @property
    def is_open(self) -> bool:
        return not self._closed

    @property
    def write_pos(self) -> int:
        """Where the published log ends, read without the position lock (the write lock's holder,
        and readers for whom a value a batch old will do)."""
        return self._write_pos

    def max_offset(self) -> int:
        """Where the published log ends (RocketMQ's getMaxOffset; segments deleted by retention included)."""
        with self._lock:
            return self._write_pos

    def publish(self, end: int) -> None:
        """Make the log up to `end` readable (once durable per the policy and dispatched)."""
        with self._lock:  # a reader waits only for this
            self._write_pos = end

    # ------------------------------------------------------------------ write (the write lock held)
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
                      (msg.queue_id, msg.flag, msg.sys_flag, msg.born_timestamp, msg.reconsume_times))

    def _encode(self, msg: MessageInner, queue_offset: int, now: int) -> tuple[list[Any], bytes]:
        """The fields and record of one `check`ed message; MessageIllegal when it would not fit a
        record or a segment."""
        fields = [msg.topic, msg.queue_id, queue_offset, now, msg.msg_id, msg.properties, msg.body, msg.flag,
                  msg.sys_flag, msg.born_timestamp, msg.born_host, msg.reconsume_times]
        try:
            payload: bytes = self._packer.pack(fields)
        except (TypeError, ValueError, OverflowError) as e:
            raise MessageIllegal(f"message cannot be stored: {e}") from None
        if len(payload) > MAX_RECORD:
            raise MessageIllegal(f"message record of {len(payload)} bytes exceeds the store's {MAX_RECORD}")
        if len(payload) + 2 * HEADER.size > self.segment_size:
            raise MessageIllegal(f"message record of {len(payload)} bytes does not fit a commit-log segment "
                                 f"(mappedFileSizeCommitLog {self.segment_size})")
        return fields, HEADER.pack(MAGIC, len(payload), zlib.crc32(payload)) + payload

    def write_batch(self, batch: list[MessageInner], queue_offset: Callable[[str, int], int],
                    now: int, checked: list[bool] | None = None
                    ) -> tuple[list[AppendResult | Exception], list[Record], int]:
        """Lay a batch's records out from the log's end, each message at the next offset of its
        queue (`queue_offset(topic, queue id)`, RocketMQ's assignOffset), write them (one write per
        segment they land in) and fsync per the flush policy. Returns each message's result (a
        MessageIllegal refuses it alone; when the write or fsync fails, the OSError is every written
        one's and nothing of the batch stays on disk), the records written, to dispatch, and the
        log's new end, not published yet. `checked[i]`: message i was `check`ed by the caller
        (not checked again). The write lock held."""
        out: list[AppendResult | Exception] = []
        chunks: list[bytes] = []
        fields_of: list[list[Any]] = []
        start = pos = self._write_pos
        room = self.files.room_at(pos)
        planned: dict[tuple[str, int], int] = {}
        for i, msg in enumerate(batch):
            try:
                if checked is None or not checked[i]:
                    self.check(msg)
                key = (msg.topic, msg.queue_id)
                offset = planned.get(key)
                if offset is None:
                    offset = queue_offset(msg.topic, msg.queue_id)
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
            return out, [], start
        data = b"".join(chunks)
        try:
            touched = self.files.write(start, data)  # an error leaves nothing of it on disk
            self._sync(touched, len(fields_of))
        except OSError as e:
            self.files.truncate(start)
            return [e if isinstance(r, AppendResult) else r for r in out], [], start
        self.batches += 1
        results = [r for r in out if isinstance(r, AppendResult)]
        return out, [(f, r.commit_log_offset, r.store_size) for f, r in zip(fields_of, results, strict=True)], pos

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

    def take_dirty(self) -> list[Segment]:
        """The segments written since their last fsync, which the caller now fsyncs (a checkpoint).
        The write lock held."""
        dirty, self._dirty = self._dirty, {}
        return list(dirty.values())

    def flush(self) -> None:
        """fsync what was written but not yet synced. The write lock is held only to take the list
        (each segment's fd duplicated, so a segment closed meanwhile is still synced), never across
        the fsyncs: a replica's appends and the acknowledgements behind them go on while they run."""
        with self.write_lock:
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
        """fsync the last segment and close the files (the write lock held); reads find nothing after."""
        for seg in self.files.segments[-1:]:
            os.fsync(seg.fd)
            self.fsyncs += 1
        with self._lock:
            self._closed = True
        self.files.close()

    # ------------------------------------------------------------------ read
    def read_at(self, pos: int, size: int = 0) -> StoredMessage | None:
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

    # ------------------------------------------------------------------ replica side
    def read_raw(self, from_offset: int, max_bytes: int) -> Transfer:
        """A master's answer to a replica asking from `from_offset`: whole records (see
        ha.transfer_slice) and this log's end. Blocking (pread): run it off the event loop."""
        with self._lock:
            end = self._write_pos
        if self._closed:
            raise OSError(f"commit log {self.store_dir} is closed")
        if from_offset < self.files.min_offset() < end:  # deleted by retention: a new slave starts where the log
            from_offset = self.files.min_offset()    # starts (RocketMQ's starts at its last segment's start)
        return Transfer(from_offset, transfer_slice(self.files.pread, from_offset, end, max_bytes), end)

    def append_raw(self, offset: int, data: bytes, fsync: bool) -> tuple[list[Record], int] | None:
        """A replica's write of its master's records at `offset`, verbatim: checked (ha.new_bytes:
        no gap, no disagreeing overlap; whole valid records), written, fsynced per the flush policy
        (with `fsync` False only written: the caller flushes later). Returns the records written
        (BLANK padding left out), to dispatch, and the log's new end, not published yet; None when
        the log holds all of `data` already. Nothing of a refused batch is written. The write lock held."""
        if self._closed:
            raise OSError(f"commit log {self.store_dir} is closed")
        local_end = self._write_pos
        if not self.files.segments and local_end == 0 and offset > 0 and offset % self.files.segment_size == 0:
            local_end = offset  # an empty replica of a log whose older segments retention deleted starts here
        start, fresh = new_bytes(offset, data, local_end, self.files.pread)
        if not fresh:
            return None
        try:
            records = parse_records(fresh, start)
        except ValueError as e:
            raise ReplicationError(f"batch at {offset} refused: {e}") from None
        touched = self.files.write(start, fresh)  # an error leaves nothing of it on disk
        try:
            if fsync and self.flush_disk_type is FlushDiskType.SYNC_FLUSH:
                self._sync(touched, 1)
            else:
                self._dirty.update((id(s), s) for s in touched)
        except OSError:
            self.files.truncate(start)
            raise
        self.batches += 1
        return records, start + len(fresh)

    def truncation_end(self, offset: int) -> int:
        """The log's end, once `offset` is checked to be a record boundary at or before it, where
        `truncate` may cut (ReplicationError otherwise; OSError when closed). The write lock held."""
        if self._closed:
            raise OSError(f"commit log {self.store_dir} is closed")
        end = self._write_pos
        if not self.files.min_offset() <= offset <= end:
            raise ReplicationError(f"cannot truncate to {offset}: the log holds [{self.files.min_offset()}, {end})")
        if offset != end and not self._records_chain(offset, end):
            raise ReplicationError(f"cannot truncate to {offset}: not a record boundary")
        return end

    def truncate(self, offset: int) -> None:
        """Cut the log back to `offset` (checked by `truncation_end`): later segments are deleted,
        the one holding `offset` is cut and fsynced, the write position published there. The write
        lock held."""
        self.files.truncate(offset)
        self.fsyncs += 1
        self.publish(offset)

    def _records_chain(self, offset: int, end: int) -> bool:
        """Whether record headers lead from `offset` exactly to `end` (so `offset` is a boundary)."""
        pos = offset
        while pos < end:
            header = self.files.pread(pos, HEADER.size)
            if len(header) < HEADER.size:
                return False
            pos += HEADER.size + HEADER.unpack(header)[1]
        return pos == end
