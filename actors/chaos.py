"""Chaos suite: break brokers and NameServers on a seeded timeline while producers send, then check
that nothing acknowledged was lost, that routes followed every fault within its bound, and that the
run left nothing behind (the model: Ray's chaos release tests, where every sequence number must be
accounted for and resources must come back).

The pieces work on their own (the multi-node test reuses them):
- `plan_faults`: the fault timeline as a pure function of the seed and the cluster shape, so one
  seed reproduces the same faults on the same targets in the same order, whatever the timing;
- `ChaosDriver`: carries a plan out against a `Deployment`, recording every fault it made;
- `RouteObserver`: long-polls every NameServer and timestamps each route change it sees;
- `RemovalLog`: the NameServers' removal events, kept across NameServer restarts (a restart
  empties a NameServer's own list);
- `measure_*` / `check_*`: turn the records into per-fault detection and recovery times and the
  four invariants;
- `run_chaos`: deploys, sends, breaks, recovers, checks and tears down.

The fault timeline written to Parquet is a contract with the Spark analysis
(`clients.analysis.faults`): fault_id int64, t_ms int64 (epoch ms), kind, target, broker_addr
(nullable), detail.
"""

from __future__ import annotations

import json
import logging
import math
import os
import random
import shutil
import signal
import string
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import ray
from ray.exceptions import GetTimeoutError, RayActorError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from actors.consumer import PullConsumer
from actors.launcher import BrokerSpec, ClusterSpec, Deployment
from actors.producer_actor import ProducerActor
from actors.profiles import get_profile
from namesrv.snapshot import FAULT_TIMELINE_COLUMNS

log = logging.getLogger(__name__)

# ---------------------------------------------------------------------------------------- kinds
KILL_BROKER = "kill_broker"
SIGKILL_BROKER = "sigkill_broker"
SIGSTOP_BROKER = "sigstop_broker"
SIGCONT_BROKER = "sigcont_broker"
RESTART_BROKER = "restart_broker"
KILL_NAMESRV = "kill_namesrv"
RESTART_NAMESRV = "restart_namesrv"

FAULT_KINDS: tuple[str, ...] = (KILL_BROKER, SIGKILL_BROKER, SIGSTOP_BROKER, KILL_NAMESRV)
"""What a fault mix may name; the other kinds are the recoveries that follow them."""
TIMELINE_KINDS: tuple[str, ...] = (*FAULT_KINDS, SIGCONT_BROKER, RESTART_BROKER, RESTART_NAMESRV)
BROKER_FAULTS: frozenset[str] = frozenset({KILL_BROKER, SIGKILL_BROKER, SIGSTOP_BROKER})
BROKER_REVIVALS: frozenset[str] = frozenset({RESTART_BROKER, SIGCONT_BROKER})
REVIVAL_OF: dict[str, str] = {
    KILL_BROKER: RESTART_BROKER, SIGKILL_BROKER: RESTART_BROKER, SIGSTOP_BROKER: SIGCONT_BROKER,
}

TIMELINE_COLUMNS = FAULT_TIMELINE_COLUMNS


def _schema(columns: Iterable[tuple[str, str]]) -> pa.Schema:
    return pa.schema([(name, pa.type_for_alias(t)) for name, t in columns])


TIMELINE_SCHEMA = _schema(TIMELINE_COLUMNS)
SEND_SCHEMA = _schema((
    ("producer", "string"), ("t_ms", "int64"), ("topic", "string"), ("ok", "bool"), ("broker_name", "string"),
    ("queue_id", "int64"), ("queue_offset", "int64"), ("msg_id", "string"), ("latency_ms", "double"),
    ("attempts", "int64"), ("brokers_tried", "string"), ("error", "string"), ("explained", "string"),
))
DETECTION_SCHEMA = _schema((
    ("fault_id", "int64"), ("kind", "string"), ("broker_addr", "string"), ("observer", "string"),
    ("observer_kind", "string"), ("fault_t_ms", "int64"), ("seen_t_ms", "int64"), ("elapsed_ms", "int64"),
    ("cause", "string"), ("bound_ms", "int64"), ("ok", "bool"),
))
"""One row per (broker fault or revival, NameServer or producer): when it saw the change."""
REMOVAL_SCHEMA = _schema((("namesrv", "string"), ("broker_addr", "string"), ("cause", "string"), ("t_ms", "int64")))
PRODUCER_ROUTE_SCHEMA = _schema((("producer", "string"), ("topic", "string"), ("t_ms", "int64"), ("source", "string"),
                                 ("brokers", "string")))
"""Each route change a producer applied: `brokers` is the comma-joined broker names it then wrote to."""
NAMESRV_ROUTE_SCHEMA = _schema((("t_ms", "int64"), ("namesrv", "string"), ("topic", "string"), ("addrs", "string")))
"""Each route change the observer saw on a NameServer; `addrs` null while it could not be reached."""


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def percentile(values: Iterable[float], p: float) -> float | None:
    """Nearest-rank percentile (p in [0, 1]); None for no values."""
    data = sorted(values)
    if not data:
        return None
    return data[min(len(data) - 1, max(0, math.ceil(p * len(data)) - 1))]


# ---------------------------------------------------------------------------------------- config
def parse_fault_mix(text: str | Iterable[str]) -> dict[str, int]:
    """'kill_broker,sigstop_broker:2' -> {kind: weight}; every kind must be a known fault."""
    parts = text.split(",") if isinstance(text, str) else list(text)
    mix: dict[str, int] = {}
    for part in (p.strip() for p in parts):
        if not part:
            continue
        kind, _, weight = part.partition(":")
        if kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault kind {kind!r}; choose from {', '.join(FAULT_KINDS)}")
        w = int(weight) if weight else 1
        if w < 1:
            raise ValueError(f"fault weight must be >= 1, got {part!r}")
        mix[kind] = mix.get(kind, 0) + w
    if not mix:
        raise ValueError("the fault mix is empty")
    return mix


@dataclass(frozen=True)
class Timing:
    """The bounds each fault is held to, derived from the timing profile."""

    expiry_ms: int
    scan_ms: int
    register_period_ms: int
    register_timeout_ms: int
    route_poll_ms: int
    channel_bound_ms: int
    margin_ms: int
    actor_start_ms: int

    @property
    def hang_bound_ms(self) -> int:
        """A hung broker is caught only by the expiry scan: expiry + one scan period + margin."""
        return self.expiry_ms + self.scan_ms + self.margin_ms

    def detect_bound_ms(self, kind: str) -> int:
        return self.hang_bound_ms if kind == SIGSTOP_BROKER else self.channel_bound_ms

    def producer_bound_ms(self, kind: str) -> int:
        """The producer follows a NameServer by push, or at worst by its next route poll."""
        return self.detect_bound_ms(kind) + self.route_poll_ms + self.margin_ms

    def back_bound_ms(self, kind: str) -> int:
        """One registration round after it returns, counting one round lost to the register timeout
        (a resumed broker's in-flight calls and timers expired while it was stopped; a new one looks
        the NameServers up first), plus actor start for a restart."""
        extra = self.actor_start_ms if kind == RESTART_BROKER else 0
        return self.register_timeout_ms + self.register_period_ms + self.margin_ms + extra

    def producer_back_bound_ms(self, kind: str) -> int:
        return self.back_bound_ms(kind) + self.route_poll_ms


