"""The route tables of a NameServer and every rule that changes them (RocketMQ's RouteInfoManager).

Not thread-safe by design: the Ray actor runs each request as one turn of its event loop, which
gives the same all-or-nothing effect as RocketMQ's write lock without paying for one.

Beyond RocketMQ, two indexes keep hot paths independent of table size: `_broker_topics`
(brokerName -> topics it hosts) so removing a broker never walks every topic, and per-topic and
per-broker route versions so long-polling clients learn exactly which routes changed.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from namesrv.clock import Clock, system_clock
from namesrv.config import NamesrvConfig
from namesrv.constants import MASTER_ID, Perm
from namesrv.models import (
    BrokerData,
    BrokerLiveInfo,
    ClusterInfo,
    DataVersion,
    QueueData,
    RegisterBrokerResult,
    TopicConfigSerializeWrapper,
    TopicRouteData,
)

log = logging.getLogger(__name__)


class RouteInfoManager:
    def __init__(self, config: NamesrvConfig | None = None, clock: Clock = system_clock) -> None:
        self.config = config or NamesrvConfig()
        self.clock = clock
        self.topic_queue_table: dict[str, dict[str, QueueData]] = {}
        self.broker_addr_table: dict[str, BrokerData] = {}
        self.cluster_addr_table: dict[str, set[str]] = {}
        self.broker_live_table: dict[str, BrokerLiveInfo] = {}
        self.filter_server_table: dict[str, list[str]] = {}
        self._broker_topics: dict[str, set[str]] = {}
        self._topic_version: dict[str, int] = {}
        self._broker_version: dict[str, int] = {}
        self.route_seq = 0
        """Bumped by every change a route query could observe; 0 means nothing happened yet."""

    # ------------------------------------------------------------------ versions
    def _touch_topic(self, topic: str) -> None:
        self.route_seq += 1
        self._topic_version[topic] = self.route_seq

    def _touch_broker(self, broker_name: str) -> None:
        self.route_seq += 1
        self._broker_version[broker_name] = self.route_seq

    def route_version(self, topic: str) -> int:
        """Version of `topic`'s route: changes whenever pickup_topic_route_data(topic) could."""
        version = self._topic_version.get(topic, 0)
        queue_map = self.topic_queue_table.get(topic)
        if queue_map:
            for broker_name in queue_map:
                bv = self._broker_version.get(broker_name, 0)
                if bv > version:
                    version = bv
        return version

    # ------------------------------------------------------------------ registration
    def register_broker(
        self,
        cluster_name: str,
        broker_addr: str,
        broker_name: str,
        broker_id: int,
        ha_server_addr: str,
        topic_config_wrapper: TopicConfigSerializeWrapper | None,
        filter_server_list: list[str] | None,
        channel: object = None,
        heartbeat_timeout_millis: int | None = None,
    ) -> RegisterBrokerResult:
        result = RegisterBrokerResult()
        broker_names = self.cluster_addr_table.setdefault(cluster_name, set())
        broker_names.add(broker_name)

        register_first = False
        broker_data = self.broker_addr_table.get(broker_name)
        if broker_data is None:
            register_first = True
            broker_data = BrokerData(cluster_name, broker_name, {})
            self.broker_addr_table[broker_name] = broker_data

        addrs = broker_data.broker_addrs
        # One address holds one id: a slave promoted to master at the same address drops its old id.
        for stale_id in [i for i, a in addrs.items() if a == broker_addr and i != broker_id]:
            del addrs[stale_id]
            self._touch_broker(broker_name)
        old_addr = addrs.get(broker_id)
        addrs[broker_id] = broker_addr
        if old_addr != broker_addr:
            self._touch_broker(broker_name)
        register_first = register_first or old_addr is None

        data_version = topic_config_wrapper.data_version if topic_config_wrapper else DataVersion()
        if topic_config_wrapper is not None and broker_id == MASTER_ID:
            # The one place that walks a broker's topics; an unchanged heartbeat never gets here.
            if register_first or self.is_broker_topic_config_changed(broker_addr, data_version):
                self._update_broker_topics(broker_name, topic_config_wrapper)

        timeout = heartbeat_timeout_millis or self.config.broker_channel_expired_time_ms
        prev = self.broker_live_table.get(broker_addr)
        self.broker_live_table[broker_addr] = BrokerLiveInfo(
            self.clock(), timeout, data_version, channel, ha_server_addr
        )
        if prev is None:
            log.info("new broker registered, %s HAServer: %s", broker_addr, ha_server_addr)

        if filter_server_list is not None:
            old_filters = self.filter_server_table.get(broker_addr, [])
            if filter_server_list:
                self.filter_server_table[broker_addr] = list(filter_server_list)
            else:
                self.filter_server_table.pop(broker_addr, None)
            if old_filters != list(filter_server_list):  # routes carry filter servers
                for name, bd in self.broker_addr_table.items():
                    if broker_addr in bd.broker_addrs.values():
                        self._touch_broker(name)

        if broker_id != MASTER_ID:
            result.master_addr, result.ha_server_addr = self.live_master_of(broker_name)
        return result

    def live_master_of(self, broker_name: str) -> tuple[str | None, str | None]:
        """(master address, its HA address) of a group when the master is live, else (None, None)."""
        broker_data = self.broker_addr_table.get(broker_name)
        master_addr = broker_data.broker_addrs.get(MASTER_ID) if broker_data is not None else None
        master_live = self.broker_live_table.get(master_addr) if master_addr is not None else None
        if master_live is None:
            return None, None
        return master_addr, master_live.ha_server_addr

    def _update_broker_topics(self, broker_name: str, wrapper: TopicConfigSerializeWrapper) -> None:
        table = wrapper.topic_config_table
        if self.config.delete_topic_with_broker_registration:
            for topic in [t for t in self._broker_topics.get(broker_name, ()) if t not in table]:
                self._remove_queue_data(topic, broker_name)
        for topic, tc in table.items():
            new = QueueData.from_topic_config(broker_name, tc)
            queue_map = self.topic_queue_table.get(topic)
            if queue_map is None:
                queue_map = self.topic_queue_table[topic] = {}
                log.info("new topic registered, %s %s", topic, new)
            old = queue_map.get(broker_name)
            if old != new:
                queue_map[broker_name] = new
                self._broker_topics.setdefault(broker_name, set()).add(topic)
                self._touch_topic(topic)

    def _remove_queue_data(self, topic: str, broker_name: str) -> None:
        queue_map = self.topic_queue_table.get(topic)
        if queue_map is None or queue_map.pop(broker_name, None) is None:
            return
        hosted = self._broker_topics.get(broker_name)
        if hosted is not None:
            hosted.discard(topic)
            if not hosted:
                del self._broker_topics[broker_name]
        if not queue_map:
            del self.topic_queue_table[topic]
            log.info("remove topic %s, no broker hosts it any more", topic)
        self._touch_topic(topic)

    # ------------------------------------------------------------------ versions and liveness
    def is_broker_topic_config_changed(self, broker_addr: str, data_version: DataVersion) -> bool:
        prev = self.query_broker_topic_config(broker_addr)
        return prev is None or prev != data_version

    def query_broker_topic_config(self, broker_addr: str) -> DataVersion | None:
        live = self.broker_live_table.get(broker_addr)
        return live.data_version if live is not None else None

    def update_broker_info_update_timestamp(self, broker_addr: str) -> bool:
        """Refresh liveness; False when the address is unknown (it must register in full)."""
        live = self.broker_live_table.get(broker_addr)
        if live is None:
            return False
        live.last_update_timestamp = self.clock()
        return True

    # ------------------------------------------------------------------ removal
    def unregister_broker(
        self, cluster_name: str, broker_addr: str, broker_name: str, broker_id: int, channel: object = None
    ) -> bool:
        """Remove one broker address; a request that names another address at that id changes nothing.

        With `channel` given, a live entry registered through another channel (a newer incarnation
        at the same address) is left alone too. Returns whether anything was removed.
        """
        live = self.broker_live_table.get(broker_addr)
        if channel is not None and live is not None and live.channel != channel:
            log.warning("ignore stale unregister of %s: registered again since", broker_addr)
            return False
        removed = False
        broker_data = self.broker_addr_table.get(broker_name)
        if broker_data is not None and broker_data.broker_addrs.get(broker_id) == broker_addr:
            del broker_data.broker_addrs[broker_id]
            self._touch_broker(broker_name)
            removed = True
            log.info("unregister broker %s[%d] %s", broker_name, broker_id, broker_addr)
            if not broker_data.broker_addrs:
                self._remove_broker_name(broker_name, cluster_name)
        # An address still listed (at another id or in another group) keeps its liveness, or its
        # route could never expire; an address no group lists any more loses it.
        if not any(broker_addr in bd.broker_addrs.values() for bd in self.broker_addr_table.values()):
            removed = self.broker_live_table.pop(broker_addr, None) is not None or removed
            self.filter_server_table.pop(broker_addr, None)
        return removed

    def _remove_broker_name(self, broker_name: str, cluster_name: str | None) -> None:
        """The last address of a group left: the group leaves its cluster and every topic."""
        self.broker_addr_table.pop(broker_name, None)
        self._touch_broker(broker_name)
        # Every cluster, not only the one named: a request may name the wrong cluster, and a group
        # registered under two cluster names is listed in both (few clusters, so this is cheap).
        for cluster in list(self.cluster_addr_table):
            names = self.cluster_addr_table.get(cluster)
            if names is not None and broker_name in names:
                names.discard(broker_name)
                if not names:
                    del self.cluster_addr_table[cluster]
                    log.info("cluster %s has no broker left, removed", cluster)
        for topic in list(self._broker_topics.get(broker_name, ())):
            self._remove_queue_data(topic, broker_name)

    def on_channel_destroy(self, broker_addr: str, channel: object = None) -> bool:
        """A broker's connection closed: remove it now. A stale channel (the address has registered
        again through a newer one) is ignored. Returns whether anything was removed."""
        live = self.broker_live_table.get(broker_addr)
        if channel is not None and live is not None and live.channel != channel:
            log.info("ignore close of a stale channel of %s", broker_addr)
            return False
        removed = self.broker_live_table.pop(broker_addr, None) is not None
        self.filter_server_table.pop(broker_addr, None)
        for broker_name, broker_data in list(self.broker_addr_table.items()):
            ids = [i for i, a in broker_data.broker_addrs.items() if a == broker_addr]
            if not ids:
                continue
            for broker_id in ids:
                del broker_data.broker_addrs[broker_id]
            self._touch_broker(broker_name)
            removed = True
            log.info("broker %s %s removed on channel destroy", broker_name, broker_addr)
            if not broker_data.broker_addrs:
                self._remove_broker_name(broker_name, broker_data.cluster)
        return removed

    def scan_not_active_broker(self) -> int:
        """Remove every broker silent for longer than its timeout; returns how many were removed."""
        now = self.clock()
        expired = [
            addr
            for addr, live in self.broker_live_table.items()
            if live.last_update_timestamp + live.heartbeat_timeout_millis < now
        ]
        for addr in expired:
            live = self.broker_live_table[addr]
            log.warning("the broker channel expired, %s %dms", addr, live.heartbeat_timeout_millis)
            self.on_channel_destroy(addr)
        return len(expired)

    # ------------------------------------------------------------------ queries
    def pickup_topic_route_data(self, topic: str) -> TopicRouteData | None:
        """Copies of the topic's queue datas and of the broker groups that host them; None unless
        both exist. Cost depends on the brokers hosting the topic, never on the table sizes."""
        queue_map = self.topic_queue_table.get(topic)
        if not queue_map:
            return None
        queue_datas: list[QueueData] = []
        broker_datas: list[BrokerData] = []
        filter_servers: dict[str, list[str]] = {}
        for broker_name, qd in queue_map.items():
            queue_datas.append(qd.copy())
            bd = self.broker_addr_table.get(broker_name)
            if bd is None:
                continue
            broker_datas.append(bd.copy())
            if self.filter_server_table:
                for addr in bd.broker_addrs.values():
                    servers = self.filter_server_table.get(addr)
                    if servers:
                        filter_servers[addr] = list(servers)
        if not broker_datas:
            return None
        return TopicRouteData(queue_datas, broker_datas, filter_servers)

    def get_all_cluster_info(self) -> ClusterInfo:
        return ClusterInfo(
            {k: v.copy() for k, v in self.broker_addr_table.items()},
            {k: set(v) for k, v in self.cluster_addr_table.items()},
        )

    def get_all_topic_list(self) -> list[str]:
        return list(self.topic_queue_table)

    def get_topics_by_cluster(self, cluster: str) -> list[str]:
        topics: set[str] = set()
        for broker_name in self.cluster_addr_table.get(cluster, ()):
            topics.update(self._broker_topics.get(broker_name, ()))
        return sorted(topics)

    def get_system_topic_list(self) -> tuple[list[str], str | None]:
        """Cluster and broker names (RocketMQ lists them as 'system topics') and one master address."""
        names: list[str] = []
        broker_addr: str | None = None
        for cluster, broker_names in self.cluster_addr_table.items():
            names.append(cluster)
            names.extend(sorted(broker_names))
        for bd in self.broker_addr_table.values():
            master = bd.broker_addrs.get(MASTER_ID)
            if master is not None:
                broker_addr = master
                break
        return names, broker_addr

    def topics_of_broker(self, broker_name: str) -> set[str]:
        return set(self._broker_topics.get(broker_name, ()))

    # ------------------------------------------------------------------ admin
    def delete_topic(self, topic: str, cluster_name: str | None = None) -> bool:
        """Remove a topic everywhere, or only from the brokers of one cluster."""
        queue_map = self.topic_queue_table.get(topic)
        if queue_map is None:
            return False
        if cluster_name:
            names = self.cluster_addr_table.get(cluster_name, set())
            victims = [b for b in queue_map if b in names]
        else:
            victims = list(queue_map)
        for broker_name in victims:
            self._remove_queue_data(topic, broker_name)
        return bool(victims)

    def wipe_write_perm_of_broker(self, broker_name: str) -> int:
        return self._operate_write_perm(broker_name, wipe=True)

    def add_write_perm_of_broker(self, broker_name: str) -> int:
        return self._operate_write_perm(broker_name, wipe=False)

    def _operate_write_perm(self, broker_name: str, *, wipe: bool) -> int:
        count = 0
        for topic in self._broker_topics.get(broker_name, ()):
            qd = self.topic_queue_table[topic][broker_name]
            perm = qd.perm & ~Perm.WRITE if wipe else qd.perm | Perm.WRITE
            if perm != qd.perm:
                qd.perm = int(perm)
                self._touch_topic(topic)
            count += 1
        return count

    # ------------------------------------------------------------------ inspection
    def dump_tables(self) -> dict[str, object]:
        """A deterministic, plain-data image of all five tables (tests compare these byte for byte)."""

        def sorted_map(items: Iterable[tuple[object, object]]) -> dict[str, object]:
            return {str(k): v for k, v in sorted(items, key=lambda kv: str(kv[0]))}

        return {
            "topicQueueTable": sorted_map(
                (t, sorted_map((b, q.to_wire()) for b, q in qm.items()))
                for t, qm in self.topic_queue_table.items()
            ),
            "brokerAddrTable": sorted_map((n, b.to_wire()) for n, b in self.broker_addr_table.items()),
            "clusterAddrTable": sorted_map((c, sorted(n)) for c, n in self.cluster_addr_table.items()),
            "brokerLiveTable": sorted_map(
                (
                    a,
                    {
                        "lastUpdateTimestamp": li.last_update_timestamp,
                        "heartbeatTimeoutMillis": li.heartbeat_timeout_millis,
                        "dataVersion": li.data_version.to_wire(),
                        "channel": repr(li.channel),
                        "haServerAddr": li.ha_server_addr,
                    },
                )
                for a, li in self.broker_live_table.items()
            ),
            "filterServerTable": sorted_map((a, list(s)) for a, s in self.filter_server_table.items()),
        }
