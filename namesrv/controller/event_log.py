"""The controller's durable history: an event log plus a snapshot, in any key-value store.

Keys under one prefix: `<prefix>/event/<index, 12 digits>` holds one event (JSON), `<prefix>/snapshot`
holds `{"index": N, "state": ...}`, the state after the first N events. Loading reads the snapshot
and replays the events after it; `compact` writes a new snapshot first and only then deletes the
events it covers, so a crash between the two leaves events that replay skips.

Fencing: an event is written with put-if-absent at the next index. A controller that is not the
newest writer (a stale copy of the actor still running after Ray started another) finds its index
taken and learns it is stale instead of overwriting history; if the index it wrote had already
been compacted away, the snapshot it reads back right after covers that index, which tells it the
same. A stale writer's write is never acknowledged, so it never announces a master.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any, Protocol

from namesrv.controller.events import Event, decode_event, encode_event

log = logging.getLogger(__name__)

INDEX_DIGITS = 12


class KVStore(Protocol):
    """What the log needs of a store (Ray's GCS internal KV in the actor)."""

    def get(self, key: str) -> bytes | None: ...

    def put(self, key: str, value: bytes) -> None:
        """Create or overwrite."""

    def put_if_absent(self, key: str, value: bytes) -> bool:
        """Write only when `key` is absent; True if written."""

    def keys(self, prefix: str) -> list[str]: ...

    def delete(self, key: str) -> None: ...


class MemoryKV:
    """A KVStore in a dict: for a controller without Ray (tools, unit tests of the core)."""

    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}

    def get(self, key: str) -> bytes | None:
        return self.data.get(key)

    def put(self, key: str, value: bytes) -> None:
        self.data[key] = bytes(value)

    def put_if_absent(self, key: str, value: bytes) -> bool:
        if key in self.data:
            return False
        self.data[key] = bytes(value)
        return True

    def keys(self, prefix: str) -> list[str]:
        return [k for k in self.data if k.startswith(prefix)]

    def delete(self, key: str) -> None:
        self.data.pop(key, None)


class StaleWriterError(RuntimeError):
    """Another controller wrote this index (or compacted past it): this one must stop writing."""


class LogCorruptedError(RuntimeError):
    """The stored history cannot be replayed (a gap, a damaged entry): never guessed around."""


@dataclass(slots=True)
class LoadedHistory:
    snapshot_index: int = 0
    snapshot_state: dict[str, Any] | None = None
    events: list[tuple[int, Event]] = field(default_factory=list)


class EventLog:
    def __init__(self, kv: KVStore, prefix: str) -> None:
        if not prefix or prefix.endswith("/"):
            raise ValueError(f"bad event log prefix {prefix!r}")
        self.kv = kv
        self.prefix = prefix
        self.last_index = 0
        """Index of the newest event this writer knows (written or loaded)."""
        self.snapshot_index = 0

    def _event_key(self, index: int) -> str:
        return f"{self.prefix}/event/{index:0{INDEX_DIGITS}d}"

    @property
    def _snapshot_key(self) -> str:
        return f"{self.prefix}/snapshot"

    def _read_snapshot(self) -> tuple[int, dict[str, Any] | None]:
        raw = self.kv.get(self._snapshot_key)
        if raw is None:
            return 0, None
        try:
            data = json.loads(raw)
            return int(data["index"]), dict(data["state"])
        except (ValueError, KeyError, TypeError) as e:
            raise LogCorruptedError(f"{self._snapshot_key}: unreadable snapshot: {e}") from None

    def _event_indexes(self) -> list[int]:
        start = len(self.prefix) + len("/event/")
        indexes = []
        for key in self.kv.keys(f"{self.prefix}/event/"):
            suffix = key[start:]
            if suffix.isdigit():
                indexes.append(int(suffix))
        return sorted(indexes)

    def load(self) -> LoadedHistory:
        """The snapshot and every event after it, in order; sets this writer's position."""
        snapshot_index, state = self._read_snapshot()
        history = LoadedHistory(snapshot_index, state)
        expected = snapshot_index + 1
        for index in self._event_indexes():
            if index <= snapshot_index:
                continue  # covered by the snapshot, not yet deleted (or a stale writer's leftover)
            if index != expected:
                raise LogCorruptedError(f"{self.prefix}: event {expected} is missing (next stored is {index})")
            raw = self.kv.get(self._event_key(index))
            if raw is None:
                raise LogCorruptedError(f"{self.prefix}: event {index} vanished while loading")
            try:
                history.events.append((index, decode_event(raw)))
            except ValueError as e:
                raise LogCorruptedError(f"{self.prefix}: event {index}: {e}") from None
            expected += 1
        self.snapshot_index = snapshot_index
        self.last_index = expected - 1
        return history

    def append(self, event: Event) -> int:
        """Persist one event at the next index; returns the index. Raises StaleWriterError if another
        writer owns that index, or OSError-like errors from the store (nothing is then written)."""
        index = self.last_index + 1
        key = self._event_key(index)
        data = encode_event(event)
        if not self.kv.put_if_absent(key, data) and self.kv.get(key) != data:
            # (the same bytes there: our own write, retried by the store's client after a lost reply,
            # or another writer that derived the very same change from the very same history)
            raise StaleWriterError(f"{self.prefix}: event {index} was written by another controller")
        snapshot_index, _ = self._read_snapshot()
        if snapshot_index >= index:
            self.kv.delete(key)
            raise StaleWriterError(f"{self.prefix}: another controller compacted past event {index}")
        self.last_index = index
        return index

    def compact(self, state: dict[str, Any]) -> None:
        """Store `state` (the state after `last_index` events) as the snapshot, then delete the events
        it covers. Never moves the snapshot backwards."""
        current, _ = self._read_snapshot()
        if current > self.last_index:
            raise StaleWriterError(f"{self.prefix}: snapshot at {current} is newer than this writer "
                                   f"({self.last_index})")
        index = self.last_index
        self.kv.put(self._snapshot_key, json.dumps({"index": index, "state": state}, separators=(",", ":")).encode())
        self.snapshot_index = index
        for old in self._event_indexes():
            if old <= index:
                self.kv.delete(self._event_key(old))

    @property
    def events_since_snapshot(self) -> int:
        return self.last_index - self.snapshot_index
