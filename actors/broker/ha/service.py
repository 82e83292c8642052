"""Replication: the transport of namesrv.store.ha.transfer (RocketMQ's HAService / HAClient).

A slave long-polls its master, over one remoting connection to the master's client port
(HA_TRANSFER, actors.broker.ha.tcp; `ha_transport` "tcp", the default, when the master has a TCP
address) or else over Ray calls to the master's actor: `ha_transfer(slave_id, from_offset,
max_bytes, wait_ms)` answers the whole records after `from_offset` (at most `max_bytes`; read on the master's event loop
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
of its own (haListenPort); its master also transfers before its own flush, this one after (the
fsync is ~1 ms here).
Every `slave_sync_interval_ms` it also copies the master's topic config, consumer offsets and
delay-offset table (the schedule service's progress).
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from typing import Any

from ray.exceptions import RayError

from actors.broker.ha.master import INLINE_BYTES
from actors.broker.ha.tcp import HAConnection
from actors.namesrv.housekeeping import BrokerChannel
from actors.runtime.handles import ActorHandles
from namesrv.acl.plain_acl import signature
from namesrv.broker.client.consumer_offsets import ConsumerOffsetManager
from namesrv.broker.config import BrokerConfig
from namesrv.broker.metadata_log import METADATA_TOPIC, MetadataLog
from namesrv.broker.read_fence import ReadFence
from namesrv.broker.subscription.config import parse_group_config
from namesrv.broker.subscription.manager import SubscriptionGroupManager
from namesrv.broker.topic_config_manager import TopicConfigManager
from namesrv.common.clock import Clock
from namesrv.protocol.models import TopicConfig, parse_data_version
from namesrv.remoting.command import MQServerError
from namesrv.store.ha.transfer import ReplicationError
from namesrv.store.ha.wire import TransferRequest, parse_transfer_answer, peer_call_ext
from namesrv.store.message_store import MessageStore
from namesrv.store.types import FlushDiskType

log = logging.getLogger(__name__)

CALL_SLACK_S = 10.0
"""A replication call that has not answered `wait_ms` plus this long is given up (a master stopped)."""
RETRY_S = 0.2
"""Pause before asking again after a failed call."""
class HAClient:
    """The slave's side: copies the master's log, then its topic config and consumer offsets."""

    def __init__(self, slave_id: int, master_name: str, namespace: str, store: MessageStore,
                 topics: TopicConfigManager, offsets: ConsumerOffsetManager, fence: ReadFence,
                 metadata: MetadataLog, config: BrokerConfig, clock: Clock) -> None:
        """`fence`: the broker's read fence, told of each append (held pulls woken once readable)
        and of the master's confirm offset (how far this slave serves reads in controller mode)."""
        self.slave_id, self.master_name = slave_id, master_name
        self.store, self.topics, self.offsets, self.fence = store, topics, offsets, fence
        self.metadata = metadata
        """The topic changes the master wrote into its log: applied as they are appended."""
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
        self.groups: SubscriptionGroupManager | None = None
        """The broker's subscription groups: the master's replace them when their DataVersion moved."""
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
        self._tcp: HAConnection | None = None
        self._no_tcp = False
        """The master said it has no TCP address: Ray calls until the next failure."""
        self._connect_lock = asyncio.Lock()
        self._answered_over: str | None = None

    def reachable(self) -> bool:
        """The master answered within the last two poll waits plus a second."""
        return self.clock() - self.last_ok_ms <= 2 * self.config.ha_poll_wait_ms + 1000

    async def _call(self, method: str, *args: Any, signs: dict[str, str]) -> Any:
        """`method` of the master's actor, signed over `signs` with this broker's account (ACL)."""
        handle = await self._handles.aget(self.master_name)
        auth = signature(signs, None, self.config.credentials)
        try:
            return await asyncio.wait_for(getattr(handle, method).remote(*args, auth=auth),
                                          self.config.ha_poll_wait_ms / 1000 + CALL_SLACK_S)
        except MQServerError:  # the master answered, refusing: its handle is fine
            raise
        except (RayError, TimeoutError):
            self._handles.forget(self.master_name)
            raise

    @property
    def transport(self) -> str:
        """How the last answered transfer travelled, "tcp" or "ray" (before the first answer: "tcp"
        while a connection is open, else "ray"). Kept across a reconnection, so a status read between
        a failure and the next connection does not report the fallback."""
        if self._answered_over is not None:
            return self._answered_over
        return "tcp" if self._tcp is not None and not self._tcp.closed else "ray"

    async def _connection(self) -> HAConnection | None:
        """The connection to the master's client port (opened when missing), or None: over Ray."""
        if self.config.ha_transport != "tcp" or self._no_tcp:
            return None
        if self._tcp is not None and not self._tcp.closed:
            return self._tcp
        async with self._connect_lock:  # pipelined lanes share one connection
            if self._tcp is not None and not self._tcp.closed:
                return self._tcp
            try:
                hello = await self._call("ha_connect", self.slave_id, self.channel,
                                         signs=peer_call_ext("ha_connect", self.slave_id))
            except AttributeError:  # a master of an older version, without ha_connect: Ray calls
                hello = None
            addr = hello.get("tcp_addr") if isinstance(hello, dict) else None
            if not isinstance(addr, str) or not addr:
                self._no_tcp = True
                return None
            conn = HAConnection(addr, self.config.credentials)
            await conn.open()
            self._tcp = conn
            log.info("slave %d replicating from %s over TCP %s", self.slave_id, self.master_name, addr)
            return conn

    async def _transfer(self, from_offset: int, ack_offset: int | None = None, stream: int = 0) -> dict[str, Any]:
        """One transfer request over TCP or Ray; the reply in the Ray transport's shape."""
        cfg = self.config
        conn = await self._connection()
        if conn is not None:
            request = TransferRequest(self.slave_id, from_offset, cfg.ha_transfer_batch_bytes, cfg.ha_poll_wait_ms,
                                      ack_offset, stream)
            answer = await conn.transfer(request, cfg.ha_poll_wait_ms / 1000 + CALL_SLACK_S)
            self._answered_over = "tcp"
            return answer
        pipelined = () if ack_offset is None else (ack_offset, stream)
        signs = TransferRequest(self.slave_id, from_offset, cfg.ha_transfer_batch_bytes, cfg.ha_poll_wait_ms,
                                ack_offset, stream).ext_fields()
        try:
            reply: dict[str, Any] = await self._call("ha_transfer", self.slave_id, from_offset,
                                                     cfg.ha_transfer_batch_bytes, cfg.ha_poll_wait_ms, self.channel,
                                                     *pipelined, signs=signs)
        except MQServerError as e:  # refused: read as the same refusal over TCP is
            reply = parse_transfer_answer(e.code, e.remark, None, None)
        self._answered_over = "ray"
        return reply

    def close(self) -> None:
        """Close the TCP connection (a failure, a role change, the broker's shutdown)."""
        if self._tcp is not None:
            self._tcp.close()
            self._tcp = None
        self._no_tcp = False

    async def run(self) -> None:
        """Replicate until cancelled (the broker's shutdown) or `stopped`."""
        try:
            while not self.stopped:
                if self.config.ha_pipeline_depth > 1:
                    await self._run_pipelined()
                    continue
                try:
                    await self.replicate_once()
                except (RayError, TimeoutError, ValueError, ReplicationError, OSError) as e:
                    self._failed(e)
                    self.close()  # the retry opens a new connection (and asks the master's address again)
                    await asyncio.sleep(RETRY_S)
        finally:
            self.close()

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
            self.close()
            await asyncio.sleep(RETRY_S)

    async def _lane(self) -> None:
        """One request after another; each acknowledges what this log holds when it is sent."""
        while not self.stopped:
            if self.first_request_ms is None:
                self.first_request_ms = self.clock()
            started = time.perf_counter()
            reply = await self._transfer(self._next, self.store.size_bytes(), self._stream)
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
        if any(topic == METADATA_TOPIC for topic, _ in touched):
            self.metadata.apply_new()  # a topic is known here before a pull for it can arrive
        end = offset + len(data)
        for topic, queue_id in touched:
            self.fence.written(end, topic, queue_id)

    def _answered(self, reply: dict[str, Any], received: int) -> None:
        self.master_max = int(reply["master_max"])
        if reply.get("confirm_offset") is not None:
            self.fence.guard.master_confirmed(int(reply["confirm_offset"]))
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
        if self.first_request_ms is None:
            self.first_request_ms = self.clock()
        started = time.perf_counter()
        reply = await self._transfer(self.store.size_bytes())
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
            meta = await self._call("ha_metadata", self.slave_id, signs=peer_call_ext("ha_metadata", self.slave_id))
        except (RayError, TimeoutError, ValueError) as e:
            self._failed(e)
            return
        table = {n: TopicConfig.model_validate(tc) for n, tc in meta["topicConfigTable"].items()}
        self.topics.sync_from_master(table, parse_data_version(meta["dataVersion"]))
        self.offsets.merge_from_master({k: {int(q): int(o) for q, o in v.items()}
                                        for k, v in meta["offsetTable"].items()})
        if isinstance(meta.get("delayOffset"), bytes):
            self.delay_offsets = meta["delayOffset"]
        groups = meta.get("subscriptionGroup")
        if self.groups is not None and isinstance(groups, dict):
            configs = {g: parse_group_config(c) for g, c in groups["subscriptionGroupTable"].items()}
            self.groups.sync_from_master(configs, parse_data_version(groups["dataVersion"]))

    def info(self) -> dict[str, Any]:
        held = self.store.size_bytes()
        return {"role": "SLAVE", "master": self.master_name, "transport": self.transport, "offset": held,
                "master_max": self.master_max,
                "lag_bytes": max(0, self.master_max - held), "reachable": self.reachable(),
                "transfers": self.transfers, "bytes_received": self.bytes_received, "last_error": self.last_error,
                "first_request_ms": self.first_request_ms, "caught_up_ms": self.caught_up_ms,
                "data_transfers": self.data_transfers,
                "mean_ms": {k: v / max(1, self.data_transfers) for k, v in self.timing_ms.items()}}
