"""The master's side of replication (RocketMQ's HAService / HAConnection): the long poll its slaves'
transfers wait in, over either transport (actors.broker.ha.service: Ray calls; actors.broker.ha.tcp:
HA_TRANSFER on the client port), and the metadata its slaves copy. See actors.broker.ha.service for the
whole protocol.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from actors.broker.ha.tcp import HATransferProcessor
from actors.namesrv.housekeeping import BrokerChannel
from namesrv.broker.client.consumer_offsets import ConsumerOffsetManager
from namesrv.broker.config import BrokerConfig
from namesrv.broker.role import RoleGuard
from namesrv.broker.subscription.manager import SubscriptionGroupManager
from namesrv.broker.topic_config_manager import TopicConfigManager
from namesrv.store.ha.lag import ReplicationLag
from namesrv.store.ha.transfer import ReplicationError
from namesrv.store.message_store import MessageStore

INLINE_BYTES = 256 * 1024
"""A batch this small is read (master) or appended (slave) on the event loop itself: a pread or a
pwrite of page cache costs less than a hand-off to a thread, which on a loaded machine waits for a
core; bigger batches (a catch-up) go to a thread so the loop never stalls on them."""


class HAMasterService:
    """The master's side: answers its slaves' transfers and metadata requests."""

    def __init__(self, store: MessageStore, role: RoleGuard, topics: TopicConfigManager,
                 offsets: ConsumerOffsetManager, config: BrokerConfig) -> None:
        self.store, self.role, self.topics, self.offsets, self.config = store, role, topics, offsets, config
        self._new_data = asyncio.Event()
        store.listeners.append(self._wake)
        self._cursors: dict[int, tuple[int, int]] = {}
        """slave id -> (its stream, where the next pipelined answer starts)."""
        self.bytes_sent = 0
        self.lag = ReplicationLag()
        """How long each written batch waited for each slave's acknowledgement (status: replication_lag_ms)."""
        self.on_slave_channel: Callable[[int, BrokerChannel], None] = lambda slave_id, channel: None
        """Told each slave's actor channel: its death takes it out of the SyncStateSet at once,
        instead of after haMaxTimeSlaveNotCatchup (RocketMQ sees its HA connection close)."""
        self.delay_offsets: Callable[[], bytes] = lambda: b""
        """The schedule service's progress (delayOffset.json's content), copied by the slaves."""
        self.groups: SubscriptionGroupManager | None = None
        """The subscription groups, copied by the slaves with the topic table."""
        self.tcp_addr: str | None = None
        """This broker's client address (host:port) when it listens on TCP: slaves replicate over it."""
        self.processor = HATransferProcessor(self.transfer)
        """HA_TRANSFER on the broker's remoting port (its `handlers` go on the request pipeline)."""

    def _wake(self) -> None:
        self.lag.written(self.store.size_bytes())
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
        holds = from_offset if ack_offset is None else ack_offset
        self.role.on_slave_request(slave_id, holds, end)
        self.lag.acked(slave_id, holds)
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
                "moved": t.offset != start, "confirm_offset": min(t.master_max, self.confirm_offset())}

    def confirm_offset(self) -> int:
        """What every member of the SyncStateSet holds (the whole log where reads are not gated):
        each answer tells the slave, which serves reads no further in controller mode."""
        return self.role.confirm_offset(self.store.size_bytes())

    def connect(self, slave_id: int, channel: BrokerChannel | None = None) -> dict[str, Any]:
        """A slave about to replicate over TCP: where (None: this broker has no TCP address); its
        actor `channel` is watched as with every Ray transfer."""
        if not isinstance(slave_id, int) or isinstance(slave_id, bool):
            return {"error": "ReplicationError", "remark": "slave id must be an integer"}
        if isinstance(channel, BrokerChannel):
            self.on_slave_channel(slave_id, channel)
        return {"tcp_addr": self.tcp_addr}

    def metadata(self) -> dict[str, Any]:
        """What SlaveSynchronize copies: the topic table with its DataVersion, consumer offsets, the
        delay offsets and the subscription groups with their DataVersion."""
        return {"topicConfigTable": {n: tc.to_wire() for n, tc in self.topics.topic_config_table.items()},
                "dataVersion": self.topics.data_version.to_wire(),
                "offsetTable": {k: dict(v) for k, v in self.offsets.table.items()},
                "delayOffset": self.delay_offsets(),
                **({"subscriptionGroup": self.groups.wire_table()} if self.groups is not None else {})}

    def info(self) -> dict[str, Any]:
        end = self.store.size_bytes()
        acks = self.role.sync.slave_acks()
        return {"role": str(self.role.role), "master_max": end, "sync_state_set": sorted(self.role.sync.members),
                "sync_state_set_epoch": self.role.sync.epoch, "slave_acks": acks,
                "slave_lag_bytes": {s: end - a for s, a in acks.items()}, "bytes_sent": self.bytes_sent,
                "flush_slave_timeouts": self.role.timeouts}
