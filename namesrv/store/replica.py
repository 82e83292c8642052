"""The commit log's replica side (namesrv.store.ha.transfer), a mixin of `MessageStore`: a master reads whole
records from an offset for its slaves; a slave appends its master's records verbatim at an offset
(segment padding included, so both hold the same segments), and cuts its log back to a consistent
point (an old master's unreplicated tail) before copying. Offsets are global across segments."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from namesrv.store.checkpoint import Checkpoint, StoreCheckpoint
from namesrv.store.ha.transfer import ReplicationError, Transfer, new_bytes, transfer_slice
from namesrv.store.mapped_file_queue import MappedFileQueue, Segment
from namesrv.store.records import HEADER, parse_records
from namesrv.store.types import Dispatcher, FlushDiskType


class CommitLogReplica:
    dir: Path
    flush_disk_type: FlushDiskType
    fsyncs: int
    batches: int
    files: MappedFileQueue
    _lock: threading.Lock
    _write_lock: threading.Lock
    _checkpoint_lock: threading.Lock
    _dispatchers: list[Dispatcher]
    _checkpoint: StoreCheckpoint
    _fd: int
    _write_pos: int
    _dirty: dict[int, Segment]

    def _dispatch_all(self, records: list[tuple[list[Any], int, int]], end: int) -> OSError | None:
        raise NotImplementedError

    def _sync(self, touched: list[Segment], records: int) -> None:
        raise NotImplementedError

    def read_raw(self, from_offset: int, max_bytes: int) -> Transfer:
        """A master's answer to a replica asking from `from_offset`: whole records (see
        ha.transfer_slice) and this log's end. Blocking (pread): run it off the event loop."""
        with self._lock:
            end = self._write_pos
        if self._fd < 0:
            raise OSError(f"commit log {self.dir} is closed")
        if from_offset < self.files.min_offset() < end:  # deleted by retention: a new slave starts where the log
            from_offset = self.files.min_offset()    # starts (RocketMQ's starts at its last segment's start)
        return Transfer(from_offset, transfer_slice(self.files.pread, from_offset, end, max_bytes), end)

    def append_raw(self, offset: int, data: bytes, fsync: bool = True) -> set[tuple[str, int]]:
        """A replica appends its master's records at `offset`, verbatim: checked (ha.new_bytes: no
        gap, no disagreeing overlap; whole valid records), written, fsynced per the flush policy
        (with `fsync` False only written: the caller flushes later), then dispatched as recovery
        would. Returns the queues that grew. Nothing of a refused batch is written. Blocking: run it
        off the event loop."""
        with self._write_lock:
            if self._fd < 0:
                raise OSError(f"commit log {self.dir} is closed")
            local_end = self._write_pos
            if not self.files.segments and local_end == 0 and offset > 0 and offset % self.files.segment_size == 0:
                local_end = offset  # an empty replica of a log whose older segments retention deleted starts here
            start, fresh = new_bytes(offset, data, local_end, self.files.pread)
            if not fresh:
                return set()
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
            failed = self._dispatch_all(records, start + len(fresh))
            if failed is not None:
                raise failed
        return {(fields[0], fields[1]) for fields, _, _ in records}

    def truncate_to(self, offset: int) -> int:
        """Cut the log back to `offset`, a record boundary at or before its end (a returning old
        master's consistent point): later segments are deleted, the one holding `offset` is cut, and
        every dispatcher forgets what was cut; returns the bytes cut. The checkpoint is lowered to
        `offset` first, so a crash part-way recovers from there. Blocking: run it off the event loop."""
        with self._checkpoint_lock, self._write_lock:
            if self._fd < 0:
                raise OSError(f"commit log {self.dir} is closed")
            end = self._write_pos
            if not self.files.min_offset() <= offset <= end:
                raise ReplicationError(f"cannot truncate to {offset}: the log holds [{self.files.min_offset()}, {end})")
            if offset == end:
                return 0
            if not self._records_chain(offset, end):
                raise ReplicationError(f"cannot truncate to {offset}: not a record boundary")
            cp = self._checkpoint.current
            if cp.physic_offset > offset:
                self._checkpoint.write(Checkpoint(offset, cp.physic_msg_timestamp, cp.min_physic_offset))
            self.files.truncate(offset)
            self.fsyncs += 1
            with self._lock:
                self._write_pos = offset
            for d in self._dispatchers:
                if d.truncate is not None:
                    d.truncate(offset)
        return end - offset

    def _records_chain(self, offset: int, end: int) -> bool:
        """Whether record headers lead from `offset` exactly to `end` (so `offset` is a boundary)."""
        pos = offset
        while pos < end:
            header = self.files.pread(pos, HEADER.size)
            if len(header) < HEADER.size:
                return False
            pos += HEADER.size + HEADER.unpack(header)[1]
        return pos == end
