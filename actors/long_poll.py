"""Route-change long-poll (Ray Serve's LongPollHost, keyed by topic).

A client holds the route versions it has; the host returns the routes whose version differs as soon
as one does. Waiters are kept per topic and woken only when a route they hold changes: a topic's own
queue data, or a broker group that hosts it (its addresses or filter servers).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from namesrv.routeinfo.changes import RouteChanges
from namesrv.routeinfo.route_info_manager import RouteInfoManager


class LongPollHost:
    def __init__(self) -> None:
        self._waiters: dict[str, set[asyncio.Event]] = {}
        self.pushes = 0
        """Waiters woken so far (one per woken call, not per topic)."""

    @property
    def waiter_count(self) -> int:
        return len({id(e) for events in self._waiters.values() for e in events})

    async def wait(self, topics: Iterable[str], timeout_s: float) -> bool:
        """Wait until one of `topics` changes (True) or `timeout_s` passes (False)."""
        event = asyncio.Event()
        keys = list(topics)
        for topic in keys:
            self._waiters.setdefault(topic, set()).add(event)
        try:
            await asyncio.wait_for(event.wait(), timeout=max(0.0, timeout_s))
            return True
        except TimeoutError:
            return False
        finally:
            for topic in keys:
                events = self._waiters.get(topic)
                if events is not None:
                    events.discard(event)
                    if not events:
                        del self._waiters[topic]

    def notify_changed(self, changes: RouteChanges, rim: RouteInfoManager) -> int:
        """Wake the waiters of every topic whose route `changes` touched; returns how many woke."""
        woken: set[asyncio.Event] = set()
        if not self._waiters:
            return 0
        for topic in changes.topics:
            woken.update(self._waiters.get(topic, ()))
        for broker_name in changes.broker_names:
            # The smaller side decides the walk: held topics, or the topics the broker hosts.
            if len(self._waiters) <= rim.topic_count_of(broker_name):
                for topic, events in self._waiters.items():
                    if rim.hosts_topic(broker_name, topic):
                        woken.update(events)
            else:
                for topic in rim.topics_of_broker(broker_name):
                    woken.update(self._waiters.get(topic, ()))
        for event in woken:
            event.set()
        self.pushes += len(woken)
        return len(woken)

    def notify_all(self) -> None:
        """Wake everyone (the 'not ready' gate opened: every held route may now be answered)."""
        for events in self._waiters.values():
            for event in events:
                event.set()
