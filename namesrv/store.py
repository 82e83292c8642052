"""A broker's message store: one append-only commit log on disk and per-queue offset indexes.

Record layout: magic (4 B) | payload length (4 B) | crc32 of payload (4 B) | payload (msgpack).
Recovery scans the log from the start and truncates at the first record that is short, has a bad
magic or a bad checksum: a torn tail from a kill -9 mid-write is never served. With SYNC flush a
send is acknowledged only after fsync; with ASYNC flush it is acknowledged after write() (it then
survives a process kill, since the page cache outlives the process, but not a machine crash).

The per-queue indexes (RocketMQ's consume queues) are rebuilt from the log at start; that costs a
scan of the log, a fair trade for a store whose only durable structure is one file.
"""

from __future__ import annotations

import logging
import os
import struct
import threading
import zlib
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

import msgpack

from namesrv.clock import Clock, system_clock

log = logging.getLogger(__name__)

MAGIC = 0x524D5131  # "RMQ1"
HEADER = struct.Struct(">III")
MAX_MESSAGE_SIZE = 4 * 1024 * 1024


class FlushDiskType(StrEnum):
    SYNC_FLUSH = "SYNC_FLUSH"
    ASYNC_FLUSH = "ASYNC_FLUSH"


class SendStatus(StrEnum):
    SEND_OK = "SEND_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"


@dataclass(slots=True)
class SendResult:
    status: SendStatus
    msg_id: str
    offset_msg_id: str
    topic: str
    broker_name: str
    queue_id: int
    queue_offset: int


@dataclass(slots=True)
class StoredMessage:
    topic: str
    queue_id: int
    queue_offset: int
    store_timestamp: int
    msg_id: str
    properties: dict[str, str]
    body: bytes
    commit_log_offset: int = 0


@dataclass(slots=True)
class RecoveryReport:
    records: int = 0
    valid_bytes: int = 0
    truncated_bytes: int = 0
    reason: str | None = None
    queues: dict[tuple[str, int], int] = field(default_factory=dict)


class CommitLog:
    """Thread-safe: the broker actor appends from a worker thread so fsync never blocks its loop."""

    def __init__(
        self,
        store_dir: str | Path,
        broker_name: str,
        flush_disk_type: FlushDiskType = FlushDiskType.SYNC_FLUSH,
        clock: Clock = system_clock,
    ) -> None:
        self.dir = Path(store_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.path = self.dir / "commitlog.dat"
        self.broker_name = broker_name
        self.flush_disk_type = flush_disk_type
        self.clock = clock
        self._lock = threading.Lock()
        self._index: dict[tuple[str, int], list[int]] = {}
        self.recovery = self._recover()
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        self._write_pos = os.fstat(self._fd).st_size
        self._dirty = False

    # ------------------------------------------------------------------ recovery
    def _recover(self) -> RecoveryReport:
        report = RecoveryReport()
        if not self.path.exists():
            return report
        data = self.path.read_bytes()
        pos = 0
        while pos < len(data):
            reason = None
            if len(data) - pos < HEADER.size:
                reason = "short header"
            else:
                magic, length, crc = HEADER.unpack_from(data, pos)
                end = pos + HEADER.size + length
                if magic != MAGIC:
                    reason = "bad magic"
                elif end > len(data):
                    reason = "short payload"
                elif zlib.crc32(data[pos + HEADER.size : end]) != crc:
                    reason = "bad checksum"
            if reason is not None:
                report.reason = reason
                break
            topic, queue_id, *_ = msgpack.unpackb(data[pos + HEADER.size : end], raw=False)
            self._index.setdefault((topic, queue_id), []).append(pos)
            report.records += 1
            pos = end
        report.valid_bytes = pos
        report.truncated_bytes = len(data) - pos
        if report.truncated_bytes:
            log.warning(
                "commit log %s: truncating %d torn bytes at %d (%s)",
                self.path, report.truncated_bytes, pos, report.reason,
            )
            with open(self.path, "r+b") as f:
                f.truncate(pos)
                f.flush()
                os.fsync(f.fileno())
        report.queues = {k: len(v) for k, v in self._index.items()}
        return report

    # ------------------------------------------------------------------ write
    def append(
        self, topic: str, queue_id: int, body: bytes, properties: dict[str, str] | None = None,
        msg_id: str | None = None,
    ) -> SendResult:
        if len(body) > MAX_MESSAGE_SIZE:
            raise ValueError(f"message body of {len(body)} bytes exceeds {MAX_MESSAGE_SIZE}")
        with self._lock:
            positions = self._index.setdefault((topic, queue_id), [])
            queue_offset = len(positions)
            pos = self._write_pos
            offset_msg_id = f"{self.broker_name}@{pos:016X}"
            now = self.clock()
            payload = msgpack.packb(
                [topic, queue_id, queue_offset, now, msg_id or offset_msg_id, properties or {}, body],
                use_bin_type=True,
            )
            record = HEADER.pack(MAGIC, len(payload), zlib.crc32(payload)) + payload
            written = os.write(self._fd, record)
            if written != len(record):  # a short write: put the file back as it was
                os.ftruncate(self._fd, pos)
                raise OSError(f"short write to commit log: {written} of {len(record)} bytes")
            if self.flush_disk_type is FlushDiskType.SYNC_FLUSH:
                os.fsync(self._fd)
            else:
                self._dirty = True
            self._write_pos = pos + len(record)
            positions.append(pos)
        return SendResult(
            SendStatus.SEND_OK, msg_id or offset_msg_id, offset_msg_id, topic, self.broker_name, queue_id,
            queue_offset,
        )

    def flush(self) -> None:
        with self._lock:
            if self._dirty:
                os.fsync(self._fd)
                self._dirty = False

    # ------------------------------------------------------------------ read
    def max_offset(self, topic: str, queue_id: int) -> int:
        with self._lock:
            return len(self._index.get((topic, queue_id), ()))

    def queues(self) -> dict[tuple[str, int], int]:
        with self._lock:
            return {k: len(v) for k, v in self._index.items()}

    def get_message(self, topic: str, queue_id: int, offset: int, max_nums: int = 32) -> list[StoredMessage]:
        with self._lock:
            positions = self._index.get((topic, queue_id), [])[offset : offset + max(0, max_nums)]
        out: list[StoredMessage] = []
        for pos in positions:
            header = os.pread(self._fd, HEADER.size, pos)
            _, length, _ = HEADER.unpack(header)
            fields: list[Any] = msgpack.unpackb(os.pread(self._fd, length, pos + HEADER.size), raw=False)
            t, q, qo, ts, mid, props, body = fields
            out.append(StoredMessage(t, q, qo, ts, mid, props, body, pos))
        return out

    def close(self) -> None:
        with self._lock:
            if self._fd >= 0:
                os.fsync(self._fd)
                os.close(self._fd)
                self._fd = -1
