"""MessageStore and its commit log: queue offsets, SYNC vs ASYNC flush, group commit, and recovery
from torn tails and corrupt middles.

Recovery is checked at every truncation point of the last record and at every corrupted byte of
it: whatever a kill -9 or a bad disk leaves behind, the records before it come back intact, the
damaged tail is cut off, and appends continue at the right queue offsets. A corrupt record in the
middle is skipped and reported, and every later record stays readable.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import namesrv.store.message_store as store_mod
from namesrv.common.clock import ManualClock
from namesrv.protocol.constants import MAX_MESSAGE_SIZE
from namesrv.protocol.message.types import MessageInner
from namesrv.store.message_store import MessageStore
from namesrv.store.records import HEADER, MAGIC
from namesrv.store.types import AppendResult, FlushDiskType


def open_log(
    path: Path, flush: FlushDiskType = FlushDiskType.SYNC_FLUSH, clock: ManualClock | None = None,
    group_commit: bool = True,
) -> MessageStore:
    return MessageStore(path, flush, clock or ManualClock(), group_commit)


def put(log: MessageStore, topic: str, queue_id: int, body: bytes, props: dict[str, str] | None = None,
        msg_id: str = "") -> AppendResult:
    return log.append(MessageInner(topic, queue_id, body, dict(props or {}), msg_id))


def log_file(path: Path) -> Path:
    (path / "commitlog").mkdir(parents=True, exist_ok=True)
    return path / "commitlog" / "00000000000000000000"  # the first segment


def forget_checkpoint(path: Path) -> None:
    """As if the store crashed before its first checkpoint: the next open scans the whole log."""
    (path / "checkpoint").unlink(missing_ok=True)


def three_records(path: Path) -> tuple[int, int]:
    """Write three records (the last one to queue ("T", 1)); return (start, end) of the last."""
    log = open_log(path)
    put(log, "T", 0, b"first")
    put(log, "T", 1, b"second", {"k": "v"})
    start = log_file(path).stat().st_size
    put(log, "T", 1, b"the last record, long enough to tear in many places" * 2, {"key": "value"})
    end = log_file(path).stat().st_size
    log.close()
    return start, end


def assert_first_two_intact(log: MessageStore) -> None:
    assert [m.body for m in log.get_message("T", 0, 0)] == [b"first"]
    assert [(m.body, m.properties, m.queue_offset) for m in log.get_message("T", 1, 0)] == [(b"second", {"k": "v"}, 0)]
    assert log.queues() == {("T", 0): 1, ("T", 1): 1}


# ============================================================================ offsets and reads
def test_append_assigns_dense_queue_offsets_per_queue(tmp_path: Path) -> None:
    clock = ManualClock(1_000)
    log = open_log(tmp_path, clock=clock)
    results = []
    for i in range(10):
        clock.advance(1)
        results.append(put(log, "T", i % 2, f"m{i}".encode()))
    results.append(put(log, "U", 0, b"other topic"))

    assert [r.queue_offset for r in results if r.queue_id == 0 and r.topic == "T"] == [0, 1, 2, 3, 4]
    assert [r.queue_offset for r in results if r.queue_id == 1] == [0, 1, 2, 3, 4]
    assert results[-1].queue_offset == 0  # another topic has its own queues
    positions = [r.commit_log_offset for r in results]
    assert positions[0] == 0 and positions == sorted(set(positions)), "every record has its own commit-log offset"
    assert all(r.msg_id == "" for r in results)
    assert log.max_offset("T", 0) == 5 and log.max_offset("T", 1) == 5 and log.max_offset("nope", 0) == 0
    assert log.queues() == {("T", 0): 5, ("T", 1): 5, ("U", 0): 1}

    msgs = log.get_message("T", 1, 0)
    assert [m.body for m in msgs] == [b"m1", b"m3", b"m5", b"m7", b"m9"]
    assert [m.queue_offset for m in msgs] == list(range(5))
    assert [m.store_timestamp for m in msgs] == [1_002, 1_004, 1_006, 1_008, 1_010]
    assert [m.body for m in log.get_message("T", 1, 3, max_nums=1)] == [b"m7"]
    assert log.get_message("T", 1, 5) == [] and log.get_message("T", 1, 2, max_nums=0) == []
    log.close()


def test_msg_id_and_properties_are_kept(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    r = put(log, "T", 0, b"x", {"a": "1", "b": ""}, msg_id="client-id-1")
    assert r.msg_id == "client-id-1" and r.commit_log_offset == 0
    (m,) = log.get_message("T", 0, 0)
    assert (m.msg_id, m.properties, m.commit_log_offset) == ("client-id-1", {"a": "1", "b": ""}, 0)
    log.close()


def test_too_large_body_is_refused_and_writes_nothing(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    put(log, "T", 0, b"ok")
    size = log_file(tmp_path).stat().st_size
    with pytest.raises(ValueError, match="exceeds"):
        put(log, "T", 0, b"x" * (MAX_MESSAGE_SIZE + 1))
    assert log_file(tmp_path).stat().st_size == size and log.max_offset("T", 0) == 1
    assert put(log, "T", 0, b"next").queue_offset == 1
    log.close()


def test_concurrent_appends_get_unique_dense_offsets(tmp_path: Path) -> None:
    log = open_log(tmp_path, FlushDiskType.ASYNC_FLUSH)
    offsets: dict[int, list[int]] = {q: [] for q in range(2)}
    lock = threading.Lock()

    def writer(q: int, n: int) -> None:
        for i in range(n):
            r = put(log, "T", q, f"{q}-{i}".encode())
            with lock:
                offsets[q].append(r.queue_offset)

    threads = [threading.Thread(target=writer, args=(t % 2, 50)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    log.close()
    assert {q: sorted(o) for q, o in offsets.items()} == {0: list(range(100)), 1: list(range(100))}
    again = open_log(tmp_path)
    assert again.recovery.records == 0 and again.recovery.truncated_bytes == 0  # the close's checkpoint covers all
    assert [m.queue_offset for m in again.get_message("T", 0, 0, 1000)] == list(range(100))
    again.close()


# ============================================================================ recovery
def test_reopen_recovers_everything_and_continues_offsets(tmp_path: Path) -> None:
    _start, end = three_records(tmp_path)
    log = open_log(tmp_path)
    rep = log.recovery
    # The close wrote a checkpoint at the end: nothing is re-read, the consume queues are on disk.
    assert (rep.records, rep.valid_bytes, rep.truncated_bytes, rep.reason, rep.scanned_from) == (0, end, 0, None, end)
    assert rep.queues == {("T", 0): 1, ("T", 1): 2}
    assert put(log, "T", 1, b"fourth").queue_offset == 2
    assert put(log, "T", 0, b"fifth").queue_offset == 1
    log.close()


def test_empty_and_missing_logs_recover_to_nothing(tmp_path: Path) -> None:
    log = open_log(tmp_path / "fresh")
    assert (log.recovery.records, log.recovery.truncated_bytes, log.recovery.reason) == (0, 0, None)
    log.close()
    log = open_log(tmp_path / "fresh")  # the file now exists but is empty
    assert (log.recovery.records, log.recovery.truncated_bytes) == (0, 0)
    assert put(log, "T", 0, b"x").queue_offset == 0
    log.close()


def test_torn_last_record_at_every_truncation_point(tmp_path: Path) -> None:
    src = tmp_path / "src"
    start, end = three_records(src)
    assert end - start > HEADER.size + 50
    for cut in range(start, end):
        case = tmp_path / f"cut{cut}"
        case.mkdir()
        with open(log_file(src), "rb") as f:
            log_file(case).write_bytes(f.read(cut))

        log = open_log(case)
        rep = log.recovery
        torn = cut - start
        expected_reason = None if torn == 0 else "short header" if torn < HEADER.size else "short payload"
        assert (rep.records, rep.valid_bytes, rep.truncated_bytes, rep.reason) == (2, start, torn, expected_reason), cut
        assert log_file(case).stat().st_size == start, cut  # the torn bytes are gone from disk
        assert_first_two_intact(log)
        # The lost (never acknowledged) record's queue offset is handed out again.
        assert put(log, "T", 1, b"after recovery").queue_offset == 1, cut
        log.close()

        again = open_log(case)
        assert (again.recovery.records, again.recovery.truncated_bytes) == (0, 0), cut
        assert [m.body for m in again.get_message("T", 1, 0)] == [b"second", b"after recovery"]
        again.close()
        shutil.rmtree(case)


def test_corrupt_byte_anywhere_in_the_last_record(tmp_path: Path) -> None:
    src = tmp_path / "src"
    start, end = three_records(src)
    original = log_file(src).read_bytes()
    for i in range(start, end):
        case = tmp_path / f"flip{i}"
        case.mkdir()
        data = bytearray(original)
        data[i] ^= 0xFF
        log_file(case).write_bytes(bytes(data))

        log = open_log(case)
        rep = log.recovery
        offset = i - start
        if offset < 4:
            expected = {"bad magic"}
        elif offset < 8:  # the length: too long, longer than the file, or a checksum over the wrong bytes
            expected = {"bad length", "short payload", "bad checksum"}
        else:  # the crc itself or the payload
            expected = {"bad checksum"}
        assert rep.reason in expected, (i, rep)
        assert (rep.records, rep.valid_bytes, rep.truncated_bytes) == (2, start, end - start), i
        assert_first_two_intact(log)
        log.close()
        shutil.rmtree(case)


def test_corrupt_middle_record_is_skipped_and_every_later_record_kept(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    put(log, "T", 0, b"one")
    second = log_file(tmp_path).stat().st_size
    put(log, "T", 0, b"two")
    third = log_file(tmp_path).stat().st_size
    put(log, "T", 0, b"three")
    put(log, "T", 1, b"other queue")
    end = log_file(tmp_path).stat().st_size
    log.close()
    data = bytearray(log_file(tmp_path).read_bytes())
    data[second + HEADER.size + 1] ^= 0x01
    log_file(tmp_path).write_bytes(bytes(data))
    forget_checkpoint(tmp_path)

    log = open_log(tmp_path)
    rep = log.recovery
    assert (rep.records, rep.valid_bytes, rep.truncated_bytes, rep.reason) == (3, end, 0, None)
    assert rep.corrupt_ranges == [(second, third, "bad checksum")], "the damaged range is reported"
    assert [(m.queue_offset, m.body) for m in log.get_message("T", 0, 0)] == [(0, b"one"), (2, b"three")]
    assert log.max_offset("T", 0) == 3 and [m.body for m in log.get_message("T", 1, 0)] == [b"other queue"]
    assert put(log, "T", 0, b"four").queue_offset == 3, "offsets continue after the highest stored one"
    log.close()
    assert log_file(tmp_path).stat().st_size > end, "the middle is never truncated"


def test_garbage_between_records_is_skipped_too(tmp_path: Path) -> None:
    donor = open_log(tmp_path / "donor")  # a record at queue offset 1, to splice in after the garbage
    put(donor, "T", 0, b"placeholder")
    start = log_file(tmp_path / "donor").stat().st_size
    put(donor, "T", 0, b"after")
    donor.close()
    after = log_file(tmp_path / "donor").read_bytes()[start:]
    log = open_log(tmp_path / "log")
    put(log, "T", 0, b"before")
    log.close()
    with open(log_file(tmp_path / "log"), "ab") as f:  # zero fill, a fake record with a bad CRC, a real one
        f.write(b"\x00" * 100 + HEADER.pack(MAGIC, 5, 0) + b"fake!" + after)
    log = open_log(tmp_path / "log")
    assert [m.body for m in log.get_message("T", 0, 0)] == [b"before", b"after"]
    assert len(log.recovery.corrupt_ranges) == 1 and log.recovery.truncated_bytes == 0
    log.close()


@pytest.mark.parametrize(
    ("tail", "reason"),
    [
        (b"\x00" * 64, "bad magic"),  # a preallocated / zero-filled tail
        (HEADER.pack(MAGIC, 10, 0) + b"0123456789", "bad checksum"),
        (HEADER.pack(MAGIC, 1_000, 0) + b"short", "short payload"),
        (b"\x52\x4d", "short header"),
    ],
)
def test_garbage_tail_after_valid_records_is_truncated(tmp_path: Path, tail: bytes, reason: str) -> None:
    _start, end = three_records(tmp_path)
    with open(log_file(tmp_path), "ab") as f:
        f.write(tail)
    log = open_log(tmp_path)
    assert (log.recovery.records, log.recovery.truncated_bytes, log.recovery.reason) == (0, len(tail), reason)
    assert log_file(tmp_path).stat().st_size == end
    log.close()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    bodies=st.lists(st.binary(min_size=1, max_size=64), min_size=1, max_size=8),
    cut_fraction=st.floats(min_value=0.0, max_value=1.0),
)
def test_any_truncation_keeps_exactly_the_complete_records(bodies: list[bytes], cut_fraction: float) -> None:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d)
        log = open_log(path)
        ends = []
        for i, body in enumerate(bodies):
            put(log, "T", i % 3, body)
            ends.append(log_file(path).stat().st_size)
        log.close()
        cut = int(ends[-1] * cut_fraction)
        os.truncate(log_file(path), cut)
        forget_checkpoint(path)

        log = open_log(path)
        complete = sum(1 for e in ends if e <= cut)
        assert log.recovery.records == complete
        assert log.recovery.valid_bytes == (ends[complete - 1] if complete else 0)
        survivors = [(i % 3, body) for i, body in enumerate(bodies[:complete])]
        got = [(q, m.body) for q in range(3) for m in log.get_message("T", q, 0, 100)]
        assert sorted(got) == sorted(survivors)
        log.close()


# ============================================================================ flushing
class FsyncCounter:
    def __init__(self) -> None:
        self.calls = 0
        self._real = os.fsync

    def __call__(self, fd: int) -> None:
        self.calls += 1
        self._real(fd)


@pytest.fixture
def fsyncs(monkeypatch: pytest.MonkeyPatch) -> FsyncCounter:
    counter = FsyncCounter()
    monkeypatch.setattr(store_mod.os, "fsync", counter)
    return counter


def test_sync_flush_fsyncs_before_every_acknowledgement(tmp_path: Path, fsyncs: FsyncCounter) -> None:
    log = open_log(tmp_path, FlushDiskType.SYNC_FLUSH)
    put(log, "T", 0, b"opens the first segment")  # its creation fsyncs the directory too
    base = fsyncs.calls
    for i in range(3):
        put(log, "T", 0, b"x")
        assert fsyncs.calls == base + i + 1
    log.flush()  # nothing left to flush
    assert fsyncs.calls == base + 3
    log.close()


def test_flush_does_not_hold_writes_behind_its_fsync(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A replica acknowledges on write and flushes after: its next append must not wait for that fsync."""
    log = open_log(tmp_path, FlushDiskType.ASYNC_FLUSH)
    put(log, "T", 0, b"opens the first segment")
    in_fsync, release = threading.Event(), threading.Event()
    real = os.fsync

    def slow_fsync(fd: int) -> None:
        in_fsync.set()
        assert release.wait(10)
        real(fd)

    monkeypatch.setattr(store_mod.os, "fsync", slow_fsync)
    flusher = threading.Thread(target=log.flush)
    flusher.start()
    assert in_fsync.wait(10)
    writer = threading.Thread(target=put, args=(log, "T", 0, b"written while the flush's fsync runs"))
    writer.start()
    writer.join(5)
    written = not writer.is_alive()  # it would wait for the fsync if flush held the write lock
    release.set()
    writer.join(10)
    assert written and log.max_offset("T", 0) == 2
    flusher.join(10)
    assert not flusher.is_alive()
    monkeypatch.setattr(store_mod.os, "fsync", real)
    log.close()


