"""Retention as RocketMQ's CleanCommitLogService: expired segments go at `deleteWhen`, or at any
hour above diskMaxUsedSpaceRatio; unexpired ones too above diskSpaceCleanForciblyRatio; above
diskSpaceWarningLevelRatio writes are refused (SERVICE_NOT_AVAILABLE) until space is freed. Min
offsets rise; a pull below them is OFFSET_MOVED to the new minimum; a new group is told its offset
is not found (the client then starts CONSUME_FROM_LAST_OFFSET at the max offset).

The disk's fullness is an injected probe (as the clock is), the files and deletions are real."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest

from namesrv.broker.client.consumer_offsets import ConsumerOffsetManager
from namesrv.broker.config import BrokerConfig
from namesrv.broker.processor.dispatcher import BrokerIdentity, BrokerProcessor
from namesrv.broker.topic_config_manager import TopicConfigManager
from namesrv.common.clock import ManualClock
from namesrv.protocol.codes import BrokerRequestCode as Code
from namesrv.protocol.codes import ResponseCode
from namesrv.protocol.message.types import MessageInner
from namesrv.protocol.models import TopicConfig
from namesrv.store.mapped_file_queue import segment_paths
from namesrv.store.message_store import MessageStore
from namesrv.store.queue.consume_queue import CQ_UNIT
from namesrv.store.retention import CleanCommitLogService, RetentionPolicy, disk_used_ratio
from namesrv.store.types import DiskFullError, FlushDiskType
from tests.support.broker import ADDR, Broker
from tests.support.store import HOUR_MS, at_local_hour

SEG = 4096




class Disk:
    """The store's disk fullness, as the clean-up service reads it."""

    def __init__(self, ratio: float = 0.5) -> None:
        self.ratio = ratio

    def __call__(self, path: Path) -> float:
        return self.ratio


def open_store(path: Path, clock: ManualClock, cq_file: int = 8 * CQ_UNIT.size) -> MessageStore:
    return MessageStore(path, FlushDiskType.SYNC_FLUSH, clock, segment_size=SEG, consume_queue_file_size=cq_file)


def fill(store: MessageStore, n: int, queues: int = 1) -> None:
    for i in range(n):
        store.append(MessageInner("T", i % queues, b"m" * 200, {"i": str(i)}))


def age_segments(store: MessageStore, hours: float, count: int | None = None) -> None:
    """Set the first `count` segments' last-modified time `hours` before the store's clock."""
    when = (store.clock() - hours * HOUR_MS) / 1000
    for p in segment_paths(store.dir / "commitlog")[:count]:
        os.utime(p, (when, when))


def cleaner(store: MessageStore, disk: Disk, **policy: Any) -> CleanCommitLogService:
    return CleanCommitLogService(store, RetentionPolicy(**{"delete_files_interval_ms": 0} | policy), disk)


def test_expired_segments_go_at_the_delete_hour_only(tmp_path: Path) -> None:
    clock = ManualClock(at_local_hour(3))
    store = open_store(tmp_path, clock)
    fill(store, 60)
    segments = len(segment_paths(tmp_path / "commitlog"))
    assert segments >= 4
    age_segments(store, 73)
    svc = cleaner(store, Disk(0.5))
    report = svc.run()
    assert (report.time_up, report.deleted_segments) == (False, []), "03:xx is not deleteWhen 04"
    clock.advance(HOUR_MS)
    report = svc.run()
    assert report.time_up and report.deleted_segments == [i * SEG for i in range(segments - 1)], \
        "every expired segment but the one being written"
    assert store.min_physical_offset() == (segments - 1) * SEG
    assert store.min_offset("T", 0) > 0 and store.max_offset("T", 0) == 60
    store.close()


def test_unexpired_segments_stay_even_above_the_max_used_ratio(tmp_path: Path) -> None:
    clock = ManualClock(at_local_hour(12))
    store = open_store(tmp_path, clock)
    fill(store, 60)
    age_segments(store, 73, count=2)
    age_segments(store, 1)  # all but the two oldest were written an hour ago...
    age_segments(store, 73, count=2)
    report = cleaner(store, Disk(0.80)).run()
    assert report.space_to_delete and not report.clean_immediately
    assert report.deleted_segments == [0, SEG], "expired ones go at any hour above 75%, the rest stay"
    store.close()


def test_above_the_forcible_ratio_unexpired_segments_go_in_batches_oldest_first(tmp_path: Path) -> None:
    clock = ManualClock(at_local_hour(12))
    store = open_store(tmp_path, clock)
    fill(store, 120)
    segments = len(segment_paths(tmp_path / "commitlog"))
    report = cleaner(store, Disk(0.86), delete_file_batch_max=3).run()
    assert report.clean_immediately and not report.disk_full
    assert report.deleted_segments == [0, SEG, 2 * SEG], "at most deleteFileBatchMax per run"
    assert len(segment_paths(tmp_path / "commitlog")) == segments - 3
    store.close()


def test_a_nearly_full_disk_refuses_writes_until_space_is_freed(tmp_path: Path) -> None:
    clock = ManualClock(at_local_hour(12))
    store = open_store(tmp_path, clock)
    fill(store, 10)
    disk = Disk(0.95)
    svc = cleaner(store, disk)
    assert svc.run().disk_full and store.disk_full
    size = store.size_bytes()
    with pytest.raises(DiskFullError):
        store.append(MessageInner("T", 0, b"refused"))

    async def put() -> None:
        await store.put(MessageInner("T", 0, b"refused too"))

    with pytest.raises(DiskFullError):
        asyncio.run(put())
    assert store.size_bytes() == size and store.max_offset("T", 0) == 10, "nothing of a refused write is stored"
    disk.ratio = 0.5
    assert not svc.run().disk_full
    assert store.append(MessageInner("T", 0, b"taken again")).queue_offset == 10
    store.close()


