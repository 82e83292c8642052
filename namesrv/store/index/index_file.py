"""One index file of the message index (RocketMQ's store/index/IndexFile): a fixed-size, memory-mapped
hash table from `topic#key` to commit-log offsets, chained through its entries.

Layout, little-endian (ours, not RocketMQ's byte-compatible file):

    header (48 B): magic u32 | version u32 | beginTimestamp i64 | endTimestamp i64 |
                   beginPhyOffset i64 | endPhyOffset i64 | hashSlotCount u32 | indexCount u32
    slots  (4 B each, `slots` of them): the newest entry of the slot (1-based), 0 for none
    entries (24 B each, `entries` of them, entry 0 unused): keyHash u32 | phyOffset i64 |
                   storeTimestamp i64 | prevIndex u32

Differences from RocketMQ 5.3 (IndexFile): an entry keeps the full store timestamp in ms (RocketMQ
keeps seconds since the file began in an int), so a time-range query is exact to the ms; the file's
end offset is the end of the last record looked at (RocketMQ keeps the start of the last one
indexed), so indexing resumes from it exactly; hashes are CRC-32 of the UTF-8 `topic#key` (a
Java String.hashCode cannot be had in Python without a loop per character).

Writes go entry, then slot, then header, so the header's count never covers an entry not yet
written. `rollback` puts a file back to a checkpointed state after a crash (see index_service).
"""

from __future__ import annotations

import mmap
import os
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

HEADER = struct.Struct("<IIqqqqII")
ENTRY = struct.Struct("<IqqI")
SLOT = struct.Struct("<I")
FILE_MAGIC = 0x49445831  # "IDX1"
VERSION = 1


class IndexCorrupt(ValueError):
    """An index file that cannot be put back to its checkpoint: the caller rebuilds it."""


def key_hash(topic: str, key: str) -> int:
    """The hash a key is filed under (RocketMQ's buildKey: `topic#key`)."""
    return zlib.crc32(f"{topic}#{key}".encode("utf-8", "surrogatepass"))


@dataclass(slots=True)
class IndexState:
    """A file's header fields, as the checkpoint records them."""

    begin_timestamp: int
    end_timestamp: int
    begin_phy_offset: int
    end_phy_offset: int
    count: int

    def to_list(self) -> list[int]:
        return [self.begin_timestamp, self.end_timestamp, self.begin_phy_offset, self.end_phy_offset, self.count]

    @classmethod
    def from_list(cls, values: list[int]) -> IndexState:
        if len(values) != 5 or not all(isinstance(v, int) for v in values):
            raise ValueError(f"bad index state {values!r}")
        return cls(*values)


def file_size(slots: int, entries: int) -> int:
    return HEADER.size + SLOT.size * slots + ENTRY.size * (entries + 1)


