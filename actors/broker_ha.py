"""Replication over Ray calls: the transport of namesrv.broker.ha (RocketMQ's HAService / HAClient).

A slave long-polls its master's actor: `ha_transfer(slave_id, from_offset, max_bytes, wait_ms)`
answers the whole records after `from_offset` (at most `max_bytes`; read on the master's event loop
when at most INLINE_BYTES are pending, else in a thread) and the master's log end, waiting up to
`wait_ms` for new records when there are none (woken by every group-commit batch). The request
itself is the slave's acknowledgement: it holds everything before `from_offset` (or `ack_offset`,
below), so the master's SyncStateSet and its waiting SYNC_MASTER sends learn of it on every call.
The slave appends each batch verbatim at that offset, acknowledges once written and fsyncs after
(as RocketMQ 5's AutoSwitchHAClient reports getMaxPhyOffset right after appendToCommitLog), wakes
pulls held on the queues that grew, and asks again at once.

Pipelined (`ha_pipeline_depth` > 1; default 1, see its docstring for why): the slave keeps that many requests in flight,
so while one answer travels to it another request already waits at the master and gets the next
records at once. Each request names a stream and what the slave holds (`ack_offset`); the master
keeps per slave a cursor of what it sent on that stream, so requests in flight together get
consecutive batches; the slave appends them in offset order. Any failure (a lost answer, a gap that
never fills) starts a new stream from the slave's own end: nothing is skipped, a batch sent twice is
skipped by the byte-identical overlap check. RocketMQ's master streams to its slave over one socket
instead; its master also transfers before its own flush, this one after (the fsync is ~1 ms here).
Every `slave_sync_interval_ms` it also copies the master's topic config, consumer offsets and
delay-offset table (the schedule service's progress).
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable
from typing import Any

from ray.exceptions import RayError

from actors.handles import ActorHandles
from actors.housekeeping import BrokerChannel
from namesrv.broker.commit_log import CommitLog, FlushDiskType
from namesrv.broker.config import BrokerConfig
from namesrv.broker.consumer_offsets import ConsumerOffsetManager
from namesrv.broker.ha import ReplicationError
from namesrv.broker.pull_hold import PullHoldService
from namesrv.broker.role import RoleGuard
from namesrv.broker.topic_config_manager import TopicConfigManager
from namesrv.clock import Clock
from namesrv.protocol.models import TopicConfig, parse_data_version

log = logging.getLogger(__name__)

CALL_SLACK_S = 10.0
"""A replication call that has not answered `wait_ms` plus this long is given up (a master stopped)."""
RETRY_S = 0.2
"""Pause before asking again after a failed call."""
INLINE_BYTES = 256 * 1024
"""A batch this small is read (master) or appended (slave) on the event loop itself: a pread or a
pwrite of page cache costs less than a hand-off to a thread, which on a loaded machine waits for a
core; bigger batches (a catch-up) go to a thread so the loop never stalls on them."""


class HAMasterService:
    """The master's side: answers its slaves' transfers and metadata requests."""

    def __init__(self, store: CommitLog, role: RoleGuard, topics: TopicConfigManager,
                 offsets: ConsumerOffsetManager, config: BrokerConfig) -> None:
        self.store, self.role, self.topics, self.offsets, self.config = store, role, topics, offsets, config
        self._new_data = asyncio.Event()
        store.listeners.append(self._wake)
        self._cursors: dict[int, tuple[int, int]] = {}
        """slave id -> (its stream, where the next pipelined answer starts)."""
        self.bytes_sent = 0
        self.on_slave_channel: Callable[[int, BrokerChannel], None] = lambda slave_id, channel: None
        self.delay_offsets: Callable[[], bytes] = lambda: b""
        """The schedule service's progress (delayOffset.json's content), copied by the slaves."""
        """Told each slave's actor channel: its death takes it out of the SyncStateSet at once,
        instead of after haMaxTimeSlaveNotCatchup (RocketMQ sees its HA connection close)."""

    def _wake(self) -> None:
        self._new_data.set()
        self._new_data = asyncio.Event()

    async def transfer(self, slave_id: int, from_offset: int, max_bytes: int, wait_ms: int,
                       channel: BrokerChannel | None = None, ack_offset: int | None = None,
                       stream: int = 0) -> dict[str, Any]:
        """The records after `from_offset`. Without `ack_offset`, the request acknowledges
        `from_offset` itself. With it (a pipelined slave: `ack_offset` is what it holds), the answer
        starts at `from_offset` or after what an earlier request of the same `stream` was sent,
        whichever is later, so requests in flight together get consecutive batches; a new stream
        (the slave's restart after an error) starts again from `from_offset`."""
        ints = (slave_id, from_offset, max_bytes, wait_ms, stream) + (() if ack_offset is None else (ack_offset,))
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in ints):
            return {"error": "ReplicationError", "remark": "slave id, offsets, size, wait and stream must be integers"}
        if isinstance(channel, BrokerChannel):
            self.on_slave_channel(slave_id, channel)
        end = self.store.size_bytes()
        self.role.on_slave_request(slave_id, from_offset if ack_offset is None else ack_offset, end)
        if ack_offset is not None:
            at = self._cursors.get(slave_id)
            if at is None or at[0] != stream:
                self._cursors[slave_id] = at = (stream, from_offset)
        waited, started = 0.0, time.perf_counter()
        deadline = started + min(wait_ms, 30_000) / 1000
        while True:
            start = from_offset if ack_offset is None else max(from_offset, self._cursors[slave_id][1])
            remaining = deadline - time.perf_counter()
            if start < self.store.size_bytes() or remaining <= 0:
                break
            try:  # another request of this slave may take what woke this one: then wait on
                await asyncio.wait_for(self._new_data.wait(), remaining)
            except TimeoutError:
                pass
            waited = time.perf_counter() - started
        size = max(1, min(max_bytes, self.config.ha_transfer_batch_bytes))
        try:
            if self.store.size_bytes() - start <= INLINE_BYTES:
                t = self.store.read_raw(start, size)
            else:  # a request racing this read may be sent the same bytes: the slave skips what it holds
                t = await asyncio.to_thread(self.store.read_raw, start, size)
        except (ReplicationError, OSError) as e:
            return {"error": type(e).__name__, "remark": str(e), "master_max": self.store.size_bytes()}
        if ack_offset is not None and self._cursors.get(slave_id, (None, 0))[0] == stream:
            self._cursors[slave_id] = (stream, max(self._cursors[slave_id][1], t.offset + len(t.data)))
        self.bytes_sent += len(t.data)
        return {"offset": t.offset, "data": t.data, "master_max": t.master_max, "waited_ms": waited * 1000,
                "moved": t.offset != start}

    def metadata(self) -> dict[str, Any]:
        """What SlaveSynchronize copies: the topic table with its DataVersion, and consumer offsets."""
        return {"topicConfigTable": {n: tc.to_wire() for n, tc in self.topics.topic_config_table.items()},
                "dataVersion": self.topics.data_version.to_wire(),
                "offsetTable": {k: dict(v) for k, v in self.offsets.table.items()},
                "delayOffset": self.delay_offsets()}

    def info(self) -> dict[str, Any]:
        end = self.store.size_bytes()
        acks = self.role.sync.slave_acks()
        return {"role": str(self.role.role), "master_max": end, "sync_state_set": sorted(self.role.sync.members),
                "sync_state_set_epoch": self.role.sync.epoch, "slave_acks": acks,
                "slave_lag_bytes": {s: end - a for s, a in acks.items()}, "bytes_sent": self.bytes_sent,
                "flush_slave_timeouts": self.role.timeouts}


