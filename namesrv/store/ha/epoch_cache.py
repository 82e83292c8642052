"""A broker's epoch file (RocketMQ's EpochFileCache): which master term wrote which part of the log.

Each master term appends (epoch, startOffset); an entry ends where the next starts, and the last
one at the store's max offset. A replica that returns (an old master, a slave that was away)
compares its entries with the new master's: the newest epoch both hold with the same start offset
is where their logs last agreed, and the smaller of the two ends of that entry is the consistent
point, the offset the replica truncates its log to before copying again.

Persisted atomically (write, fsync, rename) as JSON `[[epoch, startOffset], ...]`; end offsets are
derived, as in RocketMQ's checkpoint file.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from namesrv.common.persist import atomic_write

NO_END = 2**63 - 1
"""The end offset of an open entry (Long.MAX_VALUE)."""


class EpochCacheError(ValueError):
    """An entry that would break the cache's order, or an unreadable epoch file."""


@dataclass(frozen=True, slots=True)
class EpochEntry:
    epoch: int
    start_offset: int
    end_offset: int = NO_END

    def to_wire(self) -> dict[str, int]:
        return {"endOffset": self.end_offset, "epoch": self.epoch, "startOffset": self.start_offset}


def _with_ends(pairs: Sequence[tuple[int, int]], last_end: int = NO_END) -> list[EpochEntry]:
    out = []
    for i, (epoch, start) in enumerate(pairs):
        end = pairs[i + 1][1] if i + 1 < len(pairs) else max(last_end, start)
        out.append(EpochEntry(epoch, start, end))
    return out


def _validate(pairs: Sequence[tuple[int, int]]) -> None:
    for (e1, s1), (e2, s2) in itertools.pairwise(pairs):
        if e2 <= e1 or s2 < s1:
            raise EpochCacheError(f"epoch entries out of order: ({e1}, {s1}) then ({e2}, {s2})")
    for epoch, start in pairs:
        if epoch < 0 or start < 0:
            raise EpochCacheError(f"negative epoch entry ({epoch}, {start})")


class EpochFileCache:
    def __init__(self, path: str | Path | None = None, entries: Iterable[tuple[int, int]] = ()) -> None:
        """`path` None: in memory only (a peer's cache received over the wire)."""
        self.path = Path(path) if path is not None else None
        pairs = [(int(e), int(s)) for e, s in entries]
        _validate(pairs)
        self._pairs: list[tuple[int, int]] = pairs

    @classmethod
    def load(cls, path: str | Path) -> EpochFileCache:
        """The cache in `path`; empty when the file does not exist yet."""
        p = Path(path)
        if not p.exists():
            return cls(p)
        try:
            raw = json.loads(p.read_bytes())
            pairs = [(int(e), int(s)) for e, s in raw]
        except (ValueError, TypeError) as e:
            raise EpochCacheError(f"{p}: unreadable epoch file: {e}") from None
        return cls(p, pairs)

    def _flush(self, pairs: list[tuple[int, int]]) -> None:
        """Persist `pairs`, then make them the cache: a failed write changes nothing."""
        if self.path is not None:
            atomic_write(self.path, json.dumps(pairs, separators=(",", ":")).encode())
        self._pairs = pairs

    # ------------------------------------------------------------------ reading
    def __len__(self) -> int:
        return len(self._pairs)

    def entries(self, max_offset: int = NO_END) -> list[EpochEntry]:
        """All entries, oldest first; the last ends at `max_offset` (the store's max offset)."""
        return _with_ends(self._pairs, max_offset)

    def last_epoch(self) -> int:
        return self._pairs[-1][0] if self._pairs else -1

    def last_entry(self) -> EpochEntry | None:
        return self.entries()[-1] if self._pairs else None

    def get_entry(self, epoch: int, max_offset: int = NO_END) -> EpochEntry | None:
        return next((e for e in self.entries(max_offset) if e.epoch == epoch), None)

    def find_entry_by_offset(self, offset: int, max_offset: int = NO_END) -> EpochEntry | None:
        """The entry whose term wrote `offset`."""
        return next((e for e in self.entries(max_offset) if e.start_offset <= offset < e.end_offset), None)

    # ------------------------------------------------------------------ writing
    def append_entry(self, epoch: int, start_offset: int) -> None:
        """A new master term starts at `start_offset`. The epoch must be newer than the last; a term
        that wrote nothing (same start offset) is replaced by the new one (RocketMQ refuses the new
        entry instead, which leaves the new term unrecorded). Entries with an epoch >= `epoch` are
        first dropped, as changeToMaster does."""
        pairs = [p for p in self._pairs if p[0] < epoch]
        if pairs and start_offset < pairs[-1][1]:
            raise EpochCacheError(f"epoch {epoch} cannot start at {start_offset}, before epoch "
                                  f"{pairs[-1][0]} at {pairs[-1][1]}")
        if pairs and pairs[-1][1] == start_offset:
            pairs.pop()
        if epoch < 0 or start_offset < 0:
            raise EpochCacheError(f"negative epoch entry ({epoch}, {start_offset})")
        self._flush([*pairs, (epoch, start_offset)])

    def truncate_suffix_by_offset(self, offset: int) -> None:
        """Drop entries that start at or after `offset` (after the log is truncated to it)."""
        self._flush([p for p in self._pairs if p[1] < offset])

    def truncate_suffix_by_epoch(self, epoch: int) -> None:
        self._flush([p for p in self._pairs if p[0] < epoch])

    def truncate_prefix_by_offset(self, offset: int, max_offset: int = NO_END) -> None:
        """Drop entries that end at or before `offset` (the log before it was deleted)."""
        keep = [(e.epoch, e.start_offset) for e in self.entries(max_offset) if e.end_offset > offset]
        self._flush(keep)

    def reset(self, entries: Iterable[tuple[int, int]]) -> None:
        """Replace every entry (a slave adopting its master's history)."""
        pairs = [(int(e), int(s)) for e, s in entries]
        _validate(pairs)
        self._flush(pairs)

    # ------------------------------------------------------------------ wire
    def to_wire(self, cluster_name: str, broker_name: str, broker_id: int, max_offset: int) -> dict[str, Any]:
        """GET_BROKER_EPOCH_CACHE's body (EpochEntryCache)."""
        return {"brokerId": broker_id, "brokerName": broker_name, "clusterName": cluster_name,
                "epochList": [e.to_wire() for e in self.entries(max_offset)], "maxOffset": max_offset}


def find_consistent_point(local: Sequence[EpochEntry], master: Sequence[EpochEntry]) -> int | None:
    """The offset a returning replica truncates its log to before copying from `master`.

    Both lists come from `entries(max_offset)` of each side (the last entry ends at that side's max
    offset). Walking the local entries from the newest: the first epoch the master also holds with
    the same start offset is the last term both logs share; they agree up to the smaller end of it.
    A replica with no entries holds nothing it can vouch for: 0 (it copies the whole log, as
    RocketMQ's new replica). No term in common: 0 when the master's history starts at offset 0 (the
    logs differ from the first byte: the replica drops everything; RocketMQ gives up here instead),
    else None (the master no longer holds the start of its log: truncation cannot reconcile them).
    """
    if not local:
        return 0
    by_epoch = {e.epoch: e for e in master}
    for entry in reversed(local):
        peer = by_epoch.get(entry.epoch)
        if peer is not None and peer.start_offset == entry.start_offset:
            return min(entry.end_offset, peer.end_offset)
    if master and master[0].start_offset == 0:
        return 0
    return None
