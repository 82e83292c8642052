"""A broker's metadata carried in the replicated commit log, so it follows the data (issue 33,
point 0): topic configs, subscription groups, consumer offsets, the delay-level progress, and the
pop state (issue 35: what is in flight, acked, changed and revived).

A slave used to learn its master's topics only from the periodic metadata copy (RocketMQ's
SlaveSynchronize, every `slave_sync_interval_ms`): a topic created a few seconds before its master
died was unknown to the new master, which held the topic's messages and answered every pull with
TOPIC_NOT_EXIST; and a group's offsets committed since the last copy were rewound, so its consumers
read again what they had finished. Now a master writes each change as a record of the system topic
`METADATA_TOPIC` into its own commit log:

- a topic or subscription group created, replaced or deleted: one record, queued in the same step
  as the change, so it precedes anything of that topic (or group) that follows it;
- consumer offsets: coalesced, the changes of `offsets_delay_s` (0.1 s) in one record, because
  pulls commit offsets all the time (`commitOffset`). A failover rewinds a group by at most that
  window, on top of the client's own 5 s persist interval: at-least-once, as RocketMQ promises;
- the schedule service's progress (`delayOffset.json`: each delay level's next offset and the timers
  delivered), coalesced with the offsets: a new master delivers parked messages from where its
  predecessor was, re-delivering at most that window's (at-least-once);
- the pop state's records (namesrv.broker.pop: pops with the queue's new pop offset, acks,
  invisible-time changes, revives), each written before its request is answered: a replica applies
  them to its own index and journal, so a promoted slave revives what its old master had in
  flight. A pop's record precedes the offset record carrying the same pop offset, so a replica that
  holds the offset holds the pop: an un-acked message is never skipped by a failover. (The periodic
  copy's offsets table is not ordered with the log: that path alone can carry a pop offset ahead
  of its record, for the moments between the two.)

Replication copies the log in order, so a replica holding a message holds its topic's config, and a
SYNC_MASTER's or a controller-mode master's acknowledgement of the message (or of the topic: the
admin path waits for its record's replication) covers the config too. A replica applies the records
it appended (`apply_new`), in log order, to its own tables; a promoted slave has every topic its log
holds, under the topic's own config, and its groups' offsets as of the last record. A truncation
(`MessageStore.truncate`) makes it apply again from where its log now ends. The periodic copy stays
(the whole tables with their DataVersions).

Pure: no Ray, no sockets. Runs on the broker's event loop.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from typing import Any

from namesrv.broker.client.consumer_offsets import ConsumerOffsetManager
from namesrv.broker.pop.state import PopState
from namesrv.broker.schedule.service import ScheduleService
from namesrv.broker.subscription.config import SubscriptionGroupConfig, SubscriptionGroupError
from namesrv.broker.subscription.manager import SubscriptionGroupManager
from namesrv.broker.topic_config_manager import TopicConfigManager
from namesrv.protocol.message.types import MessageInner
from namesrv.protocol.models import TopicConfig
from namesrv.store.message_store import MessageStore
from namesrv.store.types import AppendResult

log = logging.getLogger(__name__)

METADATA_TOPIC = "rmq_sys_BROKER_METADATA"
"""The system topic of the metadata records (one queue; never registered, never pulled)."""
READ_BATCH = 32
OFFSETS_DELAY_S = 0.1


def message_queues(store: MessageStore) -> dict[tuple[str, int], int]:
    """The store's queues and their max offsets, without the topic-config records of `METADATA_TOPIC`."""
    return {key: n for key, n in store.queues().items() if key[0] != METADATA_TOPIC}


def message_count(store: MessageStore) -> int:
    """The messages the store's queues hold (the topic-config records not counted)."""
    return sum(message_queues(store).values())


