"""The store's group-commit writer (RocketMQ's GroupCommitService), a part of the message store:
`put` queues a message (`submit_all` a send's messages, together under one future); one writer
thread of the store's own takes every message queued so far as a batch (the store's batch write:
written, fsynced once for all of it with SYNC_FLUSH, dispatched) and answers its senders on their
event loop; each sender is acknowledged after the write that covers its record. While one batch is
on disk the next one gathers, so concurrent senders share fsyncs. Disk I/O never runs on the
caller's event loop, and a send crosses to the writer and back once each (no writer task on the
loop, no executor between them: two loop turns and a thread hand-off fewer per batch)."""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from namesrv.protocol.message.types import MessageInner
from namesrv.store.types import AppendResult

log = logging.getLogger(__name__)

MAX_BATCH = 1024
"""Messages written (and fsynced) together at most."""
IDLE_S = 1.0
"""The writer thread ends after this long with nothing to write (the next put starts another): an
idle store holds no thread, and one dropped without a close is not kept alive by its writer."""


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


class _Idle(Exception):
    """The writer thread had nothing to write for IDLE_S and ends."""


BatchWrite = Callable[[list[MessageInner], list[bool]], Results]
"""Writes a batch in the calling thread (each message with whether it was checked already): each
message's result, or why it was not stored."""


class GroupCommitService:
    def __init__(self, store_dir: Path, write_batch: BatchWrite, listeners: list[Callable[[], None]]) -> None:
        """`write_batch` runs in the writer thread; each of `listeners` (the store's list) is called
        on the senders' event loop after every batch."""
        self.store_dir = store_dir
        self.write_batch = write_batch
        self.listeners = listeners
        self._queue: queue.SimpleQueue[_Pending | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._thread_lock = threading.Lock()
        self._closed = False

    async def put(self, msg: MessageInner) -> AppendResult:
        """Store one message through the group-commit writer; returns once it is durable per the
        flush policy."""
        return await self.submit(msg)

    def submit(self, msg: MessageInner) -> asyncio.Future[AppendResult]:
        """Queue one message now (it goes into the log after everything queued before it and
        before anything queued after); the future is done once it is durable per the flush policy.
        Call from an event loop (the future's)."""
        return self._enqueue([msg], False, True)

    def submit_all(self, messages: list[MessageInner], checked: bool = False) -> asyncio.Future[Results]:
        """Queue messages now, in order and together (one group commit holds them all, up to
        MAX_BATCH); the future is each one's result once they are durable per the flush policy.
        `checked`: the caller ran the store's check on each of them. Call from an event loop."""
        return self._enqueue(messages, checked, False)

    def _enqueue(self, messages: list[MessageInner], checked: bool, single: bool) -> asyncio.Future[Any]:
        if self._closed:
            raise OSError(f"commit log {self.store_dir} is closed")
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._queue.put(_Pending(messages, future, checked, single))
        with self._thread_lock:  # after the put: a writer ending idle either sees it or is gone
            if self._thread is None:
                self._thread = threading.Thread(target=self._write_loop, name=f"group-commit {self.store_dir}",
                                                daemon=True)
                self._thread.start()
        return future

    def _next(self, q: queue.SimpleQueue[_Pending | None]) -> _Pending | None:
        """The next item queued (None: `stop`'s end marker); _Idle when there was none for IDLE_S
        (the thread is then forgotten, under the lock `_enqueue` starts one under)."""
        while True:
            try:
                return q.get(timeout=IDLE_S)
            except queue.Empty:
                with self._thread_lock:
                    if q.empty():
                        self._thread = None
                        raise _Idle from None

    def _write_loop(self) -> None:
        """Batches until `stop` queues the end marker; whatever is queued after it fails with
        OSError, so no sender waits forever on a closed store."""
        q = self._queue
        stopping = False
        while not stopping:
            batch: list[_Pending] = []
            count = 0
            try:
                item = self._next(q)
            except _Idle:
                return  # the next put starts a writer again
            while item is not None:
                batch.append(item)
                count += len(item.messages)
                if count >= MAX_BATCH:
                    break
                try:
                    item = q.get_nowait()
                except queue.Empty:
                    break
            stopping = item is None
            if not batch:
                continue
            messages = [m for p in batch for m in p.messages]
            checked = [p.checked for p in batch for _ in p.messages]
            try:
                results = self.write_batch(messages, checked)
            except Exception as e:  # a bug: fail every waiter rather than leave them hanging
                log.exception("commit log %s: batch write failed", self.store_dir)
                results = [e] * len(messages)
            self._answer(batch, results)
        left: list[_Pending] = []
        while True:  # put() refuses once closed; this answers a put that raced it
            try:
                item = q.get_nowait()
            except queue.Empty:
                break
            if item is not None:
                left.append(item)
        if left:
            self._answer(left, [OSError(f"commit log {self.store_dir} is closed")] * sum(len(p.messages) for p in left),
                         listeners=False)

    def _answer(self, batch: list[_Pending], results: Results, listeners: bool = True) -> None:
        """Hand each sender its results on its own event loop (one call per loop), then the listeners."""
        by_loop: dict[asyncio.AbstractEventLoop, list[tuple[_Pending, Results]]] = {}
        at = 0
        for pending in batch:
            n = len(pending.messages)
            by_loop.setdefault(pending.future.get_loop(), []).append((pending, results[at:at + n]))
            at += n
        for loop, answers in by_loop.items():
            try:
                loop.call_soon_threadsafe(self._resolve_all, answers, listeners)
            except RuntimeError:  # that loop is closed: nobody waits for these answers any more
                pass

    def _resolve_all(self, answers: list[tuple[_Pending, Results]], listeners: bool) -> None:
        for pending, results in answers:
            _resolve(pending, results)
        if listeners:
            for listener in self.listeners:
                listener()

    def refuse_puts(self) -> None:
        """From now on `put` raises OSError (the store is closing)."""
        self._closed = True

    def stop(self) -> None:
        """End the writer thread once it has written what is queued before this; callable from any
        thread (it does not wait for the thread)."""
        self._closed = True
        with self._thread_lock:
            if self._thread is not None:
                self._queue.put(None)


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