@dataclass(frozen=True)
class ChaosConfig:
    duration_s: float = 60.0
    """How long producers send; faults are planned so every broker is back before sending stops."""
    seed: int = 0
    fault_interval_s: float = 4.0
    faults: tuple[tuple[str, int], ...] = tuple((k, 1) for k in FAULT_KINDS)
    brokers: int = 3
    namesrvs: int = 2
    producers: int = 2
    rate: float = 50.0
    """Messages per second per producer."""
    topics: int = 2
    queues: int = 4
    down_time_s: float = 2.0
    """How long a killed broker stays down before it is restarted from its store."""
    stop_time_s: float | None = None
    """How long a SIGSTOPped broker stays hung; default: its detection bound + 0.5 s."""
    warmup_s: float = 1.5
    settle_s: float = 1.0
    """A revived broker is left alone at least this long (and until it is back in every route)."""
    profile: str = "fast"
    channel_bound_ms: int = 2_000
    margin_ms: int = 1_000
    actor_start_ms: int = 8_000
    """Allowance for starting a broker actor (a new worker process) on a busy 2-core machine."""
    namespace: str | None = None
    data_dir: str | None = None
    keep_data: bool = False

    def __post_init__(self) -> None:
        if self.duration_s <= 0 or self.fault_interval_s <= 0:
            raise ValueError("duration and fault interval must be > 0")
        if self.brokers < 1 or self.namesrvs < 1 or self.producers < 1 or self.topics < 1 or self.queues < 1:
            raise ValueError("brokers, namesrvs, producers, topics and queues must be >= 1")
        for kind, weight in self.faults:
            if kind not in FAULT_KINDS or weight < 1:
                raise ValueError(f"bad fault mix entry {(kind, weight)!r}")
        if any(k in BROKER_FAULTS for k, _ in self.faults) and self.brokers < 2:
            raise ValueError("broker faults need at least 2 brokers: the last healthy one is never faulted")

    @property
    def fault_mix(self) -> dict[str, int]:
        return dict(self.faults)

    def timing(self) -> Timing:
        profile = get_profile(self.profile)
        ns, broker = profile.namesrv_config(), profile.broker_config()
        return Timing(
            expiry_ms=ns.broker_channel_expired_time_ms,
            scan_ms=ns.scan_not_active_broker_interval_ms,
            register_period_ms=broker.effective_register_period_ms(),
            register_timeout_ms=broker.register_broker_timeout_ms,
            route_poll_ms=profile.route_poll_interval_ms,
            channel_bound_ms=self.channel_bound_ms,
            margin_ms=self.margin_ms,
            actor_start_ms=self.actor_start_ms,
        )

    def stop_time(self) -> float:
        return self.stop_time_s if self.stop_time_s is not None else self.timing().hang_bound_ms / 1000 + 0.5


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


def plan_faults(cfg: ChaosConfig, brokers: list[str], namesrvs: list[str]) -> list[PlannedFault]:
    """The whole fault timeline, decided up front from the seed alone.

    One fault every `fault_interval_s` from `warmup_s`, kinds drawn from a shuffled bag of the mix
    (each kind once per round of the bag, so even short runs cover the mix), targets drawn
    among the brokers that are up and settled. A broker fault is planned only while another broker
    is up, so one stays writable. Each broker fault brings its revival (restart after `down_time_s`,
    SIGCONT after the stop time); the last fault leaves room for its revival before sending stops.
    A NameServer kill needs no planned revival: Ray restarts it and the driver waits for it.
    """
    rng = random.Random(cfg.seed)
    brokers, namesrvs = sorted(brokers), sorted(namesrvs)
    mix = cfg.fault_mix
    stop_s = cfg.stop_time()
    longest = max((stop_s if k == SIGSTOP_BROKER else cfg.down_time_s) for k in mix if k in BROKER_FAULTS) if any(
        k in BROKER_FAULTS for k in mix) else 0.0
    last_at = cfg.duration_s - longest - 1.0
    back_at: dict[str, float] = {b: float("-inf") for b in brokers}
    events: list[tuple[float, int, PlannedFault]] = []
    bag: list[str] = []
    t = cfg.warmup_s
    while t <= last_at + 1e-9:
        up = [b for b in brokers if back_at[b] <= t]
        ready = [b for b in up if t - back_at[b] >= cfg.settle_s] if len(up) >= 2 else []
        feasible = {k for k in mix if (k in BROKER_FAULTS and ready) or (k == KILL_NAMESRV and namesrvs)}
        if feasible:
            if not feasible.intersection(bag):  # a new round; kinds not feasible now stay queued
                round_ = [k for k, w in mix.items() for _ in range(w)]
                rng.shuffle(round_)
                bag += round_
            kind = next(k for k in bag if k in feasible)
            bag.remove(kind)
            if kind in BROKER_FAULTS:
                target = rng.choice(ready)
                down = stop_s if kind == SIGSTOP_BROKER else cfg.down_time_s
                back_at[target] = t + down
                events.append((t + down, 0, PlannedFault(round(t + down, 3), REVIVAL_OF[kind], target, down)))
            else:
                target = rng.choice(namesrvs)
            events.append((t, 1, PlannedFault(round(t, 3), kind, target)))
        t += cfg.fault_interval_s
    return [e for _, _, e in sorted(events, key=lambda e: (e[0], e[1]))]


def plan_signature(plan: Iterable[PlannedFault]) -> list[tuple[str, str]]:
    """(kind, target) in order: what must repeat for the same seed."""
    return [(e.kind, e.target) for e in plan]


def timeline_signature(timeline: Iterable[FaultRecord]) -> list[tuple[str, str]]:
    """The executed timeline in the plan's terms (restart_namesrv rows are observations, not planned)."""
    return [(r.kind, r.target) for r in timeline if r.kind != RESTART_NAMESRV]


# ---------------------------------------------------------------------------------------- records
@dataclass(slots=True)
class FaultRecord:
    fault_id: int
    t_ms: int
    kind: str
    target: str
    broker_addr: str | None
    detail: str = ""
    revives: int | None = None
    """For a revival: the fault_id it ends (not part of the Parquet contract; also in `detail`)."""
    ok: bool = True


@dataclass(frozen=True, slots=True)
class RouteObservation:
    t_ms: int
    namesrv: str
    topic: str
    addrs: tuple[str, ...] | None
    """Broker addresses in the route; None while the NameServer cannot be reached."""


