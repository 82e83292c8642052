"""The NameServer's lifecycle owner (RocketMQ's NamesrvController), run inside the actor's event loop.

It owns the tables (RouteInfoManager, KV config), the request processor, the 'not ready' gate, the
channel watches, the route-change long-poll and the snapshot buffer, and one control loop that runs
the periodic steps: the expiry scan (scanNotActiveBroker), route snapshots and the persistence of
the brokers it knows. Every request is one turn of the event loop, so it is atomic without a lock;
after each one the controller drains what the tables say changed and acts on exactly that.
"""

from __future__ import annotations

import asyncio
import collections
import gc
import json
import logging
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from actors.control_loop import ControlLoop
from actors.housekeeping import BrokerChannel, BrokerHousekeepingService
from actors.long_poll import LongPollHost
from actors.metrics import FLUSH_INTERVAL_S, NO_METRICS, Metrics, RequestMetricsHook
from namesrv.acl.plain_acl import AclManager
from namesrv.acl.rpc_hook import AclHook, check_namesrv
from namesrv.clock import Clock, system_clock
from namesrv.persist import BackgroundWriter, DurableWriteError, Undo
from namesrv.protocol.codes import NAMESRV_LARGE_REQUEST_CODES, RequestCode, ResponseCode
from namesrv.protocol.models import TopicRouteData
from namesrv.remoting.command import RemotingRequest, RemotingResponse, error
from namesrv.remoting.config import RemotingServerConfig
from namesrv.remoting.limits import server_limits
from namesrv.remoting.pipeline import Answer, RequestContext, RequestPipeline
from namesrv.remoting.server import Connection, RemotingServer
from namesrv.remoting.wire_log import WireLogHook
from namesrv.routeinfo.changes import RemovalCause
from namesrv.routeinfo.config import NamesrvConfig
from namesrv.routeinfo.config_store import encode_config_updates, load_config_updates
from namesrv.routeinfo.kvconfig import KVConfigManager
from namesrv.routeinfo.processor import DefaultRequestProcessor
from namesrv.routeinfo.ready_gate import ReadyGate
from namesrv.routeinfo.route_info_manager import RouteInfoManager
from namesrv.routeinfo.snapshot import (
    DEFAULT_READER,
    RESTART_READER,
    SnapshotBuffer,
    snapshot_record_batch,
    snapshot_steps,
)
from namesrv.routeinfo.wire_encoder import WireEncoder
from namesrv.slices import drive_steps, run_to_end

if TYPE_CHECKING:
    import pyarrow as pa

log = logging.getLogger(__name__)

ACL_RELOAD_INTERVAL_S = 1.0
"""How often the ACL file is checked for changes."""

FREEZE_AFTER_BYTES = 256 * 1024
"""After a registration body this big, the tables it grew are moved out of the garbage collector's
sight (`gc.freeze`): a full collection walks every tracked object, which with 10,000s of topics
stalls the loop for tens of milliseconds (hundreds at 300 brokers). The tables are acyclic, so
reference counting still frees what they drop."""

SLICED_BODY_BYTES = 64 * 1024
"""A request body at least this big (a registration of some 500 topics or more) is processed in
slices; smaller ones are answered within one loop turn."""

SLICED_IN_FLIGHT = 1
"""Sliced requests processed at once; later ones wait their turn. One: a route query then waits for
at most one slice, however many brokers register together (every slice of every registration in
flight runs in one loop turn), and only one decoded topic table is held at a time."""

REMOVALS_KEPT = 10_000
"""Removal records kept in memory (oldest dropped first)."""


@dataclass(frozen=True, slots=True)
class RemovalEvent:
    broker_addr: str
    cause: RemovalCause
    t_ms: int


@dataclass(frozen=True, slots=True)
class RouteChange:
    """One topic's route as the long-poll hands it out: its version and the route (None: gone)."""

    version: int
    route: TopicRouteData | None