class HAClient:
    """The slave's side: copies the master's log, then its topic config and consumer offsets."""

    def __init__(self, slave_id: int, master_name: str, namespace: str, store: CommitLog,
                 topics: TopicConfigManager, offsets: ConsumerOffsetManager, hold: PullHoldService,
                 config: BrokerConfig, clock: Clock) -> None:
        self.slave_id, self.master_name = slave_id, master_name
        self.store, self.topics, self.offsets, self.hold = store, topics, offsets, hold
        self.config, self.clock = config, clock
        self._handles = ActorHandles(namespace)
        self.last_ok_ms = 0
        self.master_max = 0
        self.bytes_received = 0
        self.transfers = 0
        self.last_error: str | None = None
        self.first_request_ms: int | None = None
        self.timing_ms = {"call": 0.0, "master_wait": 0.0, "append": 0.0}
        """Summed over the transfers that carried data: the call's round trip less the master's wait
        for new records (Ray both ways and the master's read), that wait, and the local append."""
        self.data_transfers = 0
        self.caught_up_ms: int | None = None
        """When this slave first held its master's whole log (a catch-up's end)."""
        self._flusher: asyncio.Task[None] | None = None
        self._flush_wanted = False
        self.channel: BrokerChannel | None = None
        """This slave's actor channel, handed to the master with every request."""
        self.delay_offsets: bytes = b""
        """The master's delay-offset table as last copied (the broker hands it to its schedule service)."""
        self.stopped = False
        """Set when this broker stops following the master (a role change): `run` ends."""
        self._stream = random.getrandbits(48)
        """Pipelined: this client's stream at the master, new after each failure (random at the start:
        a restarted slave must not continue its previous process's stream)."""
        self._next = 0
        """Pipelined: the end of everything received (appended, or waiting in `_pending`)."""
        self._pending: dict[int, bytes] = {}
        """Pipelined: batches received ahead of a gap (an earlier answer still on its way), by offset."""
        self._append_lock = asyncio.Lock()

    def reachable(self) -> bool:
        """The master answered within the last two poll waits plus a second."""
        return self.clock() - self.last_ok_ms <= 2 * self.config.ha_poll_wait_ms + 1000

    async def _call(self, method: str, *args: Any) -> Any:
        handle = await self._handles.aget(self.master_name)
        try:
            return await asyncio.wait_for(getattr(handle, method).remote(*args),
                                          self.config.ha_poll_wait_ms / 1000 + CALL_SLACK_S)
        except (RayError, TimeoutError):
            self._handles.forget(self.master_name)
            raise

    async def run(self) -> None:
        """Replicate until cancelled (the broker's shutdown) or `stopped`."""
        while not self.stopped:
            if self.config.ha_pipeline_depth > 1:
                await self._run_pipelined()
                continue
            try:
                await self.replicate_once()
            except (RayError, TimeoutError, ValueError, ReplicationError, OSError) as e:
                self._failed(e)
                await asyncio.sleep(RETRY_S)

    async def _run_pipelined(self) -> None:
        """`ha_pipeline_depth` requests in flight (one stream) until one fails: then a new stream
        starts from this log's end, so nothing a lost answer carried is skipped."""
        self._stream += 1
        self._next = self.store.size_bytes()
        self._pending.clear()
        try:
            async with asyncio.TaskGroup() as lanes:
                for _ in range(self.config.ha_pipeline_depth):
                    lanes.create_task(self._lane())
        except* (RayError, TimeoutError, ValueError, ReplicationError, OSError) as group:
            self._failed(group.exceptions[0])
            await asyncio.sleep(RETRY_S)

    async def _lane(self) -> None:
        """One request after another; each acknowledges what this log holds when it is sent."""
        cfg = self.config
        while not self.stopped:
            if self.first_request_ms is None:
                self.first_request_ms = self.clock()
            started = time.perf_counter()
            reply = await self._call("ha_transfer", self.slave_id, self._next, cfg.ha_transfer_batch_bytes,
                                     cfg.ha_poll_wait_ms, self.channel, self.store.size_bytes(), self._stream)
            if "error" in reply:
                raise ReplicationError(f"master {self.master_name}: {reply['error']}: {reply['remark']}")
            data: bytes = reply["data"]
            if data:
                answered = time.perf_counter()
                offset = int(reply["offset"])
                self._next = max(self._next, offset + len(data))
                self._pending[offset] = data
                async with self._append_lock:
                    await self._append_ready(offset if reply.get("moved") else None)
                waited = float(reply.get("waited_ms", 0.0))
                self.data_transfers += 1
                self.timing_ms["call"] += (answered - started) * 1000 - waited
                self.timing_ms["master_wait"] += waited
                self.timing_ms["append"] += (time.perf_counter() - answered) * 1000
            elif self._pending and min(self._pending) > self.store.size_bytes():
                raise ReplicationError(f"a batch before offset {min(self._pending)} never came: starting again")
            self._answered(reply, len(data))

    async def _append_ready(self, moved: int | None) -> None:
        """Append the received batches that start at or before this log's end, in offset order.
        `moved`: the master answered from later than asked (retention deleted the start): that
        batch is handed to the store as is (it accepts it on an empty log, else refuses a gap)."""
        while self._pending:
            offset = min(self._pending)
            if offset > self.store.size_bytes() and offset != moved:
                return  # an earlier answer is still on its way
            await self._append(offset, self._pending.pop(offset))

    async def _append(self, offset: int, data: bytes) -> None:
        cfg = self.config
        early_ack = cfg.slave_ack_on_write and cfg.flush_disk_type is FlushDiskType.SYNC_FLUSH
        if len(data) <= INLINE_BYTES and early_ack:  # a pwrite of page cache: no thread hand-off
            touched = self.store.append_raw(offset, data, False)
        else:
            touched = await asyncio.to_thread(self.store.append_raw, offset, data, not early_ack)
        if early_ack:
            self._flush_soon()
        for topic, queue_id in touched:
            self.hold.notify(topic, queue_id)

    def _answered(self, reply: dict[str, Any], received: int) -> None:
        self.master_max = int(reply["master_max"])
        self.last_ok_ms = self.clock()
        if self.caught_up_ms is None and self.store.size_bytes() >= self.master_max:
            self.caught_up_ms = self.last_ok_ms
        self.transfers += 1
        self.bytes_received += received
        if self.last_error is not None:
            log.info("replicating from %s again at %d", self.master_name, self.store.size_bytes())
            self.last_error = None

    async def replicate_once(self) -> int:
        """One transfer: ask from this log's end, append what comes; returns the bytes appended."""
        cfg = self.config
        if self.first_request_ms is None:
            self.first_request_ms = self.clock()
        started = time.perf_counter()
        reply = await self._call("ha_transfer", self.slave_id, self.store.size_bytes(), cfg.ha_transfer_batch_bytes,
                                 cfg.ha_poll_wait_ms, self.channel)
        if "error" in reply:
            raise ReplicationError(f"master {self.master_name}: {reply['error']}: {reply['remark']}")
        data: bytes = reply["data"]
        if data:
            answered = time.perf_counter()
            await self._append(reply["offset"], data)
            waited = float(reply.get("waited_ms", 0.0))
            self.data_transfers += 1
            self.timing_ms["call"] += (answered - started) * 1000 - waited
            self.timing_ms["master_wait"] += waited
            self.timing_ms["append"] += (time.perf_counter() - answered) * 1000
        self._answered(reply, len(data))
        return len(data)

    def _flush_soon(self) -> None:
        """fsync what was written, in the background: one flush at a time, another after it if more
        was written meanwhile (so a stream of batches costs one fsync per flush, not per batch)."""
        self._flush_wanted = True
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.get_running_loop().create_task(self._flush_loop())

    async def _flush_loop(self) -> None:
        while self._flush_wanted:
            self._flush_wanted = False
            try:
                await asyncio.to_thread(self.store.flush)
            except OSError as e:
                self._failed(e)

    def _failed(self, e: BaseException) -> None:
        text = f"{type(e).__name__}: {e}"
        if text != self.last_error:
            log.warning("replication from %s failed: %s", self.master_name, text)
        self.last_error = text

    async def sync_metadata(self) -> None:
        """SlaveSynchronize: the master's topic table (when its version moved) and consumer offsets."""
        try:
            meta = await self._call("ha_metadata")
        except (RayError, TimeoutError, ValueError) as e:
            self._failed(e)
            return
        table = {n: TopicConfig.model_validate(tc) for n, tc in meta["topicConfigTable"].items()}
        self.topics.sync_from_master(table, parse_data_version(meta["dataVersion"]))
        self.offsets.merge_from_master({k: {int(q): int(o) for q, o in v.items()}
                                        for k, v in meta["offsetTable"].items()})
        if isinstance(meta.get("delayOffset"), bytes):
            self.delay_offsets = meta["delayOffset"]

    def info(self) -> dict[str, Any]:
        held = self.store.size_bytes()
        return {"role": "SLAVE", "master": self.master_name, "offset": held, "master_max": self.master_max,
                "lag_bytes": max(0, self.master_max - held), "reachable": self.reachable(),
                "transfers": self.transfers, "bytes_received": self.bytes_received, "last_error": self.last_error,
                "first_request_ms": self.first_request_ms, "caught_up_ms": self.caught_up_ms,
                "data_transfers": self.data_transfers,
                "mean_ms": {k: v / max(1, self.data_transfers) for k, v in self.timing_ms.items()}}