@dataclass(slots=True)
class Detection:
    fault_id: int
    kind: str
    broker_addr: str
    observer: str
    observer_kind: str
    """'namesrv' (removal / return in its tables) or 'producer' (its route cache)."""
    fault_t_ms: int
    seen_t_ms: int | None
    elapsed_ms: int | None
    cause: str
    bound_ms: int
    ok: bool


@dataclass(slots=True)
class Invariant:
    name: str
    ok: bool
    value: str
    detail: str = ""


# ---------------------------------------------------------------------------------------- signals
@ray.remote(num_cpus=0, max_retries=0)
def _signal_on_node(pid: int, sig: int) -> None:
    os.kill(pid, sig)


_LOCAL_NODE_IPS: dict[str, bool] = {}


def _is_local_node(node_id: str) -> bool:
    if node_id not in _LOCAL_NODE_IPS:
        me = ray.util.get_node_ip_address()
        ips = {n["NodeID"]: n["NodeManagerAddress"] for n in ray.nodes()}
        _LOCAL_NODE_IPS[node_id] = ips.get(node_id) == me
    return _LOCAL_NODE_IPS[node_id]


def send_signal(pid: int, sig: signal.Signals, node_id: str | None = None) -> None:
    """Signal a worker process: directly when it runs on this machine, else through a task pinned
    to its node (a driver on another host cannot reach it with os.kill)."""
    if node_id is None or _is_local_node(node_id):
        os.kill(pid, sig)
        return
    strategy = NodeAffinitySchedulingStrategy(node_id, soft=False)
    ray.get(_signal_on_node.options(scheduling_strategy=strategy).remote(pid, int(sig)), timeout=60)


# ---------------------------------------------------------------------------------------- observers
def route_addrs(route: dict[str, Any] | None) -> frozenset[str]:
    """Every broker address in a wire route (empty for no route)."""
    return frozenset(a for bd in (route or {}).get("brokerDatas", []) for a in bd["brokerAddrs"].values())


