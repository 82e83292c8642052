"""The store's dispatch and recovery, a part of the message store (RocketMQ's CommitLogDispatcher list
in DefaultMessageStore, doDispatch, and recover*): every record the commit log took (a batch
written, a replica's append, recovery's re-read past the checkpoint) is handed, in commit-log order,
to each dispatcher: the consume queues first, then the others (the message index, those the store
was given, those added later)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from namesrv.store.commit_log import CommitLog, Record
from namesrv.store.queue.consume_queue import ConsumeQueueStore
from namesrv.store.recovery import recover_log
from namesrv.store.types import Dispatcher, DispatchFn, RecoveryReport

log = logging.getLogger(__name__)


class Dispatchers:
    def __init__(self, commit_log: CommitLog, consume_queues: ConsumeQueueStore,
                 dispatchers: Sequence[Dispatcher] = ()) -> None:
        """The consume queues' dispatcher first (a failure to write one stops the store's writes,
        see `dispatch_all`), then `dispatchers`. Adding one takes the commit log's write lock."""
        self.commit_log = commit_log
        self.consume_queues = consume_queues
        self._dispatchers: list[Dispatcher] = [
            Dispatcher(consume_queues.dispatch, consume_queues.flush, consume_queues.truncate), *dispatchers]
        self.failed: OSError | None = None
        """Set when writing a consume queue failed: writes and checkpoints stop (see dispatch_all)."""
        self._undispatched = -1
        """The commit-log offset of the first record a failed consume-queue write left out."""

    def add(self, dispatch: DispatchFn, flush: Callable[[], None] | None = None,
            truncate: Callable[[int], object] | None = None) -> None:
        """Register a dispatcher for every record written from now on (see MessageStore.add_dispatcher)."""
        with self.commit_log.write_lock:
            self._dispatchers.append(Dispatcher(dispatch, flush, truncate))

    def _dispatch(self, fields: list[Any], pos: int, size: int) -> None:
        self.consume_queues.dispatch(fields, pos, size)
        self._dispatch_others(fields, pos, size)

    def _dispatch_others(self, fields: list[Any], pos: int, size: int) -> None:
        """Every dispatcher but the consume queues'."""
        for d in self._dispatchers[1:]:
            self._dispatch_one(d, fields, pos, size)

    def _dispatch_one(self, d: Dispatcher, fields: list[Any], pos: int, size: int) -> None:
        try:
            d.dispatch(fields, pos, size)
        except Exception:  # one dispatcher's fault must not stop the others nor the write
            log.exception("commit log %s: dispatcher %r failed at offset %d", self.commit_log.store_dir,
                          d.dispatch, pos)

    def dispatch_all(self, records: list[Record], end: int) -> OSError | None:
        """Dispatch records just written (write lock held), then publish the log's new `end`. When
        a consume queue cannot be written (a full disk), the records are in the log all the same:
        `end` is published (so nothing is written over them), writes and checkpoints stop (the
        store is `failed`), and the error is returned for their senders; `retry` (retention calls
        it once it freed space) or a restart dispatches them again (the checkpoint never moved past
        them)."""
        failed: OSError | None = None
        missing = self.consume_queues.dispatch_batch(records)  # the consume queues first, one write per queue
        if missing is not None:
            self._undispatched, failed = missing
            self.failed = failed
            log.error("commit log %s: consume queue write failed (%s); refusing writes until space is freed "
                      "(retry_dispatch) or a restart", self.commit_log.store_dir, failed)
        if missing is not None:  # the rest are dispatched by the retry
            records = [r for r in records if r[1] < self._undispatched]
        for d in self._dispatchers[1:]:
            if d.dispatch_batch is None:
                for fields, pos, size in records:
                    self._dispatch_one(d, fields, pos, size)
                continue
            try:
                d.dispatch_batch(records)
            except Exception:  # one dispatcher's fault must not stop the others nor the write
                log.exception("commit log %s: dispatcher %r failed on a batch from offset %d",
                              self.commit_log.store_dir, d.dispatch_batch, records[0][1] if records else -1)
        self.commit_log.publish(end)  # published once durable (per the policy): a reader waits only for this
        return failed

    def recover(self, checkpoint_offset: int) -> RecoveryReport:
        """Re-read the log from the checkpoint's offset (or from further back, for a dispatcher that
        lost records the checkpoint covers), dispatching each record, cut its torn tail and make
        every dispatcher forget what was cut. At start-up, before the log's end is published."""
        report = RecoveryReport()
        start = checkpoint_offset
        for d in self._dispatchers:  # one that lost what the checkpoint covers has it dispatched again
            needed = d.replay_from() if d.replay_from is not None else None
            if needed is not None and needed < start:
                log.warning("commit log %s: a dispatcher lost records before the checkpoint: replaying from %d, "
                            "not %d", self.commit_log.store_dir, needed, start)
                start = needed
        self.failed, self._undispatched = None, -1
        end = recover_log(self.commit_log.files, start, self._dispatch_until_failed, report)
        for d in self._dispatchers:
            if d.truncate is not None:
                dropped = d.truncate(end)
                if d.truncate == self.consume_queues.truncate and isinstance(dropped, int):
                    report.consume_queue_entries_dropped = dropped
        if report.consume_queue_entries_dropped:
            log.warning("commit log %s: dropped %d consume-queue entries past the recovered end %d",
                        self.commit_log.store_dir, report.consume_queue_entries_dropped, end)
        report.queues = {k: cq.max_offset for k, cq in self.consume_queues.queues.items()}
        return report

    def _dispatch_until_failed(self, fields: list[Any], pos: int, size: int) -> None:
        """Recovery's dispatch: the first consume-queue write that fails (a full disk) marks the
        store `failed` from that record on and the scan goes on without dispatching, so the store
        opens (and retention can free space) instead of failing its start."""
        if self.failed is not None:
            return
        try:
            self._dispatch(fields, pos, size)
        except OSError as e:
            self.failed, self._undispatched = e, pos
            log.error("commit log %s: consume queue write failed during recovery (%s); writes refused until "
                      "space is freed", self.commit_log.store_dir, e)

    def retry(self) -> bool:
        """Dispatch again every record from the first one a failed consume-queue write left out
        (a consume queue overwrites an entry it holds, so a record is never entered twice); True
        when the store takes writes again. Blocking: retention calls it off the event loop."""
        with self.commit_log.write_lock:
            if self.failed is None:
                return True
            self.failed, start = None, self._undispatched
            recover_log(self.commit_log.files, start, self._dispatch_until_failed, RecoveryReport())
            if self.failed is None:
                log.info("commit log %s: records from %d dispatched again; writes taken again",
                         self.commit_log.store_dir, start)
            return self.failed is None

    def flush(self) -> None:
        """Make every dispatcher's output durable (a checkpoint, outside the write lock): all they
        built for records dispatched before the call."""
        for d in self._dispatchers:
            if d.flush is not None:
                d.flush()

    def truncate(self, offset: int) -> None:
        """Every dispatcher forgets what it built for records at or after `offset` (the log was cut there)."""
        for d in self._dispatchers:
            if d.truncate is not None:
                d.truncate(offset)

    def min_offset_raised(self, offset: int) -> None:
        """Retention deleted the log below `offset`: every dispatcher drops what only points below it."""
        for d in self._dispatchers:
            if d.on_min_offset is not None:
                d.on_min_offset(offset)
