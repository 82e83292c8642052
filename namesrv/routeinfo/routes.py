"""A topic's route assembled from the route tables (RocketMQ's pickupTopicRouteData), built once per
route version and shared by every caller until the route changes: immutable all the way down
(TopicRouteData: tuples, frozen QueueData, frozen BrokerData with read-only addresses), so no caller
can change what the next one gets, and handing it out costs no copy."""

from __future__ import annotations

from namesrv.common.frozen import FrozenDict
from namesrv.protocol.models import BrokerData, QueueData, TopicRouteData
from namesrv.routeinfo.tables import RouteTables


class RouteAssembler:
    def __init__(self, tables: RouteTables) -> None:
        self._tables = tables
        self._cache = tables.route_cache
        """topic -> [its route version, its route, route_seq it was found current at]; the tables
        drop a topic that loses its last queue."""
        self._groups: dict[str, tuple[int, BrokerData]] = {}
        """brokerName -> (its broker version, one copy of its BrokerData) shared by every route built
        while that version holds: 300 brokers x 10,000 cached routes hold 300 copies, not 3 million."""

    def pickup(self, topic: str) -> tuple[TopicRouteData | None, int]:
        """The topic's route (None unless it has queue data on a known broker group) and its version.

        A cached route found current at route_seq S stays current while neither its topic nor any
        broker group was touched after S: O(1) then. Otherwise its version is recomputed over the
        groups hosting it (300 groups: ~10 µs) and, when unchanged, the route is current at the new
        seq; a changed version rebuilds it."""
        tables = self._tables
        cached = self._cache.get(topic)
        if cached is not None:
            checked = cached[2]
            if tables.last_broker_touch <= checked and tables.topic_version.get(topic, 0) <= checked:
                return cached[1], cached[0]
        version = tables.route_version(topic)
        if cached is not None and cached[0] == version:
            cached[2] = tables.route_seq
            return cached[1], version
        route = self._build(topic)
        if route is None:
            self._cache.pop(topic, None)
        else:
            self._cache[topic] = [version, route, tables.route_seq]
        return route, version

    def _build(self, topic: str) -> TopicRouteData | None:
        """The topic's queue datas (frozen: shared with the tables) and copies of the groups that
        host them (one copy per group version, shared by the routes), with their filter servers.
        Cost depends on the brokers hosting the topic, never on the table sizes."""
        tables = self._tables
        queue_map = tables.topic_queue_table.get(topic)
        if not queue_map:
            return None
        queue_datas: list[QueueData] = []
        broker_datas: list[BrokerData] = []
        filter_servers: dict[str, tuple[str, ...]] = {}
        for broker_name, qd in queue_map.items():
            queue_datas.append(qd)  # frozen: shared with the table, nothing to copy
            bd = tables.broker_addr_table.get(broker_name)
            if bd is None:
                continue
            broker_datas.append(self._group_copy(broker_name, bd))
            if tables.filter_server_table:
                for addr in bd.broker_addrs.values():
                    servers = tables.filter_server_table.get(addr)
                    if servers:
                        filter_servers[addr] = tuple(servers)
        if not broker_datas:
            return None
        return TopicRouteData(tuple(queue_datas), tuple(broker_datas), FrozenDict(filter_servers))

    def _group_copy(self, broker_name: str, bd: BrokerData) -> BrokerData:
        """A read-only copy of the table's `bd` (`frozen_copy`), made once per broker version (every
        change to a group's addresses touches its version): never the table's own object."""
        version = self._tables.broker_version.get(broker_name, 0)
        held = self._groups.get(broker_name)
        if held is None or held[0] != version:
            if len(self._groups) > 2 * len(self._tables.broker_addr_table) + 64:  # groups removed long ago
                self._groups = {n: g for n, g in self._groups.items() if n in self._tables.broker_addr_table}
            held = self._groups[broker_name] = (version, bd.frozen_copy())
        return held[1]
