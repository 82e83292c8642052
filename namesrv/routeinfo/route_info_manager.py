"""The route tables of a NameServer and every rule that changes them (RocketMQ's RouteInfoManager).

Not thread-safe by design: the Ray actor runs each request as one turn of its event loop, which
gives the same all-or-nothing effect as RocketMQ's write lock without paying for one.

The tables themselves, with the indexes that keep hot paths independent of table size, live in a
:class:`RouteTables` (see `tables`) that this manager and its helpers share: `routes` assembles a
route, `registration` applies a broker's topics in slices, `removal` takes brokers out, `inspection`
dumps the tables. None of them knows the manager.

A topic the NameServer removed from a broker that still reports it (DELETE_TOPIC_IN_NAMESRV) comes
back with that broker's next registration, as in RocketMQ 5 (`isTopicConfigChanged`: a topic
missing for the broker is written even when the DataVersion is unchanged). RocketMQ finds such topics
by looking up every topic of the registration; here `missing_topics` remembers which topics were
removed from which still-registered group, so an unchanged registration looks up only those and an
unchanged heartbeat stays independent of the topic count. A lite heartbeat carries no topics: the
processor tells such a broker to register in full (`has_missing_topics`).

Every change is also recorded in a :class:`RouteChanges` that the host drains after each request or
step (`drain_changes`): which broker addresses left the live table and why, which topics' queue
data and which broker groups changed. The host wakes exactly the waiters of those routes and logs
removals from it, instead of diffing tables.
"""

from __future__ import annotations

import logging
from dataclasses import replace

from namesrv.common.clock import Clock, system_clock
from namesrv.protocol.constants import MASTER_ID, Perm
from namesrv.protocol.models import (
    BrokerData,
    BrokerLiveInfo,
    ClusterInfo,
    DataVersion,
    QueueData,
    RegisterBrokerResult,
    TopicConfigSerializeWrapper,
    TopicRouteData,
)
from namesrv.routeinfo import removal
from namesrv.routeinfo.changes import RemovalCause, RouteChanges
from namesrv.routeinfo.config import NamesrvConfig
from namesrv.routeinfo.inspection import dump_tables
from namesrv.routeinfo.registration import (
    ALL,
    NONE,
    BrokerRegistration,
    Refused,
    TopicsWanted,
    refusal,
    topic_entry,
)
from namesrv.routeinfo.routes import RouteAssembler
from namesrv.routeinfo.tables import RouteTables

log = logging.getLogger(__name__)

