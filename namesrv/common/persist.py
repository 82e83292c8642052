"""Crash-safe file replacement: a reader sees the old file or the new one, never half of either;
and a writer thread that does it off an event loop."""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import logging
import os
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger(__name__)


def atomic_write(path: str | os.PathLike[str], data: bytes) -> None:
    """Write to a temp file in the same directory, fsync it, rename over `path`, fsync the directory."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_dir(target.parent)


def fsync_dir(path: str | os.PathLike[str]) -> None:
    """fsync a directory, so the names created or renamed in it (not only the files' contents)
    survive a machine crash. The one directory fsync of the project."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


FAILURES_KEPT = 4096
"""Failed writes remembered for `drained` (a request asks about its own within moments)."""


class DurableWriteError(OSError):
    """A change a request made could not be put on disk (a full disk, a read-only or missing
    directory): the request is answered with this error, and the change was rolled back."""


Undo = Callable[[], None]
"""Puts a table back as it was before one change: run (on the table's own thread or event loop) when
the write carrying that change failed, newest change first."""

FileWriter = Callable[[Path, bytes, Undo | None], None]
"""How a manager persists its table: `write_now` (in the caller's thread) or a `BackgroundWriter`'s
`write` (queued for a thread, off an event loop). Either way, when the image cannot be written the
change's `undo` runs, so the table in memory is never ahead of the disk."""


def write_now(path: Path, data: bytes, undo: Undo | None = None) -> None:
    """`atomic_write` in the caller's thread; a failure undoes the change and raises."""
    try:
        atomic_write(path, data)
    except OSError as e:
        if undo is not None:
            undo()
        raise DurableWriteError(f"could not write {path}: {e}") from e


class BackgroundWriter:
    """Atomic file writes done by one thread, in submission order, so no event loop waits on a disk.

    Writes to the same path coalesce (the newest content wins: each is a whole-file image). Each
    write has a sequence number (`submitted` after it); `drained(since)` returns once every write
    submitted after `since` is on disk, and raises `DurableWriteError` when one of them failed, so a
    server answers a request that changed a persisted table only after the change is durable, and
    answers an error when it is not.

    A failed write (a full disk) is never left standing in memory: the path is marked failed; every
    change whose image did not land (the failed one, those coalesced or queued behind it, and those
    submitted before the roll-back ran) is undone, newest first, on the caller's side (the event loop
    that submitted them, or the next `write` / `drained`), never in the writer thread. After the
    roll-back the table equals its last image on disk, and the next write starts from there.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self._cond = threading.Condition()
        self._pending: dict[Path, bytes] = {}
        self._entries: dict[Path, list[tuple[int, Undo | None]]] = {}
        """(seq, undo) of every change in a pending or in-flight image, per path, in submission order."""
        self._failed_paths: dict[Path, str] = {}
        """Paths whose write failed and whose changes are not rolled back yet: why."""
        self._rollback: list[tuple[int, Undo]] = []
        self._failures: collections.deque[tuple[int, Path, str]] = collections.deque(maxlen=FAILURES_KEPT)
        """(seq, path, why) of each failed write, oldest first: what `drained` reports."""
        self._submitted = 0
        self._done = 0
        self._busy = False
        self._waiters: list[tuple[int, concurrent.futures.Future[None]]] = []
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.failures = 0
        self.writes = 0

    def write(self, path: Path, data: bytes, undo: Undo | None = None) -> None:
        """Queue an image of `path`; `undo` puts the table back should this image never land."""
        try:
            self._loop = asyncio.get_running_loop()
        except RuntimeError:
            pass
        with self._cond:
            self._submitted += 1
            seq = self._submitted
            if path in self._failed_paths:  # built on changes being rolled back: it fails with them
                self._fail_locked(path, [(seq, undo)], self._failed_paths[path])
                self._settle_locked()
            else:
                self._pending[path] = data
                self._entries.setdefault(path, []).append((seq, undo))
                if self._thread is None:
                    self._thread = threading.Thread(target=self._run, name=f"{self.name}-writer", daemon=True)
                    self._thread.start()
                self._cond.notify()
                return
        self.roll_back()
        self._resolve()

    @property
    def pending(self) -> bool:
        """Whether some submitted write is not on disk (or known failed) yet."""
        return self._done < self._submitted

    @property
    def submitted(self) -> int:
        """Writes submitted so far: taken before a request, it tells whether the request wrote."""
        return self._submitted

    def failure_since(self, since: int, path: Path | None = None) -> str | None:
        """Why a write submitted after `since` (of `path` only, when given) and already done
        failed, or None."""
        with self._cond:
            for seq, failed_path, why in self._failures:
                if since < seq <= self._done and path in (None, failed_path):
                    return why
        return None

    async def drained(self, since: int | None = None, path: Path | None = None) -> None:
        """On an event loop: returns once everything submitted so far is on disk; with `since` (a
        `submitted` count), at once when nothing was submitted after it, and raises
        `DurableWriteError` when a write submitted after it (of `path` only, when given) failed
        (its change is rolled back)."""
        if since is not None and self._submitted == since:
            return
        if self.pending:
            await asyncio.wrap_future(self.flushed())
        self.roll_back()
        if since is not None:
            why = self.failure_since(since, path)
            if why is not None:
                raise DurableWriteError(why)

    async def written(self, since: int, path: Path | None = None) -> str | None:
        """`drained(since, path)` as an answer: None once everything submitted after `since` is on
        disk, else why it (of `path`, when given) is not (its change is rolled back): what a
        request that waited is told."""
        try:
            await self.drained(since, path)
        except DurableWriteError as e:
            return str(e)
        return None

    def flushed(self) -> concurrent.futures.Future[None]:
        """Completes once everything submitted before the call is written or known failed."""
        future: concurrent.futures.Future[None] = concurrent.futures.Future()
        with self._cond:
            if self._done >= self._submitted:
                future.set_result(None)
            else:
                self._waiters.append((self._submitted, future))
        return future

    def roll_back(self) -> None:
        """Undo the changes of every failed image, newest first (on the tables' side)."""
        with self._cond:
            undos, self._rollback = self._rollback, []
            self._failed_paths.clear()
        for _, undo in sorted(undos, key=lambda su: su[0], reverse=True):
            try:
                undo()
            except Exception:  # one bad undo must not keep the others from running
                log.exception("%s: rolling back a change failed", self.name)

    def _fail_locked(self, path: Path, entries: list[tuple[int, Undo | None]], why: str) -> None:
        self._failures.extend((seq, path, why) for seq, _ in entries)
        self._rollback.extend((seq, undo) for seq, undo in entries if undo is not None)

    def _settle_locked(self) -> None:
        if not self._pending and not self._busy:
            self._done = self._submitted

    def _resolve(self) -> None:
        with self._cond:
            ready = [f for seq, f in self._waiters if seq <= self._done]
            self._waiters = [(seq, f) for seq, f in self._waiters if seq > self._done]
        for f in ready:
            f.set_result(None)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._pending:
                    self._cond.wait()
                batch, self._pending = self._pending, {}
                entries = {path: self._entries.pop(path, []) for path in batch}
                upto = self._submitted
                self._busy = True
            failed: dict[Path, str] = {}
            for path, data in batch.items():
                try:
                    atomic_write(path, data)
                    self.writes += 1
                except OSError as e:
                    self.failures += 1
                    failed[path] = f"could not write {path}: {e}"
                    log.exception("%s: could not write %s", self.name, path)
            with self._cond:
                self._busy = False
                for path, why in failed.items():
                    # this image and every one queued behind it (built on the same changes) fail
                    self._failed_paths[path] = why
                    self._pending.pop(path, None)
                    self._fail_locked(path, entries[path] + self._entries.pop(path, []), why)
                self._done = upto
                self._settle_locked()
            if failed and self._loop is not None and not self._loop.is_closed():
                try:
                    self._loop.call_soon_threadsafe(self.roll_back)
                except RuntimeError:  # the loop closed meanwhile: the next write or drained rolls back
                    pass
            self._resolve()
