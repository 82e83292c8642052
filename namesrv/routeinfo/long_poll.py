"""Route-change long-poll (Ray Serve's LongPollHost, keyed by topic).

A client holds the route versions it has; the host returns the routes whose version differs as soon
as one does. Waiters are kept per topic and woken only when a route they hold changes: a topic's own
queue data, or a broker group that hosts it (its addresses or filter servers). While the NameServer
is not ready (its 'not ready' window) nothing is answered; a held poll is woken when it opens.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from namesrv.protocol.codes import ResponseCode
from namesrv.protocol.models import TopicRouteData
from namesrv.remoting.command import MQServerError
from namesrv.routeinfo.changes import RouteChanges
from namesrv.routeinfo.route_info_manager import RouteInfoManager


@dataclass(frozen=True, slots=True)
class RouteChange:
    """One topic's route as the long-poll hands it out: its version and the route (None: gone)."""

    version: int
    route: TopicRouteData | None


def check_topic_versions(topic_versions: object) -> None:
    """A long-poll's held versions must map topic names to integer versions; else MQServerError
    (SYSTEM_ERROR "invalid request: ..."), as a route query with a bad header is answered."""
    if not isinstance(topic_versions, dict) or not all(
        isinstance(t, str) and isinstance(v, int) and not isinstance(v, bool) for t, v in topic_versions.items()
    ):
        raise MQServerError(ResponseCode.SYSTEM_ERROR,
                            "invalid request: topic_versions must map topic names to integer versions")


class LongPollHost:
    def __init__(self, rim: RouteInfoManager, *, ready: Callable[[], bool], gate_remaining_ms: Callable[[], int],
                 route_of: Callable[[str], TopicRouteData | None], closed: Callable[[], bool]) -> None:
        """`ready()`: routes may be answered (the 'not ready' gate is open), else it may stay shut
        for `gate_remaining_ms()` more; `route_of(topic)` is the route as a route query answers it;
        `closed()`: the host is shutting down."""
        self.rim = rim
        self._ready = ready
        self._gate_remaining_ms = gate_remaining_ms
        self._route_of = route_of
        self._closed = closed
        self._waiters: dict[str, set[asyncio.Event]] = {}
        self.pushes = 0
        """Waiters woken so far (one per woken call, not per topic)."""

    @property
    def waiter_count(self) -> int:
        return len({id(e) for events in self._waiters.values() for e in events})

    async def listen_for_change(
        self, topic_versions: dict[str, int], timeout_s: float | None
    ) -> dict[str, RouteChange]:
        """Return {topic: RouteChange} for every held topic whose route version differs from the
        caller's, as soon as one does, or {} after the timeout (30-60 s random by default, so clients
        do not all come back at once). Malformed `topic_versions` raise MQServerError (SYSTEM_ERROR)."""
        check_topic_versions(topic_versions)
        wait_s = random.uniform(30.0, 60.0) if timeout_s is None else float(timeout_s)
        deadline = time.monotonic() + wait_s
        while True:
            if self._ready():
                changes: dict[str, RouteChange] = {}
                for topic, held in topic_versions.items():
                    version = self.rim.route_version(topic)
                    if version != held:
                        changes[topic] = RouteChange(version, self._route_of(topic))  # as polled
                if changes:
                    return changes
            remaining = deadline - time.monotonic()
            if remaining <= 0 or self._closed():
                return {}
            gate_ms = self._gate_remaining_ms()
            if gate_ms:
                remaining = min(remaining, gate_ms / 1000 + 0.001)
            await self.wait(topic_versions, remaining)

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

    def notify_changed(self, changes: RouteChanges) -> int:
        """Wake the waiters of every topic whose route `changes` touched; returns how many woke."""
        woken: set[asyncio.Event] = set()
        rim = self.rim
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
