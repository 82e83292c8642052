"""What the run sees while it breaks things, recorded from outside the system under test:

- `RouteObserver`: long-polls every NameServer and timestamps each route change it sees;
- `RemovalLog`: the NameServers' removal events, kept across NameServer restarts (a restart
  empties a NameServer's own list);
- `SnapshotCollector`: every NameServer's route snapshots, drained into a Parquet dataset (the one
  `namesrv snapshot` writes) for the Spark analysis, under a reader of its own so a `namesrv
  snapshot` running at the same time still gets every snapshot too;
- `collect_producer_results`: the producers' send records and route logs, after the run.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, RayActorError

from namesrv.common.clock import system_clock as now_ms
from namesrv.common.waiting import wait_until
from namesrv.protocol.models import TopicRouteData

log = logging.getLogger(__name__)

RouteLog = list[tuple[str, int, str, tuple[str, ...]]]
"""A producer's route log: (topic, t_ms, source 'push' | 'poll', broker names it then wrote to)."""


@dataclass(frozen=True, slots=True)
class RouteObservation:
    t_ms: int
    namesrv: str
    topic: str
    addrs: tuple[str, ...] | None
    """Broker addresses in the route; None while the NameServer cannot be reached."""


def route_addrs(route: TopicRouteData | None) -> frozenset[str]:
    """Every broker address in a route (empty for no route)."""
    return frozenset(a for bd in (route.broker_datas if route else ()) for a in bd.broker_addrs.values())


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
                    versions[topic] = change.version
                    self._set(name, topic, route_addrs(change.route), seen)
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
        """Read every given NameServer's removals. One that is restarting (its calls fail with
        ActorUnavailableError) is asked again until `timeout_s`: the restarted instance answers
        with an empty list (what the old one held died with it; see `restarted_since`)."""
        pending = list(names) if names is not None else list(self.namesrvs)
        deadline = time.monotonic() + timeout_s
        while pending:
            refs = {n: self.namesrvs[n].get_removals.remote() for n in pending}
            pending = []
            for name, ref in refs.items():
                try:
                    events = ray.get(ref, timeout=max(0.1, deadline - time.monotonic()))
                except RayActorError as e:
                    if time.monotonic() < deadline:
                        pending.append(name)
                        continue
                    log.warning("could not read removals of %s: %s", name, type(e).__name__)
                    continue
                except GetTimeoutError:
                    log.warning("could not read removals of %s within %.0f s", name, timeout_s)
                    continue
                self._events[name].update((e.broker_addr, e.cause, e.t_ms) for e in events)
            if pending:
                time.sleep(0.1)

    def restarted_since(self, name: str, t_ms: int, timeout_s: float = 15.0) -> bool:
        """Whether NameServer `name` (re)started at or after `t_ms`: it came up with empty tables
        and no removal records, so a broker removed before then left no record there."""
        handle = self.namesrvs[name]

        def started_ms() -> int:  # raises while it restarts: wait_until asks again
            return int(ray.get(handle.get_status.remote(), timeout=timeout_s)["started_ms"])

        return wait_until(started_ms, timeout_s, f"{name} to answer", 0.1) >= t_ms

    def events(self, namesrv: str) -> list[tuple[str, str, int]]:
        return sorted(self._events[namesrv], key=lambda e: e[2])

    def rows(self) -> list[dict[str, Any]]:
        return [{"namesrv": n, "broker_addr": a, "cause": c, "t_ms": t}
                for n in sorted(self._events) for a, c, t in self.events(n)]


class SnapshotCollector:
    """Drains every NameServer's buffered route snapshots into `out` (a Hive-partitioned dataset,
    see `clients.snapshots.dataset`) every `every_s`, from start to stop.

    Each drain also takes a snapshot of that instant, so the dataset has one at least every
    `every_s` even where the NameServers snapshot less often. The collector reads under its own
    `reader` name: a NameServer keeps a snapshot until every reader has taken it, so an operator's
    `namesrv snapshot` and this run both get all of them. Call `collect([name])` right before
    killing a NameServer: what it buffered dies with it.
    """

    def __init__(self, namesrvs: dict[str, Any], out: str | Path, reader: str, every_s: float = 1.0) -> None:
        self.namesrvs = dict(namesrvs)
        self.out = Path(out)
        self.reader = reader
        self.every_s = every_s
        self.rows: dict[str, int] = dict.fromkeys(self.namesrvs, 0)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> SnapshotCollector:
        self.collect()
        self._thread = threading.Thread(target=self._loop, name="snapshot-collector", daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(self.every_s):
            try:
                self.collect()
            except Exception:  # a full disk, say: logged, the run goes on
                log.exception("snapshot collection failed")

    def collect(self, names: Iterable[str] | None = None) -> dict[str, int]:
        """Drain the given NameServers (default all) once; returns rows written per NameServer."""
        from clients.snapshots.collect import collect_once

        handles = {n: self.namesrvs[n] for n in (names if names is not None else self.namesrvs)}
        written = collect_once(handles, self.out, timeout_s=15.0, reader=self.reader, every_s=self.every_s)
        with self._lock:
            for name, n in written.items():
                self.rows[name] += n
        return written

    def stop(self) -> bool:
        """Stop the thread, drain a last time and release this reader on every NameServer; True when
        the thread has exited."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=60)
        try:
            self.collect()
        except Exception:
            log.exception("last snapshot collection failed")
        refs = [h.release_snapshot_reader.remote(self.reader) for h in self.namesrvs.values()]
        for ref in refs:
            try:
                ray.get(ref, timeout=15)
            except Exception as e:  # a NameServer down now: its buffer died with it anyway
                log.info("could not release snapshot reader: %s", type(e).__name__)
        return self._thread is None or not self._thread.is_alive()

    @property
    def total_rows(self) -> int:
        with self._lock:
            return sum(self.rows.values())


def collect_producer_results(producers: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, RouteLog]]:
    """Every producer's send records (each tagged with the producer's name) and route log."""
    sends: list[dict[str, Any]] = []
    route_logs: dict[str, RouteLog] = {}
    for pname, p in producers.items():
        sends.extend({"producer": pname, **r} for r in ray.get(p.get_records.remote(), timeout=60))
        route_logs[pname] = ray.get(p.route_log.remote(), timeout=60)
    return sends, route_logs
