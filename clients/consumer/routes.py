"""A consumer's view of its topics' routes (RocketMQ's topicSubscribeInfoTable and
findBrokerAddressInSubscribe): the readable queues of each topic and where each broker is, fetched
from the NameServer actors at each rebalance (from every one of them with `route_union`)."""

from __future__ import annotations

import logging
import threading

from namesrv.client.errors import TopicNotFound
from namesrv.client.rebalance.strategies import sorted_queues
from namesrv.client.route_source import RouteSource
from namesrv.protocol.constants import MASTER_ID, is_readable
from namesrv.protocol.models import MessageQueue, TopicRouteData

log = logging.getLogger(__name__)


class ConsumerRoutes:
    def __init__(self, source: RouteSource) -> None:
        """`source`: a NameServerClient (one NameServer at a time, as RocketMQ) or RouteViews (the
        union of every NameServer's route)."""
        self.source = source
        self._lock = threading.Lock()
        self._routes: dict[str, TopicRouteData] = {}

    def refresh(self, topic: str) -> TopicRouteData | None:
        """Ask the NameServers again (None: the topic has no route; the last one is kept on failure)."""
        try:
            route, _ = self.source.get_topic_route(topic)
        except TopicNotFound:
            with self._lock:
                self._routes.pop(topic, None)
            return None
        except Exception as e:
            log.warning("route of %s not refreshed: %s", topic, e)
            with self._lock:
                return self._routes.get(topic)
        with self._lock:
            self._routes[topic] = route
        return route

    def queues(self, topic: str) -> list[MessageQueue]:
        """The topic's readable queues, sorted (topicRouteData2TopicSubscribeInfo)."""
        with self._lock:
            route = self._routes.get(topic)
        if route is None:
            return []
        return sorted_queues(MessageQueue(topic, qd.broker_name, i) for qd in route.queue_datas
                             if is_readable(qd.perm) for i in range(qd.read_queue_nums))

    def broker_addr(self, broker_name: str, master_only: bool = False) -> str | None:
        """The master's address, else (unless `master_only`) the lowest slave's."""
        with self._lock:
            routes = list(self._routes.values())
        for route in routes:
            for bd in route.broker_datas:
                if bd.broker_name != broker_name or not bd.broker_addrs:
                    continue
                if MASTER_ID in bd.broker_addrs:
                    return bd.broker_addrs[MASTER_ID]
                if not master_only:
                    return bd.broker_addrs[min(bd.broker_addrs)]
        return None

    def broker_addrs(self, topics: set[str]) -> set[str]:
        """Every broker (master, else lowest slave) of these topics' routes."""
        with self._lock:
            names = {bd.broker_name for t in topics if (r := self._routes.get(t)) is not None for bd in r.broker_datas}
        return {a for n in names if (a := self.broker_addr(n)) is not None}