class RouteInfoManager:
    def __init__(self, config: NamesrvConfig | None = None, clock: Clock = system_clock) -> None:
        self.config = config or NamesrvConfig()
        self.clock = clock
        self.tables = RouteTables()
        self._routes = RouteAssembler(self.tables)
        self.route_pickup = self._routes.pickup
        """`pickup_route_and_version`, bound once: what the route-query handler calls directly."""
        self.registering: dict[str, BrokerRegistration] = {}
        """Broker address -> its registration still being applied (see `registration`)."""
        self._registration_seq = 0

    # ------------------------------------------------------------------ the tables (RocketMQ's names)
    @property
    def topic_queue_table(self) -> dict[str, dict[str, QueueData]]:
        return self.tables.topic_queue_table

    @property
    def broker_addr_table(self) -> dict[str, BrokerData]:
        return self.tables.broker_addr_table

    @property
    def cluster_addr_table(self) -> dict[str, set[str]]:
        return self.tables.cluster_addr_table

    @property
    def broker_live_table(self) -> dict[str, BrokerLiveInfo]:
        return self.tables.broker_live_table

    @property
    def filter_server_table(self) -> dict[str, list[str]]:
        return self.tables.filter_server_table

    @property
    def route_seq(self) -> int:
        """Bumped by every change a route query could observe; 0 means nothing happened yet."""
        return self.tables.route_seq

    # ------------------------------------------------------------------ versions
    def touch_topic(self, topic: str) -> None:
        self.tables.touch_topic(topic)

    def has_changes(self) -> bool:
        """Whether anything changed since the last drain (cheaper than draining nothing)."""
        changes = self.tables.changes  # RouteChanges.__bool__, inlined: asked after every request
        return bool(changes.removed or changes.topics or changes.broker_names or changes.added)

    def drain_changes(self) -> RouteChanges:
        """Everything that changed since the previous call (and forget it)."""
        changes, self.tables.changes = self.tables.changes, RouteChanges()
        return changes

    def route_version(self, topic: str) -> int:
        """Version of `topic`'s route: changes whenever pickup_topic_route_data(topic) could."""
        return self.tables.route_version(topic)

    # ------------------------------------------------------------------ registration
    def next_registration_seq(self) -> int:
        """Arrival order of registrations: a later arrival wins over an earlier one still in flight."""
        self._registration_seq += 1
        return self._registration_seq

    def topics_wanted(
        self, broker_addr: str, broker_name: str, broker_id: int, data_version: DataVersion
    ) -> TopicsWanted:
        """Which topics of a registration the tables need (changes nothing): see `registration`."""
        if broker_id != MASTER_ID:
            return NONE
        tables = self.tables
        broker_data = tables.broker_addr_table.get(broker_name)
        register_first = broker_data is None or broker_data.broker_addrs.get(broker_id) is None
        if register_first or broker_addr in self.registering or self.is_broker_topic_config_changed(
            broker_addr, data_version
        ):
            return ALL
        return frozenset(tables.missing_topics.get(broker_name, ()))

    def begin_registration(
        self,
        cluster_name: str,
        broker_addr: str,
        broker_name: str,
        broker_id: int,
        ha_server_addr: str,
        data_version: DataVersion,
        wanted: TopicsWanted,
        filter_server_list: list[str] | None = None,
        channel: object = None,
        heartbeat_timeout_millis: int | None = None,
        seq: int | None = None,
    ) -> BrokerRegistration | Refused | None:
        """Write the broker's identity, cluster, liveness and filter servers; its topics follow
        through the returned registration. None when a later registration of this address has
        already begun (this one is stale and changes nothing); :class:`Refused` when another live
        address holds this brokerName/brokerId with a higher stateVersion (see `registration.refusal`)."""
        tables = self.tables
        seq = self.next_registration_seq() if seq is None else seq
        prev = tables.broker_live_table.get(broker_addr)
        in_flight = self.registering.get(broker_addr)
        if (prev is not None and prev.registration_seq > seq) or (in_flight is not None and in_flight.seq > seq):
            log.info("ignore registration %d of %s: a later one has begun", seq, broker_addr)
            return None
        refused = refusal(tables, broker_addr, broker_name, broker_id, data_version)
        if refused is not None:
            return refused
        tables.cluster_addr_table.setdefault(cluster_name, set()).add(broker_name)
        broker_data = tables.broker_addr_table.get(broker_name)
        if broker_data is None:
            broker_data = BrokerData(cluster_name, broker_name, {})
            tables.broker_addr_table[broker_name] = broker_data
        addrs = broker_data.broker_addrs
        # One address holds one id: a slave promoted to master at the same address drops its old id.
        for stale_id in [i for i, a in addrs.items() if a == broker_addr and i != broker_id]:
            del addrs[stale_id]
            tables.touch_broker(broker_name)
        if addrs.get(broker_id) != broker_addr:
            addrs[broker_id] = broker_addr
            tables.touch_broker(broker_name)

        timeout = heartbeat_timeout_millis or self.config.broker_channel_expired_time_ms
        # The DataVersion is recorded when the topics are written (`finish`); until then it stays
        # the previous one, so the registration still counts as a change.
        live = BrokerLiveInfo(
            self.clock(), timeout, prev.data_version if prev is not None else DataVersion(), channel,
            ha_server_addr, seq,
        )
        tables.broker_live_table[broker_addr] = live
        if prev is None:
            tables.changes.added.add(broker_addr)
            log.info("new broker registered, %s HAServer: %s", broker_addr, ha_server_addr)
        if filter_server_list is not None:
            self._set_filter_servers(broker_addr, filter_server_list)
        if wanted:  # a body with topics: every topic the NameServer deleted is reported again or gone
            missing = tables.missing_topics.pop(broker_name, set())
            if wanted != ALL:
                wanted = frozenset(missing)
        registration = BrokerRegistration(
            self.tables, self.registering, self.config, broker_addr, broker_name, broker_id, data_version, wanted,
            live, seq,
        )
        self.registering[broker_addr] = registration
        return registration

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
        """A whole registration at once (RocketMQ's registerBroker): `begin_registration`, every
        wanted topic, `finish`."""
        version = topic_config_wrapper.data_version if topic_config_wrapper else DataVersion()
        table = topic_config_wrapper.topic_config_table if topic_config_wrapper else {}
        wanted = self.topics_wanted(broker_addr, broker_name, broker_id, version) if topic_config_wrapper else NONE
        registration = self.begin_registration(
            cluster_name, broker_addr, broker_name, broker_id, ha_server_addr, version, wanted,
            filter_server_list, channel, heartbeat_timeout_millis,
        )
        assert registration is not None  # its own sequence number is the newest
        if isinstance(registration, Refused):
            return RegisterBrokerResult(refused=registration.remark)
        if registration.wanted == ALL:
            registration.apply(topic_entry(tc) for tc in table.values())
        else:
            registration.apply(topic_entry(table[t]) for t in registration.wanted if t in table)
        return registration.finish(table)

    def registered_addrs(self) -> set[str]:
        """Live addresses whose registration has completed (the not-ready gate waits for these)."""
        return self.tables.broker_live_table.keys() - self.registering.keys()

    def _set_filter_servers(self, broker_addr: str, filter_server_list: list[str]) -> None:
        tables = self.tables
        old_filters = tables.filter_server_table.get(broker_addr, [])
        if filter_server_list:
            tables.filter_server_table[broker_addr] = list(filter_server_list)
        else:
            tables.filter_server_table.pop(broker_addr, None)
        if old_filters != list(filter_server_list):  # routes carry filter servers
            for name, bd in tables.broker_addr_table.items():
                if broker_addr in bd.broker_addrs.values():
                    tables.touch_broker(name)

    def live_master_of(self, broker_name: str) -> tuple[str | None, str | None]:
        """(master address, its HA address) of a group when the master is live, else (None, None)."""
        return self.tables.live_master_of(broker_name)

    def has_missing_topics(self, broker_name: str) -> bool:
        """True when topics were removed from this group by the NameServer since its master last
        registered in full: a lite heartbeat cannot bring them back, a full registration can."""
        return bool(self.tables.missing_topics.get(broker_name))

    def register_topic(self, topic: str, queue_datas: list[QueueData]) -> str | None:
        """REGISTER_TOPIC_IN_NAMESRV (RocketMQ 5's single-topic registration): each group's queues
        for `topic`, the topic created if new. All or nothing: when a group is not registered here,
        nothing changes and its name is returned (RocketMQ logs it and stops)."""
        for qd in queue_datas:
            if qd.broker_name not in self.tables.broker_addr_table:
                log.warning("register topic %s names broker %s, which is not registered", topic, qd.broker_name)
                return qd.broker_name
        for qd in queue_datas:
            shape = (qd.read_queue_nums, qd.write_queue_nums, qd.perm, qd.topic_sys_flag)
            self.tables.put_queue_data(topic, qd.broker_name, shape)
            self.tables.missing_topics.get(qd.broker_name, set()).discard(topic)
        return None

    # ------------------------------------------------------------------ versions and liveness
    def is_broker_topic_config_changed(self, broker_addr: str, data_version: DataVersion) -> bool:
        prev = self.query_broker_topic_config(broker_addr)
        return prev is None or prev != data_version

    def query_broker_topic_config(self, broker_addr: str) -> DataVersion | None:
        live = self.tables.broker_live_table.get(broker_addr)
        return live.data_version if live is not None else None

    def update_broker_info_update_timestamp(self, broker_addr: str) -> bool:
        """Refresh liveness; False when the address is unknown (it must register in full)."""
        live = self.tables.broker_live_table.get(broker_addr)
        if live is None:
            return False
        live.last_update_timestamp = self.clock()
        return True

    # ------------------------------------------------------------------ removal (see `removal`)
    def unregister_broker(
        self, cluster_name: str, broker_addr: str, broker_name: str, broker_id: int, channel: object = None
    ) -> bool:
        return removal.unregister_broker(self.tables, cluster_name, broker_addr, broker_name, broker_id, channel)

    def on_channel_destroy(
        self, broker_addr: str, channel: object = None, cause: RemovalCause = "channel"
    ) -> bool:
        return removal.on_channel_destroy(self.tables, broker_addr, channel, cause)

    def scan_not_active_broker(self) -> int:
        """Remove every broker silent for longer than its timeout; returns how many were removed."""
        return removal.scan_not_active_broker(self.tables, self.clock())

    def broker_addrs_of_channel(self, channel: object) -> list[str]:
        """Live broker addresses registered through `channel` (RocketMQ's onChannelDestroy lookup)."""
        return [addr for addr, live in self.tables.broker_live_table.items() if live.channel == channel]

    # ------------------------------------------------------------------ queries
    def pickup_topic_route_data(self, topic: str) -> TopicRouteData | None:
        """Copies of the topic's queue datas and of the broker groups that host them; None unless
        both exist. Cost depends on the brokers hosting the topic, never on the table sizes.

        Built once per route version and shared by every caller until the route changes, so it is
        immutable all the way down (see TopicRouteData): changing it raises, and neither the tables
        nor a later caller's route can be changed through it."""
        return self.pickup_route_and_version(topic)[0]

    def pickup_route_and_version(self, topic: str) -> tuple[TopicRouteData | None, int]:
        """`pickup_topic_route_data` and the route's version, computed once."""
        return self._routes.pickup(topic)

    def get_all_cluster_info(self) -> ClusterInfo:
        return ClusterInfo(
            {k: v.copy() for k, v in self.tables.broker_addr_table.items()},
            {k: set(v) for k, v in self.tables.cluster_addr_table.items()},
        )

    def get_all_topic_list(self) -> list[str]:
        return list(self.tables.topic_queue_table)

    def get_topics_by_cluster(self, cluster: str) -> list[str]:
        topics: set[str] = set()
        for broker_name in self.tables.cluster_addr_table.get(cluster, ()):
            topics.update(self.tables.broker_topics.get(broker_name, ()))
        return sorted(topics)

    def get_system_topic_list(self) -> tuple[list[str], str | None]:
        """Cluster and broker names (RocketMQ lists them as 'system topics') and one master address."""
        names: list[str] = []
        broker_addr: str | None = None
        for cluster, broker_names in self.tables.cluster_addr_table.items():
            names.append(cluster)
            names.extend(sorted(broker_names))
        for bd in self.tables.broker_addr_table.values():
            master = bd.broker_addrs.get(MASTER_ID)
            if master is not None:
                broker_addr = master
                break
        return names, broker_addr

    def topics_of_broker(self, broker_name: str) -> set[str]:
        return self.tables.topics_of_broker(broker_name)

    def hosts_topic(self, broker_name: str, topic: str) -> bool:
        return topic in self.tables.broker_topics.get(broker_name, ())

    def topic_count_of(self, broker_name: str) -> int:
        return len(self.tables.broker_topics.get(broker_name, ()))

    # ------------------------------------------------------------------ admin
    def delete_topic(self, topic: str, cluster_name: str | None = None) -> bool:
        """Remove a topic everywhere, or only from the brokers of one cluster."""
        queue_map = self.tables.topic_queue_table.get(topic)
        if queue_map is None:
            return False
        if cluster_name:
            names = self.tables.cluster_addr_table.get(cluster_name, set())
            victims = [b for b in queue_map if b in names]
        else:
            victims = list(queue_map)
        for broker_name in victims:
            self.tables.remove_queue_data(topic, broker_name)
            # The group still lists the topic: its next registration brings it back (RocketMQ 5).
            self.tables.missing_topics.setdefault(broker_name, set()).add(topic)
        return bool(victims)

    def wipe_write_perm_of_broker(self, broker_name: str) -> int:
        return self._operate_write_perm(broker_name, wipe=True)

    def add_write_perm_of_broker(self, broker_name: str) -> int:
        return self._operate_write_perm(broker_name, wipe=False)

    def _operate_write_perm(self, broker_name: str, *, wipe: bool) -> int:
        count = 0
        for topic in self.tables.broker_topics.get(broker_name, ()):
            qd = self.tables.topic_queue_table[topic][broker_name]
            # RocketMQ: wipe clears the write bit; add sets exactly READ|WRITE (dropping INHERIT).
            perm = qd.perm & ~Perm.WRITE if wipe else Perm.READ | Perm.WRITE
            if perm != qd.perm:  # replaced, not mutated: queue datas are shared between topics
                self.tables.topic_queue_table[topic][broker_name] = replace(qd, perm=int(perm))
                self.tables.touch_topic(topic)
            count += 1
        return count

    # ------------------------------------------------------------------ inspection
    def dump_tables(self) -> dict[str, object]:
        """A deterministic, plain-data image of all five tables (tests compare these byte for byte)."""
        return dump_tables(self.tables)
