"""A topic's route assembled from the route tables (RocketMQ's pickupTopicRouteData), built once per
route version and shared by every caller until the route changes."""

from __future__ import annotations

from typing import TYPE_CHECKING

from namesrv.protocol.models import BrokerData, QueueData, TopicRouteData

if TYPE_CHECKING:
    from namesrv.routeinfo.route_info_manager import RouteInfoManager


class RouteAssembler:
    def __init__(self, rim: RouteInfoManager) -> None:
        self._rim = rim
        self._cache: dict[str, tuple[int, TopicRouteData]] = {}

    def pickup(self, topic: str) -> tuple[TopicRouteData | None, int]:
        """The topic's route (None unless it has queue data on a known broker group) and its version."""
        version = self._rim.route_version(topic)
        cached = self._cache.get(topic)
        if cached is not None and cached[0] == version:
            return cached[1], version
        route = self._build(topic)
        if route is None:
            self._cache.pop(topic, None)
        else:
            self._cache[topic] = (version, route)
        return route, version

    def forget(self, topic: str) -> None:
        """The topic has no queue data any more: drop its cached route."""
        self._cache.pop(topic, None)

    def _build(self, topic: str) -> TopicRouteData | None:
        """Copies of the topic's queue datas and of the groups that host them, with their filter
        servers. Cost depends on the brokers hosting the topic, never on the table sizes."""
        rim = self._rim
        queue_map = rim.topic_queue_table.get(topic)
        if not queue_map:
            return None
        queue_datas: list[QueueData] = []
        broker_datas: list[BrokerData] = []
        filter_servers: dict[str, list[str]] = {}
        for broker_name, qd in queue_map.items():
            queue_datas.append(qd.copy())
            bd = rim.broker_addr_table.get(broker_name)
            if bd is None:
                continue
            broker_datas.append(bd.copy())
            if rim.filter_server_table:
                for addr in bd.broker_addrs.values():
                    servers = rim.filter_server_table.get(addr)
                    if servers:
                        filter_servers[addr] = list(servers)
        if not broker_datas:
            return None
        return TopicRouteData(queue_datas, broker_datas, filter_servers)
