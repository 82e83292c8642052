"""The invisibility index on disk: a broker restart loses no message in flight (at-least-once).

One JSON object per line, appended before the request that made it is answered, and fsynced then
or later as the broker's flush mode says (namesrv.broker.pop.state):

    {"op": "pop", "e": [[group, topic, queueId, offset, originTopic, ckOffset, popTime, invisibleTime, order], ...],
     "next": [group, topic, queueId, nextOffset]}
    {"op": "ack", "k": [group, topic, queueId, offset], "pt": popTime}
    {"op": "chg", "k": [...], "pt": oldPopTime, "npt": newPopTime, "it": invisibleTime}
    {"op": "rev", "k": [...], "pt": popTime}                 re-delivered (retry topic or DLQ)

A pop's record also carries the queue's new pop offset, which a restart commits to the consumer
offsets (the offsets file is written every few seconds; the journal is never behind it): nothing
popped is popped again as new, and nothing skipped. A torn last line (a crash mid-append) is
dropped; any other unreadable line stops the load (`PopJournalError`). When the file holds many
more records than entries in flight it is rewritten as one snapshot (write, fsync, rename).

Blocking I/O: callers run `append` off the event loop; a lock orders concurrent appends.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from pathlib import Path
from typing import Any

from namesrv.broker.pop.inflight import InFlight, InflightIndex, Key
from namesrv.common.persist import atomic_write

log = logging.getLogger(__name__)

COMPACT_MIN_RECORDS = 4096


class PopJournalError(RuntimeError):
    """The journal exists but a record in it (not the last) cannot be read."""


def entry_record(e: InFlight) -> list[Any]:
    return [e.group, e.topic, e.queue_id, e.offset, e.origin_topic, e.ck_offset, e.pop_time, e.invisible_time,
            e.order]


def _entry(r: list[Any]) -> InFlight:
    g, t, q, o, origin, ck, pt, it, order = r
    if not (isinstance(g, str) and isinstance(t, str) and isinstance(origin, str) and isinstance(order, bool)
            and all(isinstance(v, int) for v in (q, o, ck, pt, it))):
        raise ValueError(f"bad entry {r!r}")
    return InFlight(g, t, q, o, origin, ck, pt, it, order)


def _key(r: list[Any]) -> Key:
    g, t, q, o = r
    if not (isinstance(g, str) and isinstance(t, str) and isinstance(q, int) and isinstance(o, int)):
        raise ValueError(f"bad key {r!r}")
    return (g, t, q, o)


class PopJournal:
    def __init__(self, path: str | Path | None) -> None:
        self.path = Path(path) if path is not None else None
        self.records = 0
        self._lock = threading.Lock()
        self._file: Any = None

    def load(self, index: InflightIndex) -> dict[tuple[str, str, int], int]:
        """Replay the journal into `index`; the pop offsets it recorded, by (group, topic, queue)."""
        offsets: dict[tuple[str, str, int], int] = {}
        if self.path is None:
            return offsets
        if self.path.exists():
            data = self.path.read_bytes()
            lines = data.split(b"\n")
            keep = len(data)
            for n, line in enumerate(lines):
                if not line:
                    continue
                try:
                    self.apply_record(json.loads(line), index, offsets)
                except (ValueError, TypeError, KeyError) as e:
                    if n == len(lines) - 1:  # the last line, with no newline: torn by a crash mid-append
                        keep = len(data) - len(line)
                        log.warning("pop journal %s: dropped a torn last record", self.path)
                        break
                    raise PopJournalError(f"cannot load pop journal {self.path}, line {n + 1}: {e}") from e
                self.records += 1
            if keep < len(data):
                with open(self.path, "r+b") as f:
                    f.truncate(keep)
                    os.fsync(f.fileno())
            log.info("pop journal %s: %d messages in flight", self.path, len(index))
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.path, "ab")  # kept open for appends until close()
        return offsets

    @staticmethod
    def apply_record(rec: dict[str, Any], index: InflightIndex, offsets: dict[tuple[str, str, int], int]) -> None:
        """One record into `index` (and a pop offset it carries into `offsets`); ValueError,
        TypeError or KeyError for one that does not parse."""
        op = rec["op"]
        if op == "pop":
            for r in rec["e"]:
                index.add(_entry(r))
            nxt = rec.get("next")
            if nxt is not None:
                g, t, q, o = _key(nxt)
                offsets[(g, t, q)] = max(offsets.get((g, t, q), -1), o)
        elif op in ("ack", "rev"):
            index.ack(_key(rec["k"]), int(rec["pt"]))
        elif op == "chg":
            key = _key(rec["k"])
            old = index.find(key, int(rec["pt"]))
            if old is not None:
                index.add(InFlight(old.group, old.topic, old.queue_id, old.offset, old.origin_topic, old.ck_offset,
                                   int(rec["npt"]), int(rec["it"]), old.order))
        else:
            raise ValueError(f"unknown op {op!r}")

    def append(self, *records: dict[str, Any]) -> None:
        """Append records and fsync (blocking). A no-op without a path."""
        self.append_batch(list(records), True)

    def append_batch(self, records: list[dict[str, Any]], fsync: bool) -> None:
        """Append records, written to the OS, and fsynced when `fsync` (blocking). A no-op without a
        path."""
        if self._file is None or not records:
            return
        data = b"".join(json.dumps(r, separators=(",", ":")).encode() + b"\n" for r in records)
        with self._lock:
            self._file.write(data)
            self._file.flush()
            if fsync:
                os.fsync(self._file.fileno())
            self.records += len(records)

    def sync(self) -> None:
        """Fsync what was appended (blocking)."""
        with self._lock:
            if self._file is not None:
                os.fsync(self._file.fileno())

    def should_compact(self, live: int) -> bool:
        return self._file is not None and self.records >= max(COMPACT_MIN_RECORDS, 4 * live)

    def compact(self, live: list[InFlight], offsets: dict[tuple[str, str, int], int]) -> None:
        """Rewrite the journal as a snapshot: the entries in flight and the pop offsets (blocking;
        pass copies taken on the event loop, and append nothing meanwhile)."""
        if self._file is None or self.path is None:
            return
        recs = [pop_record(live, None)] + [pop_record([], (g, t, q, o)) for (g, t, q), o in sorted(offsets.items())]
        data = b"".join(json.dumps(r, separators=(",", ":")).encode() + b"\n" for r in recs)
        with self._lock:
            atomic_write(self.path, data)
            self._file.close()
            self._file = open(self.path, "ab")
            self.records = len(recs)

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.flush()
                os.fsync(self._file.fileno())
                self._file.close()
                self._file = None


def pop_record(entries: list[InFlight], next_offset: tuple[str, str, int, int] | None) -> dict[str, Any]:
    rec: dict[str, Any] = {"op": "pop", "e": [entry_record(e) for e in entries]}
    if next_offset is not None:
        rec["next"] = list(next_offset)
    return rec


def ack_record(e: InFlight, op: str = "ack") -> dict[str, Any]:
    return {"op": op, "k": list(e.key), "pt": e.pop_time}


def change_record(old: InFlight, new: InFlight) -> dict[str, Any]:
    return {"op": "chg", "k": list(old.key), "pt": old.pop_time, "npt": new.pop_time, "it": new.invisible_time}
