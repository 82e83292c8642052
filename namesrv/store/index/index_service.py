"""The message index (RocketMQ's store/index/IndexService): every message's keys (the KEYS
property, space-separated) and its unique key (UNIQ_KEY, the client message id), filed as
`topic#key` -> commit-log offset and store time, in index files of bounded size (`index_file`).
A query by key reads a few entries of a memory-mapped hash table, never the log.

Entry point: `dispatch(fields, physical_offset, size)`, called once per record the commit log
publishes (append, replica append, recovery: the log's `_index_record` hook, which becomes one
dispatcher of RocketMQ's CommitLogDispatcher list). Records before the index's own end offset are
skipped, so the log's recovery may replay from anywhere before it: the index resumes from its own
last offset forward.

Durability (write, fsync, rename as the rest of the store): `flush` msyncs every file, then
atomically writes `checkpoint` with each file's header (count, time range, end offset). On open,
a file the checkpoint does not list is deleted (made after it, or an expired file whose deletion a
crash interrupted: `delete_expired` forgets files before it deletes them); a file whose header moved
past its checkpointed state is rolled back to it (IndexFile.rollback); a file that cannot be (a
torn page after a machine crash) is deleted with every later one. What was dropped is rebuilt by
the records the log dispatches after the index's end (the log's recovery here replays every
record; a log whose recovery starts from its own checkpoint must replay from `max_phy_offset` when
the index is behind it). A kill -9 or a crash loses no index entry of a record the log kept.
`delete_expired` drops the files below the log's minimum offset once retention removed them.

As RocketMQ, a rolled-back transaction message (TRANSACTION_ROLLBACK_TYPE) is not indexed.
Differences from RocketMQ 5.3: files are named by the first commit-log offset they index, not by
time; their size grows from `MIN_ENTRIES` to `entries` (RocketMQ's are all maxIndexNum); rollback
to the checkpoint replaces RocketMQ's "delete files newer than the checkpoint". A file's blocks
are reserved when it is made (posix_fallocate), so writing its mapped pages never meets a full disk
(a SIGBUS); when a new file cannot be made, records are left unindexed (logged) until one can.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from namesrv.common.persist import atomic_write, fsync_dir
from namesrv.protocol.message.properties import KEY_SEPARATOR, UNIQ_KEY
from namesrv.store.index.index_file import IndexCorrupt, IndexFile, IndexState, key_hash

log = logging.getLogger(__name__)

DEFAULT_SLOTS = 1_000_000
"""Hash slots per file (RocketMQ's maxHashSlotNum is 5,000,000)."""
DEFAULT_ENTRIES = 4_000_000
"""Entries per file at most (RocketMQ's maxIndexNum is 20,000,000): such a file is 4 MB of slots
and 96 MB of entries."""
MIN_ENTRIES = 65_536
"""The first file's entries (1.6 MB with its slots); each new file holds twice the last one's, up
to `entries`, so a broker with few messages reserves little disk and a busy one soon gets big files."""
KEYS = "KEYS"
TRANSACTION_ROLLBACK_TYPE = 0x3 << 2
TRANSACTION_TYPE_MASK = 0x3 << 2
CHECKPOINT = "checkpoint"
SUFFIX = ".idx"


@dataclass(slots=True)
class IndexRecovery:
    """What opening the index found: files rolled back to the checkpoint, files deleted (made
    after it, or torn) and the commit-log offset indexing resumes from."""

    rolled_back: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    resume_offset: int = 0


def message_keys(fields: list[Any]) -> list[str]:
    """The keys a record is filed under: its unique key, then its KEYS, each once."""
    sys_flag = fields[8] if len(fields) > 8 and isinstance(fields[8], int) else 0
    if sys_flag & TRANSACTION_TYPE_MASK == TRANSACTION_ROLLBACK_TYPE:
        return []
    keys: list[str] = []
    props = fields[5]
    uniq = fields[4] or (props.get(UNIQ_KEY) if isinstance(props, Mapping) else None)
    if isinstance(uniq, str) and uniq:
        keys.append(uniq)
    raw = props.get(KEYS) if isinstance(props, Mapping) else None
    if not isinstance(raw, str):
        return keys  # the usual message: its unique key alone
    keys.extend(k for k in raw.split(KEY_SEPARATOR) if k)
    return list(dict.fromkeys(keys))


class IndexService:
    """Thread-safe: dispatch, query, flush and truncate may come from different threads."""

    def __init__(self, directory: str | Path, slots: int = DEFAULT_SLOTS, entries: int = DEFAULT_ENTRIES) -> None:
        if slots <= 0 or entries <= 0:
            raise ValueError("an index file needs at least one slot and one entry")
        self.dir = Path(directory)
        self.slots, self.entries = slots, entries
        self._lock = threading.Lock()
        """Guards the files and the end offset: memory work on the maps only (and a new file's creation)."""
        self._flush_lock = threading.Lock()
        """One flush (or truncation) at a time."""
        self._files: list[IndexFile] = []
        self._saved: dict[str, list[int]] = {}
        self._last_timestamp = 0
        self._closed = False
        self._failing = False
        """The last new file could not be made (logged once until one can)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        self.recovery = self._load()
        self._end = self.recovery.resume_offset

    # ------------------------------------------------------------------ recovery
    def _read_checkpoint(self) -> dict[str, list[int]]:
        path = self.dir / CHECKPOINT
        if not path.exists():
            return {}
        try:
            files = json.loads(path.read_bytes())["files"]
            return {str(k): IndexState.from_list(v).to_list() for k, v in files.items()}
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            log.error("index checkpoint %s unreadable (%s): the index is rebuilt from the log", path, e)
            return {}

    def _load(self) -> IndexRecovery:
        report = IndexRecovery()
        saved = self._read_checkpoint()
        paths = sorted(self.dir.glob(f"*{SUFFIX}"))
        for i, path in enumerate(paths):
            state = saved.get(path.name)
            if state is None:  # made after the last checkpoint, or expired and not yet deleted
                log.warning("index: %s is not in the checkpoint: deleted (rebuilt from the log if needed)", path.name)
                path.unlink(missing_ok=True)
                report.deleted.append(path.name)
                fsync_dir(self.dir)
                continue
            try:
                f = IndexFile(path, self.slots, self.entries)
                try:
                    if f.state.to_list() != state:
                        f.rollback(IndexState.from_list(state))
                        report.rolled_back.append(path.name)
                except IndexCorrupt:
                    f.close()
                    raise
            except IndexCorrupt as e:
                log.warning("index: %s; it and the %d files after it are rebuilt from the log", e, len(paths) - i - 1)
                for later in paths[i:]:
                    later.unlink(missing_ok=True)
                    report.deleted.append(later.name)
                fsync_dir(self.dir)
                break
            self._files.append(f)
        self._saved = {f.path.name: f.state.to_list() for f in self._files}
        if self._files:
            report.resume_offset = self._files[-1].state.end_phy_offset
            self._last_timestamp = self._files[-1].state.end_timestamp
        if report.rolled_back or report.deleted:
            self._write_checkpoint(self._saved)
        return report

    # ------------------------------------------------------------------ write
    @property
    def max_phy_offset(self) -> int:
        """The commit-log offset everything before which is indexed."""
        with self._lock:
            return self._end

    def dispatch(self, fields: list[Any], physical_offset: int, size: int) -> None:
        """Index one record (fields as the commit log stores them: topic, queue id, queue offset,
        store time, msg id, properties, body, flag, sysFlag, ...); one already indexed is skipped."""
        self.dispatch_batch([(fields, physical_offset, size)])

    def dispatch_batch(self, records: Sequence[tuple[list[Any], int, int]]) -> None:
        """Index records in commit-log order (`dispatch`'s, each a (fields, offset, size)): one
        lock and one header write per file for all of them."""
        if self._closed or not records or records[-1][1] < self._end:
            return
        keyed = [(fields[3], [key_hash(fields[0], k) for k in message_keys(fields)], pos, size)
                 for fields, pos, size in records]
        with self._lock:
            advancing: IndexFile | None = None
            for store_timestamp, hashes, physical_offset, size in keyed:
                if physical_offset < self._end:
                    continue
                if len(hashes) > self.entries:
                    log.warning("index: record at %d has %d keys, more than a file holds; the first %d filed",
                                physical_offset, len(hashes), self.entries)
                    hashes = hashes[: self.entries]
                try:
                    f = self._writable(len(hashes), physical_offset)
                except OSError as e:  # no room for a new file (a full disk): this record goes unindexed
                    if not self._failing:
                        log.error("index: cannot make a new index file at %d (%s); records go unindexed until "
                                  "one can be made", physical_offset, e)
                    self._failing = True
                    continue
                self._failing = False
                if f is not advancing and advancing is not None:
                    advancing.advance(self._end)  # the file before a new one: everything up to here
                advancing = f
                if f is not None:
                    for h in hashes:
                        f.put(h, physical_offset, store_timestamp)
                self._end = physical_offset + size
                if hashes:
                    self._last_timestamp = store_timestamp
            if advancing is not None:
                advancing.advance(self._end)

    def _writable(self, needed: int, physical_offset: int) -> IndexFile | None:
        """The file the next entries go to: the last one, or a new one when it lacks room."""
        last = self._files[-1] if self._files else None
        if last is not None and last.room() >= needed:
            return last
        if needed == 0 and last is None:
            return None
        path = self.dir / f"{physical_offset:020d}{SUFFIX}"
        capacity = min(self.entries, max(needed, MIN_ENTRIES, 2 * last.entries if last is not None else 0))
        slots = max(1, self.slots * capacity // self.entries)
        f = IndexFile(path, slots, capacity, begin_phy_offset=physical_offset)
        self._files.append(f)
        return f

    # ------------------------------------------------------------------ read
    def query(self, topic: str, key: str, limit: int, begin: int = 0, end: int = 2**63 - 1) -> list[int]:
        """Commit-log offsets of messages of `topic` filed under `key` stored within [begin, end],
        newest first, at most `limit`, without repeats. A hash may collide: the caller checks each
        message it reads (RocketMQ leaves that to the client)."""
        h = key_hash(topic, key)
        out: list[int] = []
        with self._lock:
            for f in reversed(self._files):
                if len(out) >= limit:
                    break
                if f.time_matches(begin, end):
                    f.select(h, begin, end, limit, out)
        return list(dict.fromkeys(out))

    def last_update(self) -> tuple[int, int]:
        """(indexLastUpdateTimestamp, indexLastUpdatePhyoffset) of QUERY_MESSAGE's answer."""
        with self._lock:
            return self._last_timestamp, self._end

    def file_count(self) -> int:
        with self._lock:
            return len(self._files)

    # ------------------------------------------------------------------ durability
    def flush(self) -> None:
        """msync every file, then write the checkpoint of what was synced. Blocking: off the loop."""
        with self._flush_lock:
            with self._lock:
                if self._closed:
                    return
                states = {f.path.name: f.state.to_list() for f in self._files}
                files = list(self._files)
            if states == self._saved:
                return
            for f in files:  # covers at least everything written before the snapshot above
                f.sync()
            self._write_checkpoint(states)
            self._saved = states

    def _write_checkpoint(self, states: dict[str, list[int]]) -> None:
        atomic_write(self.dir / CHECKPOINT, json.dumps({"files": states}, sort_keys=True).encode())

    def truncate_to(self, offset: int) -> None:
        """The log was cut back to `offset`: files that begin at or after it are deleted, and the
        index resumes from it (entries of the last file for cut records stay; a query checks each
        message it reads, so they find nothing). Durable before it returns."""
        with self._flush_lock:
            with self._lock:
                if offset >= self._end:
                    return
                dropped = [f for f in self._files if f.state.begin_phy_offset >= offset]
                self._files = [f for f in self._files if f.state.begin_phy_offset < offset]
                for f in dropped:  # under the lock: a new file may take the same name right after
                    f.close()
                    f.path.unlink(missing_ok=True)
                if self._files:
                    self._files[-1].advance(min(offset, self._files[-1].state.end_phy_offset))
                self._end = offset
                states = {f.path.name: f.state.to_list() for f in self._files}
                files = list(self._files)
            if dropped:
                fsync_dir(self.dir)
            for f in files:
                f.sync()
            self._write_checkpoint(states)
            self._saved = states

    def delete_expired(self, min_phy_offset: int) -> list[str]:
        """RocketMQ's IndexService.deleteExpiredFile: drop the files whose every entry points below
        the log's minimum offset (retention removed those messages); the last file always stays.
        Returns the names deleted. Blocking: off the loop."""
        with self._flush_lock:
            with self._lock:
                expired = [f for f in self._files[:-1] if f.state.end_phy_offset <= min_phy_offset]
                self._files = [f for f in self._files if f not in expired]
                states = {f.path.name: f.state.to_list() for f in self._files}
            if not expired:
                return []
            self._write_checkpoint(states)  # first forget them, then delete: a crash between leaves strays
            self._saved = states
            for f in expired:
                f.close()
                f.path.unlink(missing_ok=True)
            fsync_dir(self.dir)
        return [f.path.name for f in expired]

    def close(self) -> None:
        self.flush()
        with self._flush_lock, self._lock:
            self._closed = True
            for f in self._files:
                f.close()
            self._files = []
