"""The NameServer as an async Ray actor: RocketMQ's NamesrvController, done the Ray way.

One event loop owns the tables, so every request is atomic without a lock. Beside the request
methods (one per request code, named as the code in lower case) it runs:
- the expiry scan (scanNotActiveBroker) as a background task;
- a channel watch per broker (BrokerHousekeepingService): a long-pending `wait_closed()` call on the
  broker actor fails the moment that actor dies, and the broker is removed at once. The watch
  carries the broker's incarnation token, so a watch on an earlier incarnation never removes a
  fresh registration at the same address;
- a long-poll (`listen_for_change`) that returns as soon as a route a client holds changes.
NameServers never talk to each other.
"""

from __future__ import annotations

import asyncio
import collections
import json
import logging
import os
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import ray
from ray.exceptions import RayActorError

from namesrv.clock import system_clock
from namesrv.codec import RemotingRequest, RemotingResponse
from namesrv.config import NamesrvConfig
from namesrv.constants import RequestCode
from namesrv.kvconfig import KVConfigManager
from namesrv.persist import atomic_write
from namesrv.processor import DefaultRequestProcessor
from namesrv.ready_gate import ReadyGate
from namesrv.route_info_manager import RouteInfoManager
from namesrv.snapshot import snapshot_record_batch

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class BrokerChannel:
    """What a broker hands the NameServer when it registers: a handle to watch and who it is.

    `token` is unique per broker incarnation (address + a random id drawn at start), so events
    from an earlier incarnation at the same address can be told apart and ignored.
    """

    handle: Any
    token: str


@dataclass(frozen=True, slots=True)
class RemovalEvent:
    broker_addr: str
    cause: str  # "channel" (watch fired), "expired" (scan), "unregister"
    t_ms: int


