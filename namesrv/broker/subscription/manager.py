"""A broker's consumer-group configs and their DataVersion (RocketMQ's SubscriptionGroupManager),
persisted atomically in RocketMQ's file shape: {"subscriptionGroupTable": {group: config},
"dataVersion": {...}}.

Every change bumps the DataVersion and is handed to the broker's file writer with an undo, so the
table in memory is never ahead of the disk (as the topic table, namesrv.broker.topic_config_manager).
A group not in the table is created with the defaults on its first use (a heartbeat, a pull, a
send-back) when `auto_create` is on (RocketMQ's autoCreateSubscriptionGroup, default true); a slave
takes its master's whole table (`sync_from_master`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path

from namesrv.broker.subscription.config import (
    SubscriptionGroupConfig,
    SubscriptionGroupError,
    group_problem,
    is_system_group,
    parse_group_config,
    system_group_configs,
)
from namesrv.common.clock import Clock, system_clock
from namesrv.common.persist import DurableWriteError, FileWriter, Undo, write_now
from namesrv.protocol.models import DataVersion, parse_data_version

log = logging.getLogger(__name__)


class SubscriptionGroupLoadError(RuntimeError):
    """The subscription group file exists but cannot be read."""


class SubscriptionGroupManager:
    def __init__(self, path: str | Path | None, clock: Clock = system_clock, auto_create: bool = True,
                 writer: FileWriter = write_now) -> None:
        self.path = Path(path) if path is not None else None
        self.clock = clock
        self.auto_create = auto_create
        self.writer = writer
        self.table: dict[str, SubscriptionGroupConfig] = {c.group_name: c for c in system_group_configs()}
        self.data_version = DataVersion()
        self.listeners: list[Callable[[str, SubscriptionGroupConfig | None], None]] = []
        """Told of every group a request created, replaced or (None) deleted: the metadata log
        writes them into the replicated commit log."""
        self._load()

    def _load(self) -> None:
        if self.path is None or not self.path.exists():
            return
        try:
            raw = json.loads(self.path.read_text(encoding="utf-8"))
            loaded = {str(g): parse_group_config(c) for g, c in raw["subscriptionGroupTable"].items()}
            version = parse_data_version(raw["dataVersion"])
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise SubscriptionGroupLoadError(f"cannot load subscription groups {self.path}: {e}") from e
        self.table.update(loaded)
        self.data_version = version
        log.info("loaded %d subscription groups, %s from %s", len(loaded), version, self.path)

    def encode(self) -> bytes:
        return json.dumps({"subscriptionGroupTable": {g: c.to_wire() for g, c in sorted(self.table.items())},
                           "dataVersion": self.data_version.to_wire()}, indent=1).encode()

    def _persist(self, undo: Undo | None) -> None:
        if self.path is not None:
            self.writer(self.path, self.encode(), undo)

    def _change(self, group: str, new: SubscriptionGroupConfig | None) -> None:
        """Set (or with None remove) `group`, a new version, the image to disk (undone if not written)."""
        prev, version = self.table.get(group), self.data_version

        def undo() -> None:
            if prev is None:
                self.table.pop(group, None)
            else:
                self.table[group] = prev
            self.data_version = version
            log.warning("subscription group change of %s rolled back: not written", group)

        if new is None:
            del self.table[group]
        else:
            self.table[group] = new
        self.data_version = self.data_version.next_version(self.clock())
        self._persist(undo)
        for listener in self.listeners:
            listener(group, new)

    # ------------------------------------------------------------------ reads
    def get(self, group: str) -> SubscriptionGroupConfig | None:
        return self.table.get(group)

    def find(self, group: str) -> SubscriptionGroupConfig | None:
        """The group's config, created with the defaults when missing and `auto_create` is on (and
        its name is valid); None otherwise (RocketMQ's findSubscriptionGroupConfig). When the new
        group cannot be written (a full disk), the defaults serve this use and the table is left
        as it was: the next use tries again."""
        config = self.table.get(group)
        if config is not None or not self.auto_create or group_problem(group) is not None:
            return config
        config = SubscriptionGroupConfig(group_name=group)
        try:
            self._change(group, config)
        except DurableWriteError as e:  # as RocketMQ, whose persist only logs: the use goes on, nothing kept
            log.warning("subscription group %s used with the defaults but not created: %s", group, e)
            return config
        log.info("auto-created subscription group %s", group)
        return config

    # ------------------------------------------------------------------ changes
    def update(self, config: SubscriptionGroupConfig) -> bool:
        """Create or replace a group's config (its name checked); False when nothing changed."""
        config = parse_group_config(config)
        if self.table.get(config.group_name) == config:
            return False
        self._change(config.group_name, config)
        log.info("subscription group updated: %s", config)
        return True

    def delete(self, group: str) -> bool:
        """Remove a group's config; a system group is refused (SubscriptionGroupError); False when
        there was none."""
        problem = group_problem(group)
        if problem is not None:
            raise SubscriptionGroupError(problem)
        if is_system_group(group):
            raise SubscriptionGroupError(f"The group {group} is a system group and cannot be deleted")
        if group not in self.table:
            return False
        self._change(group, None)
        log.info("subscription group deleted: %s", group)
        return True

    def sync_from_master(self, table: dict[str, SubscriptionGroupConfig], version: DataVersion) -> bool:
        """A slave takes its master's whole table and DataVersion; False when it has that version."""
        if version == self.data_version:
            return False
        previous_table, previous_version = dict(self.table), self.data_version

        def undo() -> None:
            self.table, self.data_version = previous_table, previous_version
            log.warning("subscription groups from the master rolled back: not written")

        self.table, self.data_version = dict(table), version
        self._persist(undo)
        log.info("subscription groups synchronised from the master: %d groups, %s", len(table), version)
        return True

    def wire_table(self) -> dict[str, object]:
        """GET_ALL_SUBSCRIPTIONGROUP_CONFIG's body (RocketMQ's SubscriptionGroupWrapper)."""
        return {"subscriptionGroupTable": {g: c.to_wire() for g, c in sorted(self.table.items())},
                "dataVersion": self.data_version.to_wire()}