class RouteObserver:
    """What every NameServer advertises for the chaos topics, over time, seen by a client.

    One thread per NameServer holds its long-poll (`listen_for_change`), so each change is seen
    within milliseconds of happening; while a NameServer cannot be reached its routes are unknown.
    `wait_for` lets the driver wait on a route condition instead of sleeping.
    """

    def __init__(self, namesrvs: dict[str, Any], topics: list[str], poll_s: float = 2.0) -> None:
        self.namesrvs = dict(namesrvs)
        self.topics = list(topics)
        self.poll_s = poll_s
        self.history: list[RouteObservation] = []
        self._current: dict[tuple[str, str], frozenset[str] | None] = {
            (n, t): None for n in self.namesrvs for t in self.topics
        }
        self._cond = threading.Condition(threading.RLock())
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def start(self) -> RouteObserver:
        for name in self.namesrvs:
            thread = threading.Thread(target=self._loop, args=(name,), name=f"route-observer-{name}", daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self) -> bool:
        """Stop every thread; True when all have exited."""
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=self.poll_s + 10)
        return not any(t.is_alive() for t in self._threads)

    def _set(self, name: str, topic: str, addrs: frozenset[str] | None, t: int) -> None:
        if self._current[(name, topic)] != addrs:
            self.history.append(RouteObservation(t, name, topic, None if addrs is None else tuple(sorted(addrs))))
        self._current[(name, topic)] = addrs

    def _loop(self, name: str) -> None:
        handle = self.namesrvs[name]
        versions = {t: -1 for t in self.topics}
        while not self._stop.is_set():
            try:
                ref = handle.listen_for_change.remote(versions, self.poll_s)
                changes = ray.get(ref, timeout=self.poll_s + 30)
            except (RayActorError, GetTimeoutError) as e:
                log.info("route observer: %s unreachable (%s)", name, type(e).__name__)
                versions = {t: -1 for t in self.topics}  # a restarted NameServer numbers routes anew
                with self._cond:
                    if any(self._current[(name, t)] is not None for t in self.topics):
                        for t in self.topics:
                            self._set(name, t, None, now_ms())
                    self._cond.notify_all()
                self._stop.wait(0.1)
                continue
            seen = now_ms()
            with self._cond:
                for topic, change in changes.items():
                    versions[topic] = change["version"]
                    self._set(name, topic, route_addrs(change["route"]), seen)
                self._cond.notify_all()

    # -- queries (safe inside `wait_for` predicates: the lock is re-entrant)
    def advertised(self, addr: str, namesrv: str) -> bool:
        with self._cond:
            return all(addr in (self._current[(namesrv, t)] or ()) for t in self.topics)

    def advertised_everywhere(self, addr: str) -> bool:
        return all(self.advertised(addr, n) for n in self.namesrvs)

    def gone_everywhere(self, addr: str) -> bool:
        with self._cond:
            return all(addr not in (self._current[(n, t)] or ()) for n in self.namesrvs for t in self.topics)

    def wait_for(self, predicate: Callable[[], bool], timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while not predicate():
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
            return True

    def snapshot_history(self) -> list[RouteObservation]:
        with self._cond:
            return list(self.history)


class RemovalLog:
    """Every NameServer's removal events (broker address, cause, t_ms), across restarts: read before
    each NameServer kill and at the end, since a restarted NameServer starts with an empty list."""

    def __init__(self, namesrvs: dict[str, Any]) -> None:
        self.namesrvs = dict(namesrvs)
        self._events: dict[str, set[tuple[str, str, int]]] = {n: set() for n in self.namesrvs}

    def snapshot(self, names: Iterable[str] | None = None, timeout_s: float = 15.0) -> None:
        names = list(names) if names is not None else list(self.namesrvs)
        refs = {n: self.namesrvs[n].get_removals.remote() for n in names}
        for name, ref in refs.items():
            try:
                events = ray.get(ref, timeout=timeout_s)
            except Exception as e:  # a NameServer restarting right now: nothing to read from it
                log.warning("could not read removals of %s: %s", name, type(e).__name__)
                continue
            self._events[name].update((e.broker_addr, e.cause, e.t_ms) for e in events)

    def events(self, namesrv: str) -> list[tuple[str, str, int]]:
        return sorted(self._events[namesrv], key=lambda e: e[2])

    def rows(self) -> list[dict[str, Any]]:
        return [{"namesrv": n, "broker_addr": a, "cause": c, "t_ms": t}
                for n in sorted(self._events) for a, c, t in self.events(n)]


# ---------------------------------------------------------------------------------------- driver
class ChaosDriver:
    """Carries a fault plan out against a Deployment and records each fault as it makes it.

    Events run in plan order, each no earlier than planned (a slow restart delays what follows, it
    never reorders it), so the timeline's kinds and targets are the plan's. Before faulting a broker
    the driver waits (bounded) until that broker is back in every route, so each fault starts from
    a converged cluster. Stopped processes are always continued when `run` ends, however it ends.
    """

    def __init__(self, dep: Deployment, cfg: ChaosConfig, observer: RouteObserver | None = None,
                 removals: RemovalLog | None = None) -> None:
        self.dep = dep
        self.cfg = cfg
        self.timing = cfg.timing()
        self.observer = observer
        self.removals = removals
        self.timeline: list[FaultRecord] = []
        self.recovery_ms: dict[int, float] = {}
        """restart_broker fault_id -> ms from the restart call until the broker answered."""
        self._stopped: dict[str, tuple[int, str | None]] = {}
        self._open: dict[str, int] = {}
        self._faulted_at: dict[str, float] = {}
        self._halt = threading.Event()
        self._lock = threading.Lock()

    def halt(self) -> None:
        self._halt.set()

    def run(self, plan: list[PlannedFault], start: float | None = None) -> list[FaultRecord]:
        """Execute `plan` (times relative to `start`, a time.monotonic() value; default now)."""
        start = time.monotonic() if start is None else start
        try:
            for event in plan:
                due = start + event.at_s
                if event.after_s is not None and event.target in self._faulted_at:
                    due = max(due, self._faulted_at[event.target] + event.after_s)
                if self._halt.wait(max(0.0, due - time.monotonic())):
                    log.warning("chaos halted before %s %s", event.kind, event.target)
                    break
                self.execute(event.kind, event.target)
        finally:
            self.release_stopped()
        return self.timeline

    def release_stopped(self) -> None:
        """SIGCONT every broker still stopped (idempotent)."""
        with self._lock:
            stopped, self._stopped = dict(self._stopped), {}
        for addr, (pid, node) in stopped.items():
            try:
                send_signal(pid, signal.SIGCONT, node)
                log.info("released stopped broker %s (pid %d)", addr, pid)
            except ProcessLookupError:
                pass
            except Exception:
                log.exception("could not SIGCONT %s (pid %d)", addr, pid)

    # -- one event
    def execute(self, kind: str, target: str) -> FaultRecord:
        """Make one fault or revival now and record it; a failed action is recorded (ok=False), not raised."""
        handler = {
            KILL_BROKER: self._kill_broker, SIGKILL_BROKER: self._sigkill_broker,
            SIGSTOP_BROKER: self._sigstop_broker, SIGCONT_BROKER: self._sigcont_broker,
            RESTART_BROKER: self._restart_broker, KILL_NAMESRV: self._kill_namesrv,
        }[kind]
        if kind in BROKER_FAULTS:
            self._settle(target)
        revives = self._open.pop(target, None) if kind in BROKER_REVIVALS else None
        broker_addr = None if kind == KILL_NAMESRV else target
        rec = FaultRecord(len(self.timeline), now_ms(), kind, target, broker_addr, revives=revives)
        self.timeline.append(rec)
        try:
            detail = handler(target, rec)
            rec.detail = detail if rec.revives is None else f"revives fault {rec.revives}; {detail}"
        except Exception as e:
            rec.ok = False
            rec.detail = f"failed: {type(e).__name__}: {e}"[:500]
            log.exception("chaos event %s on %s failed", kind, target)
        if kind in BROKER_FAULTS and rec.ok:
            self._open[target] = rec.fault_id
            self._faulted_at[target] = time.monotonic() - (now_ms() - rec.t_ms) / 1000
        log.info("fault %d %s %s: %s", rec.fault_id, kind, target, rec.detail)
        return rec

    def inject(self, kind: str, target: str, action: Callable[[], object], detail: str) -> FaultRecord:
        """Record a fault made by the caller (e.g. losing a whole node), timed right before `action`
        runs, so its revival and measurements link up like those of planned faults."""
        if kind not in TIMELINE_KINDS:
            raise ValueError(f"unknown fault kind {kind!r}")
        rec = FaultRecord(len(self.timeline), now_ms(), kind, target, None if kind == KILL_NAMESRV else target, detail)
        self.timeline.append(rec)
        action()
        if kind in BROKER_FAULTS:
            self._open[target] = rec.fault_id
            self._faulted_at[target] = time.monotonic()
        return rec

    def _settle(self, addr: str) -> None:
        observer = self.observer
        if observer is None:
            return
        bound = self.timing.back_bound_ms(RESTART_BROKER) / 1000
        if not observer.wait_for(lambda: observer.advertised_everywhere(addr), bound):
            log.warning("%s not back in every route after %.1f s; faulting it anyway", addr, bound)

    def _runtime(self, addr: str) -> dict[str, Any]:
        return ray.get(self.dep.brokers[addr].get_runtime_info.remote(), timeout=30)

    def _kill_broker(self, addr: str, rec: FaultRecord) -> str:
        self.dep.kill_broker(addr)
        return "ray.kill, no restart"

    def _sigkill_broker(self, addr: str, rec: FaultRecord) -> str:
        info = self._runtime(addr)
        rec.t_ms = now_ms()
        send_signal(info["pid"], signal.SIGKILL, info["node_id"])
        return f"SIGKILL pid {info['pid']}"

    def _sigstop_broker(self, addr: str, rec: FaultRecord) -> str:
        info = self._runtime(addr)
        with self._lock:
            self._stopped[addr] = (info["pid"], info["node_id"])
        rec.t_ms = now_ms()
        send_signal(info["pid"], signal.SIGSTOP, info["node_id"])
        return f"SIGSTOP pid {info['pid']} (alive to Ray, silent to NameServers)"

    def _sigcont_broker(self, addr: str, rec: FaultRecord) -> str:
        with self._lock:
            pid, node = self._stopped.pop(addr)
        send_signal(pid, signal.SIGCONT, node)
        return f"SIGCONT pid {pid}"

    def _restart_broker(self, addr: str, rec: FaultRecord) -> str:
        started = time.perf_counter()
        handle = self.dep.restart_broker(addr)
        info = ray.get(handle.get_runtime_info.remote(), timeout=120)
        up_ms = (time.perf_counter() - started) * 1000
        self.recovery_ms[rec.fault_id] = up_ms
        return (f"up in {up_ms:.0f} ms; store recovered {info['recovered_messages']} messages in "
                f"{info['recovery_ms']:.0f} ms")

    def _kill_namesrv(self, name: str, rec: FaultRecord) -> str:
        handle = self.dep.namesrvs[name]
        before = ray.get(handle.get_status.remote(), timeout=30)
        if self.removals is not None:
            self.removals.snapshot([name])  # its removal list dies with it
        rec.t_ms = now_ms()
        self.dep.kill_namesrv(name, restart=True)
        deadline = time.monotonic() + 120
        while True:  # calls made while it restarts either wait for the new instance or fail fast
            try:
                status = ray.get(handle.get_status.remote(), timeout=max(1.0, deadline - time.monotonic()))
                if status["started_ms"] != before["started_ms"] or status["pid"] != before["pid"]:
                    break
            except RayActorError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"{name} did not come back within 120 s")
            self._halt.wait(0.05)
        back = FaultRecord(len(self.timeline), now_ms(), RESTART_NAMESRV, name, None, revives=rec.fault_id)
        back.detail = f"revives fault {rec.fault_id}; Ray restarted it empty in {back.t_ms - rec.t_ms} ms"
        self.timeline.append(back)
        return f"ray.kill, Ray restarts it (was pid {before['pid']})"


