"""SIGKILL of a process writing the store at its most delicate points: at a segment roll (before and
after the new segment is created), after the consume queues were written and fsynced but before the
checkpoint names them, and in the middle of a retention clean-up (a segment unlinked, the queues
half corrected). The child process kills itself with a real SIGKILL at that point; the parent
reopens the store and checks that every acknowledged message is readable at the queue offset its
writer was given, that recovery reports what it cut, and that writing continues at the right
offsets."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from namesrv.common.clock import ManualClock
from namesrv.protocol.message.types import MessageInner
from namesrv.store.mapped_file_queue import segment_paths
from namesrv.store.message_store import MessageStore
from namesrv.store.types import FlushDiskType

ROOT = Path(__file__).resolve().parents[3]
SEG = 4096
QUEUES = 3

CHILD = textwrap.dedent('''
    import os, signal, sys
    from pathlib import Path
    from namesrv.protocol.message.types import MessageInner
    from namesrv.store.message_store import MessageStore
    from namesrv.store.types import FlushDiskType
    from namesrv.store import checkpoint as store_checkpoint
    from namesrv.store import mapped_file_queue
    from namesrv.store import retention as store_cleanup
    from namesrv.store.queue import consume_queue
    from namesrv.common.clock import ManualClock

    store_dir, mode, seg, queues = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])

    def die():
        sys.stdout.flush()
        os.kill(os.getpid(), signal.SIGKILL)

    calls = {"n": 0}
    if mode.startswith("roll"):  # the commit log's 4th segment: created (or about to be), nothing else
        real = mapped_file_queue.MappedFileQueue._create
        def create(self, base):
            if self.dir.name == "commitlog" and base == 3 * seg:
                if mode == "roll-before":
                    die()
                out = real(self, base)
                die()
            return real(self, base)
        mapped_file_queue.MappedFileQueue._create = create
    if mode == "checkpoint":  # the consume queues fsynced, the checkpoint about to be written (3rd time)
        real_write = store_checkpoint.StoreCheckpoint.write
        def write(self, cp):
            calls["n"] += 1
            if calls["n"] == 3:
                die()
            real_write(self, cp)
        store_checkpoint.StoreCheckpoint.write = write

    clock = ManualClock(1_700_000_000_000)
    store = MessageStore(store_dir, FlushDiskType.SYNC_FLUSH, clock, segment_size=seg, consume_queue_file_size=200)
    if mode == "cleanup-shrink":  # the segment renamed and half cut, never unlinked
        def shrink(self, fd):
            os.ftruncate(fd, os.fstat(fd).st_size // 2)
            die()
        store_cleanup.CleanCommitLogService._shrink = shrink
    if mode.startswith("cleanup"):  # a segment unlinked, the second queue's correction never happens
        real_correct = consume_queue.ConsumeQueue.correct_min_offset
        seen = {"n": 0}
        def correct(self, log_min):
            seen["n"] += 1
            if seen["n"] == 2:
                die()
            return real_correct(self, log_min)
        consume_queue.ConsumeQueue.correct_min_offset = correct
        old = (clock() - 73 * 3_600_000) / 1000
        for p in mapped_file_queue.segment_paths(store_dir / "commitlog")[:2]:
            os.utime(p, (old, old))
        store_cleanup.CleanCommitLogService(store, store_cleanup.RetentionPolicy(delete_files_interval_ms=0),
                                            lambda p: 0.80).run()
        sys.exit(3)  # not reached
    for i in range(400):
        r = store.append(MessageInner("T", i % queues, b"x" * (150 + i % 50), {"i": str(i)}))
        print(r.queue_id, r.queue_offset, i, flush=True)  # acknowledged
        if i % 20 == 19:
            store.checkpoint()
    sys.exit(3)  # the kill never came
''')


def run_child(store: Path, mode: str) -> list[tuple[int, int, int]]:
    out = subprocess.run([sys.executable, "-c", CHILD, str(store), mode, str(SEG), str(QUEUES)], cwd=ROOT,
                         capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == -signal.SIGKILL, (out.returncode, out.stderr[-2000:])
    return [(int(q), int(o), int(i)) for q, o, i in (line.split() for line in out.stdout.splitlines())]


def check_acknowledged(store: MessageStore, acked: list[tuple[int, int, int]]) -> None:
    for q, offset, i in acked:
        got = store.get_message("T", q, offset, 1)
        assert got and got[0].queue_offset == offset and got[0].properties["i"] == str(i), (q, offset, i)


def reopen(path: Path) -> MessageStore:
    return MessageStore(path, FlushDiskType.SYNC_FLUSH, ManualClock(1_700_000_000_000), segment_size=SEG,
                        consume_queue_file_size=200)


def fill_and_close(path: Path, n: int) -> list[tuple[int, int, int]]:
    store = reopen(path)
    acked = []
    for i in range(n):
        r = store.append(MessageInner("T", i % QUEUES, b"x" * (150 + i % 50), {"i": str(i)}))
        acked.append((r.queue_id, r.queue_offset, i))
    store.close()
    return acked


@pytest.mark.parametrize("mode", ["roll-before", "roll", "checkpoint"])
def test_sigkill_while_writing_loses_no_acknowledged_message(tmp_path: Path, mode: str) -> None:
    acked = run_child(tmp_path, mode)
    assert len(acked) > 20
    store = reopen(tmp_path)
    rep = store.recovery
    assert rep.scanned_from > 0, "recovery started at a checkpoint, not at the log's start"
    assert rep.scanned_from <= store.size_bytes()
    check_acknowledged(store, acked)
    if mode.startswith("roll"):
        assert len(segment_paths(tmp_path / "commitlog")) in (3, 4)
        assert store.size_bytes() <= 3 * SEG + (SEG if mode == "roll" else 0)
    # Writing goes on at the next offset of every queue.
    for q in range(QUEUES):
        assert store.append(MessageInner("T", q, b"after")).queue_offset == store.max_offset("T", q) - 1
        ours = [o for qq, o, _ in acked if qq == q]
        assert store.max_offset("T", q) > max(ours, default=-1) + 1
    store.close()
    again = reopen(tmp_path)
    check_acknowledged(again, acked)
    assert again.recovery.records == 0 and again.recovery.truncated_bytes == 0
    again.close()


@pytest.mark.parametrize("mode", ["cleanup", "cleanup-shrink"])
def test_sigkill_in_the_middle_of_a_clean_up_keeps_what_retention_keeps(tmp_path: Path, mode: str) -> None:
    acked = fill_and_close(tmp_path, 150)
    before = len(segment_paths(tmp_path / "commitlog"))
    run_child(tmp_path, mode)
    assert len(segment_paths(tmp_path / "commitlog")) == before - 1, "the first expired segment went, then the kill"
    assert any(p.name.endswith(".deleting") for p in (tmp_path / "commitlog").iterdir()) == (mode == "cleanup-shrink")
    store = reopen(tmp_path)
    assert not any(p.name.endswith(".deleting") for p in (tmp_path / "commitlog").iterdir()), "the leftover goes"
    low = store.min_physical_offset()
    assert low == SEG
    kept = []
    for q, offset, i in acked:
        got = store.get_message("T", q, offset, 1)
        if got and got[0].queue_offset == offset:
            kept.append(i)
            assert got[0].properties["i"] == str(i)
    first_kept = min(kept)
    assert kept == list(range(first_kept, 150)), "everything in the segments not deleted is there"
    for q in range(QUEUES):  # every queue corrected at the start, also those the kill left uncorrected
        first = store.get_message("T", q, store.min_offset("T", q), 1)[0]
        assert first.commit_log_offset >= low
        assert store.min_offset("T", q) > 0
    store.close()
