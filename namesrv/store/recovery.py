"""The commit log's recovery (RocketMQ's recoverNormally / recoverAbnormally): stream the log from
the checkpoint's offset (never holding it in memory), CRC-check each record and hand it to the
dispatchers again, then cut what a kill -9 left torn.

A torn or garbage tail is cut off (its segment truncated, empty segments after it removed); a
corrupt record in the middle is skipped by re-synchronising on the next record whose magic,
length and CRC check out, so later acknowledged records stay readable, and the damaged range is
reported. A BLANK record ends its segment. When the checkpoint's offset is past the log's end (the
log lost what it covered) the whole log is scanned instead, as it was before checkpoints.

Where we differ from RocketMQ 5.3: RocketMQ re-checks the last three files after a clean shutdown
and searches back by store time after a crash; we start at the checkpoint's exact offset either way
(it is written only after everything before it was fsynced).
"""

from __future__ import annotations

import logging

from namesrv.store.mapped_file_queue import MappedFileQueue
from namesrv.store.records import BLANK, read_record, resync
from namesrv.store.types import DispatchFn, RecoveryReport

log = logging.getLogger(__name__)


def recover_log(files: MappedFileQueue, start: int, dispatch: DispatchFn, report: RecoveryReport) -> int:
    """Scan and dispatch from `start`; cut the torn tail; return where the log ends."""
    end = files.file_end()
    if start > end:  # the log lost what the checkpoint covers (or is not this log's)
        log.warning("commit log %s: checkpoint offset %d is past the log's end %d: scanning it all",
                    files.dir, start, end)
        start = 0
    start = max(start, files.min_offset())
    report.scanned_from = start
    segs = files.segments
    good_end = start
    for i, seg in enumerate(segs):
        size = seg.size()
        if seg.base + size <= start and i < len(segs) - 1:
            continue
        later_data = any(s.size() for s in segs[i + 1:])
        local = max(0, start - seg.base)
        with open(seg.path, "rb") as f:
            while local < size:
                record = read_record(f, local, size)
                if isinstance(record, str):
                    nxt = resync(f, local + 1, size)
                    if nxt is None and not later_data:  # nothing valid follows: a torn or garbage tail
                        report.reason = record
                        break
                    stop = nxt if nxt is not None else size
                    report.corrupt_ranges.append((seg.base + local, seg.base + stop, record))
                    log.error("commit log %s: skipping corrupt bytes [%d, %d) (%s); later records kept",
                              files.dir, seg.base + local, seg.base + stop, record)
                    local = stop
                    continue
                fields, rec_end = record
                if fields is not BLANK:
                    dispatch(fields, seg.base + local, rec_end - local)
                    report.records += 1
                local = rec_end
                good_end = seg.base + local
        if report.reason is not None:
            break
        if local >= size and size:
            good_end = max(good_end, seg.base + size)
    report.valid_bytes = good_end
    report.truncated_bytes = files.truncate(good_end) if good_end < end else 0
    if report.truncated_bytes:
        log.warning("commit log %s: truncated %d torn bytes at %d (%s)",
                    files.dir, report.truncated_bytes, good_end, report.reason)
    return good_end
