"""The store on a real small filesystem (a 12 MiB tmpfs this test mounts): a writer that keeps
writing three times the filesystem's size, with the clean-up reading the real disk usage every 16
writes, never fails a write; with the clean-up stopped the disk really fills: the write that hits it
is not acknowledged and the store refuses writes (a consume queue could not be written) until the
next clean-up frees space and dispatches the records left out again; a restart that must rebuild its
consume queues on a disk with no room left opens all the same and the clean-up resumes it; a ballast
file that pushes the disk past the
warning level gets writes refused with DiskFullError (SERVICE_NOT_AVAILABLE on the wire) until space
is freed; the last restart holds every acknowledged message that retention did not delete.

Needs root (to mount); skipped, saying so, without it."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from namesrv.common.clock import ManualClock
from namesrv.protocol.message.types import MessageInner
from namesrv.store.message_store import MessageStore
from namesrv.store.retention import CleanCommitLogService, RetentionPolicy, disk_used_ratio
from namesrv.store.types import DiskFullError, FlushDiskType
from tests.support.store import mounted_tmpfs

SIZE_MIB = 12
SEG = 512 * 1024
BODY = 2000
NOON = 1_700_049_600_000  # any hour but deleteWhen's: only the disk's fullness deletes here




@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    with mounted_tmpfs(tmp_path / "small", SIZE_MIB * 1024) as mnt:
        yield mnt


def open_store(path: Path, clock: ManualClock) -> MessageStore:
    return MessageStore(path, FlushDiskType.SYNC_FLUSH, clock, segment_size=SEG, consume_queue_file_size=64 * 1024)


def body(i: int) -> bytes:
    return (f"{i:08d}".encode() * (BODY // 8 + 1))[:BODY]


def test_a_writer_far_past_a_small_disk_never_crashes_and_keeps_what_retention_kept(small_fs: Path) -> None:
    clock = ManualClock(NOON)
    store = open_store(small_fs / "store", clock)
    clean = CleanCommitLogService(store, RetentionPolicy(delete_files_interval_ms=0), disk_used_ratio)
    acked: dict[int, int] = {}  # queue offset -> message number
    deleted: list[int] = []
    refused = 0
    unacknowledged: set[bytes] = set()
    for i in range(3 * SIZE_MIB * 1024 * 1024 // BODY):  # three times the filesystem's size
        try:
            result = store.append(MessageInner("T", 0, body(i), {"i": str(i)}))
        except DiskFullError:
            refused += 1
        except OSError as e:  # the clean-up keeps ahead of this writer: no write may fail
            raise AssertionError(f"write {i} failed: {e}") from e
        else:
            assert result.queue_offset not in acked
            acked[result.queue_offset] = i
        if i % 16 == 0:
            report = clean.run()
            deleted += report.deleted_segments
        clock.advance(10)
    assert deleted, "the clean-up deleted segments above diskSpaceCleanForciblyRatio"
    assert len(acked) > SIZE_MIB * 1024 * 1024 // BODY, "it kept writing past the disk's size"

    def fill_up(store: MessageStore) -> bool:
        """No clean-up: the disk really fills; the write that hits it is not acknowledged, and the
        store refuses writes while a consume queue could not be written."""
        for _ in range(SIZE_MIB * 1024 * 1024 // BODY):
            n = len(acked)
            try:
                result = store.append(MessageInner("T", 0, body(n), {"i": str(n)}))
            except OSError:  # not acknowledged; stored or not (at least once), never half
                unacknowledged.add(body(n))
                break
            acked[result.queue_offset] = n
        else:
            raise AssertionError("a full disk must fail a write")
        if store.dispatch_failed is not None:  # the log took it, a consume queue did not: refused from now on
            with pytest.raises(OSError):
                store.append(MessageInner("T", 0, b"refused"))
        return store.dispatch_failed is not None

    cut_short = fill_up(store)
    report = clean.run()  # retention frees space and the records left out are dispatched again
    assert report.deleted_segments and report.dispatch_resumed == cut_short and store.dispatch_failed is None
    assert store.max_offset("T", 0) >= max(acked) + 1
    taken = store.append(MessageInner("T", 0, body(len(acked))))
    acked[taken.queue_offset] = len(acked)

    fill_up(store)
    store.close()
    # A restart that must rebuild the consume queues (lost with the checkpoint) on a disk with no
    # room left: the store opens all the same, refusing writes; the clean-up frees space, the
    # queues are rebuilt and writes are taken again.
    shutil.rmtree(small_fs / "store" / "consumequeue")
    (small_fs / "store" / "checkpoint").unlink()
    ballast = small_fs / "ballast"
    stat = os.statvfs(small_fs)
    ballast.write_bytes(b"\0" * (stat.f_bavail * stat.f_frsize))
    store = open_store(small_fs / "store", clock)
    assert store.dispatch_failed is not None, "recovery could not write every consume-queue entry"
    with pytest.raises(OSError):
        store.append(MessageInner("T", 0, b"refused"))
    clean = CleanCommitLogService(store, RetentionPolicy(delete_files_interval_ms=0), disk_used_ratio)
    report = clean.run()
    assert report.deleted_segments and report.dispatch_resumed and store.dispatch_failed is None
    assert store.max_offset("T", 0) >= max(acked) + 1
    ballast.unlink()
    clean.run()

    # something else fills the disk past diskSpaceWarningLevelRatio, more than one segment's deletion frees
    stat = os.statvfs(small_fs)
    ballast.write_bytes(b"\0" * max(0, stat.f_bavail * stat.f_frsize - SEG // 2))
    one_at_a_time = CleanCommitLogService(store, RetentionPolicy(delete_files_interval_ms=0, delete_file_batch_max=1),
                                          disk_used_ratio)
    report = one_at_a_time.run()
    assert report.disk_full and report.deleted_segments and store.disk_full
    size = store.size_bytes()
    with pytest.raises(DiskFullError):
        store.append(MessageInner("T", 0, b"refused"))
    assert store.size_bytes() == size
    ballast.unlink()
    clean.run()
    assert not store.disk_full
    last = store.append(MessageInner("T", 0, body(-1)))
    acked[last.queue_offset] = -1
    store.close()

    again = open_store(small_fs / "store", clock)  # a restart: recovery, then every kept message
    try:
        low, high = again.min_offset("T", 0), again.max_offset("T", 0)
        assert high == max(acked) + 1, "the last write was acknowledged"
        assert low > 0, "retention advanced the minimum"
        offset = low
        while offset < high:
            batch = again.get_message("T", 0, offset, 32)
            assert batch, f"queue offset {offset} between min {low} and max {high} unreadable"
            for m in batch:
                if m.queue_offset in acked:
                    assert m.body == body(acked[m.queue_offset])
                else:
                    assert m.body in unacknowledged, f"queue offset {m.queue_offset}: a message nobody sent"
            offset = batch[-1].queue_offset + 1
    finally:
        again.close()
