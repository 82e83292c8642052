"""The NameServer's lifecycle owner (RocketMQ's NamesrvController), run inside the actor's event loop.

It wires the tables (RouteInfoManager, KV config), the request processor behind one pipeline (ACL,
metrics and wire-log hooks), the 'not ready' gate, the channel watches, the route-change long-poll
(namesrv.routeinfo.long_poll), the route snapshots (actors.namesrv.snapshots) and the known brokers, and one
control loop that runs the periodic steps: the expiry scan (scanNotActiveBroker), route snapshots and
the persistence of the brokers it knows. Every request is one turn of the event loop, so it is atomic
without a lock; after each one the controller drains what the tables say changed and acts on exactly
that.
"""

from __future__ import annotations

import collections
import logging
from collections.abc import Awaitable
from dataclasses import dataclass
from pathlib import Path

from actors.namesrv.housekeeping import BrokerHousekeepingService
from actors.namesrv.requests import NamesrvRequests
from actors.namesrv.snapshots import RouteSnapshots
from actors.runtime.metrics import FLUSH_INTERVAL_S, NO_METRICS, Metrics, RequestMetricsHook
from namesrv.acl.plain_acl import AclManager
from namesrv.acl.rpc_hook import AclHook, check_namesrv
from namesrv.common.clock import Clock, system_clock
from namesrv.common.control_loop import ControlLoop
from namesrv.common.persist import BackgroundWriter
from namesrv.protocol.codes import NAMESRV_LARGE_REQUEST_CODES
from namesrv.remoting.config import RemotingServerConfig
from namesrv.remoting.connection import Connection
from namesrv.remoting.limits import server_limits
from namesrv.remoting.pipeline import RequestContext, RequestPipeline, WireAnswer
from namesrv.remoting.server import RemotingServer
from namesrv.remoting.wire_command import RemotingCommand
from namesrv.remoting.wire_log import WireLogHook
from namesrv.routeinfo.changes import RemovalCause
from namesrv.routeinfo.config import NamesrvConfig
from namesrv.routeinfo.config_store import ConfigStore, load_config_updates
from namesrv.routeinfo.known_brokers import FILE_NAME as KNOWN_BROKERS_FILE
from namesrv.routeinfo.known_brokers import KnownBrokers
from namesrv.routeinfo.kvconfig import KVConfigManager
from namesrv.routeinfo.long_poll import LongPollHost
from namesrv.routeinfo.processor import DefaultRequestProcessor
from namesrv.routeinfo.ready_gate import ReadyGate
from namesrv.routeinfo.route_info_manager import RouteInfoManager
from namesrv.routeinfo.wire_encoder import WireEncoder

log = logging.getLogger(__name__)

ACL_RELOAD_INTERVAL_S = 1.0
"""How often the ACL file is checked for changes."""

REMOVALS_KEPT = 10_000
"""Removal records kept in memory (oldest dropped first)."""


@dataclass(frozen=True, slots=True)
class RemovalEvent:
    broker_addr: str
    cause: RemovalCause
    t_ms: int


