"""The console's one collector: keeps `ConsoleState` warm so no page ever asks a server. It composes
one part per thing collected and runs them as tasks on the console actor's event loop:

- `namesrv_watch.NamesrvWatch`: every `namesrv_period_s`, each NameServer's status and topics; per
  NameServer, a route long-poll that has routes pushed as they change;
- every `stats_period_s`, in order: `broker_stats.BrokerStats` (each broker's runtime info, role,
  replication, TPS, disk), `controller_watch.ControllerWatch` (the controller's sets, elections,
  deaths), `group_stats.ConsumerGroups` (consume stats and connections per group, on the brokers
  that host it) and `group_stats.ProducerGroups` (the watched producer groups' connections).

All of them ask through one `calls.ServerCalls`, which counts every request by kind and origin: the
cost is per period and per broker/group, never per page view.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from actors.console.broker_stats import BrokerStats
from actors.console.calls import ORIGIN, ServerCalls
from actors.console.controller_watch import ControllerWatch
from actors.console.group_stats import ConsumerGroups, ProducerGroups
from actors.console.model import ConsoleState, NamesrvView
from actors.console.namesrv_watch import NamesrvWatch

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CollectorPeriods:
    namesrv_period_s: float = 1.0
    stats_period_s: float = 5.0
    long_poll_s: float = 5.0


class Collector:
    def __init__(self, namespace: str, namesrv_names: list[str], periods: CollectorPeriods | None = None) -> None:
        self.namespace = namespace
        self.namesrv_names = list(namesrv_names)
        self.periods = periods or CollectorPeriods()
        self.state = ConsoleState(namesrvs={n: NamesrvView(n, error="not asked yet") for n in namesrv_names})
        self.servers = ServerCalls(namespace, self.state)
        self.namesrvs = NamesrvWatch(self.namesrv_names, self.state, self.servers, self.periods.namesrv_period_s,
                                     self.periods.long_poll_s, self.bump)
        self.brokers = BrokerStats(namespace, self.state, self.servers)
        self.controller = ControllerWatch(self.state, self.servers)
        self.groups = ConsumerGroups(self.state, self.servers)
        self.producers = ProducerGroups(self.state, self.servers)
        self.max_broker_calls_per_tick = 0
        self.ticks = {"namesrv": 0, "stats": 0}
        self._changed = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    # ------------------------------------------------------------------ lifecycle and notification
    def start(self) -> None:
        def task(coro: Any) -> None:
            context = contextvars.copy_context()
            context.run(ORIGIN.set, "collector")  # this task's calls only, not its creator's
            self._tasks.append(asyncio.create_task(coro, context=context))
        task(self._every(self.periods.namesrv_period_s, self.refresh_namesrvs))
        task(self._every(self.periods.stats_period_s, self.refresh_brokers))
        for name in self.namesrv_names:
            task(self.namesrvs.route_loop(name))

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()

    def bump(self) -> None:
        """The state changed: wake every page waiting for news."""
        self.state.version += 1
        self.state.derived.clear()
        self._changed.set()
        self._changed = asyncio.Event()

    async def wait_change(self, seen: int, timeout_s: float) -> int:
        """The state's version once it is past `seen` (or after the timeout)."""
        if self.state.version <= seen:
            try:
                await asyncio.wait_for(self._changed.wait(), timeout_s)
            except TimeoutError:
                pass
        return self.state.version

    async def _every(self, period_s: float, step: Callable[[], Awaitable[None]]) -> None:
        while True:
            try:
                await step()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("console collector step failed")
            await asyncio.sleep(period_s)

    # ------------------------------------------------------------------ the ticks
    async def refresh_namesrvs(self) -> None:
        await self.namesrvs.refresh()
        self.ticks["namesrv"] += 1
        self.bump()

    async def refresh_brokers(self) -> None:
        """The stats tick: brokers first (the others read which are live), then the controller,
        the consumer groups and the watched producer groups."""
        before = self.servers.counts["broker"]
        await self.brokers.refresh()
        await self.controller.refresh()
        await self.groups.refresh()
        await self.producers.refresh()
        self.max_broker_calls_per_tick = max(self.max_broker_calls_per_tick, self.servers.counts["broker"] - before)
        self.ticks["stats"] += 1
        self.bump()