def _token(channel: object) -> object:
    """What the tables remember a registration's channel by: a Ray channel's token, or a TCP
    connection's token as it is."""
    return channel.token if isinstance(channel, BrokerChannel) else channel


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
        self._config_path = Path(config.config_store_path).expanduser() if data_dir is not None else None
        updated_keys = load_config_updates(self._config_path, config)  # before anything reads the config
        self.rim = RouteInfoManager(config, clock)
        self.writer = BackgroundWriter(name)
        """KV (and other table) writes, off the event loop; answers that changed them wait for it."""
        self.kv = KVConfigManager(config.kv_config_path if data_dir is not None else None, writer=self.writer.write)
        self.kv.load()
        self._known_path = data_dir / "known_brokers.json" if data_dir is not None else None
        self._known = self._load_known_brokers()
        window = config.not_ready_window_ms if restarted or self._known else 0
        self.gate = ReadyGate(clock, window, self._known)
        self.processor = DefaultRequestProcessor(self.rim, self.kv, self.gate)
        self.processor.updated_config_keys.update(updated_keys)
        self._config_before: tuple[NamesrvConfig, set[str]] | None = None
        self.loop = ControlLoop(name)
        self.housekeeping = BrokerHousekeepingService(self.loop, self._on_channel_closed, self._channel_in_use)
        self.long_poll = LongPollHost()
        self._sliced_slots = asyncio.Semaphore(SLICED_IN_FLIGHT)
        self.snapshots = SnapshotBuffer(config.snapshot_max_buffered_rows,
                                        max(config.snapshot_reader_lease_ms, 3 * config.snapshot_interval_ms))
        self._snapshot_pending = False
        self._snapshot_lock = asyncio.Lock()
        self._snapshot_again = False
        self._ready = self.gate.is_open
        self.removals: collections.deque[RemovalEvent] = collections.deque(maxlen=REMOVALS_KEPT)
        self.started_ms = clock()
        self.metrics = metrics if metrics is not None else NO_METRICS
        self.remoting_config = remoting
        self.wire = WireEncoder()
        self.pipeline = RequestPipeline(name, self.wire.encode)
        """Every request, from TCP or Ray: ACL hook, this NameServer's processor, metrics, wire log."""
        self.acl = AclHook(AclManager(config.acl_file), check_namesrv, self._count_acl_refusal) \
            if config.acl_enable else None
        if self.acl is not None:
            self.pipeline.add_hook(self.acl)
        self.pipeline.add_hook(RequestMetricsHook(self.metrics))
        self.wire_log = WireLogHook(clock)
        self.pipeline.add_hook(self.wire_log)
        self.pipeline.register_default(self.serve)
        self.remoting = RemotingServer(
            name, lambda conn, cmd: self.pipeline.handle_command(cmd, RequestContext(conn.token, conn.peer)),
            self._on_connection_closed, remoting.server_channel_max_idle_time_seconds if remoting else 0,
            lambda coro: self.loop.spawn("remoting-request", coro),
            server_limits(remoting, NAMESRV_LARGE_REQUEST_CODES),
        )
        if remoting is not None:
            self.remoting.bind(remoting.listen_host, remoting.listen_port)  # a taken port fails the start
        # Build one snapshot now and drop it: pyarrow imports pandas on its first RecordBatch, which
        # takes 0.3-3 s on a busy machine. Paid later, on the event loop at the first registration,
        # it stalls every request, heartbeats time out and live brokers expire.
        snapshot_record_batch(self.rim, self.name)

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
            self.loop.every("route-snapshot", interval, self.take_snapshot, initial_delay_s=interval)
        self.loop.start()
        if self.remoting_config is not None:
            self.loop.spawn("remoting-serve", self.remoting.serve())
        log.info("%s started (expecting %d known brokers, not-ready window %d ms)",
                 self.name, len(self._known), self.gate.window_ms)

    async def shutdown(self) -> None:
        await self.remoting.stop()
        await self.loop.shutdown()
        await self.durable()
        self.long_poll.notify_all()

    # ------------------------------------------------------------------ requests
    def serve(self, request: RemotingRequest, ctx: RequestContext) -> Answer:
        """The NameServer's processor behind its pipeline (after the ACL hook, before the metrics and
        wire-log hooks): a big body (a registration of 100s of topics) in slices, between which the
        loop answers other requests; anything else within this loop turn, so it is atomic without a
        lock. An answer whose request changed a persisted table (KV, config, a new broker) waits
        until that is on disk."""
        body = request.body
        if isinstance(body, (bytes, bytearray)) and len(body) >= SLICED_BODY_BYTES:
            return self._serve_sliced(request, ctx)
        before = self.writer.submitted
        if request.code == RequestCode.UPDATE_NAMESRV_CONFIG:  # what a failed write puts back
            self._config_before = (self.config.model_copy(), set(self.processor.updated_config_keys))
        response: RemotingResponse = run_to_end(self.processor.process_steps(request, _token(ctx.channel)))
        self._done(request, ctx.channel, response)
        if self.writer.submitted != before:
            return self._when_durable(response, before)
        return response

    async def _serve_sliced(self, request: RemotingRequest, ctx: RequestContext) -> RemotingResponse:
        async with self._sliced_slots:
            # Yield once first: a burst of registrations whose frames arrived together would
            # otherwise each run its first (for an unchanged one: only) slice in the same loop turn.
            await asyncio.sleep(0)
            before = self.writer.submitted
            # between slices: wake the waiters of the routes written so far
            response: RemotingResponse = await drive_steps(
                self.processor.process_steps(request, _token(ctx.channel)), self.after_change)
            self._done(request, ctx.channel, response)
        return await self._when_durable(response, before)

    async def _when_durable(self, response: RemotingResponse, since: int) -> RemotingResponse:
        try:
            await self.durable(since)
        except DurableWriteError as e:  # not on disk: rolled back, and the caller is told
            return error(ResponseCode.SYSTEM_ERROR, str(e))
        return response

    def _count_acl_refusal(self, reason: str) -> None:
        self.metrics.inc("acl_rejections", reason=reason)

    def _done(self, request: RemotingRequest, channel: object, response: RemotingResponse) -> None:
        """Bookkeeping after a request; reads nothing of the request but its code and body size (the
        header was parsed, once, by the processor: a new broker shows in the drained changes)."""
        code = request.code
        body = request.body
        if code == RequestCode.REGISTER_BROKER and isinstance(body, (bytes, bytearray)) and body:
            self.metrics.inc("registration_bytes", len(body))
            if len(body) >= FREEZE_AFTER_BYTES:
                gc.freeze()  # see FREEZE_AFTER_BYTES
        if response.ok and code == RequestCode.REGISTER_BROKER and isinstance(channel, BrokerChannel):
            self.housekeeping.watch(channel)
        if response.ok and code == RequestCode.UPDATE_NAMESRV_CONFIG:
            self.persist_config(self._config_undo())  # the answer waits for it (process_async / handle_wire)
        self.after_change()

    async def durable(self, since: int | None = None) -> None:
        """Returns once every persisted-table change made so far (or, with `since`, made after that
        `writer.submitted` count: none, and it returns at once) is on disk; with `since`, raises
        DurableWriteError when one of those changes could not be written (it is rolled back)."""
        await self.writer.drained(since)

    def check_long_poll(self, topic_versions: dict[str, int], auth: dict[str, str]) -> None:
        """A route long-poll passes the ACL as a route query for its topics would."""
        if self.acl is not None:
            self.acl.check_long_poll(topic_versions, auth)

    def after_change(self) -> None:
        """Act on what the tables say changed: log removals, wake the waiters of changed routes,
        schedule one (coalesced) snapshot."""
        if not self._ready and self.gate.not_ready_reason(self.rim.registered_addrs()) is None:
            self._ready = True
            self.long_poll.notify_all()  # every held route can be answered now
        changes = self.rim.drain_changes()
        if not changes:
            return
        if changes.added - self._known:  # a broker it does not know yet: remember it at once
            self.persist_known_brokers()
        now = self.clock()
        for addr, cause, last_heartbeat in changes.removed:
            self.removals.append(RemovalEvent(addr, cause, now))
            self.metrics.inc("broker_removals", cause=cause)
            self.metrics.observe("broker_removal_delay_ms", now - last_heartbeat, cause=cause)
        self.metrics.inc("long_poll_pushes", self.long_poll.notify_changed(changes, self.rim))
        if (self.config.snapshot_interval_ms > 0 and self.config.snapshot_on_change and not self._snapshot_pending
                and self.snapshots.active(now)):
            self._snapshot_pending = True  # coalesce a burst of changes into one snapshot
            self.loop.spawn("route-snapshot", self.take_snapshot())

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

    async def take_snapshot(self, wait: bool = False) -> None:
        """One image of the tables, buffered for collection, taken only while a collector holds a
        lease. Taken in slices (`snapshot_steps`: each broker group read within one loop turn), so
        a NameServer with 100s of brokers x 10,000s of topics keeps answering meanwhile. A request
        while one is being taken coalesces into one more after it; `wait` returns only once a
        snapshot begun after the call is buffered."""
        self._snapshot_pending = False
        if not self.snapshots.active(self.clock()):
            return
        if self._snapshot_lock.locked():
            self._snapshot_again = True
            if wait:
                async with self._snapshot_lock:  # FIFO: the holder finishes its extra round first
                    pass
            return
        async with self._snapshot_lock:
            while True:
                self._snapshot_again = False
                self.snapshots.append(*await drive_steps(snapshot_steps(self.rim, self.name)))
                if not self._snapshot_again:
                    break

    def resume_snapshots_after_restart(self) -> None:
        """A NameServer restarted by Ray lost its buffer and its readers' leases with its process;
        its collectors are likely still there (a chaos run collecting while it kills NameServers), so
        it snapshots for one lease, as if they had drained, until they drain again."""
        self.snapshots.lease(RESTART_READER, self.clock())

    async def drain_snapshots(self, take_now: bool, reader: str = DEFAULT_READER,
                              lease_ms: int | None = None) -> list[pa.RecordBatch]:
        """Renew `reader`'s lease (for `lease_ms`, at least the configured lease), add a snapshot of
        this instant when `take_now`, and hand over what `reader` has not taken yet."""
        now = self.clock()
        self.snapshots.lease(reader, now, lease_ms)
        if take_now and self.config.snapshot_interval_ms > 0:
            await self.take_snapshot(wait=True)
        return self.snapshots.drain(reader)

    def _load_known_brokers(self) -> set[str]:
        if self._known_path is None or not self._known_path.exists():
            return set()
        try:
            return set(json.loads(self._known_path.read_text()))
        except (ValueError, TypeError):
            log.warning("ignoring unreadable %s", self._known_path)
            return set()

    def persist_config(self, undo: Undo | None = None) -> None:
        """Store what UPDATE_NAMESRV_CONFIG changed, through the writer thread (atomically, in order,
        each image holding the values current when it was taken); `undo` if it does not land."""
        if self._config_path is not None:
            self.writer.write(self._config_path, encode_config_updates(self.config, self.processor.updated_config_keys),
                              undo)

    def _config_undo(self) -> Undo | None:
        """Puts the config back as it was before the UPDATE_NAMESRV_CONFIG just processed."""
        if self._config_before is None:
            return None
        prior, keys = self._config_before
        self._config_before = None

        def undo() -> None:
            for name in type(prior).model_fields:
                if getattr(self.config, name) != getattr(prior, name):
                    setattr(self.config, name, getattr(prior, name))
            self.processor.updated_config_keys.clear()
            self.processor.updated_config_keys.update(keys)
            log.warning("namesrv config update rolled back: not written")
        return undo

    def persist_known_brokers(self) -> None:
        """Remember the live brokers, so a restart knows whom to wait for. While the gate is shut
        the set only grows: it must not shrink because a restart happened inside its window. Runs
        periodically and as soon as a broker it does not know yet registers; written through the
        writer thread, in the order the sets were taken."""
        live = set(self.rim.broker_live_table)
        if self.gate.not_ready_reason(self.rim.registered_addrs()) is not None:
            live |= self._known
        if live == self._known:
            return
        known, self._known = self._known, live
        if self._known_path is not None:  # not written: the set goes back, and the next period retries

            def undo() -> None:
                self._known = known
            self.writer.write(self._known_path, json.dumps(sorted(live)).encode(), undo)

    # ------------------------------------------------------------------ route-change push
    async def listen_for_change(
        self, topic_versions: dict[str, int], timeout_s: float | None
    ) -> dict[str, RouteChange]:
        """Return {topic: RouteChange} for every held topic whose route version differs from the
        caller's, as soon as one does, or {} after the timeout (30-60 s random by default, so clients
        do not all come back at once)."""
        if not isinstance(topic_versions, dict) or not all(
            isinstance(t, str) and isinstance(v, int) for t, v in topic_versions.items()
        ):
            raise TypeError("topic_versions must map topic names to integer versions")
        wait_s = random.uniform(30.0, 60.0) if timeout_s is None else float(timeout_s)
        deadline = time.monotonic() + wait_s
        while True:
            if self.gate.not_ready_reason(self.rim.registered_addrs()) is None:
                changes: dict[str, RouteChange] = {}
                for topic, held in topic_versions.items():
                    version = self.rim.route_version(topic)
                    if version != held:
                        changes[topic] = RouteChange(version, self.processor.route_answer(topic)[0])  # as polled
                if changes:
                    return changes
            remaining = deadline - time.monotonic()
            if remaining <= 0 or self.loop.closed:
                return {}
            gate_ms = self.gate.remaining_ms()
            if gate_ms:
                remaining = min(remaining, gate_ms / 1000 + 0.001)
            await self.long_poll.wait(topic_versions, remaining)

    # ------------------------------------------------------------------ inspection
    def status(self) -> dict[str, Any]:
        now = self.clock()
        brokers = []
        for name, bd in sorted(self.rim.broker_addr_table.items()):
            for broker_id, addr in sorted(bd.broker_addrs.items()):
                live = self.rim.broker_live_table.get(addr)
                brokers.append({
                    "cluster": bd.cluster,
                    "broker_name": name,
                    "broker_id": broker_id,
                    "broker_addr": addr,
                    "last_heartbeat_age_ms": None if live is None else now - live.last_update_timestamp,
                    "data_version": None if live is None else live.data_version.to_wire(),
                    "topics": self.rim.topic_count_of(name),
                    "watched": live is not None and live.channel is not None
                and self.housekeeping.is_watched(live.channel),
                })
        return {
            "name": self.name,
            "started_ms": self.started_ms,
            "ready": self.gate.not_ready_reason(self.rim.registered_addrs()) is None,
            "route_seq": self.rim.route_seq,
            "topics": len(self.rim.topic_queue_table),
            "snapshots_taken": self.snapshots.taken,
            "snapshots_buffered": len(self.snapshots),
            "snapshots_dropped": self.snapshots.dropped,
            "long_poll_waiters": self.long_poll.waiter_count,
            "route_encodings": self.wire.route_encodings,
            "acl_rejections": dict(self.acl.rejections) if self.acl is not None else {},
            "brokers": brokers,
        }
