"""Crash-safe file replacement: a reader sees the old file or the new one, never half of either;
and a writer thread that does it off an event loop."""

from __future__ import annotations

import asyncio
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
    dir_fd = os.open(target.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


FileWriter = Callable[[Path, bytes], None]
"""How a manager persists its table: `atomic_write` itself (in the caller's thread) or a
`BackgroundWriter`'s `write` (queued for a thread, off an event loop)."""


class BackgroundWriter:
    """Atomic file writes done by one thread, in submission order, so no event loop waits on a disk.

    Writes to the same path coalesce (the newest content wins: each is a whole-file image). `flushed()`
    gives a future that completes once everything submitted before the call is on disk, so a server
    answers a request that changed a persisted table only after the change is durable. A write that
    fails (a full disk) is logged and counted; the table in memory stays, and the next write retries.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self._cond = threading.Condition()
        self._pending: dict[Path, bytes] = {}
        self._submitted = 0
        self._done = 0
        self._waiters: list[tuple[int, concurrent.futures.Future[None]]] = []
        self._thread: threading.Thread | None = None
        self.failures = 0
        self.writes = 0

    def write(self, path: Path, data: bytes) -> None:
        with self._cond:
            self._pending[path] = data
            self._submitted += 1
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=f"{self.name}-writer", daemon=True)
                self._thread.start()
            self._cond.notify()

    @property
    def pending(self) -> bool:
        """Whether some submitted write is not on disk yet."""
        return self._done < self._submitted

    @property
    def submitted(self) -> int:
        """Writes submitted so far: taken before a request, it tells whether the request wrote."""
        return self._submitted

    async def drained(self, since: int | None = None) -> None:
        """On an event loop: returns once everything submitted so far is on disk; with `since` (a
        `submitted` count), at once when nothing was submitted after it."""
        if since is not None and self._submitted == since:
            return
        if self.pending:
            await asyncio.wrap_future(self.flushed())

    def flushed(self) -> concurrent.futures.Future[None]:
        future: concurrent.futures.Future[None] = concurrent.futures.Future()
        with self._cond:
            if self._done >= self._submitted:
                future.set_result(None)
            else:
                self._waiters.append((self._submitted, future))
        return future

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._pending:
                    self._cond.wait()
                batch, self._pending = self._pending, {}
                upto = self._submitted
            for path, data in batch.items():
                try:
                    atomic_write(path, data)
                    self.writes += 1
                except OSError:
                    self.failures += 1
                    log.exception("%s: could not write %s", self.name, path)
            with self._cond:
                self._done = upto
                ready = [f for seq, f in self._waiters if seq <= upto]
                self._waiters = [(seq, f) for seq, f in self._waiters if seq > upto]
            for f in ready:
                f.set_result(None)
