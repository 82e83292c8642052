"""What the console knows about a cluster, as the collector last saw it: plain data, no Ray, no
aiohttp (the collector fills it, the pages read it; unit tests build it by hand).

- `NamesrvView`: one NameServer's account: its brokers (with heartbeat ages), topics and routes.
- `BrokerView`: one broker's own account: role, epoch, version, TPS, disk, queues, groups.
- `ControllerView`: the controller's sets (master, epochs, SyncStateSet), elections and deaths.
- `GroupView`: a consumer group: members, per-queue offsets (lag) from every broker it is on, and
  its subscription-group config on each master.
- `ConsoleState`: all of it, plus short histories for the charts and the events seen.
- `divergence(...)`: where the NameServers disagree (the view this design makes interesting).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from namesrv.broker.subscription.config import SubscriptionGroupConfig

HISTORY = 120
"""Samples kept per chart series (at one per collector tick)."""
EVENTS = 200
"""Events (broker appeared or left a NameServer's view, route changes) kept for the pages."""


@dataclass(frozen=True, slots=True)
class BrokerEntry:
    """One broker as one NameServer lists it."""

    cluster: str
    broker_name: str
    broker_id: int
    broker_addr: str
    heartbeat_age_ms: int | None = None
    topics: int = 0
    watched: bool = False

    @property
    def key(self) -> str:
        """What must agree between NameServers: the set, the id and the address."""
        return f"{self.cluster}/{self.broker_name}/{self.broker_id}@{self.broker_addr}"


@dataclass(frozen=True, slots=True)
class QueueRoute:
    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int


@dataclass(frozen=True, slots=True)
class RouteView:
    """A topic's route as one NameServer hands it out (the long-poll's version and data)."""

    version: int
    queues: tuple[QueueRoute, ...] = ()
    brokers: tuple[tuple[str, tuple[tuple[int, str], ...]], ...] = ()
    """(brokerName, ((brokerId, addr), ...)), sorted."""

    @property
    def signature(self) -> tuple[Any, ...]:
        """What must agree between NameServers (the version is each NameServer's own counter)."""
        return (self.queues, self.brokers)


@dataclass
class NamesrvView:
    name: str
    error: str | None = None
    ready: bool = False
    route_seq: int = 0
    remoting_address: str | None = None
    brokers: list[BrokerEntry] = field(default_factory=list)
    topics: set[str] = field(default_factory=set)
    routes: dict[str, RouteView] = field(default_factory=dict)
    long_poll_waiters: int = 0
    removals: int = 0
    seen_ms: int = 0


@dataclass
class BrokerView:
    addr: str
    actor_name: str = ""
    cluster: str = ""
    broker_name: str = ""
    broker_id: int = -1
    error: str | None = None
    role: str = ""
    epoch: int | None = None
    version: str = ""
    put_tps: float = 0.0
    get_tps: float = 0.0
    disk_ratio: float = 0.0
    disk: str = ""
    topics: int = 0
    messages: int = 0
    replication: str = "-"
    queues: dict[tuple[str, int], int] = field(default_factory=dict)
    """(topic, queueId): max offset."""
    consumer_groups: dict[str, list[str]] = field(default_factory=dict)
    sync_state_set: list[int] = field(default_factory=list)
    """A master's in-sync replicas (broker ids), as it reports them."""
    role_log: list[tuple[int, str, int]] = field(default_factory=list)
    """(at ms, role, epoch): every role this broker held."""
    controller_id: int | None = None
    """Controller mode: the broker id the controller gave this replica."""
    lease: dict[str, Any] | None = None
    """Controller mode: its master lease (valid, silent_ms, lease_ms, refused; namesrv.broker.lease)."""
    seen_ms: int = 0


@dataclass(frozen=True, slots=True)
class BrokerSetState:
    """One broker set as the controller holds it."""

    name: str
    master_broker_id: int | None
    master_address: str | None
    master_epoch: int
    sync_state_set: tuple[int, ...]
    sync_state_set_epoch: int
    replicas: tuple[tuple[int, str], ...]


@dataclass
class ControllerView:
    """The controller's account (controller mode only): its sets, elections, and the deaths it saw."""

    name: str
    error: str | None = None
    sets: dict[str, BrokerSetState] = field(default_factory=dict)
    elections: int = 0
    deaths: list[dict[str, Any]] = field(default_factory=list)
    """{"brokerName", "brokerId", "how", "atMs"}: how it learnt each broker was gone."""
    live_brokers: list[tuple[str, int]] = field(default_factory=list)
    seen_ms: int = 0


@dataclass(frozen=True, slots=True)
class QueueOffset:
    topic: str
    broker_name: str
    queue_id: int
    broker_offset: int
    consumer_offset: int
    owner: str = ""

    @property
    def lag(self) -> int:
        return max(0, self.broker_offset - self.consumer_offset)


@dataclass
class GroupView:
    group: str
    members: list[str] = field(default_factory=list)
    """Client ids of its online consumers (on any broker)."""
    subscriptions: list[str] = field(default_factory=list)
    message_model: str = ""
    consume_type: str = ""
    offsets: list[QueueOffset] = field(default_factory=list)
    consume_tps: float = 0.0
    configs: dict[str, SubscriptionGroupConfig] = field(default_factory=dict)
    """Its subscription-group config on each master that holds one (by address)."""
    error: str | None = None

    @property
    def lag(self) -> int:
        return sum(q.lag for q in self.offsets)


@dataclass
class ProducerView:
    group: str
    connections: list[tuple[str, str, str, int]] = field(default_factory=list)
    """(broker, clientId, clientAddr, version)."""
    error: str | None = None


@dataclass(frozen=True, slots=True)
class Event:
    at_ms: int
    what: str


@dataclass
class ConsoleState:
    namesrvs: dict[str, NamesrvView] = field(default_factory=dict)
    brokers: dict[str, BrokerView] = field(default_factory=dict)
    groups: dict[str, GroupView] = field(default_factory=dict)
    producers: dict[str, ProducerView] = field(default_factory=dict)
    controller: ControllerView | None = None
    """None: no controller in the deployment (brokers keep their deployed roles)."""
    tps_history: dict[str, deque[float]] = field(default_factory=dict)
    route_change_history: dict[str, deque[int]] = field(default_factory=dict)
    """Per NameServer, the route changes pushed to the collector in each tick."""
    lag_history: dict[str, deque[int]] = field(default_factory=dict)
    events: deque[Event] = field(default_factory=lambda: deque(maxlen=EVENTS))
    version: int = 0
    derived: dict[str, Any] = field(default_factory=dict)
    """What pages derive from the whole state (the divergence, per-topic totals), computed once per
    version: the collector clears it with every change (`Collector.bump`)."""

    def derive(self, name: str, compute: Any) -> Any:
        if name not in self.derived:
            self.derived[name] = compute()
        return self.derived[name]

    def record(self, series: dict[str, deque[Any]], key: str, value: Any) -> None:
        series.setdefault(key, deque(maxlen=HISTORY)).append(value)

    def all_topics(self) -> set[str]:
        return set().union(*(v.topics for v in self.namesrvs.values())) if self.namesrvs else set()

    def live_brokers(self) -> list[BrokerView]:
        return [b for b in self.brokers.values() if b.error is None]

    def note(self, what: str, at_ms: int) -> None:
        """An event for the pages (newest first)."""
        self.events.appendleft(Event(at_ms, what))


@dataclass
class Divergence:
    """Where the reachable NameServers disagree; each map: key -> the NameServers that have it."""

    brokers: dict[str, set[str]] = field(default_factory=dict)
    topics: dict[str, set[str]] = field(default_factory=dict)
    routes: dict[str, dict[str, tuple[Any, ...] | None]] = field(default_factory=dict)
    """topic -> {namesrv: its route's signature (None: no route)} for topics whose routes differ."""

    @property
    def any(self) -> bool:
        return bool(self.brokers or self.topics or self.routes)

    def summary(self) -> str:
        if not self.any:
            return "the NameServers agree"
        parts = []
        if self.brokers:
            parts.append(f"{len(self.brokers)} broker(s) not on every NameServer")
        if self.topics:
            parts.append(f"{len(self.topics)} topic(s) not on every NameServer")
        if self.routes:
            parts.append(f"{len(self.routes)} route(s) differ")
        return "; ".join(parts)


def divergence(views: dict[str, NamesrvView]) -> Divergence:
    """Compare the reachable NameServers' views (an unreachable one is shown as such, not as
    disagreeing: it has no view)."""
    live = {n: v for n, v in views.items() if v.error is None}
    out = Divergence()
    if len(live) < 2:
        return out
    names = set(live)
    have_broker: dict[str, set[str]] = {}
    have_topic: dict[str, set[str]] = {}
    for n, v in live.items():
        for b in v.brokers:
            have_broker.setdefault(b.key, set()).add(n)
        for t in v.topics:
            have_topic.setdefault(t, set()).add(n)
    out.brokers = {k: s for k, s in have_broker.items() if s != names}
    out.topics = {k: s for k, s in have_topic.items() if s != names}
    for topic in sorted(set(have_topic) - set(out.topics)):
        sigs = {n: (r.signature if (r := v.routes.get(topic)) is not None else None) for n, v in live.items()}
        if len(set(sigs.values())) > 1 and all(topic in v.routes for v in live.values()):
            out.routes[topic] = sigs
    return out


def broker_diff(before: list[BrokerEntry], after: list[BrokerEntry]) -> tuple[set[str], set[str]]:
    """(keys that appeared, keys that left) between two listings of one NameServer."""
    old, new = {b.key for b in before}, {b.key for b in after}
    return new - old, old - new
