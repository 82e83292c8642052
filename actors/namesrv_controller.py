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
from collections.abc import Awaitable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from actors.control_loop import ControlLoop, drive_steps
from actors.housekeeping import BrokerChannel, BrokerHousekeepingService
from actors.long_poll import LongPollHost
from actors.metrics import FLUSH_INTERVAL_S, NO_METRICS, Metrics
from actors.remoting_server import Connection, RemotingServer, server_limits
from namesrv.acl.plain_acl import ACCESS_KEY, SIGNATURE, AclManager, long_poll_content
from namesrv.clock import Clock, system_clock
from namesrv.persist import BackgroundWriter
from namesrv.protocol.codes import NAMESRV_LARGE_REQUEST_CODES, RequestCode, ResponseCode
from namesrv.protocol.command import RemotingRequest, RemotingResponse, error, request_ext_strings
from namesrv.protocol.models import TopicRouteData
from namesrv.protocol.register_body import run_to_end
from namesrv.protocol.remoting import RemotingCommand
from namesrv.protocol.server_config import RemotingServerConfig
from namesrv.routeinfo.changes import RemovalCause
from namesrv.routeinfo.config import NamesrvConfig
from namesrv.routeinfo.config_store import encode_config_updates, load_config_updates
from namesrv.routeinfo.kvconfig import KVConfigManager
from namesrv.routeinfo.processor import DefaultRequestProcessor, Steps
from namesrv.routeinfo.ready_gate import ReadyGate
from namesrv.routeinfo.remoting_adapter import WireEncoder, to_request
from namesrv.routeinfo.route_info_manager import RouteInfoManager
from namesrv.routeinfo.snapshot import (
    DEFAULT_READER,
    RESTART_READER,
    SnapshotBuffer,
    snapshot_record_batch,
    snapshot_steps,
)

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
class WireRecord:
    """One request served over TCP: who asked what, and the answer's code."""

    t_ms: int
    peer: str
    code: int
    language: int
    version: int
    subject: str
    """The request's topic, or its broker name for broker requests (empty otherwise)."""
    response_code: int


WIRE_LOG_KEPT = 1_000
"""Recent TCP requests kept for inspection (`namesrv status`, tests)."""


@dataclass(frozen=True, slots=True)
class RouteChange:
    """One topic's route as the long-poll hands it out: its version and the route (None: gone)."""

    version: int
    route: TopicRouteData | None


def _answer(response: RemotingResponse) -> Steps:
    """A response as the (empty) steps of a request answered at once."""
    return response
    yield  # makes this a generator