# ---------------------------------------------------------------------------------------- measuring
def _revival_times(timeline: list[FaultRecord]) -> dict[int, int]:
    """fault_id of a broker fault -> t_ms of the event that revived it."""
    return {r.revives: r.t_ms for r in timeline if r.revives is not None and r.kind in BROKER_REVIVALS}


def namesrv_outages(timeline: list[FaultRecord]) -> list[tuple[str, int, int]]:
    """(NameServer, killed t_ms, answering again t_ms) for every NameServer kill in the timeline."""
    killed = {r.fault_id: r for r in timeline if r.kind == KILL_NAMESRV}
    return [(r.target, killed[r.revives].t_ms, r.t_ms) for r in timeline
            if r.kind == RESTART_NAMESRV and r.revives in killed]


def _deadline(start_ms: int, bound_ms: int, outages: list[tuple[str, int, int]]) -> tuple[int, str]:
    """When a client-side change is due: `bound_ms` after `start_ms`, or, when a NameServer outage
    overlaps that window, `bound_ms` after the NameServer is back. A client holding a long-poll on a
    killed NameServer learns of it only when Ray fails the call, ~2 s later as the actor restarts
    (a non-restartable actor's calls fail in ~10 ms): until then it sees no change from anyone."""
    due, note = start_ms + bound_ms, ""
    for name, down, up in outages:
        if down <= due and up >= start_ms and up + bound_ms > due:
            due, note = up + bound_ms, f" (after {name} restart)"
    return due, note


def measure_namesrv_detection(
    timeline: list[FaultRecord], removals: RemovalLog, namesrvs: Iterable[str], timing: Timing,
) -> list[Detection]:
    """For each broker fault and NameServer: when that NameServer removed the broker (its own
    timestamp and cause). A NameServer killed after the fault, before it removed the broker, stopped
    advertising it by restarting empty: that counts, dated at the kill."""
    kills: dict[str, list[int]] = {}
    for r in timeline:
        if r.kind == KILL_NAMESRV:
            kills.setdefault(r.target, []).append(r.t_ms)
    out = []
    for f in timeline:
        if f.kind not in BROKER_FAULTS or not f.ok:
            continue
        bound = timing.detect_bound_ms(f.kind)
        for name in sorted(namesrvs):
            seen = next(((t, c) for a, c, t in removals.events(name) if a == f.broker_addr and t >= f.t_ms), None)
            killed = next((t for t in kills.get(name, []) if t >= f.t_ms), None)
            if killed is not None and (seen is None or killed < seen[0]):
                seen = (killed, "namesrv_restart")
            t, cause = seen if seen is not None else (None, "never")
            elapsed = None if t is None else t - f.t_ms
            out.append(Detection(f.fault_id, f.kind, f.target, name, "namesrv", f.t_ms, t, elapsed, cause, bound,
                                 elapsed is not None and elapsed <= bound))
    return out


def _first_time(entries: list[tuple[int, bool]], since_ms: int) -> int | None:
    """entries: (t_ms, condition holds) in time order. The first time >= since_ms the condition
    holds: since_ms itself when it already held then."""
    held = None
    for t, ok in entries:
        if t > since_ms:
            break
        held = ok
    if held:
        return since_ms
    return next((t for t, ok in entries if t > since_ms and ok), None)


def measure_namesrv_return(
    timeline: list[FaultRecord], history: list[RouteObservation], namesrvs: Iterable[str], topics: list[str],
    timing: Timing,
) -> list[Detection]:
    """For each revival and NameServer: when the broker was back in every topic's route there (if
    that NameServer was down meanwhile, the bound counts from its return)."""
    outages = namesrv_outages(timeline)
    out = []
    for r in timeline:
        if r.kind not in BROKER_REVIVALS or not r.ok:
            continue
        for name in sorted(namesrvs):
            times = []
            for topic in topics:
                entries = [(o.t_ms, o.addrs is not None and r.target in o.addrs)
                           for o in history if o.namesrv == name and o.topic == topic]
                times.append(_first_time(entries, r.t_ms))
            t = None if any(x is None for x in times) else max(times)  # type: ignore[type-var]
            due, note = _deadline(r.t_ms, timing.back_bound_ms(r.kind), [o for o in outages if o[0] == name])
            elapsed = None if t is None else t - r.t_ms
            out.append(Detection(r.fault_id, r.kind, r.target, name, "namesrv", r.t_ms, t, elapsed,
                                 ("registered" if t is not None else "never") + note, due - r.t_ms,
                                 t is not None and t <= due))
    return out


def measure_producer_routes(
    timeline: list[FaultRecord], route_logs: dict[str, list[tuple[str, int, str, tuple[str, ...]]]],
    broker_names: dict[str, str], topics: list[str], timing: Timing,
) -> list[Detection]:
    """For each broker fault / revival and producer: when its route cache dropped / regained the
    broker for every topic (from the producer's own route log). A producer whose NameServer was
    killed meanwhile follows only once it fails over; if the broker was revived before that, there
    was nothing left to drop and the row says so."""
    outages = namesrv_outages(timeline)
    revived = _revival_times(timeline)
    out = []
    for f in timeline:
        if not f.ok or f.kind not in BROKER_FAULTS | BROKER_REVIVALS:
            continue
        name = broker_names[f.target]
        want_present = f.kind in BROKER_REVIVALS
        bound = timing.producer_back_bound_ms(f.kind) if want_present else timing.producer_bound_ms(f.kind)
        due, note = _deadline(f.t_ms, bound, outages)
        for producer, entries in sorted(route_logs.items()):
            per_topic: list[tuple[int, str] | None] = []
            for topic in topics:
                mine = [(t, (name in brokers) == want_present, src) for tp, t, src, brokers in entries if tp == topic]
                t = _first_time([(t, ok) for t, ok, _ in mine], f.t_ms)
                src = next((s for tm, ok, s in mine if tm == t and ok), "already")
                per_topic.append(None if t is None else (t, src))
            done = None if any(x is None for x in per_topic) else max(per_topic)  # type: ignore[type-var]
            t, cause = done if done is not None else (None, "never")  # cause: how the last topic followed
            ok = t is not None and t <= due
            back = revived.get(f.fault_id)
            if t is None and note and back is not None and back <= due:
                cause, ok = "revived before its NameServer returned", True
            elapsed = None if t is None else t - f.t_ms
            out.append(Detection(f.fault_id, f.kind, f.target, producer, "producer", f.t_ms, t, elapsed, cause + note,
                                 due - f.t_ms, ok))
    return out


