"""A broker's topic table and its DataVersion (RocketMQ's TopicConfigManager), persisted atomically.

Every change bumps the DataVersion and is on disk before the caller is told it happened, so a
broker restarted after kill -9 registers exactly the topics it acknowledged.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path

from namesrv.common.clock import Clock, system_clock
from namesrv.common.persist import FileWriter, Undo, write_now
from namesrv.protocol.constants import (
    AUTO_CREATE_TOPIC_KEY_TOPIC,
    PERM_ALL,
    SELF_TEST_TOPIC,
    Perm,
    is_readable,
    is_writeable,
)
from namesrv.protocol.models import DataVersion, TopicConfig, TopicConfigSerializeWrapper, parse_data_version
from namesrv.protocol.types import InvalidInput, check_topic

log = logging.getLogger(__name__)


class TopicConfigManager:
    def __init__(
        self,
        path: str | Path | None,
        clock: Clock = system_clock,
        auto_create_topic_enable: bool = True,
        default_topic_queue_nums: int = 8,
        writer: FileWriter = write_now,
    ) -> None:
        self.path = Path(path) if path is not None else None
        self.writer = writer
        """Puts each new image of the table on disk (a broker passes a BackgroundWriter's)."""
        self.clock = clock
        self.auto_create_topic_enable = auto_create_topic_enable
        self.topic_config_table: dict[str, TopicConfig] = {}
        self.data_version = DataVersion()
        self.listeners: list[Callable[[str, TopicConfig | None], None]] = []
        """Told of each topic created, replaced (its new config) or deleted (None) by a request, as
        the change is made (not of a slave's copy of its master's whole table)."""
        self._load()
        changed = self._ensure(TopicConfig(topic_name=SELF_TEST_TOPIC, read_queue_nums=1, write_queue_nums=1))
        if auto_create_topic_enable:
            changed |= self._ensure(
                TopicConfig(
                    topic_name=AUTO_CREATE_TOPIC_KEY_TOPIC,
                    read_queue_nums=default_topic_queue_nums,
                    write_queue_nums=default_topic_queue_nums,
                    perm=PERM_ALL,
                )
            )
        if changed:  # the built-in topics are made again at every start: no undo if not written
            self._bump_and_persist(None)

    def _ensure(self, tc: TopicConfig) -> bool:
        if tc.topic_name in self.topic_config_table:
            return False
        self.topic_config_table[tc.topic_name] = tc
        return True

    def _load(self) -> None:
        if self.path is None or not self.path.exists():
            return
        data = json.loads(self.path.read_text(encoding="utf-8"))
        self.topic_config_table = {
            name: TopicConfig.model_validate(tc) for name, tc in data["topicConfigTable"].items()
        }
        self.data_version = parse_data_version(data["dataVersion"])
        log.info("loaded %d topics, %s from %s", len(self.topic_config_table), self.data_version, self.path)

    def _bump_and_persist(self, undo: Undo | None, state_version: int | None = None) -> None:
        """New version (its state version given, else kept), new image on disk; should it not land,
        `undo` takes the change back."""
        self.data_version = self.data_version.next_version(self.clock(), state_version)
        if self.path is not None:
            body = {
                "topicConfigTable": {n: tc.to_wire() for n, tc in sorted(self.topic_config_table.items())},
                "dataVersion": self.data_version.to_wire(),
            }
            self.writer(self.path, json.dumps(body, indent=1).encode(), undo)

    def _restore(self, topic: str | None, prev: TopicConfig | None) -> Undo:
        """Undo of one change: `topic` back to `prev` (None: absent), and the version before it."""
        version = self.data_version

        def undo() -> None:
            if topic is not None:
                if prev is None:
                    self.topic_config_table.pop(topic, None)
                else:
                    self.topic_config_table[topic] = prev
            self.data_version = version
            log.warning("topic config change of %s rolled back: not written", topic)
        return undo

    # ------------------------------------------------------------------ changes
    def update_topic_config(self, tc: TopicConfig) -> bool:
        """Create or replace a topic; False (and no version bump) when nothing changed."""
        prev = self.topic_config_table.get(tc.topic_name)
        if prev == tc:
            return False
        undo = self._restore(tc.topic_name, prev)
        self.topic_config_table[tc.topic_name] = tc
        self._bump_and_persist(undo)
        log.info("topic config updated: %s", tc)
        for listener in self.listeners:
            listener(tc.topic_name, tc)
        return True

    def next_version(self, state_version: int | None = None) -> DataVersion:
        """Bump the version without a topic change (e.g. the broker's permission changed), so every
        NameServer rewrites this broker's queue data on the next registration. `state_version`:
        a broker becoming master at epoch E passes E (RocketMQ's ReplicasManager:
        `getDataVersion().nextVersion(newMasterEpoch)`), so its next registration carries
        stateVersion E and NameServers prefer it to an older master (the higher-epoch rule); None
        keeps the current one. Persisted with the table, so a restart keeps it."""
        self._bump_and_persist(self._restore(None, None), state_version)
        return self.data_version

    def delete_topic_config(self, topic: str) -> bool:
        prev = self.topic_config_table.get(topic)
        if prev is None:
            return False
        undo = self._restore(topic, prev)
        del self.topic_config_table[topic]
        self._bump_and_persist(undo)
        log.info("topic deleted: %s", topic)
        for listener in self.listeners:
            listener(topic, None)
        return True

    def create_topic_in_send_message_method(
        self, topic: str, default_topic: str, client_default_topic_queue_nums: int
    ) -> TopicConfig | None:
        """Auto-create `topic` on the first message, modelled on `default_topic` (TBW102).

        Only when the default topic is inheritable; the new topic gets at most the default topic's
        write queues, and the default topic's perm without INHERIT.
        """
        check_topic(topic)
        existing = self.topic_config_table.get(topic)
        if existing is not None:
            return existing
        default = self.topic_config_table.get(default_topic)
        if default is None or not self.auto_create_topic_enable:
            return None
        if not default.perm & Perm.INHERIT:
            log.warning("create topic %s from %s refused: no INHERIT perm", topic, default_topic)
            return None
        if client_default_topic_queue_nums <= 0:
            raise InvalidInput("defaultTopicQueueNums must be positive")
        queue_nums = min(client_default_topic_queue_nums, default.write_queue_nums)
        tc = TopicConfig(
            topic_name=topic,
            read_queue_nums=queue_nums,
            write_queue_nums=queue_nums,
            perm=int(default.perm & ~Perm.INHERIT),
        )
        self.update_topic_config(tc)
        log.info("auto-created topic %s from %s with %d queues", topic, default_topic, queue_nums)
        return tc

    def create_topic_in_send_message_back_method(
        self, topic: str, queue_nums: int, perm: int = int(Perm.READ | Perm.WRITE)
    ) -> TopicConfig | None:
        """Create a group's retry or dead-letter topic (%RETRY%g, %DLQ%g) if missing; returns the
        new config, or None when it existed already (RocketMQ's createTopicInSendMessageBackMethod)."""
        if topic in self.topic_config_table:
            return None
        tc = TopicConfig(topic_name=topic, read_queue_nums=queue_nums, write_queue_nums=queue_nums, perm=perm)
        self.update_topic_config(tc)
        log.info("created %s with %d queues", topic, queue_nums)
        return tc

    def sync_from_master(self, table: dict[str, TopicConfig], version: DataVersion) -> bool:
        """A slave takes its master's whole table and DataVersion (RocketMQ's SlaveSynchronize);
        False when it already has that version. Persisted as any change (rolled back if not written)."""
        if version == self.data_version:
            return False
        previous_table, previous_version = dict(self.topic_config_table), self.data_version

        def undo() -> None:
            self.topic_config_table, self.data_version = previous_table, previous_version
            log.warning("topic config from the master rolled back: not written")
        self.topic_config_table = dict(table)
        self.data_version = version
        if self.path is not None:
            body = {"topicConfigTable": {n: tc.to_wire() for n, tc in sorted(table.items())},
                    "dataVersion": version.to_wire()}
            self.writer(self.path, json.dumps(body, indent=1).encode(), undo)
        log.info("topic config synchronised from the master: %d topics, %s", len(table), version)
        return True

    # ------------------------------------------------------------------ registration body
    def build_serialize_wrapper(self, broker_permission: int) -> TopicConfigSerializeWrapper:
        """The register body: every topic as `registered_config` reports it."""
        table = self.topic_config_table
        if not (is_readable(broker_permission) and is_writeable(broker_permission)):
            table = {n: registered_config(tc, broker_permission) for n, tc in table.items()}
        return TopicConfigSerializeWrapper(topic_config_table=dict(table), data_version=self.data_version)


def registered_config(tc: TopicConfig, broker_permission: int) -> TopicConfig:
    """A topic as the broker registers it: a broker that is not both readable and writeable masks
    every topic's perm with its own (RocketMQ 5), so routes stop sending (or reading) there at once."""
    if is_readable(broker_permission) and is_writeable(broker_permission):
        return tc
    return tc.model_copy(update={"perm": tc.perm & broker_permission})
