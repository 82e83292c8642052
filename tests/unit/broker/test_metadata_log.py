"""Metadata follows the data (issue 33, point 0): a master writes each topic and subscription-group
change into its commit log ahead of anything that follows it, and its consumer offsets coalesced;
a replica that copied the log applies them, so a promoted slave knows every topic it holds messages
of, under the topic's own config, its groups and their offsets, and where delivery of parked
messages stood, with no periodic metadata copy at all."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

from namesrv.broker.client.consumer_offsets import ConsumerOffsetManager
from namesrv.broker.metadata_log import METADATA_TOPIC, MetadataLog
from namesrv.broker.schedule.service import ScheduleService
from namesrv.broker.subscription.config import SubscriptionGroupConfig
from namesrv.broker.subscription.manager import SubscriptionGroupManager
from namesrv.broker.topic_config_manager import TopicConfigManager
from namesrv.common.clock import ManualClock
from namesrv.protocol.codes import ResponseCode
from namesrv.protocol.message.types import MessageInner
from namesrv.protocol.models import TopicConfig
from namesrv.store.message_store import MessageStore
from tests.support.broker import Broker


class Replica:
    """A slave's store and topic table, copying a master's log verbatim."""

    def __init__(self, root: Path) -> None:
        self.store = MessageStore(root / "store", clock=ManualClock())
        self.topics = TopicConfigManager(root / "topics.json", ManualClock())
        self.groups = SubscriptionGroupManager(root / "groups.json", ManualClock())
        self.offsets = ConsumerOffsetManager(root / "offsets.json")
        self.metadata = MetadataLog(self.store, self.topics, self.groups, self.offsets, lambda: False)

    def copy(self, master: MessageStore) -> int:
        t = master.read_raw(self.store.size_bytes(), 1 << 20)
        if t.data:
            self.store.append_raw(t.offset, t.data)
        return self.metadata.apply_new()


def test_an_auto_created_topic_is_in_the_log_before_its_first_message(tmp_path: Path) -> None:
    master = Broker(tmp_path / "m")
    replica = Replica(tmp_path / "r")

    async def send() -> None:
        outcome = await master.processor.send([MessageInner("Orders", 1, b"first")], "TBW102", 4)
        assert outcome.code == ResponseCode.SUCCESS

    asyncio.run(send())
    [record] = master.store.get_message(METADATA_TOPIC, 0, 0, 32)
    [message] = master.store.get_message("Orders", 1, 0, 32)
    assert record.commit_log_offset < message.commit_log_offset
    assert "Orders" not in replica.topics.topic_config_table
    assert replica.copy(master.store) == 1
    assert replica.topics.topic_config_table["Orders"] == master.topics.topic_config_table["Orders"]
    assert replica.store.get_message("Orders", 1, 0, 32)[0].body == b"first"


def test_a_replica_applies_creates_updates_and_deletes_in_log_order(tmp_path: Path) -> None:
    master = Broker(tmp_path / "m")
    replica = Replica(tmp_path / "r")
    metadata = master.processor.context.metadata

    async def changes() -> int:
        master.topics.update_topic_config(TopicConfig(topic_name="A", read_queue_nums=3, write_queue_nums=3,
                                                      order=True))
        master.topics.update_topic_config(TopicConfig(topic_name="B", read_queue_nums=2, write_queue_nums=2))
        master.topics.update_topic_config(TopicConfig(topic_name="A", read_queue_nums=5, write_queue_nums=5))
        master.topics.delete_topic_config("B")
        return await metadata.written()

    end = asyncio.run(changes())
    assert end == master.store.size_bytes()
    assert replica.copy(master.store) == 5  # and the support's own topic T, made before any loop ran
    assert replica.topics.topic_config_table["A"] == TopicConfig(topic_name="A", read_queue_nums=5,
                                                                 write_queue_nums=5)
    assert "B" not in replica.topics.topic_config_table
    assert replica.copy(master.store) == 0  # applied once
    assert replica.store.get_message(METADATA_TOPIC, 0, 0, 32)  # the records themselves are kept


def test_changes_made_without_a_loop_are_written_by_the_next_wait(tmp_path: Path) -> None:
    """The test support's own topic `T` is created before any event loop runs."""
    master = Broker(tmp_path / "m")
    assert master.store.max_offset(METADATA_TOPIC, 0) == 0
    end = asyncio.run(master.processor.context.metadata.written())
    assert end > 0 and master.store.max_offset(METADATA_TOPIC, 0) == 1


def test_a_truncated_replica_applies_what_its_new_master_writes_at_the_cut_offsets(tmp_path: Path) -> None:
    old = Broker(tmp_path / "old")
    replica = Replica(tmp_path / "r")
    asyncio.run(old.processor.context.metadata.written())  # T
    replica.copy(old.store)
    point = replica.store.size_bytes()

    async def tail() -> None:  # the old master's unreplicated tail
        old.topics.update_topic_config(TopicConfig(topic_name="Lost", read_queue_nums=1, write_queue_nums=1))
        await old.processor.context.metadata.written()

    asyncio.run(tail())
    replica.copy(old.store)
    assert "Lost" in replica.topics.topic_config_table and replica.metadata.applied == 2
    asyncio.run(replica.store.truncate(point))  # its listeners: the topic records cut are applied again
    assert replica.metadata.applied == 1
    # the new master's log: the same start, then its own change at the offsets the tail had
    new = Replica(tmp_path / "new")
    new.store.append_raw(0, old.store.read_raw(0, point).data)
    record = MessageInner(METADATA_TOPIC, 0, b'{"topic": "Kept", "config": {"topicName": "Kept", '
                                             b'"readQueueNums": 2, "writeQueueNums": 2}}')
    new.store.append(record)
    replica.copy(new.store)
    assert "Kept" in replica.topics.topic_config_table


