"""A broker's registration applied in slices (RouteInfoManager.registerBroker, made incremental).

RocketMQ applies a registration under its write lock in one go; with 10,000 topics that holds
every route query for tens of milliseconds. Here a registration is a :class:`BrokerRegistration`:

1. `RouteInfoManager.topics_wanted` says, without changing anything, which of the broker's topics
   the tables need: all of them (a first registration, a changed DataVersion, or one still being
   applied), only those the NameServer deleted while the group stayed registered (RocketMQ 5's
   per-topic `isTopicConfigChanged`), or none (an unchanged heartbeat never looks at its topics).
2. `RouteInfoManager.begin_registration` writes the broker's identity, cluster, liveness and filter
   servers (what RocketMQ writes before the topics), in one turn.
3. `apply` writes the topics, a slice at a time, between which the host answers other requests. A
   route query in between sees each topic either with this broker's queues or as before, never a
   half-written queue entry.
   A registration may also be refused here (:class:`Refused`, nothing written) when another live
   address holds its brokerName/brokerId with a higher DataVersion.stateVersion (the master epoch).
4. `finish` records the broker's DataVersion (so until then the registration counts as "changed"),
   drops topics the broker no longer reports when `delete_topic_with_broker_registration` is on,
   and answers as RocketMQ does (a slave learns its master's address).

Faults in between are decided by the live table: a registration whose broker was removed (channel
closed, unregistered, expired) or that a newer registration of the same address replaced stops at
its next slice and writes nothing more; a registration that arrived earlier than the one already
begun for its address is refused at `begin` (the newer data wins). While any registration of an
address is in flight, that address does not count as registered for the not-ready gate.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from namesrv.protocol.constants import MASTER_ID
from namesrv.protocol.models import BrokerLiveInfo, DataVersion, RegisterBrokerResult, TopicConfig
from namesrv.routeinfo.config import NamesrvConfig
from namesrv.routeinfo.tables import QueueShape, RouteTables

TopicEntry = tuple[str, QueueShape]
"""A validated topic as a registration writes it: (name, its queue shape). Plain tuples, not the
TopicConfig models: 10,000 of them alive through a registration would be 20,000 objects the garbage
collector walks again and again (a model and its fields-set each), tuples of strings and ints it
stops tracking at once."""


def topic_entry(tc: TopicConfig) -> TopicEntry:
    return tc.topic_name, (tc.read_queue_nums, tc.write_queue_nums, tc.perm, tc.topic_sys_flag)

log = logging.getLogger(__name__)

ALL: Literal["all"] = "all"
TopicsWanted = Literal["all"] | frozenset[str]
"""Which reported topics a registration must write: every one, or only the named ones (maybe none)."""

NONE: frozenset[str] = frozenset()



def covers(validated: TopicsWanted, wanted: TopicsWanted) -> bool:
    """Whether topics validated for `validated` include every topic `wanted` needs."""
    if validated == ALL:
        return True
    return wanted != ALL and wanted <= validated


Outcome = Literal["applied", "superseded", "removed"]


@dataclass(frozen=True, slots=True)
class Refused:
    """A registration refused because another live address holds its brokerName/brokerId with a
    higher DataVersion.stateVersion (RocketMQ 5's rule, `RouteInfoManager.begin_registration`)."""

    holder_addr: str
    holder_state_version: int
    state_version: int

    @property
    def remark(self) -> str:
        return (f"refused: {self.holder_addr} holds this brokerId with stateVersion {self.holder_state_version}"
                f" > {self.state_version}")


def refusal(tables: RouteTables, broker_addr: str, broker_name: str, broker_id: int,
            data_version: DataVersion) -> Refused | None:
    """RocketMQ 5's higher-epoch rule (registerBroker): when another address holds this
    brokerName/brokerId and is live here with a higher DataVersion.stateVersion (in controller
    mode the master epoch), the registration is refused: an old master that returns still
    believing it is brokerId 0 cannot take the route back from the one elected after it. An
    equal or higher stateVersion replaces the holder at once (the new address takes the id; the
    old one stays live until it expires or its channel closes, but no route names it).

    RocketMQ answers such a registration SUCCESS with no masterAddr/haServerAddr and a null
    remark, and drops the registering address from its live table (after having removed it
    from its other ids in the group). Here the answer is the same SUCCESS with a remark saying
    why; the tables are left as they were, except that the registering address loses its
    liveness when no group lists it (so its lite heartbeats answer `known: false` and it
    registers again in full, as RocketMQ's broker would re-register): an address still listed
    at another id (say, as a slave) keeps that entry, where RocketMQ would have removed it."""
    broker_data = tables.broker_addr_table.get(broker_name)
    holder = broker_data.broker_addrs.get(broker_id) if broker_data is not None else None
    if holder is None or holder == broker_addr:
        return None
    holder_live = tables.broker_live_table.get(holder)
    if holder_live is None or holder_live.data_version.state_version <= data_version.state_version:
        return None
    refused = Refused(holder, holder_live.data_version.state_version, data_version.state_version)
    log.warning("registering broker conflicts with the existing one, ignored: %s[%d] held by %s (stateVersion"
                " %d), %s offers stateVersion %d", broker_name, broker_id, holder,
                refused.holder_state_version, broker_addr, refused.state_version)
    if not any(broker_addr in bd.broker_addrs.values() for bd in tables.broker_addr_table.values()):
        if tables.drop_live(broker_addr, "refused"):
            tables.filter_server_table.pop(broker_addr, None)
    return refused


class BrokerRegistration:
    def __init__(
        self,
        tables: RouteTables,
        registering: dict[str, BrokerRegistration],
        config: NamesrvConfig,
        broker_addr: str,
        broker_name: str,
        broker_id: int,
        data_version: DataVersion,
        wanted: TopicsWanted,
        live: BrokerLiveInfo,
        seq: int,
    ) -> None:
        self.tables = tables
        self.registering = registering
        """Broker address -> its registration in flight (the manager's; this one is in it until done)."""
        self.config = config
        self.broker_addr = broker_addr
        self.broker_name = broker_name
        self.broker_id = broker_id
        self.data_version = data_version
        self.wanted = wanted
        self.live = live
        self.seq = seq
        self.written = 0

    @property
    def current(self) -> bool:
        """Still the registration in force for its address (not removed, not replaced)."""
        return self.tables.broker_live_table.get(self.broker_addr) is self.live

    def outcome(self) -> Outcome:
        if self.current:
            return "applied"
        newer = self.registering.get(self.broker_addr)
        live = self.tables.broker_live_table.get(self.broker_addr)
        if (newer is not None and newer.seq > self.seq) or (live is not None and live.registration_seq > self.seq):
            return "superseded"
        return "removed"

    def apply(self, topics: Iterable[TopicEntry]) -> bool:
        """Write one slice of topics; False (and nothing written) once the registration is void."""
        if not self.current:
            return False
        put = self.tables.put_queue_data
        name = self.broker_name
        for topic, shape in topics:
            put(topic, name, shape)
            self.written += 1
        return True

    def abandon(self) -> None:
        """Stop here (the host gave up on the request): the topics written so far stay, the
        DataVersion is not recorded, so the broker's next registration writes them all again."""
        if self.registering.get(self.broker_addr) is self:
            del self.registering[self.broker_addr]

    def finish(self, reported: Iterable[str] | None = None) -> RegisterBrokerResult:
        """Complete the registration. `reported`: every topic name in the body, when the whole table
        was written (only then may topics the broker dropped be removed)."""
        tables = self.tables
        self.abandon()
        result = RegisterBrokerResult()
        if not self.current:
            return result
        self.live.data_version = self.data_version
        if reported is not None and self.wanted == ALL and self.config.delete_topic_with_broker_registration:
            keep = set(reported)
            for topic in [t for t in tables.topics_of_broker(self.broker_name) if t not in keep]:
                tables.remove_queue_data(topic, self.broker_name)
        if self.broker_id != MASTER_ID:
            result.master_addr, result.ha_server_addr = tables.live_master_of(self.broker_name)
        return result
