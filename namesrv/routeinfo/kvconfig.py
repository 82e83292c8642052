"""Namespaced key/value settings (RocketMQ's KVConfigManager), persisted atomically as JSON."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from namesrv.common.persist import FileWriter, Undo, write_now

log = logging.getLogger(__name__)


class KVConfigError(RuntimeError):
    """The KV file on disk exists but cannot be read as a namespace table."""


class KVConfigManager:
    def __init__(self, path: str | Path | None, writer: FileWriter = write_now) -> None:
        """`path` None keeps the table in memory only (tests, throwaway NameServers); `writer` puts
        each new image of the table on disk (a server passes a BackgroundWriter's, off its loop)."""
        self.path = Path(path).expanduser() if path is not None else None
        self.writer = writer
        self.table: dict[str, dict[str, str]] = {}

    def load(self) -> None:
        """Reload from disk; a missing file is an empty table, a corrupt one an error (never guessed)."""
        if self.path is None or not self.path.exists():
            return
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            table = data["configTable"]
            if not isinstance(table, dict) or not all(
                isinstance(ns, str)
                and isinstance(kv, dict)
                and all(isinstance(k, str) and isinstance(v, str) for k, v in kv.items())
                for ns, kv in table.items()
            ):
                raise ValueError("configTable must map namespace -> {key: value} of strings")
        except (ValueError, KeyError, TypeError) as e:
            raise KVConfigError(f"cannot load KV config {self.path}: {e}") from e
        self.table = {ns: dict(kv) for ns, kv in table.items()}
        log.info("loaded KV config: %d namespaces from %s", len(self.table), self.path)

    def persist(self, undo: Undo | None = None) -> None:
        """Put the table's image on disk; should it not land, `undo` takes the change back (with
        the default writer the error is raised here, with a background one the waiter gets it)."""
        if self.path is None:
            return
        body = json.dumps({"configTable": self.table}, sort_keys=True, indent=1).encode()
        self.writer(self.path, body, undo)

    def _restore(self, namespace: str, key: str, had_namespace: bool, prev: str | None) -> Undo:
        def undo() -> None:
            if not had_namespace:
                self.table.pop(namespace, None)
                return
            ns = self.table.setdefault(namespace, {})
            if prev is None:
                ns.pop(key, None)
            else:
                ns[key] = prev
            log.warning("KV config %s %s rolled back to %s: not written", namespace, key, prev)
        return undo

    def put_kv_config(self, namespace: str, key: str, value: str) -> None:
        had_namespace = namespace in self.table
        ns = self.table.setdefault(namespace, {})
        prev = ns.get(key)
        ns[key] = value
        if prev != value or not had_namespace:
            self.persist(self._restore(namespace, key, had_namespace, prev))
        log.info("putKVConfig %s %s %s (was %s)", namespace, key, value, prev)

    def delete_kv_config(self, namespace: str, key: str) -> bool:
        ns = self.table.get(namespace)
        if ns is None or key not in ns:
            return False
        prev = ns.pop(key)  # an emptied namespace stays, listing as an empty table (as in RocketMQ)
        self.persist(self._restore(namespace, key, True, prev))
        return True

    def get_kv_config(self, namespace: str, key: str) -> str | None:
        return self.table.get(namespace, {}).get(key)

    def get_kv_list_by_namespace(self, namespace: str) -> dict[str, str] | None:
        ns = self.table.get(namespace)
        return dict(ns) if ns is not None else None
