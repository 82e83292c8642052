"""Topic configs carried in the replicated commit log, so metadata follows the data (issue 33,
point 0).

A slave used to learn its master's topics only from the periodic metadata copy (RocketMQ's
SlaveSynchronize, every `slave_sync_interval_ms`): a topic created a few seconds before its master
died was unknown to the new master, which held the topic's messages and answered every pull with
TOPIC_NOT_EXIST. Now a master writes each topic change (created, replaced, deleted) as a record of
the system topic `METADATA_TOPIC` into its own commit log, queued before anything of that topic
that follows it (queued into the writer in the same step as the change). Replication copies the log in
order, so a replica holding a message holds its topic's config, and a SYNC_MASTER's or a
controller-mode master's acknowledgement of the message (or of the topic: the admin path waits for
its record's replication) covers the config too. A replica applies the records it appended
(`apply_new`), in log order, to its own table; a promoted slave has every topic its log holds,
under the topic's own config. The periodic copy stays (consumer offsets, the delay-level progress,
and the whole table with its DataVersion).

Pure: no Ray, no sockets. Runs on the broker's event loop.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable

from namesrv.broker.topic_config_manager import TopicConfigManager
from namesrv.protocol.message.types import MessageInner
from namesrv.protocol.models import TopicConfig
from namesrv.store.message_store import MessageStore
from namesrv.store.types import AppendResult

log = logging.getLogger(__name__)

METADATA_TOPIC = "rmq_sys_BROKER_METADATA"
"""The system topic of the topic-config records (one queue; never registered, never pulled)."""
READ_BATCH = 32


def message_queues(store: MessageStore) -> dict[tuple[str, int], int]:
    """The store's queues and their max offsets, without the topic-config records of `METADATA_TOPIC`."""
    return {key: n for key, n in store.queues().items() if key[0] != METADATA_TOPIC}


def message_count(store: MessageStore) -> int:
    """The messages the store's queues hold (the topic-config records not counted)."""
    return sum(message_queues(store).values())


class MetadataLog:
    def __init__(self, store: MessageStore, topics: TopicConfigManager, records: Callable[[], bool]) -> None:
        """`records()`: whether this broker writes its topic changes into the log (a master)."""
        self.store, self.topics, self.records = store, topics, records
        self._pending: list[MessageInner] = []
        """Changes made with no event loop running (a test's direct call): queued by the next `written`."""
        self._last: asyncio.Future[AppendResult] | None = None
        """The latest record queued: the writer keeps their order, so it is written last."""
        self._applying = False
        self.applied = store.max_offset(METADATA_TOPIC, 0)
        """The queue offset of the next record to apply (a broker starts with what its table has)."""
        self.records_applied = 0
        topics.listeners.append(self._changed)
        store.truncation_listeners.append(lambda _end: self.rewind())

    def _changed(self, topic: str, tc: TopicConfig | None) -> None:
        """A topic changed by a request: its record is queued into the log at once, in the same
        step, so nothing of the topic can be queued before it."""
        if self._applying or not self.records():
            return
        body = json.dumps({"topic": topic, "config": None if tc is None else tc.to_wire()}).encode()
        record = MessageInner(METADATA_TOPIC, 0, body)
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            self._pending.append(record)
            return
        self._submit(record)

    def _submit(self, record: MessageInner) -> None:
        self._last = future = self.store.submit(record)
        future.add_done_callback(self._done)

    def _done(self, future: asyncio.Future[AppendResult]) -> None:
        if future.cancelled():
            return
        failed = future.exception()
        if failed is not None:
            log.error("topic config record not written: %s", failed)
        else:
            self.applied = max(self.applied, future.result().queue_offset + 1)

    async def written(self) -> int:
        """Wait until every record queued so far is written; where the last one ends (0: none)."""
        pending, self._pending = self._pending, []
        for record in pending:
            self._submit(record)
        if self._last is None:
            return 0
        result = await asyncio.shield(self._last)
        return result.commit_log_offset + result.store_size

    def rewind(self) -> None:
        """The log was cut (a replica's truncation): apply again from where it now ends."""
        self.applied = min(self.applied, self.store.max_offset(METADATA_TOPIC, 0))

    def apply_new(self) -> int:
        """A replica: apply the records its log gained since the last call, in order; returns how
        many. Blocking reads of a few records (page cache): fine on the loop."""
        end = self.store.max_offset(METADATA_TOPIC, 0)
        applied = 0
        while self.applied < end:
            found = self.store.get_message(METADATA_TOPIC, 0, self.applied, READ_BATCH)
            if not found:  # lost to corruption or retention: skip to what is there
                self.applied = max(self.applied + 1, self.store.min_offset(METADATA_TOPIC, 0))
                continue
            for m in found:
                self._apply(m.body)
                self.applied = m.queue_offset + 1
                applied += 1
        self.records_applied += applied
        return applied

    def _apply(self, body: bytes) -> None:
        try:
            record = json.loads(body)
            topic, wire = str(record["topic"]), record["config"]
            tc = None if wire is None else TopicConfig.model_validate(wire)
        except (ValueError, KeyError, TypeError) as e:
            log.error("topic config record not applied: %s", e)
            return
        self._applying = True
        try:
            if tc is None:
                self.topics.delete_topic_config(topic)
            else:
                self.topics.update_topic_config(tc)
        finally:
            self._applying = False
