"""The commit log's replica side (namesrv.broker.ha), a mixin of `CommitLog`: a master reads whole
records from an offset for its slaves; a slave appends its master's records verbatim at an offset,
and cuts its log back to a consistent point (an old master's unreplicated tail) before copying."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

from namesrv.broker.ha import ReplicationError, Transfer, new_bytes, transfer_slice
from namesrv.broker.index_service import IndexService
from namesrv.broker.store_records import QueueIndex, parse_records, whole_records_prefix
from namesrv.broker.store_types import FlushDiskType


class CommitLogReplica:
    path: Path
    flush_disk_type: FlushDiskType
    fsyncs: int
    batches: int
    _lock: threading.Lock
    _write_lock: threading.Lock
    _index: dict[tuple[str, int], QueueIndex]
    _fd: int
    _write_pos: int
    _dirty: bool
    index: IndexService

    def _index_record(self, fields: list[Any], pos: int, size: int) -> None:
        raise NotImplementedError

    def read_raw(self, from_offset: int, max_bytes: int) -> Transfer:
        """A master's answer to a replica asking from `from_offset`: whole records (see
        ha.transfer_slice) and this log's end. Blocking (pread): run it off the event loop."""
        with self._lock:
            fd, end = self._fd, self._write_pos
        if fd < 0:
            raise OSError(f"commit log {self.path} is closed")
        return Transfer(from_offset, transfer_slice(lambda p, n: os.pread(fd, n, p), from_offset, end, max_bytes),
                        end)

    def append_raw(self, offset: int, data: bytes, fsync: bool = True) -> set[tuple[str, int]]:
        """A replica appends its master's records at `offset`, verbatim: checked (ha.new_bytes: no
        gap, no disagreeing overlap; whole valid records), written, fsynced per the flush policy
        (with `fsync` False only written: the caller flushes later), then indexed as recovery would.
        Returns the queues that grew. Nothing of a refused batch is written. Blocking: run it off
        the event loop."""
        with self._write_lock:
            if self._fd < 0:
                raise OSError(f"commit log {self.path} is closed")
            fd = self._fd
            start, fresh = new_bytes(offset, data, self._write_pos, lambda p, n: os.pread(fd, n, p))
            if not fresh:
                return set()
            try:
                records = parse_records(fresh, start)
            except ValueError as e:
                raise ReplicationError(f"batch at {offset} refused: {e}") from None
            try:
                written = os.write(fd, fresh)
                if written != len(fresh):
                    raise OSError(f"short write to commit log: {written} of {len(fresh)} bytes")
                if fsync and self.flush_disk_type is FlushDiskType.SYNC_FLUSH:
                    os.fsync(fd)
                    self.fsyncs += 1
                else:
                    self._dirty = True
            except OSError:
                os.ftruncate(fd, start)
                raise
            self.batches += 1
            with self._lock:
                for fields, pos, size in records:
                    self._index_record(fields, pos, size)
                self._write_pos = start + len(fresh)
        return {(fields[0], fields[1]) for fields, _, _ in records}

    def truncate_to(self, offset: int) -> int:
        """Cut the log back to `offset`, a record boundary at or before its end (a returning old
        master's consistent point), and drop the index entries of what was cut; returns the bytes
        cut. Written and fsynced before the index forgets them, so a crash in between recovers the
        same. Blocking: run it off the event loop."""
        with self._write_lock:
            if self._fd < 0:
                raise OSError(f"commit log {self.path} is closed")
            fd, end = self._fd, self._write_pos
            if not 0 <= offset <= end:
                raise ReplicationError(f"cannot truncate to {offset}: the log ends at {end}")
            if offset == end:
                return 0
            tail = os.pread(fd, end - offset, offset)
            if whole_records_prefix(tail) != len(tail):
                raise ReplicationError(f"cannot truncate to {offset}: not a record boundary")
            os.ftruncate(fd, offset)
            os.fsync(fd)
            self.fsyncs += 1
            self.index.truncate_to(offset)
            with self._lock:
                self._write_pos = offset
                for key in list(self._index):
                    idx = self._index[key]
                    keep = len(idx.positions)  # positions grow with the queue offset: cut from the end
                    while keep > 0 and (idx.positions[keep - 1] >= offset or idx.positions[keep - 1] < 0):
                        keep -= 1
                    if keep == 0:
                        del self._index[key]
                    else:
                        del idx.positions[keep:], idx.sizes[keep:], idx.store_times[keep:]
        return end - offset

