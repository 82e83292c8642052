"""What each NameServer last said about each topic, and their union: the route source of a client
with `route_union` on (namesrv.client.route_union says why and why it is safe).

A view is kept only while its NameServer answers: a NameServer that fails a query or a long-poll
loses its views until it answers again, so a client cut off from a NameServer does not go on
believing what it said before the cut. One that is only late to a query (past `LATE_GRACE_S` after
the first answer) keeps its views: its long-poll tells whether it is gone.
"""

from __future__ import annotations

import logging
import threading

from clients.impl.namesrv_client import NameServerClient
from namesrv.client.errors import NameServerLate, NoNameServerAvailable, TopicNotFound
from namesrv.client.route_union import union_of_routes
from namesrv.protocol.models import TopicRouteData

log = logging.getLogger(__name__)

LATE_GRACE_S = 0.3
"""Once one NameServer answered a route query, how much longer the others have; one later than that
keeps its last view (a NameServer restarting holds a query for seconds, and a consumer's rebalance
asks topic after topic)."""
UNION_VERSION = -1
"""The route version a union carries: versions are one NameServer's counter, a union has none."""


class RouteViews:
    def __init__(self, namesrv: NameServerClient) -> None:
        self.namesrv = namesrv
        self.names = list(namesrv.namesrv_names)
        self._lock = threading.Lock()
        self._views: dict[str, dict[str, tuple[TopicRouteData | None, int]]] = {n: {} for n in self.names}

    def get_topic_route(self, topic: str) -> tuple[TopicRouteData, int]:
        """Ask every NameServer at once and answer the union of what the answering ones hold
        (`RouteSource`): TopicNotFound when none of them has a route, NoNameServerAvailable when
        none answered."""
        answers = self.namesrv.get_topic_route_everywhere(topic, grace_s=LATE_GRACE_S)
        failed = {n: a for n, a in answers.items() if isinstance(a, Exception) and not isinstance(a, NameServerLate)}
        with self._lock:
            for name, answer in answers.items():
                if isinstance(answer, NameServerLate):
                    continue  # alive, only slow (restarting, busy): its last word stands
                if isinstance(answer, Exception):
                    self._views[name].clear()
                else:
                    self._views[name][topic] = answer
        if len(failed) == len(self.names):
            raise NoNameServerAvailable("; ".join(f"{n}: {type(e).__name__} {e}" for n, e in failed.items()))
        for name, e in failed.items():
            log.info("route of %s: %s did not answer (%s), its views are dropped", topic, name, type(e).__name__)
        route = self.union(topic)
        if route is None:
            raise TopicNotFound(topic)
        return route, UNION_VERSION

    def held_versions(self, name: str, topics: set[str]) -> dict[str, int]:
        """The version of each topic as NameServer `name` last told it (-1: not known), for its long-poll."""
        with self._lock:
            view = self._views[name]
            return {t: view[t][1] if t in view else -1 for t in topics}

    def changed(self, name: str, topic: str, route: TopicRouteData | None, version: int) -> TopicRouteData | None:
        """NameServer `name` pushed a change of `topic`: the union now."""
        with self._lock:
            self._views[name][topic] = (route, version)
        return self.union(topic)

    def lost(self, name: str) -> list[str]:
        """NameServer `name` stopped answering: drop its views. The topics whose union may have
        changed and that another NameServer still has a view of (a topic no answering NameServer
        holds keeps the route the client has, as when no NameServer answers a RocketMQ client)."""
        with self._lock:
            topics = list(self._views[name])
            self._views[name].clear()
            return [t for t in topics if any(t in view for view in self._views.values())]

    def union(self, topic: str) -> TopicRouteData | None:
        with self._lock:
            views = [self._views[n].get(topic, (None, -1))[0] for n in self.names]
        return union_of_routes(views)
