"""Injectable millisecond clocks: every timing rule in the core reads one, so tests control time."""

from __future__ import annotations

import time
from collections.abc import Callable

Clock = Callable[[], int]
"""Returns the current time in milliseconds."""


def system_clock() -> int:
    return time.time_ns() // 1_000_000


def monotonic_clock() -> int:
    """Milliseconds of a clock that never jumps: for durations within one process, never for times
    compared across processes."""
    return time.monotonic_ns() // 1_000_000


class ManualClock:
    """A clock that moves only when told to; the unit tests' time machine."""

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self.now_ms = start_ms

    def __call__(self) -> int:
        return self.now_ms

    def advance(self, ms: int) -> int:
        if ms < 0:
            raise ValueError("time only moves forward")
        self.now_ms += ms
        return self.now_ms
