"""Per-queue consume queues on disk (RocketMQ's ConsumeQueue): for every queue offset one 20-byte
entry, commit-log offset (8 B) | record size (4 B) | tag hash code (8 B), in segment files of
`mapped_file_size_consume_queue` bytes under `consumequeue/<topic>/<queueId>/`.

A queue read is one pread of the entries it wants; a queue's max offset is its entry count, known
from its files' sizes at start-up without reading them. Entries are written (not fsynced) as the
commit log dispatches its records; `flush` fsyncs the files written since, before the store's
checkpoint moves past them. An entry whose record was lost to corruption has offset -1.

The tag hash is Java's String.hashCode of the TAGS property, as RocketMQ stores it (0 without tags).
Where we differ from RocketMQ 5.3: no extended consume queue (ConsumeQueueExt) and no bloom filter
bit map; the store time is read from the commit log when needed (search by time).
"""

from __future__ import annotations

import os
import re
import struct
import threading
from pathlib import Path
from typing import Any

from namesrv.common.persist import fsync_dir
from namesrv.store.mapped_file_queue import MappedFileQueue, Segment

CQ_UNIT = struct.Struct(">qiq")
"""One entry: commit-log offset, record size, tag hash code (RocketMQ's CQ_STORE_UNIT_SIZE, 20)."""
LOST = CQ_UNIT.pack(-1, 0, 0)
Entry = tuple[int, int, int, int]
"""An entry to enter: queue offset, commit-log offset, record size, tag hash code."""
_PLAIN_TOPIC = re.compile(r"^[%|a-zA-Z0-9_-]+$")
_ENCODED = ".x-"


def topic_dir_name(topic: str) -> str:
    """A topic's directory: its name when it is a valid RocketMQ topic name (as RocketMQ lays it
    out), else `.x-` and its UTF-8 in hex (a name no valid topic has, so never a path trick)."""
    return topic if _PLAIN_TOPIC.match(topic) else _ENCODED + topic.encode("utf-8", "surrogatepass").hex()


def topic_of_dir(name: str) -> str | None:
    if _PLAIN_TOPIC.match(name):
        return name
    if name.startswith(_ENCODED):
        try:
            return bytes.fromhex(name[len(_ENCODED):]).decode("utf-8", "surrogatepass")
        except ValueError:
            return None
    return None


