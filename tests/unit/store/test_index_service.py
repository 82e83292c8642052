"""The message index (namesrv.store.index.index_service): keys and unique keys to commit-log offsets,
files of bounded size, time ranges, and what a crash leaves: a file rolled back to its checkpoint,
a file made after it deleted, a torn one rebuilt, and the commit log re-feeding the index from the
index's own end offset."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from namesrv.common.clock import ManualClock
from namesrv.protocol.message.types import MessageInner
from namesrv.store.index import index_service
from namesrv.store.index.index_file import ENTRY, HEADER, SLOT, IndexFile, key_hash
from namesrv.store.index.index_service import CHECKPOINT, IndexRecovery, IndexService, message_keys
from namesrv.store.message_store import MessageStore


def rec(topic: str, ts: int, uniq: str = "", keys: str | None = None, sys_flag: int = 0) -> list[Any]:
    props = {"KEYS": keys} if keys is not None else {}
    return [topic, 0, 0, ts, uniq, props, b"", 0, sys_flag, 0, "", 0]


def feed(index: IndexService, records: list[list[Any]], start: int = 0, size: int = 100) -> int:
    pos = start
    for fields in records:
        index.dispatch(fields, pos, size)
        pos += size
    return pos


def test_message_keys_uniq_then_keys_once_and_rollback_skipped() -> None:
    assert message_keys(rec("T", 1, "U1", "a b  a")) == ["U1", "a", "b"]
    assert message_keys(rec("T", 1, "", "")) == []
    assert message_keys(rec("T", 1, "U1", "a", sys_flag=0xC)) == []  # TRANSACTION_ROLLBACK_TYPE
    assert message_keys(rec("T", 1, "U1", "a", sys_flag=0x4)) == ["U1", "a"]  # prepared: indexed


@settings(max_examples=40, deadline=None)
@given(records=st.lists(st.tuples(st.sampled_from(["T", "U"]), st.sampled_from(["", "u1", "u2", "u3"]),
                                  st.one_of(st.none(), st.sampled_from(["", "a", "a b", "b c a", "c"])),
                                  st.sampled_from([0, 0x4, 0xC])), max_size=40),
       cuts=st.lists(st.integers(1, 12), max_size=12))
def test_a_batch_indexes_exactly_as_its_records_one_by_one(records: list[tuple[str, str, str | None, int]],
                                                             cuts: list[int]) -> None:
    """The writer's dispatch_batch (one lock and one header write per file) files every key and
    rolls files where dispatching each record alone does, and both reopen alike."""
    fields = [rec(topic, 100 + i, uniq, keys, flag) for i, (topic, uniq, keys, flag) in enumerate(records)]
    with tempfile.TemporaryDirectory() as one_dir, tempfile.TemporaryDirectory() as batch_dir:
        one, batched = IndexService(one_dir, slots=4, entries=5), IndexService(batch_dir, slots=4, entries=5)
        feed(one, fields)
        at = 0
        for n in [*cuts, len(fields)]:
            batched.dispatch_batch([(f, 100 * (at + i), 100) for i, f in enumerate(fields[at:at + n])])
            at = min(at + n, len(fields))
        batched.dispatch_batch([(f, 100 * i, 100) for i, f in enumerate(fields)])  # all seen already: skipped
        for index in (one, batched):
            index.flush()
            index.close()
        reopened = [IndexService(d, slots=4, entries=5) for d in (one_dir, batch_dir)]
        assert one.max_phy_offset == batched.max_phy_offset == 100 * len(fields)
        for a, b in ((one, batched), tuple(reopened)):
            assert a.max_phy_offset == b.max_phy_offset
            assert a.file_count() == b.file_count() and a.last_update() == b.last_update()
            for topic in ("T", "U"):
                for key in ("u1", "u2", "u3", "a", "b", "c"):
                    assert a.query(topic, key, 100) == b.query(topic, key, 100), (topic, key)
        assert sorted(p.name for p in Path(one_dir).iterdir()) == sorted(p.name for p in Path(batch_dir).iterdir())
        for index in reopened:
            index.close()


def test_query_by_key_topic_time_range_and_limit(tmp_path: Path) -> None:
    index = IndexService(tmp_path, slots=16, entries=1000)
    feed(index, [rec("T", 10 + i, f"U{i}", f"k{i % 3} all") for i in range(30)] + [rec("Other", 50, "X", "k0")])
    assert index.query("T", "U7", 10) == [700]
    assert index.query("T", "k1", 100) == [100 * i for i in range(28, -1, -3)]  # newest first
    assert index.query("T", "all", 5) == [2900, 2800, 2700, 2600, 2500]
    assert index.query("T", "all", 100, begin=15, end=17) == [700, 600, 500]
    assert index.query("Other", "k0", 10) == [3000]
    assert index.query("T", "missing", 10) == []
    assert index.max_phy_offset == 3100
    assert index.last_update() == (50, 3100)


def test_files_roll_when_full_and_queries_span_them(tmp_path: Path) -> None:
    index = IndexService(tmp_path, slots=4, entries=5)
    feed(index, [rec("T", i, "", "same") for i in range(12)])
    assert index.file_count() == 3
    assert index.query("T", "same", 100) == [100 * i for i in range(11, -1, -1)]
    assert sorted(p.name for p in tmp_path.glob("*.idx")) == [f"{0:020d}.idx", f"{500:020d}.idx", f"{1000:020d}.idx"]


def test_flush_close_reopen_resumes_from_its_end(tmp_path: Path) -> None:
    index = IndexService(tmp_path, slots=8, entries=50)
    end = feed(index, [rec("T", i, f"U{i}", "k") for i in range(10)])
    index.close()
    again = IndexService(tmp_path, slots=8, entries=50)
    assert again.recovery.resume_offset == end and not again.recovery.rolled_back
    assert again.query("T", "U3", 5) == [300]
    feed(again, [rec("T", 0, "U0", "k")], start=0)  # already indexed: skipped
    assert again.query("T", "k", 100) == [100 * i for i in range(9, -1, -1)]


def test_kill_after_checkpoint_rolls_back_then_refeeds(tmp_path: Path) -> None:
    index = IndexService(tmp_path, slots=8, entries=50)
    mid = feed(index, [rec("T", i, f"U{i}", "k") for i in range(5)])
    index.flush()
    end = feed(index, [rec("T", i, f"V{i}", "k") for i in range(5)], start=mid)
    # a kill -9: nothing more reaches the checkpoint, the mapped pages are all there
    again = IndexService(tmp_path, slots=8, entries=50)
    assert again.recovery.rolled_back == [f"{0:020d}.idx"] and again.recovery.resume_offset == mid
    assert again.query("T", "V1", 5) == [] and again.query("T", "k", 100) == [400, 300, 200, 100, 0]
    assert feed(again, [rec("T", i, f"V{i}", "k") for i in range(5)], start=mid) == end
    assert again.query("T", "V1", 5) == [mid + 100]
    assert again.query("T", "k", 100) == [100 * i for i in range(9, -1, -1)]


def test_file_made_after_the_checkpoint_is_deleted(tmp_path: Path) -> None:
    index = IndexService(tmp_path, slots=4, entries=3)
    mid = feed(index, [rec("T", i, "", "k") for i in range(3)])
    index.flush()
    feed(index, [rec("T", i, "", "k") for i in range(3)], start=mid)  # a second file, never checkpointed
    again = IndexService(tmp_path, slots=4, entries=3)
    assert again.recovery.deleted == [f"{mid:020d}.idx"] and again.recovery.resume_offset == mid
    assert again.query("T", "k", 10) == [200, 100, 0]


def test_torn_entry_past_the_checkpoint_rebuilds_the_file(tmp_path: Path) -> None:
    index = IndexService(tmp_path, slots=4, entries=20)
    mid = feed(index, [rec("T", i, "", "k") for i in range(3)])
    index.flush()
    feed(index, [rec("T", 9, "", "k")], start=mid)
    path = tmp_path / f"{0:020d}.idx"
    # a machine crash: the slot's page reached the disk, the new entry's did not
    with open(path, "r+b") as f:
        f.seek(HEADER.size + SLOT.size * 4 + ENTRY.size * 4)
        f.write(b"\x00" * ENTRY.size)
    again = IndexService(tmp_path, slots=4, entries=20)
    assert again.recovery.deleted == [path.name] and again.recovery.resume_offset == 0
    assert again.query("T", "k", 10) == []


def test_truncate_forgets_what_was_cut(tmp_path: Path) -> None:
    index = IndexService(tmp_path, slots=4, entries=3)
    feed(index, [rec("T", i, f"U{i}", "") for i in range(7)])
    assert index.file_count() == 3
    index.truncate_to(350)
    assert index.max_phy_offset == 350 and index.file_count() == 2
    feed(index, [rec("T", 1, "W", "")], start=350)
    again_end = index.max_phy_offset
    index.close()
    again = IndexService(tmp_path, slots=4, entries=3)
    assert again.recovery.resume_offset == again_end and again.query("T", "W", 3) == [350]


def test_index_file_rejects_a_bad_header(tmp_path: Path) -> None:
    path = tmp_path / f"{0:020d}.idx"
    IndexFile(path, 4, 4, begin_phy_offset=0).close()
    with open(path, "r+b") as f:
        f.write(b"XXXX")
    (tmp_path / CHECKPOINT).write_text(json.dumps({"files": {path.name: [0, 0, 0, 0, 0]}}))
    again = IndexService(tmp_path, slots=4, entries=4)
    assert again.recovery.deleted == [path.name]


def test_commit_log_indexes_appends_and_rebuilds_after_a_kill(tmp_path: Path) -> None:
    clock = ManualClock(1000)
    log = MessageStore(tmp_path, clock=clock)
    results = [log.append(MessageInner("T", i % 2, b"x", {"KEYS": f"order-{i % 5}"}, f"ID{i}")) for i in range(20)]
    assert log.index.query("T", "ID7", 1) == [results[7].commit_log_offset]
    log.index.flush()
    more = [log.append(MessageInner("T", 0, b"y", {"KEYS": "late"}, f"L{i}")) for i in range(3)]
    # a kill -9: `log` is never closed, so nothing checkpoints the last three
    again = MessageStore(tmp_path, clock=clock)
    assert again.index.recovery.rolled_back
    assert again.index.query("T", "late", 10) == [r.commit_log_offset for r in reversed(more)]
    assert again.index.query("T", "order-2", 10) == [results[i].commit_log_offset for i in (17, 12, 7, 2)]
    assert key_hash("T", "late") != key_hash("U", "late")
    again.close()


WRITER = """
import sys
from namesrv.protocol.message.types import MessageInner
from namesrv.store.message_store import MessageStore
log = MessageStore(sys.argv[1])
start = int(sys.argv[2])
for i in range(start, start + 100_000):
    log.append(MessageInner("T", i % 4, b"body", {"KEYS": f"k{i} shared"}, f"U{i}"))
    print(i, flush=True)  # acknowledged: on disk (SYNC_FLUSH)
    if i % 37 == 0:
        log.index.flush()