class SmallBroker(Broker):
    def __init__(self, root: Path) -> None:  # the processor harness, on a store of small segments
        self.clock = ManualClock(at_local_hour(12))
        self.topics = TopicConfigManager(root / "topics.json", self.clock)
        self.store = open_store(root / "store", self.clock)
        self.offsets = ConsumerOffsetManager(root / "offsets.json")
        self.created: list[str] = []
        self.notified: list[tuple[str, list[str]]] = []
        self.processor = BrokerProcessor(
            BrokerIdentity("DefaultCluster", "broker-a", 0, ADDR), BrokerConfig(), self.topics, self.store,
            self.offsets, self.clock, self.created.append, lambda g, c: self.notified.append((g, c)))
        self.topics.update_topic_config(TopicConfig(topic_name="T", read_queue_nums=2, write_queue_nums=2))


def test_a_send_to_a_full_disk_gets_rocketmqs_answer(tmp_path: Path) -> None:
    broker = SmallBroker(tmp_path)
    assert broker.send(b"before").code == ResponseCode.SUCCESS
    cleaner(broker.store, Disk(0.93)).run()
    answer = broker.send(b"refused")
    assert answer.code == ResponseCode.SERVICE_NOT_AVAILABLE
    assert answer.remark is not None and "the broker's disk is full [CL:  0.93" in answer.remark
    assert broker.store.max_offset("T", 0) == 1


def test_pull_below_the_new_minimum_is_moved_and_a_new_group_starts_at_the_end(tmp_path: Path) -> None:
    broker = SmallBroker(tmp_path)
    for i in range(60):
        assert broker.send(b"x" * 200, queue_id=0, n=str(i)).code == ResponseCode.SUCCESS
    q = {"consumerGroup": "NEW", "topic": "T", "queueId": 0}
    assert broker.call(Code.QUERY_CONSUMER_OFFSET, q).ext_fields == {"offset": "0"}, "nothing deleted yet: from 0"
    cleaner(broker.store, Disk(0.86)).run()
    low = broker.store.min_offset("T", 0)
    assert 0 < low < 60
    moved = broker.pull(0)
    assert moved.code == ResponseCode.PULL_OFFSET_MOVED
    assert moved.ext_fields is not None and moved.ext_fields["nextBeginOffset"] == str(low)
    assert moved.ext_fields["minOffset"] == str(low)
    assert broker.pull(low).code == ResponseCode.SUCCESS
    # RocketMQ: no offset stored and the queue's min above 0 -> QUERY_NOT_FOUND; the client's
    # CONSUME_FROM_LAST_OFFSET then starts at the max offset (not at the oldest kept message).
    assert broker.call(Code.QUERY_CONSUMER_OFFSET, q).code == ResponseCode.QUERY_NOT_FOUND
    assert broker.call(Code.GET_MIN_OFFSET, {"topic": "T", "queueId": 0}).ext_fields == {"offset": str(low)}


def test_min_offsets_survive_a_restart_and_a_kill_between_deletion_and_correction(tmp_path: Path) -> None:
    clock = ManualClock(at_local_hour(12))
    store = open_store(tmp_path, clock)
    fill(store, 90, queues=2)
    svc = cleaner(store, Disk(0.86), delete_file_batch_max=2)
    svc.run()
    lows = (store.min_offset("T", 0), store.min_offset("T", 1))
    assert min(lows) > 0
    store.close()
    again = open_store(tmp_path, clock)
    assert (again.min_offset("T", 0), again.min_offset("T", 1)) == lows
    # A kill -9 after a segment was unlinked but before the queues were corrected.
    svc = cleaner(again, Disk(0.86))
    svc.clean_consume_queues = lambda log_min: None  # type: ignore[method-assign]  # the kill lands here
    deleted = svc.delete_first_segment(0, clean_at_once=True)
    assert deleted is not None
    assert again.min_offset("T", 0) == lows[0], "not corrected yet"
    reopened = open_store(tmp_path, clock)  # as after the kill: the start corrects the queues
    first = reopened.get_message("T", 0, reopened.min_offset("T", 0), 1)[0]
    assert first.commit_log_offset >= reopened.min_physical_offset() > deleted
    assert reopened.min_offset("T", 0) > lows[0]
    before = reopened.get_message("T", 0, reopened.min_offset("T", 0) - 1, 1)
    assert before == [] or before[0].commit_log_offset >= reopened.min_physical_offset()
    assert reopened.recovery.truncated_bytes == 0
    reopened.close()
    again.close()


def test_the_used_ratio_is_dfs_not_counting_roots_reserve_as_used(tmp_path: Path) -> None:
    """RocketMQ's getDiskPartitionSpaceUsedPercent (and df): used / (used + usable), read here from
    the real filesystem; the blocks reserved for root are neither."""
    st = os.statvfs(tmp_path)
    used = (st.f_blocks - st.f_bfree) * st.f_frsize
    usable = st.f_bavail * st.f_frsize
    assert disk_used_ratio(tmp_path) == pytest.approx(used / (used + usable), abs=0.01)
    if st.f_bfree - st.f_bavail > st.f_blocks // 20:  # a large reserve: counting it as used reads fuller
        assert disk_used_ratio(tmp_path) < 1 - usable / (st.f_blocks * st.f_frsize)