def tag_hash(properties: dict[str, str]) -> int:
    """Java's String.hashCode of the message's TAGS (RocketMQ's tagsString2tagsCode), 0 without."""
    tags = properties.get("TAGS") if isinstance(properties, dict) else None
    if not tags:
        return 0
    h, units = 0, tags.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(units), 2):  # Java hashes UTF-16 code units
        h = (31 * h + (units[i] << 8 | units[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


class ConsumeQueue:
    """One queue's entries. Writers: the store's writer thread (dispatch, truncation); readers
    pread through `entries`."""

    def __init__(self, directory: Path, file_size: int) -> None:
        self.files = MappedFileQueue(directory, file_size - file_size % CQ_UNIT.size, durable_names=False)
        end = self.files.file_end()
        if end % CQ_UNIT.size:  # a torn entry from a kill mid-write: cut it
            self.files.truncate(end - end % CQ_UNIT.size)
            end -= end % CQ_UNIT.size
        self.max_offset = end // CQ_UNIT.size
        """Entries written (the next queue offset)."""
        self.min_offset = self.files.min_offset() // CQ_UNIT.size
        """The first entry kept (raised by retention to the first whose record is still kept)."""

    def put(self, offset: int, pos: int, size: int, tags_code: int) -> list[Segment]:
        at = offset * CQ_UNIT.size
        entry = CQ_UNIT.pack(pos, size, tags_code)
        if offset < self.max_offset:  # recovery dispatching again what is already here
            return self.files.overwrite(at, entry)
        if offset > self.max_offset and not self.files.segments:  # a replica whose master deleted the start
            self.min_offset = offset
        elif offset > self.max_offset:  # entries lost with a corrupt stretch of the log
            entry = LOST * (offset - self.max_offset) + entry
            at = self.max_offset * CQ_UNIT.size
        touched = self.files.write(at, entry)
        self.max_offset = offset + 1
        return touched

    def append_run(self, entries: list[Entry]) -> list[Segment] | None:
        """Enter a run of entries at consecutive queue offsets starting at the queue's end with one
        write; None (nothing written) when `entries` are not such a run (`put` them one by one)."""
        first = entries[0][0]
        if first != self.max_offset or entries[-1][0] != first + len(entries) - 1:
            return None
        data = b"".join([CQ_UNIT.pack(pos, size, tags_code) for _, pos, size, tags_code in entries])
        touched = self.files.write(first * CQ_UNIT.size, data)
        self.max_offset = first + len(entries)
        return touched

    def entries(self, start: int, count: int) -> list[tuple[int, int, int]]:
        """(commit-log offset, size, tag hash) of up to `count` entries from queue offset `start`."""
        start = max(start, self.min_offset)
        count = min(count, self.max_offset - start)
        if count <= 0:
            return []
        data = self.files.pread(start * CQ_UNIT.size, count * CQ_UNIT.size)
        return list(CQ_UNIT.iter_unpack(data[: len(data) - len(data) % CQ_UNIT.size]))

    def entry(self, offset: int) -> tuple[int, int, int] | None:
        found = self.entries(offset, 1)
        return found[0] if found else None

    def offset_within(self, log_end: int, chunk: int = 256) -> int:
        """The queue offset after the last entry whose record ends inside a log ending at
        `log_end` (`min_offset` when none does): the queue as a reader bounded by that log end
        sees it (a confirm offset, a replica's truncation point). Scans back from the tail, a
        chunk of entries per read: only the tail past `log_end` is read."""
        end = self.max_offset
        last = self.entry(end - 1) if end > self.min_offset else None
        if last is not None and 0 <= last[0] and last[0] + last[1] <= log_end:
            return end  # the common case: the whole queue is inside
        while end > self.min_offset:
            start = max(self.min_offset, end - chunk)
            entries = self.entries(start, end - start)
            for i in range(len(entries) - 1, -1, -1):
                pos, size, _ = entries[i]
                if 0 <= pos and pos + size <= log_end:
                    return start + i + 1
            end = start
        return self.min_offset

    def truncate_past(self, log_end: int) -> int:
        """Drop the tail entries whose record does not end inside a log ending at `log_end`
        (recovery, a replica's truncation); returns the entries dropped."""
        keep = self.offset_within(log_end)
        dropped = self.max_offset - keep
        if dropped:
            self.files.truncate(keep * CQ_UNIT.size)
            self.max_offset = keep
        return dropped

    def correct_min_offset(self, log_min: int) -> None:
        """Raise `min_offset` to the first entry whose record is at or after `log_min` (RocketMQ's
        correctMinOffset), deleting whole files that hold only older entries."""
        per_file = self.files.segment_size // CQ_UNIT.size
        while len(self.files.segments) > 1:
            last_of_first = self.files.segments[1].base // CQ_UNIT.size - 1
            e = self.entry(last_of_first)
            if e is None or e[0] >= log_min:
                break
            self.files.delete_first()
        lo, hi = max(self.min_offset, self.files.min_offset() // CQ_UNIT.size), self.max_offset
        hi = min(hi, lo + per_file)
        while lo < hi:  # binary search: entries' commit-log offsets grow with the queue offset
            mid = (lo + hi) // 2
            e = self.entry(mid)
            if e is not None and e[0] >= log_min:
                hi = mid
            else:
                lo = mid + 1
        self.min_offset = lo

    def close(self) -> None:
        self.files.close()


def _entry(fields: list[Any], pos: int, size: int) -> Entry:
    """The consume-queue entry of one record (its fields as the commit log hands them out)."""
    return fields[2], pos, size, tag_hash(fields[5] if len(fields) > 5 else {})


def _subdirs(directory: Path) -> list[os.DirEntry[str]]:
    """The directories in `directory` (none when it does not exist)."""
    try:
        with os.scandir(directory) as entries:
            return [e for e in entries if e.is_dir()]
    except (FileNotFoundError, NotADirectoryError):
        return []


class ConsumeQueueStore:
    """Every queue's consume queue, found on disk at start-up (directories and file sizes only) and
    created on a queue's first message. The store's first dispatcher."""

    def __init__(self, directory: Path, file_size: int) -> None:
        self.dir = directory
        self.file_size = file_size
        self.queues: dict[tuple[str, int], ConsumeQueue] = {}
        self._dirty: dict[int, Segment] = {}
        self._dirty_dirs: set[Path] = set()
        self._lock = threading.Lock()
        for topic_dir in _subdirs(directory):  # directory entries' types: no stat per queue
            topic = topic_of_dir(topic_dir.name)
            if topic is None:
                continue
            for queue_dir in _subdirs(Path(topic_dir.path)):
                if queue_dir.name.isdigit():
                    cq = ConsumeQueue(Path(queue_dir.path), file_size)
                    if cq.max_offset > 0:
                        self.queues[(topic, int(queue_dir.name))] = cq

    def get(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        return self.queues.get((topic, queue_id))

    def _queue(self, topic: str, queue_id: int) -> ConsumeQueue:
        cq = self.queues.get((topic, queue_id))
        if cq is None:
            cq = self.queues[(topic, queue_id)] = ConsumeQueue(self.dir / topic_dir_name(topic) / str(queue_id),
                                                               self.file_size)
        return cq

    def dispatch(self, fields: list[Any], pos: int, size: int) -> None:
        """Add the entry of one record (RocketMQ's CommitLogDispatcherBuildConsumeQueue)."""
        cq = self._queue(fields[0], fields[1])
        self._written(cq, cq.put(*_entry(fields, pos, size)))

    def dispatch_batch(self, records: list[tuple[list[Any], int, int]]) -> tuple[int, OSError] | None:
        """Add the entries of a batch of records just written, one write per queue (a queue's
        records of a batch sit at consecutive queue offsets): a write per record made the writer
        thread give up the GIL per message. When a write fails: the commit-log offset of the first
        record whose entry may be missing, and the error (entries written are written again by a
        retry: a queue overwrites an entry it holds)."""
        runs: dict[tuple[str, int], list[Entry]] = {}
        for fields, pos, size in records:
            runs.setdefault((fields[0], fields[1]), []).append(_entry(fields, pos, size))
        left = list(runs.items())
        for i, ((topic, queue_id), entries) in enumerate(left):
            try:
                cq = self._queue(topic, queue_id)
                touched = cq.append_run(entries)
                if touched is None:
                    for entry in entries:
                        self._written(cq, cq.put(*entry))
                else:
                    self._written(cq, touched)
            except OSError as e:
                return min(pos for _, rest in left[i:] for _, pos, _, _ in rest), e
        return None

    def _written(self, cq: ConsumeQueue, touched: list[Segment]) -> None:
        """Note what a write touched, for the next flush to fsync."""
        with self._lock:
            for seg in touched:
                self._dirty[id(seg)] = seg
            if cq.files.unsynced_dirs:
                self._dirty_dirs |= cq.files.unsynced_dirs
                cq.files.unsynced_dirs = set()

    def flush(self) -> None:
        """fsync every file written since the last flush, and the directories of those created."""
        with self._lock:
            dirty, self._dirty = self._dirty, {}
            dirs, self._dirty_dirs = self._dirty_dirs, set()
        for seg in dirty.values():
            if seg.fd >= 0:
                os.fsync(seg.fd)
        for d in sorted(dirs, key=lambda p: len(p.parts), reverse=True):
            if d.is_dir():
                fsync_dir(d)

    def truncate(self, log_end: int) -> int:
        """Drop every entry whose record is not whole inside a log ending at `log_end`."""
        dropped = 0
        for key, cq in list(self.queues.items()):
            dropped += cq.truncate_past(log_end)
            if cq.max_offset == 0:
                del self.queues[key]
        return dropped

    def correct_min_offsets(self, log_min: int) -> int:
        """At start-up: correct the queues whose first entry points below the log's first kept
        offset (retention was killed between deleting a segment and correcting the queues); one
        pread per queue otherwise. Returns the queues corrected."""
        corrected = 0
        if log_min <= 0:  # nothing was ever deleted: nothing to read
            return 0
        for cq in self.queues.values():
            first = cq.entry(cq.min_offset)
            if first is not None and first[0] < log_min:
                cq.correct_min_offset(log_min)
                corrected += 1
        return corrected

    def close(self) -> None:
        for cq in self.queues.values():
            cq.close()
