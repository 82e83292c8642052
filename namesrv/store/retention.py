"""Retention (RocketMQ's CleanCommitLogService and CleanConsumeQueueService): delete the oldest
commit-log segments, then the consume-queue files that only point into them, and raise every
queue's min offset.

A run (every cleanResourceInterval) deletes when one of these holds, as RocketMQ does:
- it is one of the `deleteWhen` hours (local time) — segments last written more than
  `fileReservedTime` hours ago go;
- the disk holding the store is fuller than `diskMaxUsedSpaceRatio` — the same, whatever the hour;
- it is fuller than `diskSpaceCleanForciblyRatio` (or `diskSpaceWarningLevelRatio`) — segments go
  even before they expire (RocketMQ's cleanImmediately, with cleanFileForciblyEnable on).
Above `diskSpaceWarningLevelRatio` the store is also marked disk-full and refuses writes (a send is
answered SERVICE_NOT_AVAILABLE, as RocketMQ's) until a run finds the disk below it again.

The settings are read again at each run (`BrokerConfig.retention_policy()` of the broker's live config, which
UPDATE_BROKER_CONFIG changes), as RocketMQ's CleanCommitLogService reads messageStoreConfig each time.

At most `deleteFileBatchMax` (10) segments go per run, oldest first, never the one being written,
and a run stops at the first segment that may not go (no hole in the middle of the log), pausing
`deleteCommitLogFilesInterval` between two. It runs in a worker thread: the write lock is held only
to take a segment out of the table and to correct one queue at a time, never across an unlink, so
sends and reads wait for memory work only.

Crash safety: a segment is taken out of the table, renamed `<name>.deleting` (its directory
fsynced: from then on a restart no longer sees it), cut from its end 16 MiB at a time (the kernel
frees its page cache in small steps instead of one unlink stalling the broker's CPU), unlinked, then
the consume queues are corrected. A kill -9 in between leaves either the segment (deleted by the next
run) or consume-queue entries pointing below the log's start, which the next start corrects
(`ConsumeQueueStore.correct_min_offsets`); nothing still inside retention is touched.

Where we differ from RocketMQ 5.3: one store path (no multi-path commit log), no manual
`deleteExpiredFiles` admin trigger, no redelete of hanged files (we do not memory-map); the index
files are the index dispatcher's to drop (`on_min_offset`: IndexService.delete_expired).
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from namesrv.common.persist import fsync_dir

if TYPE_CHECKING:
    from namesrv.store.message_store import MessageStore

log = logging.getLogger(__name__)

DELETE_FILE_BATCH_MAX = 10
"""RocketMQ's deleteFileBatchMax."""
DELETING_SUFFIX = ".deleting"
SHRINK_STEP = 16 << 20
SHRINK_PAUSE_S = 0.001


def disk_used_ratio(path: Path) -> float:
    """How full the filesystem holding `path` is, 0..1, as RocketMQ's getDiskPartitionSpaceUsedPercent
    and `df` count it: used / (used + usable), the blocks reserved for root counted in neither. Not
    (total - usable) / total, which counts the reserve as used: on a disk with a large reserve that
    read 86 % where df said 65 %, and retention deleted segments "at once" on a disk far from full."""
    usage = shutil.disk_usage(path)
    return used_ratio(usage.used, usage.free)


def used_ratio(used: int, free: int) -> float:
    """`disk_used_ratio` of a `shutil.disk_usage` reading: `used` is the total minus every free
    block, `free` what may still be written."""
    return used / (used + free) if used + free else 1.0


def is_time_to_delete(delete_when: str, now_ms: int) -> bool:
    """Whether the local hour of `now_ms` is one of `delete_when`'s (RocketMQ's isItTimeToDo)."""
    hour = time.localtime(now_ms / 1000).tm_hour
    return any(part.strip() and int(part) == hour for part in delete_when.split(";"))


@dataclass(slots=True)
class RetentionPolicy:
    """The MessageStoreConfig fields retention reads (see namesrv.broker.config.BrokerConfig for their
    meaning; `BrokerConfig.retention_policy()` makes one)."""

    file_reserved_time_h: int = 72
    delete_when: str = "04"
    disk_max_used_space_ratio: int = 75
    disk_space_warning_level_ratio: int = 90
    disk_space_clean_forcibly_ratio: int = 85
    delete_files_interval_ms: int = 100
    delete_file_batch_max: int = DELETE_FILE_BATCH_MAX


@dataclass(slots=True)
class CleanReport:
    """What one run saw and did."""

    disk_ratio: float = 0.0
    time_up: bool = False
    space_to_delete: bool = False
    clean_immediately: bool = False
    disk_full: bool = False
    dispatch_resumed: bool = False
    """A consume-queue write a full disk had failed was done again (the store takes writes again)."""
    deleted_segments: list[int] = field(default_factory=list)
    """Start offsets of the segments deleted."""
    min_physical_offset: int = 0
    policy: RetentionPolicy | None = None
    """The settings this run used."""


