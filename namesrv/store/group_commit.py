"""The store's group-commit writer (RocketMQ's GroupCommitService), a part of the message store:
`put` queues a message (`submit_all` a send's messages, together under one future); one writer
task takes every message queued so far as a batch and hands it to a worker thread (the store's
batch write: written, fsynced once for all of it with SYNC_FLUSH, dispatched); each sender is
acknowledged after the write that covers its record. While one batch is on disk the next one
gathers, so concurrent senders share fsyncs. Disk I/O never runs on the caller's event loop."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from namesrv.protocol.message.types import MessageInner
from namesrv.store.types import AppendResult

MAX_BATCH = 1024
"""Messages written (and fsynced) together at most."""


Results = list[AppendResult | Exception]
"""Each message's result in a batch or a submission: where it is stored, or why it was not."""


@dataclass(slots=True)
class _Pending:
    """Messages submitted together, waiting for the group-commit writer: one future for all of
    them (a send's batch is one entry, not one task per message); `checked`: the caller ran the
    store's check on each already (the writer does not check them again); `single`: the future
    is the one message's result (`submit`), not the list."""

    messages: list[MessageInner]
    future: asyncio.Future[Any]
    checked: bool
    single: bool


BatchWrite = Callable[[list[MessageInner], list[bool]], Results]
"""Writes a batch in the calling thread (each message with whether it was checked already): each
message's result, or why it was not stored."""


class GroupCommitService:
    def __init__(self, store_dir: Path, write_batch: BatchWrite, listeners: list[Callable[[], None]]) -> None:
        """`write_batch` runs in a worker thread; each of `listeners` (the store's list) is called on
        the writer's event loop after every batch."""
        self.store_dir = store_dir
        self.write_batch = write_batch
        self.listeners = listeners
        self._queue: asyncio.Queue[_Pending | None] | None = None
        self._writer: asyncio.Task[None] | None = None
        self._writer_loop: asyncio.AbstractEventLoop | None = None
        self._closed = False

    async def put(self, msg: MessageInner) -> AppendResult:
        """Store one message through the group-commit writer; returns once it is durable per the
        flush policy. Call from one event loop."""
        return await self.submit(msg)

    def submit(self, msg: MessageInner) -> asyncio.Future[AppendResult]:
        """Queue one message now (it goes into the log after everything queued before it and
        before anything queued after); the future is done once it is durable per the flush policy.
        Call from the writer's event loop."""
        return self._enqueue([msg], False, True)

    def submit_all(self, messages: list[MessageInner], checked: bool = False) -> asyncio.Future[Results]:
        """Queue messages now, in order and together (one group commit holds them all, up to
        MAX_BATCH); the future is each one's result once they are durable per the flush policy.
        `checked`: the caller ran the store's check on each of them. Call from the writer's event loop."""
        return self._enqueue(messages, checked, False)

    def _enqueue(self, messages: list[MessageInner], checked: bool, single: bool) -> asyncio.Future[Any]:
        if self._closed:
            raise OSError(f"commit log {self.store_dir} is closed")
        loop = asyncio.get_running_loop()
        if self._queue is None or self._writer_loop is not loop:  # first put, or a new event loop
            self._queue = asyncio.Queue()
            self._writer_loop = loop
            self._writer = loop.create_task(self._write_loop(self._queue), name="commit-log-writer")
        future: asyncio.Future[Any] = loop.create_future()
        self._queue.put_nowait(_Pending(messages, future, checked, single))
        return future

    async def _write_loop(self, queue: asyncio.Queue[_Pending | None]) -> None:
        """Batches until `stop` queues the end marker; whatever is queued after it (or while the
        log is closed) fails with OSError, so no sender waits forever on a closed store."""
        stopping = False
        while not stopping:
            batch: list[_Pending] = []
            count = 0
            item = await queue.get()
            while item is not None:
                batch.append(item)
                count += len(item.messages)
                if count >= MAX_BATCH or queue.empty():
                    break
                item = queue.get_nowait()
            stopping = item is None
            if not batch:
                continue
            messages = [m for p in batch for m in p.messages]
            checked = [p.checked for p in batch for _ in p.messages]
            try:
                results = await asyncio.to_thread(self.write_batch, messages, checked)
            except Exception as e:  # a bug: fail every waiter rather than leave them hanging
                results = [e] * len(messages)
            at = 0
            for pending in batch:
                mine = results[at:at + len(pending.messages)]
                at += len(pending.messages)
                _resolve(pending, mine)
            for listener in self.listeners:
                listener()
        while not queue.empty():  # put() refuses once closed; this drains a put that raced it
            left = queue.get_nowait()
            if left is not None:
                _resolve(left, [OSError(f"commit log {self.store_dir} is closed")] * len(left.messages))

    def refuse_puts(self) -> None:
        """From now on `put` raises OSError (the store is closing)."""
        self._closed = True

    def stop(self) -> None:
        """End the writer task once it has written what is queued before this; callable from any
        thread."""
        loop, queue = self._writer_loop, self._queue
        if loop is not None and queue is not None and not loop.is_closed():
            try:
                running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
            except RuntimeError:
                running = None
            if running is loop:
                queue.put_nowait(None)
            else:
                loop.call_soon_threadsafe(queue.put_nowait, None)


def _resolve(pending: _Pending, results: Results) -> None:
    """Answer a submission: a single message's result or exception, or the list of results."""
    future = pending.future
    if future.done():
        return
    if not pending.single:
        future.set_result(results)
    elif isinstance(results[0], Exception):
        future.set_exception(results[0])
    else:
        future.set_result(results[0])