"""


def test_sigkill_mid_write_loses_no_acknowledged_key(tmp_path: Path) -> None:
    """A real kill -9 of a process appending and checkpointing the index, three times at different
    points: every acknowledged message is found again by its key and by its unique key."""
    import signal
    import subprocess
    import sys

    acked: list[int] = []
    recoveries: list[IndexRecovery] = []
    for round_, kill_after in enumerate((150, 333, 71)):
        start = acked[-1] + 1 if acked else 0
        proc = subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path), str(start)], stdout=subprocess.PIPE,
                                text=True, cwd=Path(__file__).parents[3])
        assert proc.stdout is not None
        for _ in range(kill_after):
            acked.append(int(proc.stdout.readline()))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        again = MessageStore(tmp_path)
        recoveries.append(again.index.recovery)
        missing = [i for i in acked if not again.query_message("T", f"k{i}", 1, 0, 2**63 - 1)
                   or not again.query_message("T", f"U{i}", 1, 0, 2**63 - 1)]
        assert not missing, (round_, missing[:5], again.index.recovery)
        assert len(again.query_message("T", "shared", 64, 0, 2**63 - 1)) == 64
        again.close()
    assert any(r.rolled_back for r in recoveries), recoveries  # a kill between checkpoints was rolled back


def test_delete_expired_drops_files_below_the_log_minimum(tmp_path: Path) -> None:
    index = IndexService(tmp_path, slots=4, entries=3)
    feed(index, [rec("T", i, "", "k") for i in range(8)])  # files from 0, 300, 600
    assert index.delete_expired(299) == []
    assert index.delete_expired(650) == [f"{0:020d}.idx", f"{300:020d}.idx"]
    assert index.query("T", "k", 10) == [700, 600] and index.file_count() == 1
    assert index.delete_expired(10**9) == []  # the last file always stays
    index.close()
    again = IndexService(tmp_path, slots=4, entries=3)
    assert again.file_count() == 1 and not again.recovery.deleted and again.recovery.resume_offset == 800


def test_an_expired_file_left_by_a_crash_is_deleted_alone(tmp_path: Path) -> None:
    index = IndexService(tmp_path, slots=4, entries=3)
    feed(index, [rec("T", i, "", "k") for i in range(8)])
    index.flush()
    stray = (tmp_path / f"{0:020d}.idx").read_bytes()
    index.delete_expired(650)
    index.close()
    (tmp_path / f"{0:020d}.idx").write_bytes(stray)  # the deletion a crash interrupted
    again = IndexService(tmp_path, slots=4, entries=3)
    assert again.recovery.deleted == [f"{0:020d}.idx"] and again.recovery.resume_offset == 800
    assert again.query("T", "k", 10) == [700, 600]


def test_a_log_cut_back_forgets_the_cut_messages_keys(tmp_path: Path) -> None:
    """A returning old master cuts its unreplicated tail (MessageStore.truncate_to): the keys of the cut
    messages find nothing, and a message later written at the same offset is found once."""
    log = MessageStore(tmp_path, clock=ManualClock())
    kept = log.append(MessageInner("T", 0, b"kept", {"KEYS": "k"}, "U0"))
    cut = log.append(MessageInner("T", 0, b"cut", {"KEYS": "k gone"}, "U1"))
    log.truncate_to(cut.commit_log_offset)
    assert log.query_message("T", "gone", 10, 0, 2**63 - 1) == []
    assert [m.body for m in log.query_message("T", "k", 10, 0, 2**63 - 1)] == [b"kept"]
    again = log.append(MessageInner("T", 0, b"new", {"KEYS": "k"}, "U2"))
    assert again.commit_log_offset == cut.commit_log_offset
    assert [m.body for m in log.query_message("T", "k", 10, 0, 2**63 - 1)] == [b"new", b"kept"]
    assert kept.commit_log_offset < again.commit_log_offset
    log.close()
    reopened = MessageStore(tmp_path, clock=ManualClock())
    assert [m.body for m in reopened.query_message("T", "k", 10, 0, 2**63 - 1)] == [b"new", b"kept"]
    reopened.close()


def test_files_grow_from_small_to_the_bound(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(index_service, "MIN_ENTRIES", 2)
    index = IndexService(tmp_path, slots=8, entries=16)
    feed(index, [rec("T", i, "", "k") for i in range(40)])
    sizes = [f.entries for f in index._files]
    assert sizes == [2, 4, 8, 16, 16] and [f.slots for f in index._files] == [1, 2, 4, 8, 8]
    assert index.query("T", "k", 100) == [100 * i for i in range(39, -1, -1)]
    index.close()
    again = IndexService(tmp_path, slots=8, entries=16)
    assert [f.entries for f in again._files] == sizes and again.query("T", "k", 3) == [3900, 3800, 3700]


def test_a_full_disk_leaves_records_unindexed_never_fails_a_write(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    import errno

    import namesrv.store.index.index_file as index_file

    def full(fd: int, offset: int, length: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    log = MessageStore(tmp_path, clock=ManualClock())
    monkeypatch.setattr(index_file.os, "posix_fallocate", full)
    unindexed = log.append(MessageInner("T", 0, b"x", {"KEYS": "k"}, "U0"))  # acknowledged: in the log
    assert log.get_by_commit_offset(unindexed.commit_log_offset) is not None
    assert log.query_message("T", "k", 5, 0, 2**63 - 1) == [] and list((tmp_path / "index").glob("*.idx")) == []
    monkeypatch.undo()
    log.append(MessageInner("T", 0, b"y", {"KEYS": "k"}, "U1"))
    assert [m.body for m in log.query_message("T", "k", 5, 0, 2**63 - 1)] == [b"y"]
    log.close()