class CleanCommitLogService:
    def __init__(self, store: MessageStore, policy: RetentionPolicy | Callable[[], RetentionPolicy],
                 disk_usage: Callable[[Path], float] = disk_used_ratio,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        """`policy`: fixed settings, or a function giving the settings of the moment, called at the
        start of every run (the broker passes `config.retention_policy`)."""
        self.store = store
        self.policy = policy
        self.disk_usage = disk_usage
        self.sleep = sleep
        self.last: CleanReport | None = None

    def run(self) -> CleanReport:
        """One retention run. Blocking (unlinks, preads, pauses): run it off the event loop."""
        p, store = self.policy if isinstance(self.policy, RetentionPolicy) else self.policy(), self.store
        now = store.clock()
        report = CleanReport(disk_ratio=self.disk_usage(store.dir), policy=p)
        percent = report.disk_ratio * 100
        report.time_up = is_time_to_delete(p.delete_when, now)
        report.disk_full = percent > p.disk_space_warning_level_ratio
        report.clean_immediately = report.disk_full or percent > p.disk_space_clean_forcibly_ratio
        report.space_to_delete = report.clean_immediately or percent > p.disk_max_used_space_ratio
        if report.disk_full != store.disk_full:
            log.log(logging.ERROR if report.disk_full else logging.INFO, "store %s: disk %.1f%% used: %s", store.dir,
                    percent, "marked full, writes refused" if report.disk_full else "space ok, writes taken again")
        store.disk_full, store.disk_ratio = report.disk_full, report.disk_ratio
        if report.time_up or report.space_to_delete:
            expired_before = now - p.file_reserved_time_h * 3_600_000
            for i in range(p.delete_file_batch_max):
                base = self.delete_first_segment(expired_before, report.clean_immediately)
                if base is None:
                    break
                report.deleted_segments.append(base)
                if p.delete_files_interval_ms > 0 and i + 1 < p.delete_file_batch_max:
                    self.sleep(p.delete_files_interval_ms / 1000)
            if not report.deleted_segments and report.space_to_delete:
                log.warning("store %s: disk %.1f%% used, but no segment could be deleted", store.dir, percent)
        if report.deleted_segments and store.disk_full:  # what was freed counts now, not at the next run
            ratio = self.disk_usage(store.dir)
            if ratio * 100 <= p.disk_space_warning_level_ratio:
                log.info("store %s: disk %.1f%% used after the clean-up: writes taken again", store.dir, ratio * 100)
                store.disk_full, store.disk_ratio = False, ratio
        if store.dispatch_failed is not None:  # a consume queue the full disk cut short: try again now
            report.dispatch_resumed = store.retry_dispatch()
        report.min_physical_offset = store.commit_log.files.min_offset()
        self.last = report
        return report

    def delete_first_segment(self, expired_before_ms: int, clean_at_once: bool) -> int | None:
        """Delete the oldest segment if it may go (expired, or `clean_at_once`), never the last one;
        then correct the consume queues. Returns its start offset, or None."""
        store = self.store
        with store.commit_log.write_lock:
            segs = store.commit_log.files.segments
            if len(segs) <= 1 or not store.commit_log.is_open:
                return None
            seg = segs[0]
            last_modified = os.fstat(seg.fd).st_mtime_ns // 1_000_000
            if not clean_at_once and last_modified > expired_before_ms:
                return None
            store.commit_log.files.forget_first()
        doomed = seg.path.with_name(seg.path.name + DELETING_SUFFIX)
        os.rename(seg.path, doomed)  # out of the log for a restart too (a leftover is removed at start)
        fsync_dir(store.commit_log.files.dir)
        self._shrink(seg.fd)
        doomed.unlink(missing_ok=True)
        log.info("store %s: deleted commit-log segment %d (last written %d ms ago)%s", store.dir, seg.base,
                 store.clock() - last_modified, " at once (disk nearly full)" if clean_at_once else "")
        self.clean_consume_queues(store.commit_log.files.min_offset())
        store.dispatchers.min_offset_raised(store.commit_log.files.min_offset())  # the index drops files below it
        return seg.base

    def _shrink(self, fd: int) -> None:
        """Cut the file from its end in SHRINK_STEP steps, pausing between, so the kernel frees its
        page cache a little at a time rather than in one unlink that takes the CPU from the broker
        (a reader still holding it reads nothing: it is below the log's min offset)."""
        size = os.fstat(fd).st_size
        while size > 0:
            size = max(0, size - SHRINK_STEP)
            os.ftruncate(fd, size)
            if size:
                self.sleep(SHRINK_PAUSE_S)

    def clean_consume_queues(self, log_min: int) -> None:
        """RocketMQ's CleanConsumeQueueService: each queue's files that point only below `log_min`
        go, its min offset rises; one queue at a time under the write lock."""
        for cq in list(self.store.consume_queues.queues.values()):
            with self.store.commit_log.write_lock:
                if not self.store.commit_log.is_open:  # closed meanwhile: the next start corrects the rest
                    return
                cq.correct_min_offset(log_min)
            self.sleep(0)  # let the broker's event loop take the GIL between two queues
