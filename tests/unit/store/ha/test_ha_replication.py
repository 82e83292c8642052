"""Replication's pure parts on real files: a slave's commit log copied from its master's by raw
transfers is byte-for-byte the master's, indexed as the master's own recovery would; it resumes
from what it holds after a restart; a gap, a disagreeing overlap or a damaged batch is refused and
changes nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from namesrv.common.clock import ManualClock
from namesrv.protocol.message.types import MessageInner
from namesrv.store.ha.transfer import ReplicaAhead, ReplicaConflict, ReplicaGap, ReplicationError
from namesrv.store.mapped_file_queue import segment_paths
from namesrv.store.message_store import MessageStore
from namesrv.store.types import FlushDiskType


def log_bytes(log: MessageStore) -> bytes:
    """The whole commit log, its segments end to end."""
    return b"".join(p.read_bytes() for p in segment_paths(log.dir / "commitlog"))


def open_log(path: Path) -> MessageStore:
    return MessageStore(path, FlushDiskType.SYNC_FLUSH, ManualClock())


def fill(log: MessageStore, n: int, start: int = 0, size: int = 100) -> None:
    for i in range(start, start + n):
        log.append(MessageInner(f"T{i % 3}", i % 2, bytes([i % 251]) * (size + i % 7), {"KEYS": f"k{i}"}, f"id{i}"))


def copy_all(master: MessageStore, slave: MessageStore, max_bytes: int) -> int:
    """Transfers until the slave holds everything; returns the number of transfers."""
    calls = 0
    while True:
        t = master.read_raw(slave.size_bytes(), max_bytes)
        calls += 1
        if not t.data:
            return calls
        slave.append_raw(t.offset, t.data)


def same_content(master: MessageStore, slave: MessageStore) -> None:
    assert log_bytes(slave) == log_bytes(master)
    assert slave.queues() == master.queues()
    for (topic, q), n in master.queues().items():
        assert [(m.queue_offset, m.commit_log_offset, m.body, m.msg_id, m.properties)
                for m in slave.get_message(topic, q, 0, n)] == \
               [(m.queue_offset, m.commit_log_offset, m.body, m.msg_id, m.properties)
                for m in master.get_message(topic, q, 0, n)]


def test_slave_copies_master_byte_for_byte_in_whole_records(tmp_path: Path) -> None:
    master, slave = open_log(tmp_path / "m"), open_log(tmp_path / "s")
    fill(master, 50)
    calls = copy_all(master, slave, max_bytes=1000)
    assert calls > 5  # the cap was applied: several transfers, each of whole records
    same_content(master, slave)
    # a slave's own recovery rebuilds the same index from the copied file
    slave.close()
    again = open_log(tmp_path / "s")
    assert again.recovery.truncated_bytes == 0
    same_content(master, again)


def test_record_bigger_than_the_cap_travels_alone(tmp_path: Path) -> None:
    master = open_log(tmp_path / "m")
    fill(master, 1, size=5000)
    t = master.read_raw(0, 100)
    assert len(t.data) == master.size_bytes() == t.master_max


def test_restarted_slave_resumes_from_what_it_holds(tmp_path: Path) -> None:
    master, slave = open_log(tmp_path / "m"), open_log(tmp_path / "s")
    fill(master, 20)
    copy_all(master, slave, 1 << 20)
    held = slave.size_bytes()
    slave.close()
    fill(master, 10, start=20)
    slave = open_log(tmp_path / "s")
    assert slave.size_bytes() == held
    t = master.read_raw(slave.size_bytes(), 1 << 20)
    assert t.offset == held and len(t.data) == master.size_bytes() - held  # only what is new
    slave.append_raw(t.offset, t.data)
    same_content(master, slave)
    assert slave.max_offset("T0", 0) == master.max_offset("T0", 0)


def test_gap_is_refused_and_changes_nothing(tmp_path: Path) -> None:
    master, slave = open_log(tmp_path / "m"), open_log(tmp_path / "s")
    fill(master, 10)
    first = master.read_raw(0, 300)
    second = master.read_raw(len(first.data), 300)
    with pytest.raises(ReplicaGap):
        slave.append_raw(second.offset, second.data)
    assert slave.size_bytes() == 0 and log_bytes(slave) == b""


def test_overlap_that_agrees_is_skipped_one_that_disagrees_is_refused(tmp_path: Path) -> None:
    master, slave = open_log(tmp_path / "m"), open_log(tmp_path / "s")
    fill(master, 10)
    whole = master.read_raw(0, 1 << 20)
    half = master.read_raw(0, len(whole.data) // 2)
    slave.append_raw(0, half.data)
    assert slave.append_raw(0, whole.data)  # the first half again, then the rest: only the rest written
    same_content(master, slave)
    assert slave.append_raw(0, half.data) == set()  # all held already: nothing to do
    other = open_log(tmp_path / "o")  # a log that diverged: different records at the same offsets
    other.append(MessageInner("X", 0, b"x" * 50))
    diverged = other.read_raw(0, 1 << 20)
    before = log_bytes(slave)
    with pytest.raises(ReplicaConflict):
        slave.append_raw(0, diverged.data)
    assert log_bytes(slave) == before


@pytest.mark.parametrize("damage", ["flip", "cut"])
def test_damaged_batch_is_refused_whole(tmp_path: Path, damage: str) -> None:
    master, slave = open_log(tmp_path / "m"), open_log(tmp_path / "s")
    fill(master, 5)
    data = bytearray(master.read_raw(0, 1 << 20).data)
    if damage == "flip":
        data[len(data) // 2] ^= 0xFF
    else:
        del data[-3:]
    with pytest.raises(ReplicationError):
        slave.append_raw(0, bytes(data))
    assert slave.size_bytes() == 0 and slave.queues() == {} and log_bytes(slave) == b""


def test_slave_ahead_of_master_is_told_so(tmp_path: Path) -> None:
    master = open_log(tmp_path / "m")
    fill(master, 2)
    with pytest.raises(ReplicaAhead):
        master.read_raw(master.size_bytes() + 1, 100)
    assert master.read_raw(master.size_bytes(), 100).data == b""


def test_append_without_fsync_is_flushed_later(tmp_path: Path) -> None:
    """A slave acknowledging on write (slave_ack_on_write) appends without fsync, then flushes."""
    master, slave = open_log(tmp_path / "m"), open_log(tmp_path / "s")
    fill(master, 5)
    t = master.read_raw(0, 1 << 20)
    before = slave.commit_log.fsyncs
    slave.append_raw(t.offset, t.data, fsync=False)
    assert slave.commit_log.fsyncs == before and slave.size_bytes() == master.size_bytes()  # readable at once
    slave.flush()
    assert slave.commit_log.fsyncs == before + 1
    slave.append_raw(master.size_bytes(), b"")  # nothing new: nothing written, nothing to flush
    slave.flush()
    assert slave.commit_log.fsyncs == before + 1


def test_truncate_to_a_consistent_point_then_copy_again(tmp_path: Path) -> None:
    """An old master's unreplicated tail is cut back to where the logs agree; what it cut is gone from
    every queue's index, the log's recovery sees the same, and copying resumes from there."""
    master, old = open_log(tmp_path / "m"), open_log(tmp_path / "old")
    fill(master, 10)
    copy_all(master, old, 1 << 20)
    point = old.size_bytes()
    fill(old, 7, start=100)  # written on the old master only, never replicated
    fill(master, 5, start=10)  # the new master's own records from the same point on
    with pytest.raises(ReplicaConflict):
        old.append_raw(*_next(master, point))
    with pytest.raises(ReplicationError):
        old.truncate_to(point + 1)  # not a record boundary
    before = old.queues()
    assert old.truncate_to(point) > 0
    assert old.size_bytes() == point and sum(old.queues().values()) == 10 < sum(before.values())
    copy_all(master, old, 1 << 20)
    same_content(master, old)
    old.close()
    reopened = open_log(tmp_path / "old")
    same_content(master, reopened)
    assert reopened.truncate_to(reopened.size_bytes()) == 0


def _next(master: MessageStore, offset: int) -> tuple[int, bytes]:
    t = master.read_raw(offset, 1 << 20)
    return t.offset, t.data
