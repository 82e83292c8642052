"""Consumer offsets per group and queue (RocketMQ's ConsumerOffsetManager), persisted atomically.

Offsets change on every commit, so they are written out on a schedule (RocketMQ flushes every 5 s)
and at shutdown, never on the request path: a broker killed in between loses at most the last
interval's commits, and those messages are delivered again (at-least-once, as RocketMQ promises).
The file is RocketMQ's shape: {"offsetTable": {"topic@group": {"queueId": offset}}}.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path

from namesrv.common.persist import atomic_write

log = logging.getLogger(__name__)

TOPIC_GROUP_SEPARATOR = "@"


class ConsumerOffsetError(RuntimeError):
    """The offsets file exists but cannot be read."""


class ConsumerOffsetManager:
    def __init__(self, path: str | Path | None) -> None:
        self.path = Path(path) if path is not None else None
        self.table: dict[str, dict[int, int]] = {}
        self.dirty = False
        self.listeners: list[Callable[[str, dict[int, int] | None], None]] = []
        """Told of every change a request makes: (topic@group, its changed queues' offsets, or None
        when the key is gone). The metadata log writes them into the replicated commit log."""
        self._load()

    def _load(self) -> None:
        if self.path is None or not self.path.exists():
            return
        try:
            raw = json.loads(self.path.read_text(encoding="utf-8"))["offsetTable"]
            self.table = {str(key): {int(q): int(o) for q, o in queues.items()} for key, queues in raw.items()}
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise ConsumerOffsetError(f"cannot load consumer offsets {self.path}: {e}") from e
        log.info("loaded offsets of %d topic@group pairs from %s", len(self.table), self.path)

    def _changed(self, key: str, queues: dict[int, int] | None) -> None:
        self.dirty = True
        for listener in self.listeners:
            listener(key, queues)

    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        key = f"{topic}{TOPIC_GROUP_SEPARATOR}{group}"
        queues = self.table.setdefault(key, {})
        if queues.get(queue_id) != offset:
            queues[queue_id] = offset
            self._changed(key, {queue_id: offset})

    def apply(self, key: str, queues: dict[int, int] | None) -> None:
        """A replica: its master's change, as its listeners were told it (None: the key removed)."""
        if queues is None:
            self.table.pop(key, None)
        else:
            self.table.setdefault(key, {}).update(queues)
        self.dirty = True

    def merge_from_master(self, table: dict[str, dict[int, int]]) -> None:
        """A slave takes its master's offsets over its own (RocketMQ's SlaveSynchronize: putAll)."""
        for key, queues in table.items():
            mine = self.table.setdefault(str(key), {})
            for queue_id, offset in queues.items():
                if mine.get(int(queue_id)) != int(offset):
                    mine[int(queue_id)] = int(offset)
                    self.dirty = True

    def remove_group(self, group: str) -> int:
        """Forget every offset of `group` (deleteSubGroup's cleanOffset); the queues forgotten."""
        suffix = f"{TOPIC_GROUP_SEPARATOR}{group}"
        keys = [k for k in self.table if k.endswith(suffix)]
        removed = sum(len(self.table.pop(k)) for k in keys)
        for key in keys:
            self._changed(key, None)
        return removed

    def topics_of(self, group: str) -> list[str]:
        """The topics `group` committed offsets for (RocketMQ's whichTopicByConsumer)."""
        suffix = f"{TOPIC_GROUP_SEPARATOR}{group}"
        return sorted(k[: -len(suffix)] for k in self.table if k.endswith(suffix))

    def clone_offset(self, src_group: str, dest_group: str, topic: str) -> bool:
        """Copy `src_group`'s offsets of `topic` to `dest_group` (RocketMQ's cloneOffset); False
        when the source has none."""
        queues = self.table.get(f"{topic}{TOPIC_GROUP_SEPARATOR}{src_group}")
        if not queues:
            return False
        key = f"{topic}{TOPIC_GROUP_SEPARATOR}{dest_group}"
        self.table[key] = dict(queues)
        self._changed(key, dict(queues))
        return True

    def query_offset(self, group: str, topic: str, queue_id: int) -> int:
        """The committed offset, or -1 when the group never committed one for this queue."""
        return self.table.get(f"{topic}{TOPIC_GROUP_SEPARATOR}{group}", {}).get(queue_id, -1)

    def encode(self) -> bytes:
        table = {key: {str(q): o for q, o in sorted(queues.items())} for key, queues in sorted(self.table.items())}
        return json.dumps({"offsetTable": table}, indent=1).encode()

    def snapshot(self) -> bytes | None:
        """The table's bytes if it changed since the last snapshot (taken where the table lives, so
        no writer races it); None when unchanged or not persisted."""
        if self.path is None or not self.dirty:
            return None
        self.dirty = False
        return self.encode()

    def write(self, data: bytes) -> None:
        """Write a snapshot (write, fsync, rename). Blocking: run it in a worker thread."""
        if self.path is not None:
            atomic_write(self.path, data)

    def persist(self) -> None:
        """Snapshot and write at once (shutdown, tests)."""
        data = self.snapshot()
        if data is not None:
            self.write(data)