def test_async_flush_acknowledges_after_write_and_fsyncs_on_flush(tmp_path: Path, fsyncs: FsyncCounter) -> None:
    log = open_log(tmp_path, FlushDiskType.ASYNC_FLUSH)
    put(log, "T", 0, b"opens the first segment")  # its creation fsyncs the directory
    log.flush()
    base = fsyncs.calls
    for _ in range(3):
        put(log, "T", 0, b"x")
    assert fsyncs.calls == base  # acknowledged without fsync
    # Written (in the page cache): readable now, and by a process that opens the file afresh.
    assert log.max_offset("T", 0) == 4
    reader = MessageStore(tmp_path)
    assert reader.recovery.records == 4
    reader.close()
    base = fsyncs.calls
    log.flush()
    assert fsyncs.calls == base + 1
    log.flush()  # clean: no second fsync
    assert fsyncs.calls == base + 1
    put(log, "T", 0, b"y")
    log.close()  # close always syncs (the log, then its checkpoint)
    assert fsyncs.calls >= base + 2


def test_short_write_rolls_the_file_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = open_log(tmp_path)
    put(log, "T", 0, b"kept")
    size = log_file(tmp_path).stat().st_size
    real_write = os.pwrite

    def short_write(fd: int, data: bytes, offset: int) -> int:
        return real_write(fd, data[: len(data) // 2], offset)

    monkeypatch.setattr(store_mod.os, "pwrite", short_write)
    with pytest.raises(OSError, match="short write"):
        put(log, "T", 0, b"torn by a full disk")
    monkeypatch.setattr(store_mod.os, "pwrite", real_write)

    assert log_file(tmp_path).stat().st_size == size and log.max_offset("T", 0) == 1
    assert put(log, "T", 0, b"next").queue_offset == 1
    log.close()
    again = open_log(tmp_path)
    assert (again.recovery.records, again.recovery.truncated_bytes) == (0, 0)
    assert [m.body for m in again.get_message("T", 0, 0)] == [b"kept", b"next"]
    again.close()


# ============================================================================ group commit
def test_concurrent_puts_share_fsyncs_and_each_is_acknowledged_after_its_own(tmp_path: Path,
                                                                              fsyncs: FsyncCounter) -> None:
    log = open_log(tmp_path)
    put(log, "T", 0, b"opens the first segment")
    base, batches = fsyncs.calls, log.commit_log.batches

    async def send_all() -> list[AppendResult]:
        return list(await asyncio.gather(*(log.put(MessageInner("T", i % 4, f"m{i}".encode())) for i in range(200))))

    results = asyncio.run(send_all())
    assert sorted((r.queue_id, r.queue_offset) for r in results) == sorted((q, o + (q == 0)) for q in range(4)
                                                                            for o in range(50))
    assert fsyncs.calls - base == log.commit_log.batches - batches < 200, "one fsync per batch, not per message"
    assert log.commit_log.fsyncs == log.commit_log.batches
    log.close()
    again = open_log(tmp_path)
    assert again.recovery.records == 0 and again.max_offset("T", 0) == 51
    again.close()


def test_a_send_s_messages_go_in_together_under_one_future(tmp_path: Path, fsyncs: FsyncCounter) -> None:
    """put_all: a send's batch is one submission (one future, not a task per message): written in
    order in one group commit, each message's result in order, an illegal one refused alone and
    raised to the caller; `checked` still writes what the caller checked."""
    log = open_log(tmp_path)
    put(log, "T", 0, b"opens the first segment")
    base, batches = fsyncs.calls, log.commit_log.batches

    async def send() -> tuple[list[AppendResult], BaseException | None, list[AppendResult]]:
        together = await log.put_all([MessageInner("T", 1, f"b{i}".encode(), {"KEYS": f"k{i}"})
                                      for i in range(32)], checked=True)
        assert log.commit_log.batches == batches + 1, "one group commit"
        raised: BaseException | None = None
        try:  # the second message cannot be stored: the first and third are, the caller is told
            await log.put_all([MessageInner("T", 2, b"ok"), MessageInner("T" * 200, 2, b"bad"),
                               MessageInner("T", 2, b"ok too")])
        except Exception as e:
            raised = e
        one = await log.put_all([MessageInner("T", 3, b"alone")])
        return together, raised, one

    results, raised, [alone] = asyncio.run(send())
    assert [(r.queue_id, r.queue_offset) for r in results] == [(1, i) for i in range(32)]
    assert [r.commit_log_offset for r in results] == sorted(r.commit_log_offset for r in results)
    assert [m.body for m in log.get_message("T", 1, 0, 100)] == [f"b{i}".encode() for i in range(32)]
    assert [m.body for m in log.query_message("T", "k7", 5, 0, 2**63 - 1)] == [b"b7"]
    assert "topic" in str(raised) and [m.body for m in log.get_message("T", 2, 0)] == [b"ok", b"ok too"]
    assert alone.queue_offset == 0 and fsyncs.calls - base <= 3
    log.close()


def test_a_group_commit_s_fsync_runs_off_the_loop_and_waits_for_a_busy_write_lock(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch's write and fsync run in a worker thread, never on the loop; while another thread
    holds the write lock (a flush, a checkpoint) the batch waits for it and is acknowledged only
    once it is written."""
    log = open_log(tmp_path)
    put(log, "T", 0, b"opens the first segment")
    where: list[int] = []
    real = os.fsync

    def fsync(fd: int) -> None:
        where.append(threading.get_ident())
        real(fd)

    monkeypatch.setattr(store_mod.os, "fsync", fsync)

    async def send() -> tuple[int, list[AppendResult], AppendResult]:
        loop_thread = threading.get_ident()
        together = await log.put_all([MessageInner("T", 0, f"m{i}".encode()) for i in range(8)])
        log.commit_log.write_lock.acquire()  # as a flush in another thread would hold it
        pending = asyncio.ensure_future(log.put(MessageInner("T", 0, b"behind the lock")))
        for _ in range(20):
            await asyncio.sleep(0)
        assert not pending.done(), "acknowledged before it could be written"
        log.commit_log.write_lock.release()
        return loop_thread, together, await pending

    loop_thread, together, behind = asyncio.run(send())
    assert where and loop_thread not in where
    assert [r.queue_offset for r in together] == list(range(1, 9)) and behind.queue_offset == 9
    assert [m.body for m in log.get_message("T", 0, 9)] == [b"behind the lock"]
    log.close()


def test_a_failed_group_fsync_fails_its_senders_cuts_the_batch_and_frees_the_lock(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = open_log(tmp_path)
    put(log, "T", 0, b"kept")
    size = log_file(tmp_path).stat().st_size
    real = os.fsync
    failing = [True]

    def fsync(fd: int) -> None:
        if failing[0]:
            raise OSError(5, "Input/output error")
        real(fd)

    monkeypatch.setattr(store_mod.os, "fsync", fsync)

    async def send() -> tuple[list[object], AppendResult]:
        # however the writer groups the five (one batch or several), every fsync fails until they are answered
        outcomes = list(await asyncio.gather(*(log.put(MessageInner("T", 0, b"x")) for _ in range(5)),
                                             return_exceptions=True))
        failing[0] = False
        return outcomes, await log.put(MessageInner("T", 0, b"after"))

    outcomes, after = asyncio.run(send())
    assert all(isinstance(o, OSError) for o in outcomes), outcomes
    assert after.queue_offset == 1 and [m.body for m in log.get_message("T", 0, 0)] == [b"kept", b"after"]
    assert log.commit_log.write_lock.acquire(blocking=False)
    log.commit_log.write_lock.release()
    log.close()
    assert log_file(tmp_path).stat().st_size > size


def test_one_fsync_per_message_mode_is_the_baseline(tmp_path: Path, fsyncs: FsyncCounter) -> None:
    log = open_log(tmp_path, group_commit=False)
    put(log, "T", 0, b"opens the first segment")
    base = fsyncs.calls

    async def send_all() -> None:
        await asyncio.gather(*(log.put(MessageInner("T", 0, b"x")) for _ in range(40)))

    asyncio.run(send_all())
    assert fsyncs.calls - base == 40
    log.close()


def test_a_failed_batch_fails_its_senders_and_writes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = open_log(tmp_path)
    put(log, "T", 0, b"kept")
    size = log_file(tmp_path).stat().st_size

    def full_disk(fd: int, data: bytes, offset: int) -> int:
        raise OSError(28, "No space left on device")

    async def send() -> list[object]:
        return list(await asyncio.gather(*(log.put(MessageInner("T", 0, b"x")) for _ in range(5)),
                                         return_exceptions=True))

    monkeypatch.setattr(store_mod.os, "pwrite", full_disk)
    outcomes = asyncio.run(send())
    assert all(isinstance(o, OSError) for o in outcomes)
    monkeypatch.undo()
    assert log_file(tmp_path).stat().st_size == size and log.max_offset("T", 0) == 1
    log.close()


def test_search_by_timestamp_and_read_by_commit_offset(tmp_path: Path) -> None:
    clock = ManualClock(1_000)
    log = open_log(tmp_path, clock=clock)
    results = []
    for i in range(5):
        clock.advance(10)
        results.append(put(log, "T", 0, f"m{i}".encode(), {"TAGS": "a"}))
    assert log.search_offset_by_timestamp("T", 0, 0) == 0
    assert log.search_offset_by_timestamp("T", 0, 1_030) == 2
    assert log.search_offset_by_timestamp("T", 0, 1_031) == 3
    assert log.search_offset_by_timestamp("T", 0, 9_999) == 5
    m = log.get_by_commit_offset(results[3].commit_log_offset)
    assert m is not None and (m.body, m.queue_offset, m.properties) == (b"m3", 3, {"TAGS": "a"})
    assert log.get_by_commit_offset(results[3].commit_log_offset + 1) is None
    assert log.get_by_commit_offset(10**9) is None
    log.close()