class IndexFile:
    """Not thread-safe: `IndexService` holds its lock around every call."""

    def __init__(self, path: Path, slots: int, entries: int, begin_phy_offset: int | None = None) -> None:
        """Open `path`; with `begin_phy_offset` create it, its blocks reserved (OSError when the disk
        has no room: nothing is left behind)."""
        self.path = path
        create = begin_phy_offset is not None
        fd = os.open(path, os.O_RDWR | (os.O_CREAT | os.O_EXCL if create else 0), 0o644)
        try:
            if create:
                try:  # blocks reserved now: a mapped page written later never meets a full disk
                    os.posix_fallocate(fd, 0, file_size(slots, entries))
                except OSError:
                    os.close(fd)
                    fd = -1
                    path.unlink(missing_ok=True)
                    raise
            size = os.fstat(fd).st_size
            if size < HEADER.size:
                raise IndexCorrupt(f"index file {path} is {size} bytes")
            self.mm = mmap.mmap(fd, size)
        finally:
            if fd >= 0:
                os.close(fd)
        if create:
            assert begin_phy_offset is not None
            self.slots, self.entries = slots, entries
            self.state = IndexState(0, 0, begin_phy_offset, begin_phy_offset, 0)
            self._write_header()
        else:
            magic, version, b_ts, e_ts, b_phy, e_phy, n_slots, count = HEADER.unpack_from(self.mm, 0)
            if magic != FILE_MAGIC or version != VERSION or n_slots <= 0:
                self.mm.close()
                raise IndexCorrupt(f"index file {path} has a bad header")
            self.slots = n_slots
            self.entries = (size - HEADER.size - SLOT.size * n_slots) // ENTRY.size - 1
            if self.entries <= 0 or count > self.entries:
                self.mm.close()
                raise IndexCorrupt(f"index file {path} has a bad size or count")
            self.state = IndexState(b_ts, e_ts, b_phy, e_phy, count)
        self._slots = memoryview(self.mm)[HEADER.size : HEADER.size + SLOT.size * self.slots].cast("I")
        self._entries_at = HEADER.size + SLOT.size * self.slots

    # ------------------------------------------------------------------ write
    def room(self) -> int:
        return self.entries - self.state.count

    def put(self, hash_: int, phy_offset: int, store_timestamp: int) -> None:
        """Add one entry (the caller checked `room`); the header is written by `advance`."""
        slot = hash_ % self.slots
        index = self.state.count + 1
        ENTRY.pack_into(self.mm, self._entries_at + ENTRY.size * index, hash_, phy_offset, store_timestamp,
                        self._slots[slot])
        self._slots[slot] = index
        self.state.count = index
        if index == 1:
            self.state.begin_timestamp = self.state.end_timestamp = store_timestamp
        else:
            self.state.begin_timestamp = min(self.state.begin_timestamp, store_timestamp)
            self.state.end_timestamp = max(self.state.end_timestamp, store_timestamp)

    def advance(self, end_phy_offset: int) -> None:
        """Record that everything before `end_phy_offset` is indexed (after the record's entries)."""
        self.state.end_phy_offset = end_phy_offset
        self._write_header()

    def _write_header(self) -> None:
        s = self.state
        HEADER.pack_into(self.mm, 0, FILE_MAGIC, VERSION, s.begin_timestamp, s.end_timestamp, s.begin_phy_offset,
                         s.end_phy_offset, self.slots, s.count)

    # ------------------------------------------------------------------ read
    def time_matches(self, begin: int, end: int) -> bool:
        s = self.state
        return s.count > 0 and s.begin_timestamp <= end and s.end_timestamp >= begin

    def select(self, hash_: int, begin: int, end: int, limit: int, out: list[int]) -> None:
        """Append to `out` the commit-log offsets filed under `hash_` stored within [begin, end],
        newest first, until `out` holds `limit`."""
        index = self._slots[hash_ % self.slots]
        count = self.state.count
        base = self._entries_at
        while 0 < index <= count and len(out) < limit:
            h, phy, ts, prev = ENTRY.unpack_from(self.mm, base + ENTRY.size * index)
            if h == hash_ and begin <= ts <= end:
                out.append(phy)
            if prev >= index:  # chains only go back: a loop is damage, stop
                break
            index = prev

    # ------------------------------------------------------------------ durability
    def sync(self) -> None:
        self.mm.flush()

    def rollback(self, to: IndexState) -> None:
        """Put the file back to checkpointed state `to`: every slot whose head is an entry written
        after it is walked back to an entry it covers. Entries past the checkpoint are checked as
        they are walked (hash in this slot, offset at or after the checkpoint's end, chain going
        back); anything else raises IndexCorrupt and the caller rebuilds the file."""
        if to.count > self.entries or to.count < 0:
            raise IndexCorrupt(f"index file {self.path}: checkpoint count {to.count} out of range")
        base = self._entries_at
        for slot, head in enumerate(self._slots):
            if head <= to.count:
                continue
            index = head
            while index > to.count:
                if index > self.entries:
                    raise IndexCorrupt(f"index file {self.path}: slot {slot} points past the file")
                h, phy, _ts, prev = ENTRY.unpack_from(self.mm, base + ENTRY.size * index)
                if h % self.slots != slot or phy < to.end_phy_offset or prev >= index:
                    raise IndexCorrupt(f"index file {self.path}: entry {index} was not fully written")
                index = prev
            self._slots[slot] = index
        self.state = IndexState(*to.to_list())
        self._write_header()

    def close(self) -> None:
        self._slots.release()
        self.mm.close()