class NameServerActor:
    def __init__(self, name: str, config: dict[str, Any] | None = None, data_dir: str | None = None) -> None:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        self.name = name
        self.data_dir = Path(data_dir).expanduser() / name if data_dir else None
        overrides = dict(config or {})
        if self.data_dir is not None:
            overrides.setdefault("kv_config_path", str(self.data_dir / "kvConfig.json"))
            overrides.setdefault("config_store_path", str(self.data_dir / "namesrv.json"))
        self.config = NamesrvConfig(**overrides)
        self.rim = RouteInfoManager(self.config, system_clock)
        self.kv = KVConfigManager(self.config.kv_config_path if self.data_dir is not None else None)
        self.kv.load()
        self._known_path = self.data_dir / "known_brokers.json" if self.data_dir is not None else None
        self._known = self._load_known_brokers()
        self.gate = ReadyGate(system_clock, self.config.not_ready_window_ms, self._known)
        self.processor = DefaultRequestProcessor(self.rim, self.kv, self.gate)
        self.started_ms = system_clock()
        self.reconstructed = ray.get_runtime_context().was_current_actor_reconstructed
        self._watches: dict[str, tuple[str, asyncio.Task[None]]] = {}
        self._changed = asyncio.Event()
        self._last_seq = 0
        self.removals: list[RemovalEvent] = []
        self._snapshots: collections.deque[pa.RecordBatch] = collections.deque()
        self._snapshot_rows = 0
        self.snapshots_dropped = 0
        self._snapshot_pending = False
        # Build one snapshot now and drop it: pyarrow imports pandas on its first RecordBatch, which
        # takes 0.3-3 s on a busy machine. Paid later, on the event loop at the first registration,
        # it stalls every request, heartbeats time out and live brokers expire.
        snapshot_record_batch(self.rim, self.name)
        loop = asyncio.get_event_loop()
        self._tasks = [loop.create_task(self._scan_loop())]
        if self.config.snapshot_interval_ms > 0:
            self._tasks.append(loop.create_task(self._snapshot_loop()))
        log.info(
            "%s started (reconstructed=%s, expecting %d known brokers, not-ready window %d ms)",
            name, self.reconstructed, len(self._known), self.config.not_ready_window_ms,
        )

    # ------------------------------------------------------------------ persistence of known brokers
    def _load_known_brokers(self) -> set[str]:
        if self._known_path is None or not self._known_path.exists():
            return set()
        try:
            return set(json.loads(self._known_path.read_text()))
        except (ValueError, TypeError):
            log.warning("ignoring unreadable %s", self._known_path)
            return set()

    def _persist_known_brokers(self) -> None:
        live = set(self.rim.broker_live_table)
        if live == self._known:
            return
        self._known = live
        if self._known_path is not None:
            atomic_write(self._known_path, json.dumps(sorted(live)).encode())

    # ------------------------------------------------------------------ change notification
    def _after_mutation(self) -> None:
        if self.rim.route_seq != self._last_seq:
            self._last_seq = self.rim.route_seq
            self._changed.set()
            self._changed = asyncio.Event()
            if self.config.snapshot_interval_ms > 0 and self.config.snapshot_on_change and not self._snapshot_pending:
                self._snapshot_pending = True  # coalesce a burst of changes into one snapshot
                asyncio.get_event_loop().call_soon(self._take_snapshot)
        self._persist_known_brokers()

    # ------------------------------------------------------------------ route snapshots
    def _take_snapshot(self) -> None:
        """One consistent image of the tables (taken within one loop turn), buffered for collection."""
        self._snapshot_pending = False
        batch = snapshot_record_batch(self.rim, self.name)
        self._snapshots.append(batch)
        self._snapshot_rows += batch.num_rows
        while self._snapshot_rows > self.config.snapshot_max_buffered_rows and len(self._snapshots) > 1:
            dropped = self._snapshots.popleft()
            self._snapshot_rows -= dropped.num_rows
            self.snapshots_dropped += 1

    async def _snapshot_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.snapshot_interval_ms / 1000)
            try:
                self._take_snapshot()
            except Exception:
                log.exception("route snapshot failed")

    async def drain_snapshots(self, take_now: bool = True) -> list[pa.RecordBatch]:
        """Hand over (and forget) every buffered snapshot; `take_now` adds one of this instant."""
        if take_now:
            self._take_snapshot()
        batches = list(self._snapshots)
        self._snapshots.clear()
        self._snapshot_rows = 0
        return batches

    def _record_removals(self, before: set[str], cause: str) -> None:
        now = system_clock()
        for addr in before.difference(self.rim.broker_live_table):
            self.removals.append(RemovalEvent(addr, cause, now))

    # ------------------------------------------------------------------ background work
    async def _scan_loop(self) -> None:
        await asyncio.sleep(self.config.scan_not_active_broker_initial_delay_ms / 1000)
        while True:
            try:
                before = set(self.rim.broker_live_table)
                if self.rim.scan_not_active_broker():
                    self._record_removals(before, "expired")
                    self._after_mutation()
            except Exception:
                log.exception("scanNotActiveBroker failed")
            await asyncio.sleep(self.config.scan_not_active_broker_interval_ms / 1000)

    def _ensure_watch(self, broker_addr: str, channel: BrokerChannel) -> None:
        current = self._watches.get(broker_addr)
        if current is not None and current[0] == channel.token and not current[1].done():
            return
        task = asyncio.get_event_loop().create_task(self._watch(broker_addr, channel))
        self._watches[broker_addr] = (channel.token, task)

    async def _watch(self, broker_addr: str, channel: BrokerChannel) -> None:
        try:
            await channel.handle.wait_closed.remote()
            how = "closed"
        except RayActorError as e:
            how = f"died ({type(e).__name__})"
        except Exception as e:  # any failure of the call means the channel is gone
            how = f"failed ({type(e).__name__}: {e})"
        before = set(self.rim.broker_live_table)
        if self.rim.on_channel_destroy(broker_addr, channel.token):
            log.warning("broker %s channel %s: removed at once", broker_addr, how)
            self._record_removals(before, "channel")
            self._after_mutation()
        current = self._watches.get(broker_addr)
        if current is not None and current[0] == channel.token:
            del self._watches[broker_addr]

    # ------------------------------------------------------------------ request entry points
    def _process(
        self, code: int, ext: dict[str, Any], body: bytes | None, channel: BrokerChannel | None
    ) -> RemotingResponse:
        token = channel.token if isinstance(channel, BrokerChannel) else None
        before = set(self.rim.broker_live_table)
        response = self.processor.process_request(RemotingRequest(code, ext, body), token)
        if code == RequestCode.UNREGISTER_BROKER:
            self._record_removals(before, "unregister")
        self._after_mutation()
        return response

    async def process(self, request: RemotingRequest, channel: BrokerChannel | None = None) -> RemotingResponse:
        """Generic entry: any request code, as a network front end would pass it."""
        if not isinstance(request, RemotingRequest):
            return self.processor.process_request(request)  # answers with a clear error
        response = self._process(request.code, request.ext_fields, request.body, channel)
        if request.code == RequestCode.REGISTER_BROKER and response.ok and isinstance(channel, BrokerChannel):
            self._ensure_watch(request.ext_fields["brokerAddr"], channel)
        return response

    async def register_broker(
        self, body: bytes | None = None, *, channel: BrokerChannel | None = None, **ext: Any
    ) -> RemotingResponse:
        return await self.process(RemotingRequest(RequestCode.REGISTER_BROKER, ext, body), channel)

    async def unregister_broker(self, *, channel: BrokerChannel | None = None, **ext: Any) -> RemotingResponse:
        return self._process(RequestCode.UNREGISTER_BROKER, ext, None, channel)

    async def query_data_version(self, body: bytes | None = None, **ext: Any) -> RemotingResponse:
        return self._process(RequestCode.QUERY_DATA_VERSION, ext, body, None)

    async def broker_heartbeat(self, **ext: Any) -> RemotingResponse:
        return self._process(RequestCode.BROKER_HEARTBEAT, ext, None, None)

    async def get_routeinfo_by_topic(self, **ext: Any) -> RemotingResponse:
        return self.processor.process_request(RemotingRequest(RequestCode.GET_ROUTEINFO_BY_TOPIC, ext))

    async def get_broker_cluster_info(self, **ext: Any) -> RemotingResponse:
        return self._process(RequestCode.GET_BROKER_CLUSTER_INFO, ext, None, None)

    async def wipe_write_perm_of_broker(self, **ext: Any) -> RemotingResponse:
        return self._process(RequestCode.WIPE_WRITE_PERM_OF_BROKER, ext, None, None)

    async def add_write_perm_of_broker(self, **ext: Any) -> RemotingResponse:
        return self._process(RequestCode.ADD_WRITE_PERM_OF_BROKER, ext, None, None)

    async def get_all_topic_list_from_nameserver(self, **ext: Any) -> RemotingResponse:
        return self._process(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, ext, None, None)

    async def delete_topic_in_namesrv(self, **ext: Any) -> RemotingResponse:
        return self._process(RequestCode.DELETE_TOPIC_IN_NAMESRV, ext, None, None)

    async def get_topics_by_cluster(self, **ext: Any) -> RemotingResponse:
        return self._process(RequestCode.GET_TOPICS_BY_CLUSTER, ext, None, None)

    async def get_system_topic_list_from_ns(self, **ext: Any) -> RemotingResponse:
        return self._process(RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS, ext, None, None)

    async def put_kv_config(self, **ext: Any) -> RemotingResponse:
        return self._process(RequestCode.PUT_KV_CONFIG, ext, None, None)

    async def get_kv_config(self, **ext: Any) -> RemotingResponse:
        return self._process(RequestCode.GET_KV_CONFIG, ext, None, None)

    async def delete_kv_config(self, **ext: Any) -> RemotingResponse:
        return self._process(RequestCode.DELETE_KV_CONFIG, ext, None, None)

    async def get_kvlist_by_namespace(self, **ext: Any) -> RemotingResponse:
        return self._process(RequestCode.GET_KVLIST_BY_NAMESPACE, ext, None, None)

    async def update_namesrv_config(self, body: bytes | None = None, **ext: Any) -> RemotingResponse:
        return self._process(RequestCode.UPDATE_NAMESRV_CONFIG, ext, body, None)

    async def get_namesrv_config(self, **ext: Any) -> RemotingResponse:
        return self._process(RequestCode.GET_NAMESRV_CONFIG, ext, None, None)

    # ------------------------------------------------------------------ route-change push
    async def listen_for_change(
        self, topic_versions: dict[str, int], timeout_s: float | None = None
    ) -> dict[str, dict[str, Any]]:
        """Long-poll: return {topic: {"version", "route"}} for every held topic whose route version
        differs from the caller's, as soon as one does, or {} after the timeout (30-60 s random by
        default, so clients do not all come back at once). `route` is None for a vanished topic."""
        if not isinstance(topic_versions, dict) or not all(
            isinstance(t, str) and isinstance(v, int) for t, v in topic_versions.items()
        ):
            raise TypeError("topic_versions must map topic names to integer versions")
        wait_s = random.uniform(30.0, 60.0) if timeout_s is None else float(timeout_s)
        deadline = time.monotonic() + wait_s
        while True:
            if self.gate.not_ready_reason(self.rim.broker_live_table) is None:
                changes: dict[str, dict[str, Any]] = {}
                for topic, held in topic_versions.items():
                    version = self.rim.route_version(topic)
                    if version != held:
                        route = self.rim.pickup_topic_route_data(topic)
                        changes[topic] = {"version": version, "route": route.to_wire() if route else None}
                if changes:
                    return changes
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return {}
            gate_ms = self.gate.remaining_ms()
            if gate_ms:
                remaining = min(remaining, gate_ms / 1000 + 0.001)
            try:
                await asyncio.wait_for(self._changed.wait(), timeout=remaining)
            except TimeoutError:
                pass

    # ------------------------------------------------------------------ inspection
    async def get_status(self) -> dict[str, Any]:
        now = system_clock()
        brokers = []
        for name, bd in sorted(self.rim.broker_addr_table.items()):
            for broker_id, addr in sorted(bd.broker_addrs.items()):
                live = self.rim.broker_live_table.get(addr)
                brokers.append(
                    {
                        "cluster": bd.cluster,
                        "broker_name": name,
                        "broker_id": broker_id,
                        "broker_addr": addr,
                        "last_heartbeat_age_ms": None if live is None else now - live.last_update_timestamp,
                        "data_version": None if live is None else live.data_version.to_wire(),
                        "topics": len(self.rim.topics_of_broker(name)),
                        "watched": addr in self._watches,
                    }
                )
        return {
            "name": self.name,
            "pid": os.getpid(),
            "node_id": ray.get_runtime_context().get_node_id(),
            "started_ms": self.started_ms,
            "reconstructed": self.reconstructed,
            "ready": self.gate.not_ready_reason(self.rim.broker_live_table) is None,
            "route_seq": self.rim.route_seq,
            "topics": len(self.rim.topic_queue_table),
            "snapshots_buffered": len(self._snapshots),
            "snapshots_dropped": self.snapshots_dropped,
            "brokers": brokers,
        }

    async def get_removals(self) -> list[RemovalEvent]:
        return list(self.removals)

    async def dump_tables(self) -> dict[str, object]:
        return self.rim.dump_tables()

    async def ping(self) -> str:
        return self.name