def test_a_replica_skips_a_record_it_cannot_read(tmp_path: Path) -> None:
    master = MessageStore(tmp_path / "m", clock=ManualClock())
    master.append(MessageInner(METADATA_TOPIC, 0, b"not json"))
    master.append(MessageInner(METADATA_TOPIC, 0, b'{"topic": "Ok", "config": null}'))
    replica = Replica(tmp_path / "r")
    replica.topics.update_topic_config(TopicConfig(topic_name="Ok", read_queue_nums=1, write_queue_nums=1))
    assert replica.copy(master) == 2
    assert "Ok" not in replica.topics.topic_config_table  # the second record (a delete) applied


def test_offsets_are_coalesced_into_one_record_and_a_replica_takes_them(tmp_path: Path) -> None:
    """Issue 33: a group's offsets reached a slave only by the periodic copy, so a failover rewound
    them. Pulls commit all the time: the changes of a short window go into one record."""
    master = Broker(tmp_path / "m")
    replica = Replica(tmp_path / "r")
    metadata = master.processor.context.metadata
    offsets = master.offsets

    async def commits() -> int:
        await metadata.written()  # the support's topic T
        before = master.store.max_offset(METADATA_TOPIC, 0)
        for offset in range(1, 101):  # a consumer pulling and committing, two queues
            offsets.commit_offset("G1", "T", 0, offset)
            offsets.commit_offset("G1", "T", 1, offset * 2)
        offsets.commit_offset("Gone", "T", 0, 7)
        offsets.remove_group("Gone")
        assert offsets.clone_offset("G1", "G2", "T")
        await metadata.written()
        return master.store.max_offset(METADATA_TOPIC, 0) - before

    assert asyncio.run(commits()) == 1, "201 commits, a removal and a clone: one record"
    replica.copy(master.store)
    assert replica.offsets.table == master.offsets.table == {"T@G1": {0: 100, 1: 200}, "T@G2": {0: 100, 1: 200}}
    assert replica.offsets.query_offset("Gone", "T", 0) == -1


def test_offsets_are_written_after_the_window_without_anyone_waiting(tmp_path: Path) -> None:
    master = Broker(tmp_path / "m")
    metadata = master.processor.context.metadata
    metadata.offsets_delay_s = 0.01

    async def commit() -> None:
        await metadata.written()
        before = master.store.max_offset(METADATA_TOPIC, 0)
        master.offsets.commit_offset("G", "T", 3, 42)
        await wait_for(lambda: master.store.max_offset(METADATA_TOPIC, 0) == before + 1)

    asyncio.run(commit())
    replica = Replica(tmp_path / "r")
    replica.copy(master.store)
    assert replica.offsets.query_offset("G", "T", 3) == 42


def test_subscription_groups_follow_the_log_and_a_slave_writes_nothing(tmp_path: Path) -> None:
    master = Broker(tmp_path / "m")
    replica = Replica(tmp_path / "r")
    groups = master.processor.context.subscription_groups

    async def changes() -> None:
        groups.update(SubscriptionGroupConfig(group_name="Orders", retry_max_times=3, consume_broadcast_enable=False))
        groups.update(SubscriptionGroupConfig(group_name="Temp"))
        groups.delete("Temp")
        await master.processor.context.metadata.written()

    asyncio.run(changes())
    replica.copy(master.store)
    assert replica.groups.get("Orders") == groups.get("Orders") and replica.groups.get("Orders").retry_max_times == 3
    assert replica.groups.get("Temp") is None
    # the replica's own changes (a consumer auto-creating its group there) go into no log
    replica.offsets.commit_offset("Local", "T", 0, 1)
    replica.groups.find("Local")
    assert asyncio.run(replica.metadata.written()) == 0


async def wait_for(predicate: Callable[[], bool], timeout_s: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.005)


def test_the_delay_progress_follows_the_log_and_a_promoted_replica_delivers_from_there(tmp_path: Path) -> None:
    """Issue 33: a delay level's progress reached a slave only by the periodic copy, so a new master
    delivered again every parked message its predecessor had delivered since. Now a pass that
    delivers is recorded with the offsets; a replica's schedule service takes it from the log."""
    master = Broker(tmp_path / "m")
    replica = Replica(tmp_path / "r")
    delivered: list[bytes] = []

    async def deliver(msg: MessageInner) -> None:
        delivered.append(msg.body)
        await master.store.put(msg)

    levels = master.processor.context.delay_levels_ms
    schedules = [ScheduleService(store, root / "delayOffset.json", clock, levels, deliver)
                 for store, root, clock in ((master.store, tmp_path / "m", master.clock),
                                            (replica.store, tmp_path / "r", ManualClock()))]
    master.processor.context.metadata.follow_delay_progress(schedules[0])
    replica.metadata.follow_delay_progress(schedules[1])
    for i in range(3):
        assert master.send(f"parked-{i}".encode(), DELAY="1").code == ResponseCode.SUCCESS  # level 1: 1 s

    async def deliver_due() -> None:
        master.clock.advance(levels[0] + 1)
        assert await schedules[0].pass_once() == 3
        await master.processor.context.metadata.written()

    asyncio.run(deliver_due())
    assert sorted(delivered) == [b"parked-0", b"parked-1", b"parked-2"] and schedules[0].level_offsets == {1: 3}
    assert schedules[1].level_offsets == {}
    replica.copy(master.store)
    assert schedules[1].level_offsets == {1: 3}, "the replica has its master's progress, from the log alone"
    asyncio.run(schedules[1].persist(force=True))
    assert ScheduleService(replica.store, tmp_path / "r" / "delayOffset.json", ManualClock(), levels,
                           deliver).level_offsets == {1: 3}, "and keeps it across its own restart"