class MetadataLog:
    def __init__(self, store: MessageStore, topics: TopicConfigManager, groups: SubscriptionGroupManager,
                 offsets: ConsumerOffsetManager, records: Callable[[], bool],
                 offsets_delay_s: float = OFFSETS_DELAY_S) -> None:
        """`records()`: whether this broker writes its changes into the log (a master)."""
        self.store, self.topics, self.groups, self.offsets = store, topics, groups, offsets
        self.records, self.offsets_delay_s = records, offsets_delay_s
        self._pending: list[MessageInner] = []
        """Changes made with no event loop running (a test's direct call): queued by the next `written`."""
        self._offsets: dict[str, dict[int, int] | None] = {}
        """Offset changes not yet in a record (topic@group: changed queues, or None when removed)."""
        self._coalesce_timer: asyncio.TimerHandle | None = None
        """Coalesces the offsets' and the delay progress's changes into one record."""
        self.schedule: ScheduleService | None = None
        self.pop_state: PopState | None = None
        self._delay_changed = False
        self._last: asyncio.Future[AppendResult] | None = None
        """The latest record queued: the writer keeps their order, so it is written last."""
        self._applying = False
        self.applied = store.max_offset(METADATA_TOPIC, 0)
        """The queue offset of the next record to apply (a broker starts with what its tables have)."""
        self.records_applied = 0
        topics.listeners.append(self._topic_changed)
        groups.listeners.append(self._group_changed)
        offsets.listeners.append(self._offsets_changed)
        store.truncation_listeners.append(lambda _end: self.rewind())

    # ------------------------------------------------------------------ a master writes
    def _writing(self) -> bool:
        return not self._applying and self.records()

    def _topic_changed(self, topic: str, tc: TopicConfig | None) -> None:
        """A topic changed by a request: its record is queued into the log at once, in the same
        step, so nothing of the topic can be queued before it."""
        if self._writing():
            self._queue({"topic": topic, "config": None if tc is None else tc.to_wire()})

    def _group_changed(self, group: str, config: SubscriptionGroupConfig | None) -> None:
        if self._writing():
            self._queue({"group": group, "config": None if config is None else config.to_wire()})

    def follow_delay_progress(self, schedule: ScheduleService) -> None:
        """Record `schedule`'s progress as it moves (a master), and apply it from the log (a replica)."""
        self.schedule = schedule
        schedule.listeners.append(self._delay_progressed)

    def follow_pop_state(self, state: PopState) -> None:
        """Write `state`'s records into the log (a master), and apply them from it (a replica)."""
        self.pop_state = state
        state.log_sink = self._pop_records

    def _pop_records(self, records: list[dict[str, Any]]) -> asyncio.Future[AppendResult] | None:
        """A master: the pop state's records as one record, queued now; what to await for it."""
        if not self._writing():
            return None
        self._submit(MessageInner(METADATA_TOPIC, 0, json.dumps({"pop": records}).encode()))
        return self._last

    def _delay_progressed(self) -> None:
        if self._writing():
            self._delay_changed = True
            self._coalesce()

    def _offsets_changed(self, key: str, queues: dict[int, int] | None) -> None:
        if not self._writing():
            return
        known = self._offsets.get(key)
        self._offsets[key] = None if queues is None else (known or {}) | queues
        self._coalesce()

    def _coalesce(self) -> None:
        """Write the offsets' and delay progress's changes `offsets_delay_s` from now, in one record."""
        if self._coalesce_timer is None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                return  # written by the next `written`
            self._coalesce_timer = loop.call_later(self.offsets_delay_s, self._flush_coalesced)

    def _flush_coalesced(self) -> None:
        self._coalesce_timer = None
        changes, self._offsets = self._offsets, {}
        delay, self._delay_changed = self._delay_changed, False
        if not self.records():  # a master deposed meanwhile writes nothing
            return
        record: dict[str, Any] = {}
        if changes:
            record["offsets"] = {k: None if q is None else {str(i): o for i, o in q.items()}
                                 for k, q in changes.items()}
        if delay and self.schedule is not None:
            record["delay"] = self.schedule.encode().decode()
        if record:
            self._queue(record)

    def _queue(self, record: dict[str, Any]) -> None:
        message = MessageInner(METADATA_TOPIC, 0, json.dumps(record).encode())
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            self._pending.append(message)
            return
        self._submit(message)

    def _submit(self, record: MessageInner) -> None:
        self._last = future = self.store.submit(record)
        future.add_done_callback(self._done)

    def _done(self, future: asyncio.Future[AppendResult]) -> None:
        if future.cancelled():
            return
        failed = future.exception()
        if failed is not None:
            log.error("metadata record not written: %s", failed)
        else:
            self.applied = max(self.applied, future.result().queue_offset + 1)

    async def written(self) -> int:
        """Wait until every record queued so far (and the offsets changed so far) is written; where
        the last one ends (0: none)."""
        pending, self._pending = self._pending, []
        for record in pending:
            self._submit(record)
        if self._coalesce_timer is not None:
            self._coalesce_timer.cancel()
        self._flush_coalesced()
        if self._last is None:
            return 0
        result = await asyncio.shield(self._last)
        return result.commit_log_offset + result.store_size

    # ------------------------------------------------------------------ a replica applies
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
        self._applying = True
        try:
            record = json.loads(body)
            if "topic" in record:
                wire = record["config"]
                if wire is None:
                    self.topics.delete_topic_config(str(record["topic"]))
                else:
                    self.topics.update_topic_config(TopicConfig.model_validate(wire))
            elif "pop" in record:
                if self.pop_state is not None:
                    self.pop_state.apply_replicated(list(record["pop"]), self.offsets)
            elif "group" in record:
                wire = record["config"]
                if wire is None:
                    self.groups.delete(str(record["group"]))
                else:
                    self.groups.update(SubscriptionGroupConfig.model_validate(wire))
            else:
                for key, queues in dict(record.get("offsets", {})).items():
                    self.offsets.apply(str(key), None if queues is None
                                       else {int(q): int(o) for q, o in dict(queues).items()})
                if "delay" in record and self.schedule is not None:
                    self.schedule.take_progress(str(record["delay"]).encode())
        except (ValueError, KeyError, TypeError, AttributeError, SubscriptionGroupError) as e:
            log.error("metadata record not applied: %s", e)
        finally:
            self._applying = False
