"""Route snapshots of one NameServer: images of its tables buffered for collectors (clients.analysis).

A snapshot is taken only while some collector holds a lease on the buffer: periodically, after a
change (coalesced: a burst of changes makes one snapshot), and on a collector's drain. It is taken in
slices (`snapshot_steps`: each broker group read within one loop turn), so a NameServer with 100s of
brokers x 10,000s of topics keeps answering meanwhile. Arrow (and the pandas it imports on its first
batch) is loaded only when the first lease is granted, off the event loop: a NameServer nobody
collects from never pays for it.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from namesrv.common.clock import Clock
from namesrv.common.control_loop import ControlLoop
from namesrv.common.slices import drive_steps
from namesrv.routeinfo.config import NamesrvConfig
from namesrv.routeinfo.route_info_manager import RouteInfoManager
from namesrv.routeinfo.snapshot import (
    DEFAULT_READER,
    RESTART_READER,
    SnapshotBuffer,
    empty_record_batch,
    snapshot_steps,
)

if TYPE_CHECKING:
    import pyarrow as pa


class RouteSnapshots:
    def __init__(self, name: str, config: NamesrvConfig, rim: RouteInfoManager, clock: Clock,
                 loop: ControlLoop) -> None:
        self.name = name
        self.config = config
        self.rim = rim
        self.clock = clock
        self.loop = loop
        self.buffer = SnapshotBuffer(config.snapshot_max_buffered_rows,
                                     max(config.snapshot_reader_lease_ms, 3 * config.snapshot_interval_ms))
        self._pending = False
        self._lock = asyncio.Lock()
        self._again = False
        self._warm = False

    def warm_up(self) -> None:
        """Build one empty Arrow batch and drop it: pyarrow imports pandas on its first RecordBatch,
        which takes 0.3-3 s on a busy machine. Paid on the event loop at the first snapshot, it
        stalls every request, heartbeats time out and live brokers expire. Touches no table, so it
        may run on a thread of its own (`_warm_before_lease`)."""
        empty_record_batch()
        self._warm = True

    async def _warm_before_lease(self) -> None:
        """Before the first lease (no snapshot is taken without one): the warm-up on a thread, so
        the loop keeps serving while Arrow loads."""
        if not self._warm:
            await asyncio.to_thread(self.warm_up)

    def on_change(self, now: int) -> None:
        """The tables changed: schedule one snapshot (coalesced), while a collector holds a lease."""
        if (self.config.snapshot_interval_ms > 0 and self.config.snapshot_on_change and not self._pending
                and self.buffer.active(now)):
            self._pending = True  # coalesce a burst of changes into one snapshot
            self.loop.spawn("route-snapshot", self.take())

    async def take(self, wait: bool = False) -> None:
        """One image of the tables, buffered for collection, taken only while a collector holds a
        lease. A request while one is being taken coalesces into one more after it; `wait` returns
        only once a snapshot begun after the call is buffered."""
        self._pending = False
        if not self.buffer.active(self.clock()):
            return
        if self._lock.locked():
            self._again = True
            if wait:
                async with self._lock:  # FIFO: the holder finishes its extra round first
                    pass
            return
        async with self._lock:
            while True:
                self._again = False
                self.buffer.append(*await drive_steps(snapshot_steps(self.rim, self.name)))
                if not self._again:
                    break

    def resume_after_restart(self) -> None:
        """A NameServer restarted by Ray lost its buffer and its readers' leases with its process;
        its collectors are likely still there (a chaos run collecting while it kills NameServers), so
        it snapshots for one lease, as if they had drained, until they drain again. Called before
        the NameServer serves, so Arrow is loaded here, before the lease."""
        self.warm_up()
        self.buffer.lease(RESTART_READER, self.clock())

    async def drain(self, take_now: bool, reader: str = DEFAULT_READER,
                    lease_ms: int | None = None) -> list[pa.RecordBatch]:
        """Renew `reader`'s lease (for `lease_ms`, at least the configured lease), add a snapshot of
        this instant when `take_now`, and hand over what `reader` has not taken yet."""
        await self._warm_before_lease()
        now = self.clock()
        self.buffer.lease(reader, now, lease_ms)
        if take_now and self.config.snapshot_interval_ms > 0:
            await self.take(wait=True)
        return self.buffer.drain(reader)

    def release(self, reader: str) -> None:
        """`reader` is done collecting: it no longer holds snapshots back from being forgotten."""
        self.buffer.release(reader)
