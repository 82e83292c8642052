"""Long pulls held until a message arrives (RocketMQ's PullRequestHoldService), woken per queue.

A held pull is answered as soon as its queue holds a message at or past the offset it asked for.
Three things wake it: a send's notify for its queue; a check made right after the hold is
registered (a message stored between the pull's read and its hold was notified to nobody: the
check sees it, and anything stored after the check notifies the hold); and a periodic re-check,
every 5 s with long polling and every `shortPollingTimeMills` without (as PullRequestHoldService
checks every held queue's max offset), for a message stored by a path that does not notify.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

LONG_POLLING_CHECK_INTERVAL_S = 5.0
"""PullRequestHoldService's period with long polling on."""


class PullHoldService:
    """Pulls waiting for new messages (RocketMQ's PullRequestHoldService), woken per queue."""

    def __init__(self) -> None:
        self._waiters: dict[tuple[str, int], asyncio.Event] = {}
        self.held = 0
        self.rechecks = 0
        """Checks made because a hold's wait timed out (the periodic re-check, or the last look at
        its deadline), not because its queue was notified."""

    async def wait(self, topic: str, queue_id: int, timeout_s: float, arrived: Callable[[], bool],
                   check_interval_s: float = LONG_POLLING_CHECK_INTERVAL_S) -> bool:
        """Hold until `arrived()` (the queue has a message for this pull, or the broker closes) or
        `timeout_s`; returns whether it arrived. `arrived` is checked once the hold is registered,
        after every notify of the queue, and every `check_interval_s`."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        key = (topic, queue_id)
        self.held += 1
        try:
            while True:
                event = self._waiters.get(key)
                if event is None:
                    event = self._waiters[key] = asyncio.Event()
                if arrived():  # registered first: whatever is stored after this check notifies `event`
                    return True
                remaining = deadline - loop.time()
                if remaining <= 0:
                    return False
                try:
                    await asyncio.wait_for(event.wait(), min(remaining, check_interval_s))
                except TimeoutError:
                    self.rechecks += 1
        finally:
            self.held -= 1

    def notify(self, topic: str, queue_id: int) -> None:
        """Wake the holds of the queue, and those of any queue of the topic (queue id -1: a pop of
        every queue, namesrv.broker.pop)."""
        for key in ((topic, queue_id), (topic, -1)):
            event = self._waiters.pop(key, None)
            if event is not None:
                event.set()

    def notify_all(self) -> None:
        for key in list(self._waiters):
            self.notify(*key)