def spurious_removals(removals: RemovalLog, timeline: list[FaultRecord], timing: Timing) -> list[dict[str, Any]]:
    """Removals of a broker no fault touched at the time: a live broker dropped from routes (its
    heartbeats were late, e.g. a NameServer event loop stalled). Not an invariant (CPU starvation on
    a shared machine can cause one), but every one is worth a look."""
    revived = {r.revives: r for r in timeline if r.revives is not None and r.kind in BROKER_REVIVALS}
    windows: dict[str, list[tuple[int, float]]] = {}
    for f in timeline:
        if f.kind in BROKER_FAULTS:
            r = revived.get(f.fault_id)
            windows.setdefault(f.target, []).append(
                (f.t_ms, float("inf") if r is None else r.t_ms + timing.back_bound_ms(r.kind)))
    return [row for row in removals.rows()
            if row["cause"] != "unregister"
            and not any(a <= row["t_ms"] <= b for a, b in windows.get(row["broker_addr"], []))]


def impaired_windows(timeline: list[FaultRecord], broker_names: dict[str, str], timing: Timing,
                     end_ms: int) -> dict[str, list[tuple[int, int]]]:
    """broker name -> [(from, to)] ms while it could not take a send: from its fault until it was
    back in routes (revival + its return bound); open-ended faults run to `end_ms`."""
    revived = {r.revives: r for r in timeline if r.revives is not None and r.kind in BROKER_REVIVALS}
    windows: dict[str, list[tuple[int, int]]] = {}
    for f in timeline:
        if f.kind not in BROKER_FAULTS:
            continue
        r = revived.get(f.fault_id)
        to = end_ms if r is None else r.t_ms + timing.back_bound_ms(r.kind)
        windows.setdefault(broker_names[f.target], []).append((f.t_ms, to))
    return windows


def explain_failure(record: dict[str, Any], windows: dict[str, list[tuple[int, int]]]) -> str | None:
    """Why a failed send failed, when every broker it tried was faulted at the time; None when it
    tried a healthy broker (or none): such a failure breaks invariant 2."""
    tried = [b for b in (record.get("brokers_tried") or "").split(",") if b]
    if not tried:
        return None
    start, end = record["t_ms"], record["t_ms"] + int(record["latency_ms"]) + 1
    for broker in tried:
        if not any(a <= end and start <= b for a, b in windows.get(broker, [])):
            return None
    hung = "timed out" in (record.get("error") or "")
    return f"{'timed out on hung' if hung else 'every attempt on faulted'} broker(s) {','.join(dict.fromkeys(tried))}"


# ---------------------------------------------------------------------------------------- checks
def check_no_loss(acked: list[dict[str, Any]], consumed: list[Any]) -> tuple[Invariant, dict[str, int]]:
    """Invariant 1: every acknowledged (topic, broker, queue, offset) reads back with its msgId."""
    stored = {(m.topic, m.broker_name, m.queue_id, m.queue_offset): m.msg_id for m in consumed}
    lost = [r for r in acked
            if stored.get((r["topic"], r["broker_name"], r["queue_id"], r["queue_offset"])) != r["msg_id"]]
    ids = [m.msg_id for m in consumed]
    acked_ids = {r["msg_id"] for r in acked}
    counts = {
        "acknowledged": len(acked),
        "consumed": len(consumed),
        "lost": len(lost),
        "duplicates": len(ids) - len(set(ids)),
        "stored_unacknowledged": len(set(ids) - acked_ids),
    }
    where = [(r["topic"], r["broker_name"], r["queue_id"], r["queue_offset"]) for r in lost[:3]]
    example = f"; e.g. {where}" if lost else ""
    return Invariant(
        "1 every acknowledged message is readable",
        not lost,
        f"{counts['lost']} lost of {counts['acknowledged']}",
        f"{counts['consumed']} consumed, {counts['duplicates']} duplicate msgIds, "
        f"{counts['stored_unacknowledged']} stored but never acknowledged (failed or timed-out sends){example}",
    ), counts


def check_sends(records: list[dict[str, Any]]) -> tuple[Invariant, dict[str, Any]]:
    """Invariant 2: a sync send fails only when every broker it tried was faulted; `explained` must
    be filled in on every failed record first (see `explain_failure`)."""
    failed = [r for r in records if not r["ok"]]
    unexplained = [r for r in failed if not r.get("explained")]
    acked = len(records) - len(failed)
    rate = acked / len(records) if records else 1.0
    counts = {"attempted": len(records), "acknowledged": acked, "failed": len(failed),
              "unexplained_failures": len(unexplained), "success_rate": rate,
              "retried": sum(1 for r in records if r["ok"] and r["attempts"] > 1)}
    reasons: dict[str, int] = {}
    for r in failed:
        key = r.get("explained") or f"UNEXPLAINED: {(r.get('error') or '')[:120]}"
        reasons[key] = reasons.get(key, 0) + 1
    detail = "; ".join(f"{n}x {k}" for k, n in sorted(reasons.items(), key=lambda kv: -kv[1])[:6])
    return Invariant(
        "2 sync sends succeed while a writable broker lives",
        not unexplained and bool(records),
        f"{rate:.2%} ({acked}/{len(records)}), {len(unexplained)} unexplained failures",
        f"{counts['retried']} acknowledged after a retry" + (f"; failures: {detail}" if detail else ""),
    ), counts


def check_detections(name: str, rows: list[Detection], what: str) -> Invariant:
    bad = [d for d in rows if not d.ok]
    worst = max((d.elapsed_ms for d in rows if d.elapsed_ms is not None), default=None)
    detail = "; ".join(
        f"fault {d.fault_id} {d.kind} {d.broker_addr} @ {d.observer}: "
        f"{'never' if d.elapsed_ms is None else f'{d.elapsed_ms} ms'} > {d.bound_ms} ms"
        for d in bad[:5]
    )
    return Invariant(name, not bad, f"{len(rows) - len(bad)}/{len(rows)} {what}"
                     + (f", max {worst} ms" if worst is not None else ""), detail)


def alive_actors(job_id: str | None = None) -> int:
    """ALIVE actors in the cluster (of one job when given), read from the GCS. The state API
    (ray.util.state) needs the dashboard, which local test clusters here run without."""
    from ray._private import state

    return sum(1 for a in state.actors().values()
               if a["State"] == "ALIVE" and (job_id is None or a["JobID"] == job_id))


def wait_actors_gone(job_id: str, timeout_s: float = 30.0) -> bool:
    """After ray.kill (asynchronous): wait until no actor of this job is ALIVE, so none of them can
    still write into a directory about to be removed."""
    return _wait(lambda: alive_actors(job_id) == 0, timeout_s)


def named_actors(namespace: str) -> list[str]:
    return sorted(a["name"] for a in ray.util.list_named_actors(all_namespaces=True) if a["namespace"] == namespace)


