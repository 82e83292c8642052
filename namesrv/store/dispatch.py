"""The store's dispatch, recovery and checkpoint, a mixin of `MessageStore` (RocketMQ's
CommitLogDispatcher list, recover*, and FlushConsumeQueueService's checkpoint)."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from namesrv.common.clock import Clock
from namesrv.store.checkpoint import Checkpoint, StoreCheckpoint
from namesrv.store.mapped_file_queue import MappedFileQueue, Segment
from namesrv.store.queue.consume_queue import ConsumeQueueStore
from namesrv.store.recovery import recover_log
from namesrv.store.types import Dispatcher, DispatchFn, RecoveryReport

log = logging.getLogger(__name__)


class CommitLogDispatch:
    dir: Path
    clock: Clock
    files: MappedFileQueue
    consume_queues: ConsumeQueueStore
    _dispatchers: list[Dispatcher]
    _checkpoint: StoreCheckpoint
    _write_lock: threading.Lock
    _lock: threading.Lock
    dispatch_failed: OSError | None
    _undispatched: int
    _checkpoint_lock: threading.Lock
    _dirty: dict[int, Segment]
    _fd: int
    _write_pos: int

    # ------------------------------------------------------------------ dispatch and recovery
    def add_dispatcher(self, dispatch: DispatchFn, flush: Callable[[], None] | None = None,
                       truncate: Callable[[int], object] | None = None) -> None:
        """Register a CommitLogDispatcher, called after the consume queues for every record written
        from now on: `dispatch(fields, commit_log_offset, record_size)` with the record's fields
        (store_records' layout: topic, queue id, queue offset, store time, msg id, properties, body,
        flag, sysFlag, born time, born host, reconsume times). It runs in the store's writer thread
        under the write lock, after the record is durable per the flush policy and before readers
        see it; it must not call the store's write methods. `flush()` makes what it built durable
        (called before every checkpoint from the checkpoint's thread, outside the write lock, so
        concurrently with `dispatch`: it must cover what was dispatched before the call);
        `truncate(offset)` forgets what it built for records at or after `offset` (a replica
        cutting its log, recovery cutting a torn tail). To see the records recovery re-reads, pass
        it to the constructor's `dispatchers` instead."""
        with self._write_lock:
            self._dispatchers.append(Dispatcher(dispatch, flush, truncate))

    def _dispatch(self, fields: list[Any], pos: int, size: int) -> None:
        for d in self._dispatchers:
            try:
                d.dispatch(fields, pos, size)
            except Exception:  # one dispatcher's fault must not stop the others nor the write
                if d.dispatch == self.consume_queues.dispatch:
                    raise
                log.exception("commit log %s: dispatcher %r failed at offset %d", self.dir, d.dispatch, pos)

    def _dispatch_all(self, records: list[tuple[list[Any], int, int]], end: int) -> OSError | None:
        """Dispatch records just written (write lock held), then publish the log's new `end`. When
        a consume queue cannot be written (a full disk), the records are in the log all the same:
        `end` is published (so nothing is written over them), writes and checkpoints stop (the
        store is `dispatch_failed`), and the error is returned for their senders; `retry_dispatch`
        (retention calls it once it freed space) or a restart dispatches them again (the
        checkpoint never moved past them)."""
        failed: OSError | None = None
        for fields, pos, size in records:
            try:
                self._dispatch(fields, pos, size)
            except OSError as e:
                failed = self.dispatch_failed = e
                self._undispatched = pos
                log.error("commit log %s: consume queue write failed (%s); refusing writes until space is freed "
                          "(retry_dispatch) or a restart", self.dir, e)
                break
        with self._lock:  # published once durable (per the policy): a reader waits only for this
            self._write_pos = end
        return failed

    def _recover(self) -> RecoveryReport:
        report = RecoveryReport()
        start = self._checkpoint.current.physic_offset
        for d in self._dispatchers:  # one that lost what the checkpoint covers has it dispatched again
            needed = d.replay_from() if d.replay_from is not None else None
            if needed is not None and needed < start:
                log.warning("commit log %s: a dispatcher lost records before the checkpoint: replaying from %d, "
                            "not %d", self.dir, needed, start)
                start = needed
        self.dispatch_failed, self._undispatched = None, -1
        end = recover_log(self.files, start, self._dispatch_until_failed, report)
        for d in self._dispatchers:
            if d.truncate is not None:
                dropped = d.truncate(end)
                if d.truncate == self.consume_queues.truncate and isinstance(dropped, int):
                    report.consume_queue_entries_dropped = dropped
        if report.consume_queue_entries_dropped:
            log.warning("commit log %s: dropped %d consume-queue entries past the recovered end %d",
                        self.dir, report.consume_queue_entries_dropped, end)
        report.queues = {k: cq.max_offset for k, cq in self.consume_queues.queues.items()}
        return report

    def _dispatch_until_failed(self, fields: list[Any], pos: int, size: int) -> None:
        """Recovery's dispatch: the first consume-queue write that fails (a full disk) marks the
        store `dispatch_failed` from that record on and the scan goes on without dispatching, so
        the store opens (and retention can free space) instead of failing its start."""
        if self.dispatch_failed is not None:
            return
        try:
            self._dispatch(fields, pos, size)
        except OSError as e:
            self.dispatch_failed, self._undispatched = e, pos
            log.error("commit log %s: consume queue write failed during recovery (%s); writes refused until "
                      "space is freed", self.dir, e)

    def retry_dispatch(self) -> bool:
        """Dispatch again every record from the first one a failed consume-queue write left out
        (a consume queue overwrites an entry it holds, so a record is never entered twice); True
        when the store takes writes again. Blocking: retention calls it off the event loop."""
        with self._write_lock:
            if self.dispatch_failed is None:
                return True
            self.dispatch_failed, start = None, self._undispatched
            recover_log(self.files, start, self._dispatch_until_failed, RecoveryReport())
            if self.dispatch_failed is None:
                log.info("commit log %s: records from %d dispatched again; writes taken again", self.dir, start)
            return self.dispatch_failed is None

    def checkpoint(self) -> int:
        """Make the log and every dispatcher's output durable up to the current end, then record
        that end in the checkpoint file (write, fsync, rename); returns it. Blocking: run it off
        the event loop (the broker does so every flushIntervalConsumeQueue)."""
        with self._checkpoint_lock:  # one at a time, and never across a replica's truncate_to
            with self._write_lock:  # memory work only
                if self._fd < 0 or self.dispatch_failed is not None:
                    return self._checkpoint.current.physic_offset
                end, first = self._write_pos, self.files.min_offset()
                dirty, self._dirty = self._dirty, {}
            for seg in dirty.values():  # outside the write lock: sends go on while these fsyncs run
                if seg.fd >= 0:
                    os.fsync(seg.fd)
            for d in self._dispatchers:  # all they built for records before `end` was built before it was read
                if d.flush is not None:
                    d.flush()
            last = self._checkpoint.current
            if end != last.physic_offset or last.min_physic_offset != first:
                self._checkpoint.write(Checkpoint(end, self.clock(), first))
        return end

