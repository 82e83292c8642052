"""What a chaos run will do, decided before it starts: the configuration, the timing bounds each
fault is held to, and the fault plan as a pure function of the seed and the cluster shape (one seed
reproduces the same faults on the same targets in the same order, whatever the timing).

Also the record of what was actually done (`FaultRecord`), so plan and timeline compare in one place.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from actors.deployment.profiles import get_profile
from clients.chaos.schema import (
    BROKER_FAULTS,
    FAULT_KINDS,
    HEAL,
    HELD_FAULTS,
    HOST_FAULTS,
    KILL_NAMESRV,
    LOSE_MASTER_NODE,
    MIX_KINDS,
    NODE_FAULTS,
    PARTITION_BROKER_NAMESRV,
    PAUSE_SLAVE,
    RESTART_BROKER,
    RESTART_NAMESRV,
    REVIVAL_OF,
    SET_FAULTS,
)
from namesrv.broker.config import BrokerConfig
from namesrv.routeinfo.config import NamesrvConfig


def parse_fault_mix(text: str | Iterable[str]) -> dict[str, int]:
    """'kill_broker,sigstop_broker:2' -> {kind: weight}; every kind must be a known fault."""
    parts = text.split(",") if isinstance(text, str) else list(text)
    mix: dict[str, int] = {}
    for part in (p.strip() for p in parts):
        if not part:
            continue
        kind, _, weight = part.partition(":")
        if kind not in MIX_KINDS:
            raise ValueError(f"unknown fault kind {kind!r}; choose from {', '.join(MIX_KINDS)}")
        try:
            w = int(weight) if weight else 1
        except ValueError:
            raise ValueError(f"fault weight must be an integer, got {part!r}") from None
        if w < 1:
            raise ValueError(f"fault weight must be >= 1, got {part!r}")
        mix[kind] = mix.get(kind, 0) + w
    if not mix:
        raise ValueError("the fault mix is empty")
    return mix


# ---------------------------------------------------------------------------------------- timing
@dataclass(frozen=True)
class Timing:
    """The bounds each fault is held to, derived from the NameServer and broker configs in force."""

    expiry_ms: int
    scan_ms: int
    register_period_ms: int
    register_timeout_ms: int
    route_poll_ms: int
    channel_bound_ms: int
    margin_ms: int
    actor_start_ms: int
    node_death_ms: int = 30_000
    """How long Ray may take to declare a removed node dead (GCS health checks; 12-13 s measured on
    a busy 2-core machine, up to ~30 s with Ray's defaults): until then a NameServer's channel watch
    on a broker of that node hears nothing definite."""

    @classmethod
    def from_configs(cls, namesrv: NamesrvConfig, broker: BrokerConfig, route_poll_ms: int,
                     channel_bound_ms: int, margin_ms: int, actor_start_ms: int,
                     node_death_ms: int = 30_000) -> Timing:
        return cls(
            expiry_ms=namesrv.broker_channel_expired_time_ms,
            scan_ms=namesrv.scan_not_active_broker_interval_ms,
            register_period_ms=broker.effective_register_period_ms(),
            register_timeout_ms=broker.register_broker_timeout_ms,
            route_poll_ms=route_poll_ms,
            channel_bound_ms=channel_bound_ms,
            margin_ms=margin_ms,
            actor_start_ms=actor_start_ms,
            node_death_ms=node_death_ms,
        )

    @property
    def hang_bound_ms(self) -> int:
        """A hung broker is caught only by the expiry scan: expiry + one scan period + margin."""
        return self.expiry_ms + self.scan_ms + self.margin_ms

    def detect_bound_ms(self, kind: str) -> int:
        """A lost node's broker leaves a NameServer when its channel watch gets Ray's verdict on the
        node (or its heartbeats expire, whichever is first)."""
        if kind in NODE_FAULTS:
            return min(self.node_death_ms, self.expiry_ms + self.scan_ms) + self.margin_ms
        return self.hang_bound_ms if kind in HELD_FAULTS else self.channel_bound_ms

    def producer_bound_ms(self, kind: str) -> int:
        """The producer follows a NameServer by push, or at worst by its next route poll."""
        return self.detect_bound_ms(kind) + self.route_poll_ms + self.margin_ms

    def back_bound_ms(self, kind: str, up_ms: float | None = None) -> int:
        """One registration round after it returns, counting one round lost to the register timeout
        (a resumed broker's in-flight calls and timers expired while it was stopped; a new one looks
        the NameServers up first), plus actor start for a restart: `up_ms`, what the new actor took to
        come up, once measured (Ray's worker start on a loaded machine is no NameServer's doing),
        else `actor_start_ms`. For a heal, `up_ms` is how long the cut lasted: a connection the cut
        stalled or broke resumes at its next back-off attempt (TCP's retransmission, gRPC's reconnect:
        the broker's calls to a NameServer are Ray's), which comes at most about as long after the
        heal as the cut lasted."""
        start = (self.actor_start_ms if up_ms is None else int(up_ms)) if kind == RESTART_BROKER else 0
        if kind == HEAL:
            start = int(up_ms or 0)
        return self.register_timeout_ms + self.register_period_ms + self.margin_ms + start

    def producer_back_bound_ms(self, kind: str, up_ms: float | None = None) -> int:
        return self.back_bound_ms(kind, up_ms) + self.route_poll_ms


# ---------------------------------------------------------------------------------------- config
class ChaosConfig(BaseModel):
    """One chaos run. By default it deploys a private cluster in its own namespace and tears it down
    afterwards; with `existing` it faults the deployment already running in `namespace` instead."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    duration_s: float = Field(default=60.0, gt=0)
    """How long producers send; faults are planned so every broker is back before sending stops."""
    seed: int = 0
    fault_interval_s: float = Field(default=4.0, gt=0)
    faults: tuple[tuple[str, int], ...] = tuple((k, 1) for k in FAULT_KINDS)
    brokers: int = Field(default=3, ge=1)
    """Brokers of a private deployment (an existing one has what it has)."""
    namesrvs: int = Field(default=2, ge=1)
    producers: int = Field(default=2, ge=1)
    rate: float = Field(default=50.0, gt=0)
    """Messages per second per producer."""
    transactions: float = Field(default=0.0, ge=0)
    """Transactions per second from a transactional producer in the driver (clients.chaos.transactions),
    each committed, rolled back or left to its check-back; 0: none."""
    topics: int = Field(default=2, ge=1)
    queues: int = Field(default=4, ge=1)
    down_time_s: float = Field(default=2.0, gt=0)
    """How long a killed broker stays down before it is restarted from its store."""
    stop_time_s: float | None = Field(default=None, gt=0)
    """How long a SIGSTOPped broker stays hung; default: its detection bound + 0.5 s."""
    warmup_s: float = Field(default=1.5, ge=0)
    settle_s: float = Field(default=1.0, ge=0)
    """A revived broker is left alone at least this long (and until it is back in every route)."""
    profile: str = "fast"
    """Timing profile of a private deployment, and the route poll of the chaos producers."""
    channel_bound_ms: int = Field(default=2_000, gt=0)
    margin_ms: int = Field(default=1_000, ge=0)
    actor_start_ms: int = Field(default=8_000, ge=0)
    """Allowance for starting a broker actor (a new worker process) on a busy 2-core machine: how long
    the driver waits for a restart to come back; the return bounds count the start as measured."""
    node_death_bound_ms: int = Field(default=30_000, gt=0)
    """How long Ray may take to declare a removed node dead (lose_master_node's detection bound:
    invariant 3a allows this plus the margin)."""
    snapshot_interval_ms: int = Field(default=1_000, gt=0)
    """A private deployment's NameServers snapshot their routes this often (and on every change);
    with an output directory the run collects every NameServer's snapshots this often."""
    slaves: int = Field(default=0, ge=0, le=2)
    """Slaves per broker set of a private deployment (issue 21's replication)."""
    broker_role: Literal["SYNC_MASTER", "ASYNC_MASTER"] | None = None
    """The masters' role in a private deployment; default SYNC_MASTER with slaves (as `namesrv up`)."""
    broker_overrides: dict[str, Any] = Field(default_factory=dict)
    """Other broker settings of a private deployment (e.g. ha_max_time_slave_not_catchup_ms)."""
    namesrv_overrides: dict[str, Any] = Field(default_factory=dict)
    """NameServer settings of a private deployment (e.g. broker_channel_expired_time_ms); the
    bounds follow them."""
    broker_tcp: bool = False
    """A private deployment's brokers listen on TCP (free loopback ports), as `namesrv up` deploys
    them: routes carry host:port, the producers send over their own connections and slaves
    replicate over HA_TRANSFER. Off, brokers are Ray-only (a route's address is the actor's name):
    sends are actor calls and slaves replicate over Ray calls."""
    controller: bool = False
    """A private deployment with the controller: brokers in controller mode, a killed master
    replaced by its slave (actors.broker.ha.replicas_manager); off, roles stay as deployed."""
    namespace: str | None = None
    existing: bool = False
    """Fault the deployment already running in `namespace` (which must be given) instead of a private one."""
    data_dir: str | None = None
    keep_data: bool = False
    group_members: int = Field(default=0, ge=0, le=8)
    """Push consumers of one consumer group reading the run's topics, their queue ownership sampled
    and judged (invariant 7: each queue the group can reach owned once, but for a rebalance
    interval, a pass's graces and the margin: `GroupLane.bound_ms`); 0: no group."""
    route_union: bool = True
    """The run's producers and group members take the union of every NameServer's view (the project's
    default); False: client i is given NameServer i alone (a RocketMQ client sticks to the one it
    picked), to see what divergence does without the union."""
    group_rebalance_ms: int = Field(default=1_000, gt=0)
    """The group members' rebalance interval (RocketMQ: 20 s)."""
    delay_ms: int = Field(default=100, gt=0, le=10_000)
    """delay_broker's hold on each chunk, each way (a round trip takes at least twice this)."""
    hosts: int = Field(default=0, ge=0)
    """Run on the multi-host test bed (clients.chaos.hosts) of this many hosts, each NameServer and
    broker on a host of its own, the clients on the test driver's node; the host faults
    (partitions, isolation) need it. 0: wherever Ray places them."""

    @model_validator(mode="after")
    def _check(self) -> Self:
        get_profile(self.profile)  # a clear error for an unknown profile
        for kind, weight in self.faults:
            if kind not in MIX_KINDS or weight < 1:
                raise ValueError(f"bad fault mix entry {(kind, weight)!r}")
        if not self.faults:
            raise ValueError("the fault mix is empty")
        if not self.existing and self.brokers < 2 and any(k in BROKER_FAULTS for k, _ in self.faults):
            raise ValueError("broker faults need at least 2 brokers: the last healthy one is never faulted")
        if any(k == PAUSE_SLAVE for k, _ in self.faults) and not self.existing and self.slaves < 1:
            raise ValueError("pause_slave needs slaves: --slaves 1")
        if any(k == LOSE_MASTER_NODE for k, _ in self.faults) and not self.existing and (
                self.slaves < 1 or not self.controller):
            raise ValueError("lose_master_node needs a slave to take over: --slaves 1 --controller")
        if self.existing and not self.namespace:
            raise ValueError("faulting an existing deployment needs its namespace")
        if any(k in HOST_FAULTS for k, _ in self.faults) and not self.hosts:
            raise ValueError(f"{', '.join(sorted(k for k, _ in self.faults if k in HOST_FAULTS))} need the "
                             "multi-host test bed: --hosts N")
        if self.hosts:
            servers = self.namesrvs + self.brokers * (self.slaves + 1)
            if self.existing:
                raise ValueError("a run on the test bed deploys its own cluster there; --hosts and --namespace "
                                 "exclude each other")
            if self.hosts < servers:
                raise ValueError(f"the test bed gives each NameServer and broker a host of its own: {self.namesrvs} "
                                 f"NameServers and {self.brokers * (self.slaves + 1)} brokers need {servers} hosts, "
                                 f"not {self.hosts}")
            if not self.broker_tcp:
                raise ValueError("brokers on the test bed's hosts serve TCP on their host's address: --tcp-brokers")
        if self.existing and self.namesrv_overrides:
            raise ValueError("an existing deployment keeps its own NameServer config; namesrv_overrides is for a "
                             "private one")
        if self.existing and self.data_dir is not None:
            raise ValueError("an existing deployment keeps its own data dir; data_dir is for a private one")
        return self

    @property
    def fault_mix(self) -> dict[str, int]:
        return dict(self.faults)

    def timing(self) -> Timing:
        """The bounds for a deployment running this config's profile."""
        profile = get_profile(self.profile)
        return self.timing_for(profile.namesrv_config(**self.namesrv_overrides), profile.broker_config())

    def timing_for(self, namesrv: NamesrvConfig, broker: BrokerConfig) -> Timing:
        """The bounds for a deployment running these configs (an existing one's, read from its actors)."""
        return Timing.from_configs(namesrv, broker, get_profile(self.profile).route_poll_interval_ms,
                                   self.channel_bound_ms, self.margin_ms, self.actor_start_ms,
                                   self.node_death_bound_ms)

    def stop_time(self, timing: Timing | None = None) -> float:
        timing = timing or self.timing()
        return self.stop_time_s if self.stop_time_s is not None else timing.hang_bound_ms / 1000 + 0.5

    def held_time(self, kind: str, timing: Timing | None = None) -> float:
        """How long a broker fault of this kind lasts before its revival: a hang or a host fault
        until the expiry has caught it (`stop_time`), a kill `down_time_s`."""
        return self.stop_time(timing) if kind in HELD_FAULTS else self.down_time_s


def client_namesrvs(names: list[str], i: int, union: bool) -> list[str]:
    """What client i of the run is given: every NameServer (it takes the union of their views), or,
    without the union, NameServer i alone (as a RocketMQ client sticks to the one it picked)."""
    return list(names) if union or not names else [names[i % len(names)]]


# ---------------------------------------------------------------------------------------- plan
@dataclass(frozen=True, slots=True)
class PlannedFault:
    at_s: float
    """Seconds after the start of sending."""
    kind: str
    target: str
    after_s: float | None = None
    """A revival also waits this long after its fault really happened (a late fault never shortens
    a broker's down time: a SIGSTOP shorter than the expiry would go unnoticed)."""
    peer: str | None = None
    """The NameServer a partition_broker_namesrv cuts the broker from."""


_MASTER_RULE = "master"
"""Which sets a set fault may hit: any settled one while another is up (a master kill), or"""


def _set_rule(kind: str) -> str:
    """... a settled one with a slave (pause_slave), or a settled one with a slave while another
    set is up (lose_master_node)."""
    return kind if kind in (PAUSE_SLAVE, LOSE_MASTER_NODE) else _MASTER_RULE


def plan_faults(cfg: ChaosConfig, brokers: list[str], namesrvs: list[str],
                timing: Timing | None = None, sets: dict[str, list[str]] | None = None) -> list[PlannedFault]:
    """The whole fault timeline, decided up front from the seed alone.

    One fault every `fault_interval_s` from `warmup_s`, kinds drawn from a shuffled bag of the mix
    (each kind once per round of the bag, so even short runs cover the mix), targets drawn
    among the brokers that are up and settled. A broker fault is planned only while another broker
    is up, so one stays writable. Each broker fault brings its revival (restart after `down_time_s`,
    SIGCONT after the stop time); the last fault leaves room for its revival before sending stops.
    A NameServer kill needs no planned revival: Ray restarts it and the driver waits for it.

    `sets`: broker set name -> its members' addresses (master and slaves), for the set faults
    (kill_master, sigkill_master, pause_slave), whose target is the set's name (the driver finds
    the broker holding the role when it makes the fault); a master kill needs another set up,
    pause_slave a set with a slave. One fault per set at a time: a fault on a broker (`brokers`
    are the masters' addresses) holds its whole set. Without `sets`, each broker is a set of one.
    lose_master_node (a set fault with a slave, while another set is up) has no revival: its set
    counts as up again `down_time_s` later (its slave took over) but is never faulted again, since
    it has lost a member for good.
    """
    rng = random.Random(cfg.seed)
    brokers, namesrvs = sorted(brokers), sorted(namesrvs)
    set_of = {a: name for name, members in (sets or {}).items() for a in members}
    key = {b: set_of.get(b, b) for b in brokers}
    set_names = sorted(sets or {})
    with_slaves = {n for n in set_names if len((sets or {})[n]) > 1}
    retired: set[str] = set()
    mix = cfg.fault_mix
    longest = max(cfg.held_time(k, timing) for k in mix if k in BROKER_FAULTS) if any(
        k in BROKER_FAULTS for k in mix) else 0.0
    last_at = cfg.duration_s - longest - 1.0
    back_at: dict[str, float] = {k: float("-inf") for k in (*key.values(), *set_names)}
    events: list[tuple[float, int, PlannedFault]] = []
    bag: list[str] = []
    t = cfg.warmup_s
    while t <= last_at + 1e-9:
        up = sorted({k for k in back_at if back_at[k] <= t})
        settled = [k for k in up if t - back_at[k] >= cfg.settle_s and k not in retired]
        ready = [b for b in brokers if key[b] in settled] if len(up) >= 2 else []
        ready_sets = {_MASTER_RULE: [n for n in set_names if n in settled] if len(up) >= 2 else [],
                      PAUSE_SLAVE: [n for n in set_names if n in settled and n in with_slaves]}
        ready_sets[LOSE_MASTER_NODE] = [n for n in ready_sets[_MASTER_RULE] if n in with_slaves]
        feasible = {k for k in mix if (k in SET_FAULTS and ready_sets[_set_rule(k)])
                    or (k in BROKER_FAULTS and k not in SET_FAULTS and ready) or (k == KILL_NAMESRV and namesrvs)}
        if feasible:
            if not feasible.intersection(bag):  # a new round; kinds not feasible now stay queued
                round_ = [k for k, w in mix.items() for _ in range(w)]
                rng.shuffle(round_)
                bag += round_
            kind = next(k for k in bag if k in feasible)
            bag.remove(kind)
            peer = None
            if kind in BROKER_FAULTS:
                target = rng.choice(ready_sets[_set_rule(kind)]) if kind in SET_FAULTS else rng.choice(ready)
                peer = rng.choice(namesrvs) if kind == PARTITION_BROKER_NAMESRV else None
                down = cfg.held_time(kind, timing)
                back_at[key.get(target, target)] = t + down
                if kind in NODE_FAULTS:
                    retired.add(target)
                else:
                    events.append((t + down, 0, PlannedFault(round(t + down, 3), REVIVAL_OF[kind], target, down)))
            else:
                target = rng.choice(namesrvs)
            events.append((t, 1, PlannedFault(round(t, 3), kind, target, peer=peer)))
        t += cfg.fault_interval_s
    return [e for _, _, e in sorted(events, key=lambda e: (e[0], e[1]))]


# ---------------------------------------------------------------------------------------- records
@dataclass(slots=True)
class FaultRecord:
    """One fault or revival as it was made (a row of faults.parquet)."""

    fault_id: int
    t_ms: int
    kind: str
    target: str
    broker_addr: str | None
    detail: str = ""
    revives: int | None = None
    """For a revival: the fault_id it ends (not part of the Parquet contract; also in `detail`)."""
    ok: bool = True
    planned: str | None = None
    """The plan's target when it named a broker set (set faults and their revivals); `target` is
    then the broker the driver found in the role (not part of the Parquet contract)."""
    peer: str | None = None
    """The NameServer a partition_broker_namesrv cut the broker from."""


def plan_signature(plan: Iterable[PlannedFault]) -> list[tuple[str, str, str | None]]:
    """(kind, target, peer) in order: what must repeat for the same seed."""
    return [(e.kind, e.target, e.peer) for e in plan]


def timeline_signature(timeline: Iterable[FaultRecord]) -> list[tuple[str, str, str | None]]:
    """The executed timeline in the plan's terms (restart_namesrv rows are observations, not planned)."""
    return [(r.kind, r.planned or r.target, r.peer) for r in timeline if r.kind != RESTART_NAMESRV]