def _wait(predicate: Callable[[], bool], timeout_s: float) -> bool:
    """For state that offers no event to wait on (the GCS catching up after ray.kill)."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def check_leaks(namespace: str, job_id: str, alive_before: int, refs: list[Any], data_dir: str | None,
                observer_stopped: bool) -> Invariant:
    """Invariant 4, after teardown: no named actor left in the namespace, no ALIVE actor of this job,
    every submitted call finished, the temp store dir gone (`data_dir`, None when kept), threads
    stopped. ray.kill is asynchronous, so the GCS gets a bounded moment to catch up."""
    _wait(lambda: not named_actors(namespace), 30)
    leftovers = named_actors(namespace)
    wait_actors_gone(job_id)
    ours_alive, alive_after = alive_actors(job_id), alive_actors()
    pending = len(ray.wait(refs, num_returns=len(refs), timeout=0)[1]) if refs else 0
    dir_left = data_dir is not None and os.path.exists(data_dir)
    return Invariant(
        "4 nothing leaked",
        not leftovers and ours_alive == 0 and pending == 0 and not dir_left and observer_stopped,
        f"{len(leftovers)} named actors, {ours_alive} ALIVE actors of this job, {pending} unfinished tasks",
        f"cluster ALIVE actors {alive_before} before, {alive_after} after; observer threads "
        f"{'stopped' if observer_stopped else 'STILL RUNNING'}; temp store dir "
        + ("kept" if data_dir is None else ("LEFT BEHIND" if dir_left else "removed"))
        + (f"; leftover actors {leftovers}" if leftovers else ""),
    )


# ---------------------------------------------------------------------------------------- report
@dataclass
class ChaosReport:
    config: ChaosConfig
    namespace: str
    data_dir: str
    plan: list[PlannedFault]
    timeline: list[FaultRecord]
    sends: list[dict[str, Any]]
    detections: list[Detection]
    removals: list[dict[str, Any]]
    route_logs: dict[str, list[tuple[str, int, str, tuple[str, ...]]]]
    route_history: list[RouteObservation]
    invariants: list[Invariant]
    figures: dict[str, Any]
    started_ms: int
    """When sending started (the plan's time zero), epoch ms."""
    files: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return all(i.ok for i in self.invariants)

    def timeline_table(self) -> pa.Table:
        rows = [{"fault_id": r.fault_id, "t_ms": r.t_ms, "kind": r.kind, "target": r.target,
                 "broker_addr": r.broker_addr, "detail": r.detail} for r in self.timeline]
        return pa.Table.from_pylist(rows, schema=TIMELINE_SCHEMA)

    def write_parquet(self, out_dir: str | os.PathLike[str]) -> dict[str, str]:
        """faults.parquet (the Spark contract), sends, detections, removals, producer_routes and
        namesrv_routes .parquet, and summary.json, under `out_dir`."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        tables = {
            "faults": self.timeline_table(),
            "sends": pa.Table.from_pylist([{k: r.get(k) for k in SEND_SCHEMA.names} for r in self.sends],
                                          schema=SEND_SCHEMA),
            "detections": pa.Table.from_pylist([asdict(d) for d in self.detections], schema=DETECTION_SCHEMA),
            "removals": pa.Table.from_pylist(self.removals, schema=REMOVAL_SCHEMA),
            "producer_routes": pa.Table.from_pylist(
                [{"producer": p, "topic": topic, "t_ms": t, "source": src, "brokers": ",".join(brokers)}
                 for p, entries in sorted(self.route_logs.items()) for topic, t, src, brokers in entries],
                schema=PRODUCER_ROUTE_SCHEMA),
            "namesrv_routes": pa.Table.from_pylist(
                [{"t_ms": o.t_ms, "namesrv": o.namesrv, "topic": o.topic,
                  "addrs": None if o.addrs is None else ",".join(o.addrs)} for o in self.route_history],
                schema=NAMESRV_ROUTE_SCHEMA),
        }
        files = {}
        for name, table in tables.items():
            path = out / f"{name}.parquet"
            pq.write_table(table, path)
            files[name] = str(path)
        summary = {
            "ok": self.ok,
            "namespace": self.namespace,
            "started_ms": self.started_ms,
            "config": {k: v for k, v in asdict(self.config).items()},
            "invariants": [asdict(i) for i in self.invariants],
            "figures": self.figures,
            "plan": [asdict(p) for p in self.plan],
        }
        path = out / "summary.json"
        path.write_text(json.dumps(summary, indent=2, default=str))
        files["summary"] = str(path)
        self.files = files
        return files


def _stats(values: list[float]) -> dict[str, float | int | None]:
    return {"n": len(values), "p50": percentile(values, 0.5), "p99": percentile(values, 0.99),
            "max": max(values) if values else None}


def summarize(timeline: list[FaultRecord], detections: list[Detection], recovery_ms: dict[int, float],
              send_counts: dict[str, Any], loss_counts: dict[str, int]) -> dict[str, Any]:
    """The figures a run is judged by: per fault kind, how long detection and recovery took."""
    figures: dict[str, Any] = {"sends": send_counts, "messages": loss_counts, "faults": {}}
    for kind in TIMELINE_KINDS:
        figures["faults"][kind] = sum(1 for r in timeline if r.kind == kind)
    def elapsed(kind: str, who: str) -> list[float]:
        return [float(d.elapsed_ms) for d in detections
                if d.kind == kind and d.observer_kind == who and d.elapsed_ms is not None]

    figures["detection_ms"] = {
        kind: {"namesrv": _stats(elapsed(kind, "namesrv")), "producer": _stats(elapsed(kind, "producer")),
               "causes": sorted({d.cause for d in detections if d.kind == kind and d.observer_kind == "namesrv"})}
        for kind in sorted(BROKER_FAULTS)
    }
    figures["return_ms"] = {
        kind: {"namesrv": _stats(elapsed(kind, "namesrv")), "producer": _stats(elapsed(kind, "producer"))}
        for kind in sorted(BROKER_REVIVALS)
    }
    figures["broker_restart_up_ms"] = _stats(list(recovery_ms.values()))
    ns_back = [float(r.t_ms - timeline[r.revives].t_ms) for r in timeline
               if r.kind == RESTART_NAMESRV and r.revives is not None]
    figures["namesrv_restart_ms"] = _stats(ns_back)
    return figures


# ---------------------------------------------------------------------------------------- the run
def broker_specs(n: int) -> list[BrokerSpec]:
    names = [f"broker-{string.ascii_lowercase[i]}" if i < 26 else f"broker-{i}" for i in range(n)]
    return [BrokerSpec(name) for name in names]


def consume_everything(namespace: str, namesrvs: list[str], topics: list[str]) -> list[Any]:
    consumer = PullConsumer(namespace, namesrvs, timeout_s=30)
    return [m for topic in topics for m in consumer.consume_all(topic)]


TopicCreator = Callable[[Deployment, str, int], object]
"""(deployment, topic, queues) -> creates the topic on every broker (clients.admin.AdminClient
does it; it is passed in because `actors` must not import `clients`)."""


def run_chaos(cfg: ChaosConfig, create_topic: TopicCreator,
              out_dir: str | os.PathLike[str] | None = None) -> ChaosReport:
    """One chaos scenario on the connected Ray cluster (call ray.init first): deploy a fresh cluster
    in its own namespace, send, break things on the seeded plan, recover, check, tear down."""
    if not ray.is_initialized():
        raise RuntimeError("run_chaos needs a connected Ray (ray.init)")
    namespace = cfg.namespace or f"chaos-{uuid.uuid4().hex[:10]}"
    own_dir = cfg.data_dir is None
    data_dir = cfg.data_dir or tempfile.mkdtemp(prefix="namesrv-chaos-")
    timing = cfg.timing()
    job_id = ray.get_runtime_context().get_job_id()
    alive_before = alive_actors()
    topics = [f"ChaosTopic{i}" for i in range(cfg.topics)]
    spec = ClusterSpec(namesrv_count=cfg.namesrvs, brokers=broker_specs(cfg.brokers), profile=cfg.profile,
                       namespace=namespace, data_dir=data_dir)
    dep = Deployment(spec)
    names = {b.addr: b.broker_name for b in spec.brokers}
    producers: dict[str, Any] = {}
    loops: list[Any] = []
    observer: RouteObserver | None = None
    driver: ChaosDriver | None = None
    started_ms = now_ms()
    log.info("chaos run in namespace %s, data in %s, seed %d", namespace, data_dir, cfg.seed)
    try:
        dep.start()
        for topic in topics:
            create_topic(dep, topic, cfg.queues)
        observer = RouteObserver(dep.namesrvs, topics).start()
        if not observer.wait_for(lambda: all(observer.advertised_everywhere(a) for a in dep.brokers), 60):
            raise RuntimeError("brokers never showed up in every NameServer's routes")
        removals = RemovalLog(dep.namesrvs)
        actor_cls = ray.remote(ProducerActor)
        for i in range(cfg.producers):
            pname = f"chaos-producer-{i}"
            producers[pname] = actor_cls.options(num_cpus=0, max_concurrency=4, name=pname, namespace=namespace).remote(
                f"chaos_producer_{i}", namespace, sorted(dep.namesrvs),
                poll_name_server_interval_ms=timing.route_poll_ms)
        ray.get([p.summary.remote() for p in producers.values()], timeout=120)
        plan = plan_faults(cfg, sorted(dep.brokers), sorted(dep.namesrvs))
        driver = ChaosDriver(dep, cfg, observer, removals)
        start = time.monotonic()
        started_ms = now_ms()
        loops = [p.run_send_loop.remote(topics, cfg.rate, cfg.duration_s, 128, cfg.seed * 1000 + i)
                 for i, p in enumerate(producers.values())]
        timeline = driver.run(plan, start)
        ray.get(loops, timeout=cfg.duration_s + 300)
        if not observer.wait_for(lambda: all(observer.advertised_everywhere(a) for a in dep.brokers),
                                 timing.back_bound_ms(RESTART_BROKER) / 1000):
            log.warning("not every broker is back in every route at the end of the run")
        removals.snapshot()
        sends: list[dict[str, Any]] = []
        route_logs: dict[str, list[tuple[str, int, str, tuple[str, ...]]]] = {}
        for pname, p in producers.items():
            sends.extend({"producer": pname, **r} for r in ray.get(p.get_records.remote(), timeout=60))
            route_logs[pname] = ray.get(p.route_log.remote(), timeout=60)
        consumed = consume_everything(namespace, sorted(dep.namesrvs), topics)
        history = observer.snapshot_history()
    finally:
        if driver is not None:
            driver.release_stopped()
        for p in producers.values():
            try:
                ray.get(p.shutdown.remote(), timeout=10)
            except Exception as e:
                log.info("producer shutdown: %s", type(e).__name__)
            ray.kill(p, no_restart=True)
        observer_stopped = observer.stop() if observer is not None else True
        try:
            dep.teardown(graceful=True)
        except Exception:
            log.exception("teardown failed")
        if own_dir and not cfg.keep_data:
            wait_actors_gone(job_id)  # a dying NameServer may still persist its known brokers
            shutil.rmtree(data_dir, ignore_errors=True)

    windows = impaired_windows(timeline, names, timing, now_ms())
    for r in sends:
        r["explained"] = None if r["ok"] else explain_failure(r, windows)
    loss, loss_counts = check_no_loss([r for r in sends if r["ok"]], consumed)
    send_inv, send_counts = check_sends(sends)
    namesrv_names = sorted(removals.namesrvs)
    ns_detect = measure_namesrv_detection(timeline, removals, namesrv_names, timing)
    ns_back = measure_namesrv_return(timeline, history, namesrv_names, topics, timing)
    prod = measure_producer_routes(timeline, route_logs, names, topics, timing)
    detections = ns_detect + ns_back + prod
    invariants = [
        loss,
        send_inv,
        check_detections("3a dead broker leaves every NameServer in bound", ns_detect, "NameServer removals in bound"),
        check_detections("3b producer caches follow in bound", [d for d in prod if d.kind in BROKER_FAULTS],
                         "producer cache drops in bound"),
        check_detections("3c revived broker back everywhere in bound",
                         ns_back + [d for d in prod if d.kind in BROKER_REVIVALS], "returns in bound"),
        check_leaks(namespace, job_id, alive_before, loops, data_dir if own_dir and not cfg.keep_data else None,
                    observer_stopped),
    ]
    figures = summarize(timeline, detections, driver.recovery_ms, send_counts, loss_counts)
    figures["timing"] = asdict(timing)
    figures["timeline_matches_plan"] = timeline_signature(timeline) == plan_signature(plan)
    spurious = spurious_removals(removals, timeline, timing)
    figures["spurious_removals"] = spurious
    if spurious:
        invariants[2].detail = (invariants[2].detail + "; " if invariants[2].detail else "") + (
            f"note: {len(spurious)} removals of brokers no fault touched, e.g. {spurious[:2]}")
    report = ChaosReport(cfg, namespace, data_dir, plan, timeline, sends, detections, removals.rows(), route_logs,
                         history, invariants, figures, started_ms)
    if out_dir is not None:
        report.write_parquet(out_dir)
    return report


__all__ = [
    "BROKER_FAULTS",
    "FAULT_KINDS",
    "TIMELINE_COLUMNS",
    "TIMELINE_KINDS",
    "TIMELINE_SCHEMA",
    "ChaosConfig",
    "ChaosDriver",
    "ChaosReport",
    "Detection",
    "FaultRecord",
    "Invariant",
    "PlannedFault",
    "RemovalLog",
    "RouteObserver",
    "check_detections",
    "check_leaks",
    "check_no_loss",
    "check_sends",
    "measure_namesrv_detection",
    "measure_namesrv_return",
    "measure_producer_routes",
    "namesrv_outages",
    "now_ms",
    "parse_fault_mix",
    "plan_faults",
    "plan_signature",
    "run_chaos",
    "send_signal",
    "spurious_removals",
    "timeline_signature",
    "wait_actors_gone",
]
