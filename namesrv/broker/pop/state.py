"""A broker's pop state: the invisibility index, its journal with group commit, the queues being
popped right now, and the pop offsets the journal recorded.

The index lives on the broker's event loop; every change is made there first, then recorded:
`record` queues the journal records and resolves once they are written. Records queued while a
write is under way go out together in the next one (one fsync for many pops and acks), in the
order they were queued.

Durability follows the broker's flush mode. A pop's record is fsynced before the pop is answered
(it carries the queue's new pop offset, which the offsets file may persist a few seconds later: the
journal is never behind it). Under SYNC_FLUSH every record is. Under ASYNC_FLUSH (`sync_acks`
False) an ack's, a change's or a revive's record is written to the file (the OS holds it: a broker
process crash loses nothing) and fsynced with the next pop's record, by `flush` (the broker's
commit-log flush interval) or on close, as RocketMQ writes its ack records into the commit log and
flushes them with it: a machine crash in between forgets the ack, and the message comes again once
its invisible time is up (at-least-once, never a loss). That spares an ack the fsync it used to
wait for (~0.9 ms here, a third of a proxied ack).

A master also writes the records into its commit log (`log_sink`, the metadata log's): they
replicate with the messages, and a replica applies them to its own index and journal, so a promoted
slave revives what its old master had in flight (namesrv.broker.metadata_log). Pure apart from the
journal's file (no Ray, no sockets).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from namesrv.broker.client.consumer_offsets import ConsumerOffsetManager
from namesrv.broker.pop.inflight import InflightIndex, Key, QueueKey
from namesrv.broker.pop.journal import PopJournal
from namesrv.common.clock import Clock

log = logging.getLogger(__name__)


class PopState:
    def __init__(self, clock: Clock, journal_path: str | Path | None = None, sync_acks: bool = True) -> None:
        self.clock = clock
        self.sync_acks = sync_acks
        """Fsync every record before its request is answered (SYNC_FLUSH); else only pops'."""
        self.index = InflightIndex(clock)
        self.journal = PopJournal(journal_path)
        self.pop_offsets: dict[QueueKey, int] = {}
        """The last pop offset recorded per (group, topic, queue): compaction keeps them."""
        self.busy: set[QueueKey] = set()
        """Queues a pop is reading now: another pop of the group skips them (RocketMQ's queue lock)."""
        self.order_attempts: dict[Key, int] = {}
        """Times an orderly pop's message lapsed and was popped again from its queue (the revive
        service counts them, a pop reports them as orderCountInfo: RocketMQ's ConsumerOrderInfoManager).
        Kept in memory: a restart counts again from 0."""
        self.on_added: Callable[[], None] = lambda: None
        """Called when an entry joined the index (the revive service looks at its next due time)."""
        self.log_sink: Callable[[list[dict[str, Any]]], Awaitable[object] | None] = lambda records: None
        """Writes records into the replicated log and returns what to await (None: this broker does
        not write them, a replica)."""
        self._pending: list[dict[str, Any]] = []
        self._pending_durable = False
        """A record queued for the next write needs its fsync before it is answered."""
        self._unsynced = False
        """Records written but not fsynced yet (ASYNC_FLUSH's acks): `flush` syncs them."""
        self._waiters: list[asyncio.Future[None]] = []
        self._writing = False
        self._writer: asyncio.Task[None] | None = None
        self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="pop-journal")
        self._applied: set[asyncio.Task[None]] = set()
        """A replica's journal writes of applied records, under way."""

    def open(self, offsets: ConsumerOffsetManager) -> None:
        """Load the journal: the entries in flight, and the pop offsets committed where the offsets
        file is behind (a crash within its persist interval)."""
        self._take_pop_offsets(self.journal.load(self.index), offsets)

    def _take_pop_offsets(self, recorded: dict[QueueKey, int], offsets: ConsumerOffsetManager) -> None:
        """Pop offsets the records carried: kept (compaction writes them), and committed where the
        group's committed offset is behind them."""
        for (group, topic, queue_id), offset in recorded.items():
            key = (group, topic, queue_id)
            self.pop_offsets[key] = max(self.pop_offsets.get(key, -1), offset)
            if offsets.query_offset(group, topic, queue_id) < offset:
                offsets.commit_offset(group, topic, queue_id, offset)

    async def record(self, *records: dict[str, Any]) -> None:
        """Journal `records` (and, on a master, write them into the replicated log); returns once
        they are fsynced (at once without a journal) and in the log."""
        if not records:
            return
        logged = self.log_sink(list(records))
        await self._journal(records)
        if logged is not None:
            await logged

    def apply_replicated(self, records: list[dict[str, Any]], offsets: ConsumerOffsetManager) -> None:
        """A replica: records its master wrote into the log, applied to the index (and the pop
        offsets they carry committed), then journalled here in the background. Raises ValueError,
        TypeError or KeyError (nothing applied) for a record that does not parse."""
        recorded: dict[QueueKey, int] = {}
        scratch = InflightIndex(self.clock)
        for r in records:  # checked on a scratch index first: all or nothing
            PopJournal.apply_record(r, scratch, {})
        for r in records:
            PopJournal.apply_record(r, self.index, recorded)
        self._take_pop_offsets(recorded, offsets)
        if any(r["op"] == "pop" and r["e"] for r in records):
            self.on_added()
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop (a test's direct call): journalled now
            self.journal.append(*records)
            return
        task = loop.create_task(self._keep(records))
        self._applied.add(task)
        task.add_done_callback(self._applied.discard)

    async def _keep(self, records: list[dict[str, Any]]) -> None:
        try:
            await self._journal(records)
        except OSError as e:  # in the index all the same, but not across this replica's restart
            log.error("pop journal: %d replicated records not journalled: %s", len(records), e)

    async def _journal(self, records: tuple[dict[str, Any], ...] | list[dict[str, Any]]) -> None:
        if self.journal.path is None:
            return
        for r in records:
            if r["op"] == "pop" and "next" in r:
                g, t, q, o = r["next"]
                self.pop_offsets[(g, t, q)] = o
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        self._pending.extend(records)
        if not self._pending_durable:
            self._pending_durable = self.sync_acks or any(r["op"] == "pop" for r in records)
        self._waiters.append(done)
        if not self._writing:
            self._writing = True
            self._writer = loop.create_task(self._write_pending())
        await done

    async def _write_pending(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while self._pending:
                batch, waiters, durable = self._pending, self._waiters, self._pending_durable
                self._pending, self._waiters, self._pending_durable = [], [], False
                try:
                    await loop.run_in_executor(self._executor, self.journal.append_batch, batch, durable)
                    self._unsynced = not durable
                except OSError as e:
                    for w in waiters:
                        if not w.done():
                            w.set_exception(e)
                    continue
                for w in waiters:
                    if not w.done():
                        w.set_result(None)
            if self.journal.should_compact(len(self.index)):
                # on the loop: the snapshot and the rewrite see the same index, nothing appends meanwhile
                self.journal.compact(list(self.index.entries.values()), dict(self.pop_offsets))
                self._unsynced = False
        finally:
            self._writing = False

    async def flush(self) -> None:
        """Fsync what was written unsynced (ASYNC_FLUSH's acks), off the loop; a no-op otherwise."""
        if self._unsynced and not self._writing:
            self._unsynced = False
            try:
                await asyncio.get_running_loop().run_in_executor(self._executor, self.journal.sync)
            except OSError as e:
                self._unsynced = True
                log.error("pop journal not synced: %s", e)

    def close(self) -> None:
        self._executor.shutdown(wait=True)
        self.journal.close()
