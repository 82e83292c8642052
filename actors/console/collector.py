"""The console's one collector: keeps `ConsoleState` warm so no page ever asks a server.

Runs as tasks on the console actor's event loop:
- every `namesrv_period_s`, each NameServer's status (its brokers, heartbeat ages) and topic list;
- per NameServer, a route long-poll (`listen_for_change`) over every topic it lists: routes are
  pushed as they change, not asked for;
- every `stats_period_s`, each broker's runtime info, role/replication status and runtime KV
  (TPS, disk, version), its subscription groups, then per group its consume stats and consumer
  connections (on the brokers that host it), per watched producer group its connections, and the
  controller's stats when one is deployed (its sets, elections, the deaths it saw).

The cost is per period and per broker/group, never per page view: `calls` counts every request
made, so a test can check that page loads add none.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any

import ray

from actors.console.decode import (
    consume_stats,
    consumer_connection,
    producer_connection,
    route_view,
    runtime_kv,
    subscription_groups,
    topic_list,
)
from actors.console.model import (
    BrokerEntry,
    BrokerSetState,
    BrokerView,
    ConsoleState,
    ControllerView,
    Event,
    GroupView,
    NamesrvView,
    ProducerView,
    QueueOffset,
    broker_diff,
)
from actors.controller.actor import CONTROLLER_NAME
from actors.deployment.registry import DeploymentRecord
from namesrv.acl.plain_acl import SessionCredentials, credentials_only, long_poll_content, signed
from namesrv.client.rebalance.strategies import AllocateMessageQueueAveragely
from namesrv.common.clock import system_clock
from namesrv.protocol.codes import BrokerRequestCode, RequestCode
from namesrv.protocol.constants import MASTER_ID
from namesrv.remoting.command import RemotingRequest, RemotingResponse

log = logging.getLogger(__name__)

CALL_TIMEOUT_S = 5.0
GROUP_CONCURRENCY = 16
"""Groups whose stats are asked for at once in a refresh."""
ORIGIN: contextvars.ContextVar[str] = contextvars.ContextVar("console_call_origin", default="view")
"""Who asks a server: the collector's own tasks set "collector", a form's action "action"; anything
else (a page view) is counted as "view", which must stay at zero."""


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
        self.credentials: SessionCredentials | None = None
        self.calls = {"namesrv": 0, "broker": 0, "controller": 0}
        self.calls_by_origin = {"collector": 0, "action": 0, "view": 0}
        self.max_broker_calls_per_tick = 0
        self.ticks = {"namesrv": 0, "stats": 0}
        self.watched_producers: set[str] = set()
        self._namesrv_handles: dict[str, Any] = {}
        self._broker_handles: dict[str, Any] = {}
        """actor name -> handle."""
        self._controller: Any = None
        self._record = DeploymentRecord(namespace)
        self._route_changes: dict[str, int] = {}
        self._versions: dict[str, dict[str, int]] = {n: {} for n in namesrv_names}
        """Per NameServer, the route version held per topic (a topic without a route included)."""
        self._topics_grew = {n: asyncio.Event() for n in namesrv_names}
        """Set when a NameServer lists a topic its held long-poll does not hold: the long-poll starts
        again with it at once (it answers a new topic's route straight away), not when it times out."""
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
            task(self._route_loop(name))

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

    async def _every(self, period_s: float, step: Any) -> None:
        while True:
            try:
                await step()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("console collector step failed")
            await asyncio.sleep(period_s)

    # ------------------------------------------------------------------ calls (counted)
    def _count(self, kind: str, n: int = 1) -> None:
        self.calls[kind] += n
        self.calls_by_origin[ORIGIN.get()] += n

    async def _ask(self, ref: Awaitable[Any]) -> Any:
        return await asyncio.wait_for(ref, CALL_TIMEOUT_S)

    def request(self, code: int, ext: dict[str, Any] | None = None, body: bytes | None = None,
                credentials: SessionCredentials | None = None) -> RemotingRequest:
        return RemotingRequest(code, signed(ext or {}, body, credentials or self.credentials), body)

    async def call_namesrv(self, name: str, request: RemotingRequest) -> RemotingResponse:
        self._count("namesrv")
        resp: RemotingResponse = await self._ask((await self._namesrv(name)).process.remote(request))
        return resp

    async def call_broker(self, addr: str, request: RemotingRequest) -> RemotingResponse:
        """One request to the broker that routes name `addr` (its TCP address or actor name)."""
        handle = self.broker_handle(addr)
        if handle is None:
            raise LookupError(f"no live broker at {addr}")
        self._count("broker")
        resp: RemotingResponse = await self._ask(handle.process.remote(request))
        return resp

    def broker_handle(self, addr: str) -> Any:
        view = self.state.brokers.get(addr)
        name = view.actor_name if view is not None and view.actor_name else addr
        return self._broker_handles.get(name)

    async def _lookup(self, name: str) -> Any:
        """The named actor's handle, looked up off the event loop (the GCS may be slow to answer)."""
        return await asyncio.wait_for(asyncio.to_thread(ray.get_actor, name, namespace=self.namespace),
                                      CALL_TIMEOUT_S)

    async def _namesrv(self, name: str) -> Any:
        if name not in self._namesrv_handles:
            self._namesrv_handles[name] = await self._lookup(name)
        return self._namesrv_handles[name]

    # ------------------------------------------------------------------ NameServers
    async def refresh_namesrvs(self) -> None:
        await asyncio.gather(*(self._refresh_namesrv(n) for n in self.namesrv_names))
        for name in self.namesrv_names:
            self.state.record(self.state.route_change_history, name, self._route_changes.pop(name, 0))
        self.ticks["namesrv"] += 1
        self.bump()

    async def _refresh_namesrv(self, name: str) -> None:
        view = self.state.namesrvs[name]
        try:
            handle = await self._namesrv(name)
            self._count("namesrv")
            status = await self._ask(handle.get_status.remote())
            listing = await self.call_namesrv(name, self.request(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER))
        except Exception as e:
            self._namesrv_handles.pop(name, None)
            if view.error is None:
                self._event(f"{name} unreachable: {type(e).__name__}")
            view.error = f"{type(e).__name__}: {e}"[:200]
            return
        entries = [BrokerEntry(b["cluster"], b["broker_name"], int(b["broker_id"]), b["broker_addr"],
                               b.get("last_heartbeat_age_ms"), int(b.get("topics", 0)), bool(b.get("watched")))
                   for b in status.get("brokers", [])]
        if view.error is None:
            came, left = broker_diff(view.brokers, entries)
            for key in sorted(came):
                self._event(f"{name}: broker {key} registered")
            for key in sorted(left):
                self._event(f"{name}: broker {key} removed (expired, unregistered or its channel closed)")
        elif view.seen_ms:
            self._event(f"{name} reachable again")
        view.error = None
        view.ready = bool(status.get("ready"))
        view.route_seq = int(status.get("route_seq", 0))
        view.remoting_address = status.get("remoting_address")
        view.long_poll_waiters = int(status.get("long_poll_waiters", 0))
        view.brokers = entries
        topics = topic_list(listing)
        if topics is not None:
            if topics - view.topics:
                self._topics_grew[name].set()
            view.topics = topics
            for gone in set(view.routes) - topics:
                del view.routes[gone]
        view.seen_ms = system_clock()

    async def _route_loop(self, name: str) -> None:
        """Hold a long-poll on every topic this NameServer lists; apply what it pushes."""
        while True:
            view = self.state.namesrvs[name]
            versions = self._versions[name]
            held = {t: versions.get(t, -1) for t in sorted(view.topics)}
            if view.error is not None or not held:
                await asyncio.sleep(self.periods.namesrv_period_s)
                continue
            grew = self._topics_grew[name]
            grew.clear()
            try:
                auth = credentials_only(signed(long_poll_content(held), None, self.credentials)) \
                    if self.credentials else None
                self._count("namesrv")
                poll = asyncio.ensure_future(asyncio.wait_for(
                    (await self._namesrv(name)).listen_for_change.remote(held, self.periods.long_poll_s, auth),
                    self.periods.long_poll_s + CALL_TIMEOUT_S))
                woken = asyncio.ensure_future(grew.wait())
                try:
                    await asyncio.wait({poll, woken}, return_when=asyncio.FIRST_COMPLETED)
                except asyncio.CancelledError:
                    poll.cancel()
                    raise
                finally:
                    woken.cancel()
                if not poll.done():  # a new topic: hold it too (the NameServer drops the old wait at its timeout)
                    poll.cancel()
                    continue
                changes = poll.result()
            except asyncio.CancelledError:
                raise
            except Exception as e:
                log.info("route long-poll on %s failed: %s", name, type(e).__name__)
                await asyncio.sleep(self.periods.namesrv_period_s)
                continue
            for topic, change in changes.items():
                versions[topic] = change.version
                if change.route is None:
                    view.routes.pop(topic, None)
                else:
                    view.routes[topic] = route_view(change.version, change.route)
            self._route_changes[name] = self._route_changes.get(name, 0) + len(changes)
            if changes:
                self._event(f"{name}: route of {', '.join(sorted(changes)[:5])}"
                            f"{' ...' if len(changes) > 5 else ''} changed")
                self.bump()

    # ------------------------------------------------------------------ brokers, groups, producers
    async def _broker_names(self) -> list[str]:
        """Every broker the deployment started (actors.deployment.registry), dead ones included."""
        record = await asyncio.to_thread(self._record.get)
        return sorted(record["brokers"])

    async def refresh_brokers(self) -> None:
        before = self.calls["broker"]
        try:
            names = await self._broker_names()
        except Exception as e:  # the GCS not answering
            log.info("deployment record of %s unreadable: %s", self.namespace, type(e).__name__)
            names = []
        names = names or sorted(self._broker_handles)
        results = await asyncio.gather(*(self._refresh_broker(n) for n in names))
        self.state.brokers = {v.addr: v for v in results if v is not None}
        for view in self.state.brokers.values():
            self.state.record(self.state.tps_history, view.addr, round(view.put_tps, 2))
        await self._refresh_controller()
        await self._refresh_groups()
        await self._refresh_producers()
        self.max_broker_calls_per_tick = max(self.max_broker_calls_per_tick, self.calls["broker"] - before)
        self.ticks["stats"] += 1
        self.bump()

    async def _refresh_broker(self, actor_name: str) -> BrokerView | None:
        old = next((v for v in self.state.brokers.values() if v.actor_name == actor_name), None)
        try:
            if actor_name not in self._broker_handles:
                self._broker_handles[actor_name] = await self._lookup(actor_name)
            handle = self._broker_handles[actor_name]
            self._count("broker", 2)
            info, status = await asyncio.gather(self._ask(handle.get_runtime_info.remote()),
                                                self._ask(handle.status.remote()))
            self._count("broker")
            kv = runtime_kv(await self._ask(handle.process.remote(self.request(
                BrokerRequestCode.GET_BROKER_RUNTIME_INFO))))
        except Exception as e:
            self._broker_handles.pop(actor_name, None)
            if old is None:
                return None  # never seen alive (a dead broker from an earlier run of the registry)
            if old.error is None:
                self._event(f"broker {actor_name} ({old.addr}) unreachable: {type(e).__name__}")
            old.error = f"{type(e).__name__}"
            old.put_tps = old.get_tps = 0.0
            return old
        if old is not None and old.error is not None:
            self._event(f"broker {actor_name} answers again")
        ha = status.get("ha") or {}
        if ha.get("role") == "SLAVE":
            replication = f"lag {ha.get('lag_bytes', 0)} B"
        elif ha.get("slave_lag_bytes"):
            replication = ", ".join(f"{s}: {b} B" for s, b in sorted(ha["slave_lag_bytes"].items()))
        else:
            replication = "-"
        return BrokerView(
            addr=info["broker_addr"], actor_name=actor_name, cluster=info["cluster"], broker_name=info["broker_name"],
            broker_id=int(info["broker_id"]), role=str(status.get("role", "")),
            epoch=status.get("masterEpoch") if status.get("controller_mode") else None,
            version=kv.get("brokerVersionDesc", ""), put_tps=_first_float(kv.get("putTps")),
            get_tps=_first_float(kv.get("getTransferredTps")), disk_ratio=_first_float(kv.get("commitLogDiskRatio")),
            disk=kv.get("commitLogDirCapacity", ""), topics=int(info.get("topics", 0)),
            messages=int(info.get("recovered_messages", 0)), replication=replication,
            queues={(k.rpartition(":")[0], int(k.rpartition(":")[2])): int(n)
                    for k, n in info.get("queues", {}).items()},
            consumer_groups={g: list(ids) for g, ids in info.get("consumer_groups", {}).items()},
            sync_state_set=sorted(int(i) for i in ha.get("sync_state_set") or []),
            role_log=[(int(e.get("atMs", 0)), str(e.get("role", "")), int(e.get("epoch", 0)))
                      for e in status.get("role_log") or []],
            controller_id=(status.get("controller") or {}).get("controller_broker_id"),
            lease=(status.get("controller") or {}).get("lease"),
            seen_ms=system_clock())

    async def _refresh_controller(self) -> None:
        """The controller's stats, once per tick (no controller in the namespace: nothing to show)."""
        old = self.state.controller
        try:
            if self._controller is None:
                try:
                    self._controller = await self._lookup(CONTROLLER_NAME)
                except ValueError:  # none deployed
                    self.state.controller = None
                    return
            self._count("controller")
            stats = await self._ask(self._controller.stats.remote())
        except Exception as e:
            self._controller = None
            if old is not None and old.error is None:
                self._event(f"controller unreachable: {type(e).__name__}")
                old.error = type(e).__name__
            return
        view = ControllerView(str(stats.get("name", CONTROLLER_NAME)), elections=int(stats.get("elections", 0)),
                              deaths=list(stats.get("deaths", [])),
                              live_brokers=[(str(n), int(i)) for n, i in stats.get("live_brokers", [])],
                              seen_ms=system_clock())
        view.sets = {name: BrokerSetState(
            name, s.get("master_broker_id"), s.get("master_address"), int(s.get("master_epoch", 0)),
            tuple(s.get("sync_state_set", ())), int(s.get("sync_state_set_epoch", 0)),
            tuple(sorted((int(i), str(a)) for i, a in (s.get("replicas") or {}).items())))
            for name, s in (stats.get("sets") or {}).items()}
        if old is not None:
            if old.error is not None:
                self._event("controller answers again")
            for name, now in view.sets.items():
                before = old.sets.get(name)
                if before is not None and before.master_epoch != now.master_epoch:
                    self._event(f"controller: {name} master is now {now.master_broker_id} "
                                f"({now.master_address or 'none'}), epoch {now.master_epoch}")
        self.state.controller = view

    def live_brokers(self) -> list[BrokerView]:
        return [b for b in self.state.brokers.values() if b.error is None]

    async def _refresh_groups(self) -> None:
        hosts: dict[str, set[str]] = {}
        for b in self.live_brokers():
            for g in b.consumer_groups:
                hosts.setdefault(g, set()).add(b.addr)
            if b.broker_id != MASTER_ID:
                continue
            try:
                configured = subscription_groups(await self.call_broker(b.addr, self.request(
                    BrokerRequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)))
            except Exception as e:
                log.info("subscription groups of %s: %s", b.addr, type(e).__name__)
                continue
            for g in configured:
                hosts.setdefault(g, set()).add(b.addr)
        limit = asyncio.Semaphore(GROUP_CONCURRENCY)

        async def one(group: str, addrs: set[str]) -> GroupView:
            async with limit:
                return await self._group(group, sorted(addrs))
        views = await asyncio.gather(*(one(g, a) for g, a in sorted(hosts.items())))
        groups = {v.group: v for v in views}
        for v in views:
            self.state.record(self.state.lag_history, v.group, v.lag)
        self.state.groups = groups

    async def _group(self, group: str, addrs: list[str]) -> GroupView:
        view = GroupView(group)
        members: set[str] = set()
        subs: set[str] = set()
        for addr in addrs:
            b = self.state.brokers[addr]
            members.update(b.consumer_groups.get(group, []))
            try:
                stats = consume_stats(await self.call_broker(addr, self.request(
                    BrokerRequestCode.GET_CONSUME_STATS, {"consumerGroup": group})))
                if stats is not None:
                    view.consume_tps += stats.consume_tps
                    view.offsets.extend(QueueOffset(mq.topic, mq.broker_name, mq.queue_id, o.broker_offset,
                                                    o.consumer_offset) for mq, o in stats.offset_table.items())
                if group in b.consumer_groups:
                    conn = consumer_connection(await self.call_broker(addr, self.request(
                        BrokerRequestCode.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": group})))
                    if conn is not None:
                        subs.update(conn.subscription_table)
                        view.message_model, view.consume_type = conn.message_model, conn.consume_type
            except Exception as e:
                view.error = f"{addr}: {type(e).__name__}"
        view.members = sorted(members)
        view.subscriptions = sorted(subs)
        view.offsets = _with_owners(group, sorted(view.offsets, key=lambda q: (q.topic, q.broker_name, q.queue_id)),
                                    view.members)
        return view

    async def _refresh_producers(self) -> None:
        for group in sorted(self.watched_producers):
            self.state.producers[group] = await self.producer_view(group)

    async def producer_view(self, group: str) -> ProducerView:
        view = ProducerView(group)
        for b in self.live_brokers():
            try:
                conn = producer_connection(await self.call_broker(b.addr, self.request(
                    BrokerRequestCode.GET_PRODUCER_CONNECTION_LIST, {"producerGroup": group})))
            except Exception as e:
                view.error = f"{b.addr}: {type(e).__name__}"
                continue
            for c in conn.connection_set if conn is not None else []:
                view.connections.append((b.actor_name or b.addr, c.client_id, c.client_addr, c.version))
        return view

    def _event(self, what: str) -> None:
        self.state.events.appendleft(Event(system_clock(), what))


def _first_float(text: str | None) -> float:
    """RocketMQ's TPS strings carry several figures ('12.3 10.1 9.8'): the first."""
    try:
        return float((text or "0").split()[0])
    except (ValueError, IndexError):
        return 0.0


def _with_owners(group: str, offsets: list[QueueOffset], members: list[str]) -> list[QueueOffset]:
    """Each queue's owner as the default strategy (AllocateMessageQueueAveragely) assigns it among
    the members, per topic (what the members' rebalance computes from the same inputs)."""
    if not members:
        return offsets
    from namesrv.protocol.models import MessageQueue

    strategy = AllocateMessageQueueAveragely()
    cids = sorted(members)
    owner: dict[tuple[str, str, int], str] = {}
    for topic in sorted({q.topic for q in offsets}):
        mqs = sorted((MessageQueue(q.topic, q.broker_name, q.queue_id) for q in offsets if q.topic == topic),
                     key=lambda m: (m.broker_name, m.queue_id))
        for cid in cids:
            for mq in strategy.allocate(group, cid, mqs, cids):
                owner[(mq.topic, mq.broker_name, mq.queue_id)] = cid
    return [QueueOffset(q.topic, q.broker_name, q.queue_id, q.broker_offset, q.consumer_offset,
                        owner.get((q.topic, q.broker_name, q.queue_id), "")) for q in offsets]
