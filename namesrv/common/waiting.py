"""The one poll helper, for state that offers no event to wait on (an actor restarting, the GCS
catching up after a kill). Where an event exists (a route change), wait on the event instead.
`wait_until` sleeps between checks; `wait_until_async` awaits, for a check made on an event loop."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class WaitTimeout(TimeoutError):
    """The condition did not hold in time; the message says what was awaited and what was last seen."""


class _Check:
    """One poll's bookkeeping: the deadline, and what the predicate last gave."""

    def __init__(self, timeout_s: float, what: str) -> None:
        self.deadline = time.monotonic() + timeout_s
        self.timeout_s = timeout_s
        self.what = what
        self.last: object = None

    def met(self, predicate: Callable[[], T]) -> T | None:
        """The predicate's value when truthy, else None; WaitTimeout once the deadline has passed.
        An exception from the predicate counts as 'not yet' (e.g. an actor still restarting)."""
        try:
            value = predicate()
        except Exception as e:
            self.last = e
        else:
            if value:
                return value
            self.last = value
        if time.monotonic() >= self.deadline:
            raise WaitTimeout(f"timed out after {self.timeout_s:.1f} s waiting for {self.what}; "
                              f"last saw: {self.last!r}")
        return None


def wait_until(predicate: Callable[[], T], timeout_s: float, what: str = "a condition",
               interval_s: float = 0.05) -> T:
    """Re-check `predicate` every `interval_s` until it returns something truthy (returned) or
    `timeout_s` pass (WaitTimeout)."""
    check = _Check(timeout_s, what)
    while (value := check.met(predicate)) is None:
        time.sleep(interval_s)
    return value


async def wait_until_async(predicate: Callable[[], T], timeout_s: float, what: str = "a condition",
                           interval_s: float = 0.01) -> T:
    """`wait_until` for a predicate the event loop makes true: awaits between checks."""
    check = _Check(timeout_s, what)
    while (value := check.met(predicate)) is None:
        await asyncio.sleep(interval_s)
    return value
