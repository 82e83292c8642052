"""Long pulls held until a message arrives (RocketMQ's PullRequestHoldService), woken per queue."""

from __future__ import annotations

import asyncio


class PullHoldService:
    """Pulls waiting for new messages (RocketMQ's PullRequestHoldService), woken per queue."""

    def __init__(self) -> None:
        self._waiters: dict[tuple[str, int], asyncio.Event] = {}
        self.held = 0

    async def wait(self, topic: str, queue_id: int, timeout_s: float) -> None:
        key = (topic, queue_id)
        event = self._waiters.get(key)
        if event is None:
            event = self._waiters[key] = asyncio.Event()
        self.held += 1
        try:
            await asyncio.wait_for(event.wait(), timeout_s)
        except TimeoutError:
            pass
        finally:
            self.held -= 1

    def notify(self, topic: str, queue_id: int) -> None:
        event = self._waiters.pop((topic, queue_id), None)
        if event is not None:
            event.set()

    def notify_all(self) -> None:
        for key in list(self._waiters):
            self.notify(*key)