class NamesrvController:
    def __init__(
        self, name: str, config: NamesrvConfig, data_dir: Path | None, clock: Clock = system_clock,
        remoting: RemotingServerConfig | None = None, metrics: Metrics | None = None, restarted: bool = True,
    ) -> None:
        """`restarted` False: a first start (not a restart by Ray); with no known brokers persisted
        either, there is nothing to wait for and route queries are answered at once."""
        self.name = name
        self.config = config
        self.clock = clock
        self.data_dir = data_dir
        config_path = Path(config.config_store_path).expanduser() if data_dir is not None else None
        updated_keys = load_config_updates(config_path, config)  # before anything reads the config
        self.rim = RouteInfoManager(config, clock)
        self.writer = BackgroundWriter(name)
        """KV (and other table) writes, off the event loop; answers that changed them wait for it."""
        self.kv = KVConfigManager(config.kv_config_path if data_dir is not None else None, writer=self.writer.write)
        self.kv.load()
        self.known = KnownBrokers(data_dir / KNOWN_BROKERS_FILE if data_dir is not None else None, self.writer.write)
        """The brokers it knows, persisted: a restart waits for them (the 'not ready' gate)."""
        window = config.not_ready_window_ms if restarted or self.known.addrs else 0
        self.gate = ReadyGate(clock, window, self.known.addrs)
        self.processor = DefaultRequestProcessor(self.rim, self.kv, self.gate)
        self.processor.updated_config_keys.update(updated_keys)
        self.config_store = ConfigStore(config_path, config, self.processor.updated_config_keys, self.writer.write)
        self.loop = ControlLoop(name)
        self.housekeeping = BrokerHousekeepingService(self.loop, self._on_channel_closed, self._channel_in_use)
        self.long_poll = LongPollHost(self.rim, ready=self.routes_ready, gate_remaining_ms=self.gate.remaining_ms,
                                      route_of=lambda topic: self.processor.route_answer(topic)[0],
                                      closed=lambda: self.loop.closed)
        self.snapshots = RouteSnapshots(name, config, self.rim, clock, self.loop)
        self._ready = self.gate.is_open
        self.removals: collections.deque[RemovalEvent] = collections.deque(maxlen=REMOVALS_KEPT)
        self.started_ms = clock()
        self.metrics = metrics if metrics is not None else NO_METRICS
        self.remoting_config = remoting
        self.wire = WireEncoder()
        self.pipeline = RequestPipeline(name, self.wire.encode_frame)
        """Every request, from TCP or Ray: ACL hook, this NameServer's processor, metrics, wire log."""
        self.acl = AclHook(AclManager(config.acl_file), check_namesrv, self._count_acl_refusal) \
            if config.acl_enable else None
        if self.acl is not None:
            self.pipeline.add_hook(self.acl)
        self.pipeline.add_hook(RequestMetricsHook(self.metrics))
        self.wire_log = WireLogHook(clock)
        self.pipeline.add_hook(self.wire_log)
        self.requests = NamesrvRequests(self.processor, self.writer, self.config_store, self.housekeeping,
                                        self.metrics, self.after_change)
        self.pipeline.register(self.requests.handlers())
        self.pipeline.register_default(self.requests.serve)
        self.remoting = RemotingServer(
            name, self._serve_tcp,
            self._on_connection_closed, remoting.server_channel_max_idle_time_seconds if remoting else 0,
            lambda coro: self.loop.spawn("remoting-request", coro),
            server_limits(remoting, NAMESRV_LARGE_REQUEST_CODES),
        )
        if remoting is not None:
            self.remoting.bind(remoting.listen_host, remoting.listen_port)  # a taken port fails the start

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        """Schedule the periodic steps on the running event loop."""
        cfg = self.config
        self.gate.begin()  # the not-ready window counts from serving, not from __init__'s warm-up
        scan_s = cfg.scan_not_active_broker_interval_ms / 1000
        self.loop.every("scan-not-active-broker", scan_s, self.scan_not_active_broker,
                        initial_delay_s=cfg.scan_not_active_broker_initial_delay_ms / 1000)
        self.loop.every("persist-known-brokers", scan_s, self.persist_known_brokers, initial_delay_s=scan_s)
        self.loop.every("flush-metrics", FLUSH_INTERVAL_S, self.flush_metrics, initial_delay_s=FLUSH_INTERVAL_S)
        if self.acl is not None:
            self.loop.every("reload-acl", ACL_RELOAD_INTERVAL_S, self.acl.reload, initial_delay_s=ACL_RELOAD_INTERVAL_S)
        if cfg.snapshot_interval_ms > 0:
            interval = cfg.snapshot_interval_ms / 1000
            self.loop.every("route-snapshot", interval, self.snapshots.take, initial_delay_s=interval)
        self.loop.start()
        if self.remoting_config is not None:
            self.loop.spawn("remoting-serve", self.remoting.serve())
        log.info("%s started (expecting %d known brokers, not-ready window %d ms)",
                 self.name, len(self.known.addrs), self.gate.window_ms)

    async def shutdown(self) -> None:
        await self.remoting.stop()
        await self.loop.shutdown()
        await self.durable()
        self.long_poll.notify_all()

    # ------------------------------------------------------------------ requests and changes
    def _serve_tcp(self, conn: Connection, cmd: RemotingCommand) -> WireAnswer | Awaitable[WireAnswer]:
        """A TCP request into the pipeline, with its connection's context (built once per connection)."""
        ctx = conn.context
        if ctx is None:
            ctx = conn.context = RequestContext(conn.token, conn.peer)
        return self.pipeline.handle_command(cmd, ctx)

    def _count_acl_refusal(self, reason: str) -> None:
        self.metrics.inc("acl_rejections", reason=reason)

    async def durable(self, since: int | None = None) -> None:
        """Returns once every persisted-table change made so far (or, with `since`, made after that
        `writer.submitted` count: none, and it returns at once) is on disk; with `since`, raises
        DurableWriteError when one of those changes could not be written (it is rolled back)."""
        await self.writer.drained(since)

    def check_long_poll(self, topic_versions: dict[str, int], auth: dict[str, str]) -> None:
        """A route long-poll passes the ACL as a route query for its topics would."""
        if self.acl is not None:
            self.acl.check_long_poll(topic_versions, auth)

    def routes_ready(self) -> bool:
        """Whether route queries are answered (the 'not ready' gate is open)."""
        return self.gate.not_ready_reason(self.rim.registered_addrs()) is None

    def after_change(self) -> None:
        """Act on what the tables say changed: log removals, wake the waiters of changed routes,
        schedule one (coalesced) snapshot."""
        if not self._ready and self.routes_ready():
            self._ready = True
            self.long_poll.notify_all()  # every held route can be answered now
        if not self.rim.has_changes():  # most requests (route queries) change nothing
            return
        changes = self.rim.drain_changes()
        if changes.added - self.known.addrs:  # a broker it does not know yet: remember it at once
            self.persist_known_brokers()
        now = self.clock()
        for addr, cause, last_heartbeat in changes.removed:
            self.removals.append(RemovalEvent(addr, cause, now))
            self.metrics.inc("broker_removals", cause=cause)
            self.metrics.observe("broker_removal_delay_ms", now - last_heartbeat, cause=cause)
        self.metrics.inc("long_poll_pushes", self.long_poll.notify_changed(changes))
        self.snapshots.on_change(now)

    def _on_connection_closed(self, conn: Connection, reason: str) -> None:
        self._on_channel_closed(conn.token, reason)

    def _channel_in_use(self, token: str) -> bool:
        return bool(self.rim.broker_addrs_of_channel(token))

    def _on_channel_closed(self, token: str, how: str) -> None:
        for addr in self.rim.broker_addrs_of_channel(token):
            if self.rim.on_channel_destroy(addr, token):
                log.warning("broker %s channel %s: removed at once", addr, how)
        self.after_change()

    # ------------------------------------------------------------------ periodic steps
    def flush_metrics(self) -> None:
        self.metrics.set("live_brokers", len(self.rim.broker_live_table))
        self.metrics.set("topics", len(self.rim.topic_queue_table))
        self.metrics.set("long_poll_waiters", self.long_poll.waiter_count)
        self.metrics.flush()

    def scan_not_active_broker(self) -> None:
        if self.rim.scan_not_active_broker():
            self.after_change()

    def persist_known_brokers(self) -> None:
        """Remember the live brokers, so a restart knows whom to wait for (while the gate is shut
        the set only grows). Runs periodically and as soon as a broker it does not know yet
        registers; written through the writer thread, in the order the sets were taken."""
        self.known.update(set(self.rim.broker_live_table), grow_only=not self.routes_ready())
