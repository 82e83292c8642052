"""A topic's route assembled from the route tables (RocketMQ's pickupTopicRouteData), built once per
route version and shared by every caller until the route changes."""

from __future__ import annotations

from namesrv.protocol.models import BrokerData, QueueData, TopicRouteData
from namesrv.routeinfo.tables import RouteTables


class RouteAssembler:
    def __init__(self, tables: RouteTables) -> None:
        self._tables = tables
        self._cache = tables.route_cache
        """topic -> (its route version, its route); the tables drop a topic that loses its last queue."""

    def pickup(self, topic: str) -> tuple[TopicRouteData | None, int]:
        """The topic's route (None unless it has queue data on a known broker group) and its version."""
        version = self._tables.route_version(topic)
        cached = self._cache.get(topic)
        if cached is not None and cached[0] == version:
            return cached[1], version
        route = self._build(topic)
        if route is None:
            self._cache.pop(topic, None)
        else:
            self._cache[topic] = (version, route)
        return route, version

    def _build(self, topic: str) -> TopicRouteData | None:
        """The topic's queue datas (frozen: shared with the tables) and copies of the groups that
        host them, with their filter servers. Cost depends on the brokers hosting the topic, never
        on the table sizes."""
        tables = self._tables
        queue_map = tables.topic_queue_table.get(topic)
        if not queue_map:
            return None
        queue_datas: list[QueueData] = []
        broker_datas: list[BrokerData] = []
        filter_servers: dict[str, list[str]] = {}
        for broker_name, qd in queue_map.items():
            queue_datas.append(qd)  # frozen: shared with the table, nothing to copy
            bd = tables.broker_addr_table.get(broker_name)
            if bd is None:
                continue
            broker_datas.append(bd.copy())
            if tables.filter_server_table:
                for addr in bd.broker_addrs.values():
                    servers = tables.filter_server_table.get(addr)
                    if servers:
                        filter_servers[addr] = list(servers)
        if not broker_datas:
            return None
        return TopicRouteData(queue_datas, broker_datas, filter_servers)
