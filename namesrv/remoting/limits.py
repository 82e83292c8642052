"""What a remoting server holds for its clients at most, before any request is authenticated.

`ServerLimits` are the bounds (RemotingServerConfig's server_* fields); `FrameBudget` is the
server-wide budget of bytes that large partial frames reserve before more of them is read, with the
connections waiting for it, in order; `HeapTrim` gives the memory of dropped half frames back to
the OS.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from namesrv.remoting.config import RemotingServerConfig


@dataclass(frozen=True, slots=True)
class ServerLimits:
    """What a server holds for its clients at most (RemotingServerConfig's server_* fields)."""

    max_connections: int = 1024
    small_frame_max_length: int = 64 * 1024
    pending_frames_max_bytes: int = 64 * 1024 * 1024
    large_codes: frozenset[int] | None = None
    """Request codes that may send frames longer than `small_frame_max_length` (None: any)."""


def server_limits(config: RemotingServerConfig | None, large_codes: frozenset[int]) -> ServerLimits:
    """The limits a server config sets (the defaults without one: a server that never listens)."""
    if config is None:
        return ServerLimits(large_codes=large_codes)
    return ServerLimits(config.server_max_connections, config.server_small_frame_max_length,
                        config.server_pending_frames_max_bytes, large_codes)


class BudgetWaiter(Protocol):
    def retry_budget(self) -> bool:
        """Budget was freed: reserve it and read on (False: still not enough)."""


class FrameBudget:
    """The pending-frame budget shared by a server's connections."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.reserved = 0
        """What large partial frames have reserved now."""
        self.waits = 0
        """Times a connection stopped reading because the budget was spent."""
        self.waiters: list[BudgetWaiter] = []

    def reserve(self, n: int) -> bool:
        """Reserve `n` bytes (a frame bigger than the whole budget still gets it, when nothing else
        holds any)."""
        if self.reserved > 0 and self.reserved + n > self.max_bytes:
            return False
        self.reserved += n
        return True

    def wait(self, waiter: BudgetWaiter) -> None:
        """`waiter` stopped reading until budget is released (then its `retry_budget` is called)."""
        self.waits += 1
        self.waiters.append(waiter)

    def release(self, n: int) -> None:
        """Give `n` reserved bytes back, and let the connections waiting for them read on, in order."""
        self.reserved -= n
        waiters, self.waiters = self.waiters, []
        for i, waiter in enumerate(waiters):
            if not waiter.retry_budget():
                self.waiters = waiters[i:] + self.waiters
                break


def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's malloc_trim: freed buffers of big half frames are scattered over the heap, where
    glibc keeps them from the OS (RSS stays up) until asked to give free pages back."""
    try:
        trim: Callable[[int], int] = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):  # not glibc
        return None
    return trim


MALLOC_TRIM = _malloc_trim()


class HeapTrim:
    def __init__(self) -> None:
        self._scheduled = False

    def soon(self) -> None:
        """Return freed memory to the OS after this loop turn (once, however many asked in it)."""
        if MALLOC_TRIM is not None and not self._scheduled:
            self._scheduled = True
            asyncio.get_event_loop().call_soon(self._trim)

    def _trim(self) -> None:
        self._scheduled = False
        if MALLOC_TRIM is not None:
            MALLOC_TRIM(0)


@dataclass(frozen=True, slots=True)
class ServerStats:
    connections: int
    accepted: int
    requests: int
    bad_frames: int
    idle_closed: int
    refused_connections: int
    buffered_bytes: int
    """Bytes of partial frames held by all connections now."""
    reserved_bytes: int
    """Of the pending-frame budget, what large partial frames have reserved now."""
    budget_waits: int
    """Times a connection stopped reading because the pending-frame budget was spent."""
