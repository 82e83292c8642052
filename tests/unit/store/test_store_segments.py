"""The store's segments, consume queues, checkpoint and dispatchers: records never span segments
(BLANK padding), offsets stay global across them (replication copies and truncates segment by
segment), a queue read is served from the on-disk consume queue, and a restart re-reads only the
log after the checkpoint."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from namesrv.common.clock import ManualClock
from namesrv.protocol.message.properties import MessageIllegal
from namesrv.protocol.message.types import MessageInner
from namesrv.store.ha.transfer import ReplicationError
from namesrv.store.mapped_file_queue import segment_name, segment_paths
from namesrv.store.message_store import MessageStore
from namesrv.store.queue import consume_queue
from namesrv.store.queue.consume_queue import CQ_UNIT, topic_dir_name
from namesrv.store.records import BLANK_MAGIC, HEADER
from namesrv.store.types import Dispatcher, FlushDiskType, StoreFormatError

SEG = 4096


def open_log(path: Path, seg: int = SEG, **kw: Any) -> MessageStore:
    return MessageStore(path, FlushDiskType.SYNC_FLUSH, ManualClock(1_000), segment_size=seg, **kw)


def fill(log: MessageStore, n: int, size: int = 300, queues: int = 2, topic: str = "T", start: int = 0) -> list[int]:
    return [log.append(MessageInner(topic, i % queues, bytes([i % 251]) * size, {"i": str(i), "TAGS": f"t{i % 3}"}))
            .commit_log_offset for i in range(start, start + n)]


def log_bytes(path: Path) -> bytes:
    return b"".join(p.read_bytes() for p in segment_paths(path / "commitlog"))


def test_records_never_span_segments_and_a_full_segment_ends_in_a_blank(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    positions = fill(log, 40)
    files = segment_paths(tmp_path / "commitlog")
    assert len(files) >= 3
    assert [p.name for p in files] == [segment_name(i * SEG) for i in range(len(files))], "named by start offset"
    for full in files[:-1]:
        data = full.read_bytes()
        assert len(data) == SEG, "a full segment is exactly the segment size"
    sizes = [HEADER.size + HEADER.unpack(log_bytes(tmp_path)[p : p + HEADER.size])[1] for p in positions]
    assert all(p // SEG == (p + s - 1) // SEG for p, s in zip(positions, sizes, strict=True)), "no record spans two"
    # The bytes after the last record of segment 0 are one BLANK record.
    first_in_1 = min(p for p in positions if p >= SEG)
    last_in_0 = max(p for p in positions if p < SEG)
    blank_at = last_in_0 + sizes[positions.index(last_in_0)]
    magic, length, _ = HEADER.unpack(files[0].read_bytes()[blank_at : blank_at + HEADER.size])
    assert (magic, blank_at + HEADER.size + length, first_in_1) == (BLANK_MAGIC, SEG, SEG)
    assert [m.properties["i"] for q in (0, 1) for m in log.get_message("T", q, 0, 100)] == \
        [str(i) for i in range(0, 40, 2)] + [str(i) for i in range(1, 40, 2)]
    log.close()


def test_a_message_bigger_than_a_segment_is_refused(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    with pytest.raises(MessageIllegal, match="segment"):
        log.append(MessageInner("T", 0, b"x" * SEG))
    assert log.size_bytes() == 0 and log.queues() == {}
    log.close()


def test_queue_reads_come_from_the_consume_queue_files(tmp_path: Path) -> None:
    log = open_log(tmp_path, consume_queue_file_size=10 * CQ_UNIT.size)  # 10 entries per file
    positions = fill(log, 60, queues=1)
    files = segment_paths(tmp_path / "consumequeue" / "T" / "0")
    assert len(files) == 6 and all(f.stat().st_size == 10 * CQ_UNIT.size for f in files)
    entries = [CQ_UNIT.unpack_from(b"".join(f.read_bytes() for f in files), i * CQ_UNIT.size) for i in range(60)]
    assert [e[0] for e in entries] == positions

    got = log.read_messages("T", 0, 37, 5)
    assert [m.properties["i"] for m in got.messages] == ["37", "38", "39", "40", "41"] and got.next_offset == 42
    log.close()


def test_restart_reads_only_the_log_after_the_checkpoint(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    fill(log, 30)
    covered = log.checkpoint()
    assert covered == log.size_bytes()
    fill(log, 5, start=30)
    end = log.size_bytes()
    # A kill -9 now: no close, no checkpoint after the first one.
    again = open_log(tmp_path)
    rep = again.recovery
    assert (rep.scanned_from, rep.records, rep.valid_bytes, rep.truncated_bytes) == (covered, 5, end, 0)
    assert again.max_offset("T", 0) + again.max_offset("T", 1) == 35
    assert [m.properties["i"] for m in again.get_message("T", 1, 15, 10)] == ["31", "33"]
    assert again.append(MessageInner("T", 0, b"next")).queue_offset == 18
    again.close()


def test_consume_queue_written_past_the_checkpoint_with_its_log_torn_is_cut(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    fill(log, 10, queues=1)
    log.checkpoint()
    positions = fill(log, 3, queues=1)
    seg = segment_paths(tmp_path / "commitlog")[-1]
    os.truncate(seg, positions[1] - int(seg.name))  # the log lost its last two records, the queue did not
    again = open_log(tmp_path)
    assert again.recovery.consume_queue_entries_dropped == 2 and again.recovery.truncated_bytes == 0
    assert again.max_offset("T", 0) == 11
    assert again.append(MessageInner("T", 0, b"again")).queue_offset == 11
    again.close()


def test_missing_consume_queues_are_rebuilt_from_the_log(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    fill(log, 25, topic="%RETRY%g")
    log.close()
    shutil.rmtree(tmp_path / "consumequeue")
    (tmp_path / "checkpoint").unlink()
    again = open_log(tmp_path)
    assert again.recovery.records == 25 and again.queues() == {("%RETRY%g", 0): 13, ("%RETRY%g", 1): 12}
    assert (tmp_path / "consumequeue" / topic_dir_name("%RETRY%g") / "1").is_dir()
    again.close()


def test_a_topic_name_is_never_a_path(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append(MessageInner("../../escape", 0, b"x"))
    assert not (tmp_path.parent / "escape").exists()
    assert [p.name for p in (tmp_path / "consumequeue").iterdir()] == [topic_dir_name("../../escape")]
    log.close()
    again = open_log(tmp_path)
    assert [m.body for m in again.get_message("../../escape", 0, 0)] == [b"x"]
    again.close()


def test_replication_copies_segments_byte_for_byte_and_truncates_across_them(tmp_path: Path) -> None:
    master, slave = open_log(tmp_path / "m"), open_log(tmp_path / "s")
    fill(master, 50)
    while slave.size_bytes() < master.size_bytes():
        t = master.read_raw(slave.size_bytes(), 1000)
        slave.append_raw(t.offset, t.data)
    assert log_bytes(tmp_path / "s") == log_bytes(tmp_path / "m")
    assert [p.name for p in segment_paths(tmp_path / "s" / "commitlog")] == \
        [p.name for p in segment_paths(tmp_path / "m" / "commitlog")]
    assert slave.queues() == master.queues()
    consistent = SEG + 40  # not a boundary
    with pytest.raises(ReplicationError, match="boundary"):
        slave.truncate_to(consistent)
    point = master.get_message("T", 0, 10, 1)[0].commit_log_offset  # in the second segment or later
    assert point >= SEG
    cut = slave.truncate_to(point)
    assert cut == master.size_bytes() - point and slave.size_bytes() == point
    assert max(int(p.name) for p in segment_paths(tmp_path / "s" / "commitlog")) <= point
    assert slave.max_offset("T", 0) == 10
    slave.close()
    reopened = open_log(tmp_path / "s")
    assert reopened.size_bytes() == point and reopened.max_offset("T", 0) == 10
    t = master.read_raw(point, 1 << 20)
    reopened.append_raw(t.offset, t.data)
    assert reopened.queues() == master.queues()
    reopened.close()
    master.close()


def test_dispatchers_see_every_record_in_order_on_append_replica_and_recovery(tmp_path: Path) -> None:
    seen: list[tuple[str, int, int]] = []

    def record(fields: list[Any], pos: int, size: int) -> None:
        seen.append((fields[5].get("i", ""), pos, size))

    log = open_log(tmp_path / "m")
    log.add_dispatcher(record)
    positions = fill(log, 12)
    assert [s[0] for s in seen] == [str(i) for i in range(12)] and [s[1] for s in seen] == positions
    log.checkpoint()
    fill(log, 3, start=12)
    seen.clear()
    again = open_log(tmp_path / "m", dispatchers=[Dispatcher(record)])  # recovery hands it what it re-reads
    assert [s[0] for s in seen] == ["12", "13", "14"]
    seen.clear()
    slave = open_log(tmp_path / "s")
    slave.add_dispatcher(record)
    t = again.read_raw(0, 1 << 20)
    slave.append_raw(t.offset, t.data)
    assert [s[0] for s in seen] == [str(i) for i in range(15)], "blank padding is never dispatched"
    again.close()
    slave.close()


def test_a_single_file_log_of_the_old_layout_is_refused_clearly(tmp_path: Path) -> None:
    (tmp_path / "commitlog.dat").write_bytes(b"")
    with pytest.raises(StoreFormatError, match="single-file"):
        open_log(tmp_path)


def test_a_consume_queue_write_failure_stops_writes_and_a_restart_rebuilds_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = open_log(tmp_path)
    fill(log, 5, queues=1)
    log.checkpoint()
    def full_disk(self: consume_queue.ConsumeQueue, *a: Any) -> Any:
        raise OSError(28, "No space left on device")

    with monkeypatch.context() as full:  # both ways a consume queue writes: a run and one entry
        full.setattr(consume_queue.ConsumeQueue, "append_run", full_disk)
        full.setattr(consume_queue.ConsumeQueue, "put", full_disk)
        with pytest.raises(OSError, match="No space"):
            log.append(MessageInner("T", 0, b"in the log, not in its queue"))
    end = log.size_bytes()
    with pytest.raises(OSError, match="restart"):
        log.append(MessageInner("T", 0, b"refused"))
    assert log.size_bytes() == end and log.checkpoint() < end, "nothing written over it, the checkpoint stays"
    again = open_log(tmp_path)  # as after the restart: the record is dispatched again
    assert again.recovery.records == 1 and again.max_offset("T", 0) == 6
    assert again.get_message("T", 0, 5)[0].body == b"in the log, not in its queue"
    again.close()


def test_an_empty_slave_starts_at_its_masters_first_kept_segment(tmp_path: Path) -> None:
    master = open_log(tmp_path / "m")
    fill(master, 40)
    gone = master.commit_log.files.forget_first()  # as retention does (the file itself stays for this test)
    assert gone is not None and master.min_physical_offset() == SEG
    slave = open_log(tmp_path / "s")
    t = master.read_raw(0, 1 << 20)
    assert t.offset == SEG, "asked from 0, answered from the log's first kept offset"
    slave.append_raw(t.offset, t.data)
    while slave.size_bytes() < master.size_bytes():
        t = master.read_raw(slave.size_bytes(), 1 << 20)
        slave.append_raw(t.offset, t.data)
    assert slave.min_physical_offset() == SEG and slave.size_bytes() == master.size_bytes()
    kept = [m.properties["i"] for m in master.get_message("T", 1, 0, 100) if m.commit_log_offset >= SEG]
    assert [m.properties["i"] for m in slave.get_message("T", 1, 0, 100)] == kept
    first_kept = next(m.queue_offset for m in master.get_message("T", 1, 0, 100) if m.commit_log_offset >= SEG)
    assert slave.min_offset("T", 1) == first_kept and slave.max_offset("T", 1) == master.max_offset("T", 1)
    slave.close()
    slave = open_log(tmp_path / "s")
    assert slave.min_offset("T", 1) == first_kept and slave.max_offset("T", 1) == master.max_offset("T", 1)
    slave.close()
    master.close()


def test_opening_a_store_opens_no_descriptor_per_old_file(tmp_path: Path) -> None:
    log = open_log(tmp_path, consume_queue_file_size=2 * CQ_UNIT.size)
    fill(log, 200, queues=20)  # 20 queues of 10 entries in 5 files each, 20+ commit-log segments
    log.close()
    before = len(os.listdir("/proc/self/fd"))
    again = open_log(tmp_path, consume_queue_file_size=2 * CQ_UNIT.size)
    opened = len(os.listdir("/proc/self/fd")) - before
    # Recovery reads each queue's last entry (checked against the log's end): its last file only.
    assert opened <= 20 + 2, f"{opened} descriptors: old segments and consume-queue files open on first use"
    assert [m.properties["i"] for m in again.get_message("T", 7, 3, 2)] == ["67", "87"]
    again.close()


def test_the_key_index_is_the_second_dispatcher_and_is_rebuilt_when_it_lost_files(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    for i in range(30):
        log.append(MessageInner("T", i % 2, b"k" * 200, {"KEYS": f"key-{i}"}, msg_id=f"U{i:04d}"))
    assert [m.properties["KEYS"] for m in log.query_message("T", "key-7", 4, 0, 2**62)] == ["key-7"]
    log.close()
    again = open_log(tmp_path)
    assert again.recovery.records == 0, "the checkpoint flushed the index too: nothing to re-read"
    assert [m.msg_id for m in again.query_message("T", "U0012", 4, 0, 2**62)] == ["U0012"]
    again.close()
    (tmp_path / "index" / "checkpoint").unlink()  # its files are now unknown to it: deleted at open
    rebuilt = open_log(tmp_path)
    assert rebuilt.index.recovery.deleted and rebuilt.recovery.scanned_from == 0
    assert rebuilt.recovery.records == 30 and rebuilt.recovery.truncated_bytes == 0
    assert [m.properties["KEYS"] for m in rebuilt.query_message("T", "key-29", 4, 0, 2**62)] == ["key-29"]
    rebuilt.close()


def test_a_batch_enters_each_queue_with_one_write_and_a_failed_queue_is_entered_by_the_retry(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """dispatch_batch: records of several queues interleaved; each queue's run is one write. A queue
    whose write fails is reported with the first commit-log offset that may lack its entry, and the
    retry from there (a queue overwrites an entry it holds) leaves every entry exactly once."""
    queues = consume_queue.ConsumeQueueStore(tmp_path, 20 * CQ_UNIT.size)
    records = [([("A", "B")[i % 2], 0, i // 2, 0, 0, {}], 100 * i, 100) for i in range(8)]
    writes: list[str] = []
    real_write = consume_queue.MappedFileQueue.write

    def counted(self: Any, pos: int, data: bytes) -> Any:
        writes.append(self.dir.parent.name)
        return real_write(self, pos, data)

    with monkeypatch.context() as m:
        m.setattr(consume_queue.MappedFileQueue, "write", counted)
        assert queues.dispatch_batch(records[:4]) is None
    assert writes == ["A", "B"], "one write per queue, not one per record"

    def full_disk(self: Any, pos: int, data: bytes) -> Any:
        if self.dir.parent.name == "B":
            raise OSError(28, "No space left on device")
        return real_write(self, pos, data)

    with monkeypatch.context() as m:
        m.setattr(consume_queue.MappedFileQueue, "write", full_disk)
        missing = queues.dispatch_batch(records[4:])
    assert missing is not None and missing[0] == 500 and "No space" in str(missing[1]), "B's first record of the batch"
    assert (queues.queues[("A", 0)].max_offset, queues.queues[("B", 0)].max_offset) == (4, 2)
    for fields, pos, size in records:
        if pos >= missing[0]:
            queues.dispatch(fields, pos, size)
    for topic, positions in (("A", [0, 200, 400, 600]), ("B", [100, 300, 500, 700])):
        cq = queues.queues[(topic, 0)]
        assert [e[0] for e in cq.entries(0, 10)] == positions and cq.max_offset == 4
    queues.close()
