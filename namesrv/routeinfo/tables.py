"""The route tables of a NameServer and the few writes that keep their indexes in step.

RocketMQ's RouteInfoManager holds five tables; here they live in a :class:`RouteTables` that the
manager and its helpers (route assembly, registration, removal, inspection) all take, so no helper
needs the manager itself. Beside the five tables:

- `broker_topics` (brokerName -> topics it hosts), so removing a broker never walks every topic;
- per-topic and per-broker route versions, so long-polling clients learn exactly which routes
  changed (`route_version`), and `route_seq`, bumped by every change a route query could observe;
- `missing_topics` (brokerName -> topics the NameServer removed from that group while it stayed
  registered), so an unchanged registration looks up only those;
- `queue_datas`: one QueueData per distinct shape per group, shared by its topics (never mutated);
- `changes`: what changed since the host last drained it (see `changes`);
- `route_cache`: each topic's assembled route at its version (see `routes`).

Every write that a route query could observe goes through `put_queue_data`, `remove_queue_data`,
`touch_topic`, `touch_broker` or `drop_live`, which keep the indexes, versions and changes right.
"""

from __future__ import annotations

import logging
from typing import Any

from namesrv.protocol.constants import MASTER_ID
from namesrv.protocol.models import BrokerData, BrokerLiveInfo, QueueData
from namesrv.routeinfo.changes import RemovalCause, RouteChanges

# The route tables' log lines keep the name they had before the tables left the manager's module.
log = logging.getLogger("namesrv.routeinfo.route_info_manager")

QueueShape = tuple[int, int, int, int]
"""(read queues, write queues, perm, topic sys flag) of a QueueData."""


class RouteTables:
    def __init__(self) -> None:
        self.topic_queue_table: dict[str, dict[str, QueueData]] = {}
        self.broker_addr_table: dict[str, BrokerData] = {}
        self.cluster_addr_table: dict[str, set[str]] = {}
        self.broker_live_table: dict[str, BrokerLiveInfo] = {}
        self.filter_server_table: dict[str, list[str]] = {}
        self.broker_topics: dict[str, set[str]] = {}
        self.topic_version: dict[str, int] = {}
        self.broker_version: dict[str, int] = {}
        self.missing_topics: dict[str, set[str]] = {}
        self.queue_datas: dict[str, dict[QueueShape, QueueData]] = {}
        self.route_seq = 0
        self.last_broker_touch = 0
        """`route_seq` at the last `touch_broker` of any group: a route checked after it is still current
        unless its own topic was touched since (see `routes`)."""
        self.changes = RouteChanges()
        self.route_cache: dict[str, list[Any]] = {}
        """topic -> [its route version, its route, the route_seq it was last found current at]."""

    # ------------------------------------------------------------------ versions
    def touch_topic(self, topic: str) -> None:
        self.route_seq += 1
        self.topic_version[topic] = self.route_seq
        self.changes.topics.add(topic)

    def touch_broker(self, broker_name: str) -> None:
        self.route_seq += 1
        self.broker_version[broker_name] = self.route_seq
        self.last_broker_touch = self.route_seq
        self.changes.broker_names.add(broker_name)

    def route_version(self, topic: str) -> int:
        """Version of `topic`'s route: changes whenever the assembled route could."""
        version = self.topic_version.get(topic, 0)
        queue_map = self.topic_queue_table.get(topic)
        if queue_map:
            for broker_name in queue_map:
                bv = self.broker_version.get(broker_name, 0)
                if bv > version:
                    version = bv
        return version

    def drop_live(self, broker_addr: str, cause: RemovalCause) -> bool:
        live = self.broker_live_table.pop(broker_addr, None)
        if live is not None:
            self.changes.removed.append((broker_addr, cause, live.last_update_timestamp))
        return live is not None

    # ------------------------------------------------------------------ queue data
    def put_queue_data(self, topic: str, broker_name: str, shape: QueueShape) -> None:
        shared = self.queue_datas.setdefault(broker_name, {})
        new = shared.get(shape)
        if new is None:  # one QueueData per distinct shape per group, shared by its topics (never mutated)
            new = shared[shape] = QueueData(broker_name, *shape)
        queue_map = self.topic_queue_table.get(topic)
        if queue_map is None:
            queue_map = self.topic_queue_table[topic] = {}
            log.info("new topic registered, %s %s", topic, new)
        old = queue_map.get(broker_name)
        if old != new:
            queue_map[broker_name] = new
            self.broker_topics.setdefault(broker_name, set()).add(topic)
            self.touch_topic(topic)

    def remove_queue_data(self, topic: str, broker_name: str) -> None:
        queue_map = self.topic_queue_table.get(topic)
        if queue_map is None or queue_map.pop(broker_name, None) is None:
            return
        hosted = self.broker_topics.get(broker_name)
        if hosted is not None:
            hosted.discard(topic)
            if not hosted:
                del self.broker_topics[broker_name]
        if not queue_map:
            del self.topic_queue_table[topic]
            self.route_cache.pop(topic, None)
            log.info("remove topic %s, no broker hosts it any more", topic)
        self.touch_topic(topic)

    # ------------------------------------------------------------------ lookups
    def topics_of_broker(self, broker_name: str) -> set[str]:
        return set(self.broker_topics.get(broker_name, ()))

    def live_master_of(self, broker_name: str) -> tuple[str | None, str | None]:
        """(master address, its HA address) of a group when the master is live, else (None, None)."""
        broker_data = self.broker_addr_table.get(broker_name)
        master_addr = broker_data.broker_addrs.get(MASTER_ID) if broker_data is not None else None
        master_live = self.broker_live_table.get(master_addr) if master_addr is not None else None
        if master_live is None:
            return None, None
        return master_addr, master_live.ha_server_addr
