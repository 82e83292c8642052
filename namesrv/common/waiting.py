"""The one poll helper, for state that offers no event to wait on (an actor restarting, the GCS
catching up after a kill). Where an event exists (a route change), wait on the event instead."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class WaitTimeout(TimeoutError):
    """The condition did not hold in time; the message says what was awaited and what was last seen."""


def wait_until(predicate: Callable[[], T], timeout_s: float, what: str = "a condition",
               interval_s: float = 0.05) -> T:
    """Re-check `predicate` every `interval_s` until it returns something truthy (returned) or
    `timeout_s` pass (WaitTimeout). An exception from the predicate counts as 'not yet'."""
    deadline = time.monotonic() + timeout_s
    last: object = None
    while True:
        try:
            value = predicate()
        except Exception as e:  # e.g. an actor still restarting: keep trying until the deadline
            last = e
        else:
            if value:
                return value
            last = value
        if time.monotonic() >= deadline:
            raise WaitTimeout(f"timed out after {timeout_s:.1f} s waiting for {what}; last saw: {last!r}")
        time.sleep(interval_s)