def _result_name(code: int) -> str:
    try:
        return ResponseCode(code).name
    except ValueError:
        return str(code)


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
        self.acl = AclManager(config.acl_file) if config.acl_enable else None
        self.acl_rejections: collections.Counter[str] = collections.Counter()
        self.metrics = metrics if metrics is not None else NO_METRICS
        self.remoting_config = remoting
        self.wire = WireEncoder()
        self.wire_log: collections.deque[tuple[int, str, int, int, int, str, int]] = collections.deque(
            maxlen=WIRE_LOG_KEPT)
        """WireRecord fields as plain tuples (cheap on the hot path); `wire_records()` names them."""
        self.remoting = RemotingServer(
            name, self.handle_wire, self._on_connection_closed,
            remoting.server_channel_max_idle_time_seconds if remoting else 0,
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
            self.loop.every("reload-acl", ACL_RELOAD_INTERVAL_S, self.reload_acl, initial_delay_s=ACL_RELOAD_INTERVAL_S)
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
    def process(self, request: RemotingRequest, channel: BrokerChannel | str | None = None,
                remote: str = "ray") -> RemotingResponse:
        """One request, answered within this loop turn, from the Ray path (`channel` a BrokerChannel
        to watch) or from TCP (`channel` the connection's token: its close event removes what
        registered through it). With ACL on, a request that fails it answers NO_PERMISSION and
        changes nothing."""
        started = time.perf_counter()
        response: RemotingResponse = run_to_end(self._steps(request, channel, remote))
        return self._done(request, channel, remote, response, started)

    async def process_async(self, request: RemotingRequest, channel: BrokerChannel | str | None = None,
                            remote: str = "ray") -> RemotingResponse:
        """`process` for a request that may take many slices (a big registration): between slices
        the loop answers other requests, and the waiters of the routes written so far are woken."""
        body = getattr(request, "body", None)
        if not body or len(body) < SLICED_BODY_BYTES:
            before = self.writer.submitted
            response = self.process(request, channel, remote)
            await self.durable(before)  # only if this request wrote (KV, config, a new broker)
            return response
        started = time.perf_counter()
        async with self._sliced_slots:
            # Yield once first: a burst of registrations whose frames arrived together would
            # otherwise each run its first (for an unchanged one: only) slice in the same loop turn.
            await asyncio.sleep(0)
            return self._done(request, channel, remote, await self._run_sliced(request, channel, remote), started)

    async def _run_sliced(self, request: RemotingRequest, channel: BrokerChannel | str | None,
                          remote: str) -> RemotingResponse:
        # between slices: wake the waiters of the routes written so far
        response: RemotingResponse = await drive_steps(self._steps(request, channel, remote), self.after_change)
        return response

    def _steps(self, request: RemotingRequest, channel: BrokerChannel | str | None, remote: str) -> Steps:
        token = channel.token if isinstance(channel, BrokerChannel) else channel
        if self.acl is not None and isinstance(request, RemotingRequest):
            denied = self.acl.validator.check_namesrv(request.code, request_ext_strings(request), request.body, remote)
            if denied is not None:
                self.acl_rejections[denied.reason] += 1
                self.metrics.inc("acl_rejections", reason=denied.reason)
                log.warning("ACL refused request %s from %s: %s", request.code, remote, denied.remark)
                return _answer(error(ResponseCode.NO_PERMISSION, denied.remark))
        return self.processor.process_steps(request, token)

    def _done(self, request: RemotingRequest, channel: BrokerChannel | str | None, remote: str,
              response: RemotingResponse, started: float) -> RemotingResponse:
        """Bookkeeping after a request; reads nothing of the request but its code and body size (the
        header was parsed, once, by the processor: a new broker shows in the drained changes)."""
        code = getattr(request, "code", -1)
        self.metrics.inc("requests", code=code, result=_result_name(response.code),
                         transport="tcp" if remote != "ray" else "ray")
        self.metrics.observe("request_latency_ms", (time.perf_counter() - started) * 1000, code=code)
        body = getattr(request, "body", None)
        if code == RequestCode.REGISTER_BROKER and isinstance(body, (bytes, bytearray)) and body:
            self.metrics.inc("registration_bytes", len(body))
            if len(body) >= FREEZE_AFTER_BYTES:
                gc.freeze()  # see FREEZE_AFTER_BYTES
        if response.ok and code == RequestCode.REGISTER_BROKER and isinstance(channel, BrokerChannel):
            self.housekeeping.watch(channel)
        if response.ok and code == RequestCode.UPDATE_NAMESRV_CONFIG:
            self.persist_config()  # the answer waits for it (process_async / handle_wire: durable)
        self.after_change()
        return response

    def check_long_poll(self, topic_versions: dict[str, int], auth: dict[str, str]) -> None:
        """A route long-poll passes the ACL as a route query for its topics would."""
        if self.acl is None:
            return
        ext = long_poll_content(topic_versions) | {k: v for k, v in auth.items() if k in (ACCESS_KEY, SIGNATURE)}
        denied = self.acl.validator.check_namesrv(RequestCode.GET_ROUTEINFO_BY_TOPIC, ext, None, "ray")
        if denied is not None:
            self.acl_rejections[denied.reason] += 1
            raise PermissionError(denied.remark)

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

    def handle_wire(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand | Awaitable[RemotingCommand]:
        """A request from a TCP client, answered as RocketMQ's NameServer answers it (a registration
        in slices, the others within this loop turn)."""
        if cmd.code == RequestCode.REGISTER_BROKER:
            return self._handle_wire_sliced(conn, cmd)
        before = self.writer.submitted
        response = self.process(to_request(cmd), conn.token, conn.peer)
        if self.writer.submitted != before:  # it changed a persisted table: answer once that is on disk
            return self._answer_when_durable(conn, cmd, response, before)
        return self._answer_wire(conn, cmd, response)

    async def _answer_when_durable(self, conn: Connection, cmd: RemotingCommand,
                                   response: RemotingResponse, since: int) -> RemotingCommand:
        await self.durable(since)
        return self._answer_wire(conn, cmd, response)

    async def durable(self, since: int | None = None) -> None:
        """Returns once every persisted-table change made so far (or, with `since`, made after that
        `writer.submitted` count: none, and it returns at once) is on disk."""
        await self.writer.drained(since)

    async def _handle_wire_sliced(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return self._answer_wire(conn, cmd, await self.process_async(to_request(cmd), conn.token, conn.peer))

    def _answer_wire(self, conn: Connection, cmd: RemotingCommand, response: RemotingResponse) -> RemotingCommand:
        answer = self.wire.encode(cmd, response)
        ext = cmd.ext_fields or {}
        self.wire_log.append((self.clock(), conn.peer, cmd.code, cmd.language, cmd.version,
                              ext.get("topic") or ext.get("brokerName") or "", answer.code))
        return answer

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

    async def reload_acl(self) -> None:
        assert self.acl is not None
        await asyncio.to_thread(self.acl.try_reload)  # a broken file is logged; the previous rules stay

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

    def persist_config(self) -> None:
        """Store what UPDATE_NAMESRV_CONFIG changed, through the writer thread (atomically, in order,
        each image holding the values current when it was taken)."""
        if self._config_path is not None:
            self.writer.write(self._config_path, encode_config_updates(self.config, self.processor.updated_config_keys))

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
        self._known = live
        if self._known_path is not None:
            self.writer.write(self._known_path, json.dumps(sorted(live)).encode())

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

    def wire_records(self) -> list[WireRecord]:
        return [WireRecord(*r) for r in self.wire_log]

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
            "acl_rejections": dict(self.acl_rejections),
            "brokers": brokers,
        }
