"""Replication's pure parts (RocketMQ's HAConnection / HAClient, by offset): what a master sends a
slave from an offset, and how a slave checks a batch of raw records before it appends them at
exactly that offset.

A slave holds a byte-for-byte copy of its master's commit log: the same records at the same
positions, so a queue offset, a commit-log offset and an offset message id mean the same thing on
both. It asks from the offset it already holds (its own log's end: after a restart it resumes, it
never copies again); the master answers whole records from there, at most `max_bytes` of them (one
record more when a single record is bigger), and its own log's end. The slave refuses a batch that
leaves a gap, that overlaps what it holds with different bytes, or that is not whole valid records;
it writes nothing of a refused batch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from namesrv.store.records import HEADER, whole_records_prefix

DEFAULT_TRANSFER_BYTES = 4 * 1024 * 1024
"""Bytes per transfer: big enough that a slave far behind catches up at disk speed over Ray calls
(RocketMQ's haTransferBatchSize is 32 KiB over its own socket), small enough to bound one call."""

ReadAt = Callable[[int, int], bytes]
"""pread(position, length) of a commit log."""


class ReplicationError(Exception):
    """A batch or a request a replica must refuse (nothing is written)."""


class ReplicaGap(ReplicationError):
    """The batch starts after the replica's end: bytes in between would be missing."""


class ReplicaConflict(ReplicationError):
    """The batch overlaps what the replica holds with different bytes: the logs diverged (an old
    master's unreplicated tail); the replica must truncate to the consistent point first."""


class ReplicaAhead(ReplicationError):
    """The replica asks from past the master's end: it holds bytes the master does not."""


@dataclass(frozen=True, slots=True)
class Transfer:
    """One answer of the master: `data` (whole records) starts at commit-log `offset`; the master's
    log ends at `master_max` (RocketMQ's masterPhyOffset)."""

    offset: int
    data: bytes
    master_max: int


def transfer_slice(read_at: ReadAt, from_offset: int, end: int, max_bytes: int) -> bytes:
    """Whole records of a log ending at `end`, from `from_offset` (a record boundary), at most
    `max_bytes` unless the first record alone is bigger (then exactly that record)."""
    if from_offset < 0 or max_bytes <= 0:
        raise ReplicationError(f"bad transfer request: from {from_offset}, {max_bytes} bytes")
    if from_offset > end:
        raise ReplicaAhead(f"replica asks from {from_offset}, past this log's end {end}")
    if from_offset == end:
        return b""
    data = read_at(from_offset, min(end - from_offset, max_bytes))
    whole = whole_records_prefix(data)
    if whole:
        return data[:whole]
    header = read_at(from_offset, HEADER.size)
    if len(header) < HEADER.size:
        raise ReplicationError(f"no record header at {from_offset}")
    _, length, _ = HEADER.unpack(header)
    size = HEADER.size + length
    if from_offset + size > end:
        raise ReplicationError(f"record at {from_offset} ({size} bytes) runs past the log's end {end}")
    return read_at(from_offset, size)


def new_bytes(offset: int, data: bytes, local_end: int, read_at: ReadAt) -> tuple[int, bytes]:
    """What of a batch at `offset` is new to a replica whose log ends at `local_end`: (position,
    bytes) to append at its end. The part it already holds must be byte-identical."""
    if offset < 0:
        raise ReplicationError(f"batch at negative offset {offset}")
    if offset > local_end:
        raise ReplicaGap(f"batch starts at {offset}, past this replica's end {local_end}: "
                         f"{offset - local_end} bytes would be missing")
    overlap = min(local_end, offset + len(data)) - offset
    if overlap > 0 and read_at(offset, overlap) != data[:overlap]:
        raise ReplicaConflict(f"batch at {offset} differs from the {overlap} bytes this replica holds there")
    return local_end, data[overlap:] if overlap > 0 else data
