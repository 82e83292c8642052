"""bench_analysis's workload: simulated NameServers whose route snapshots the benchmark loads into Spark.

Each `SnapshotSource` actor is a real RouteInfoManager on a manual clock with a scripted broker
fleet (`broker_topics` per broker, `fault_schedule`'s kills and restarts) and returns its snapshots
as Arrow tables (or Arrow IPC bytes) into Ray's object store.
"""

from __future__ import annotations

import random

import pyarrow as pa
import ray

from clients.analysis.bridge import table_to_arrow_ipc
from namesrv.common.clock import ManualClock
from namesrv.protocol.models import DataVersion, TopicConfig, TopicConfigSerializeWrapper
from namesrv.routeinfo.route_info_manager import RouteInfoManager
from namesrv.routeinfo.snapshot import arrow_schema, snapshot_record_batch

T0 = 1_700_000_000_000
HEARTBEAT_MS = 30_000
SCAN_MS = 10_000


def broker_topics(broker: int, shared_topics: int, auto_topics: int) -> dict[str, int]:
    """Cluster-wide topics on every broker, plus a few auto-created ones on this broker only."""
    topics = {f"Shared{j:04d}": 8 for j in range(shared_topics)}
    topics.update({f"Auto{broker:03d}x{k:02d}": 4 for k in range(auto_topics)})
    return topics


def fault_schedule(brokers: int, steps: int, period_ms: int, seed: int) -> list[tuple[int, str, str]]:
    """(t_ms, kind, broker name): a kill every 20 steps from step 5, each restarted 15 steps later
    (at a 10 s period that is after the 120 s expiry, so every NameServer removes it first)."""
    rng = random.Random(seed)
    events: list[tuple[int, str, str]] = []
    step = 5
    while step + 15 < steps:
        name = f"broker-{rng.randrange(brokers):03d}"
        kill_t = T0 + step * period_ms + rng.randrange(period_ms)
        events.append((kill_t, "kill_broker", name))
        events.append((kill_t + 15 * period_ms, "restart_broker", name))
        step += 20
    return sorted(events)


@ray.remote(num_cpus=0)
class SnapshotSource:
    """One simulated NameServer: the real RouteInfoManager, a manual clock, a scripted broker fleet.

    Index 0 sees a killed broker's channel close at once; the others only expire it (120 s), which
    is what the divergence, detection-delay and stale-route analyses measure.
    """

    def __init__(
        self,
        index: int,
        brokers: int,
        shared_topics: int,
        auto_topics: int,
        faults: list[tuple[int, str, str]],
    ) -> None:
        self.name = f"ns-{index}"
        self.index = index
        self.clock = ManualClock(T0)
        self.rim = RouteInfoManager(clock=self.clock)
        self.faults = list(faults)
        self.wrappers = {}
        for b in range(brokers):
            name = f"broker-{b:03d}"
            table = {
                t: TopicConfig(topic_name=t, read_queue_nums=q, write_queue_nums=q)
                for t, q in broker_topics(b, shared_topics, auto_topics).items()
            }
            self.wrappers[name] = TopicConfigSerializeWrapper(
                topic_config_table=table, data_version=DataVersion(T0, 1)
            )
        self.addr = {name: f"10.1.{b // 250}.{b % 250}:10911" for b, name in enumerate(sorted(self.wrappers))}
        self.running = set(self.wrappers)
        self.last_hb: dict[str, int] = {}
        self.incarnation = dict.fromkeys(self.wrappers, 0)
        self.next_scan = T0 + 5_000
        self.rows = 0

    def _register(self, name: str) -> None:
        self.rim.register_broker(
            "Cluster",
            self.addr[name],
            name,
            0,
            self.addr[name],
            self.wrappers[name],
            [],
            channel=f"{name}#{self.incarnation[name]}",
        )
        self.last_hb[name] = self.clock()

    def _advance(self, now: int) -> None:
        while self.faults and self.faults[0][0] <= now:
            t, kind, name = self.faults.pop(0)
            self.clock.now_ms = max(self.clock.now_ms, t)
            if kind == "kill_broker":
                self.running.discard(name)
                if self.index == 0:
                    self.rim.on_channel_destroy(self.addr[name], channel=f"{name}#{self.incarnation[name]}")
            elif kind == "restart_broker":
                self.running.add(name)
                self.incarnation[name] += 1
                self._register(name)
        while self.next_scan <= now:
            self.clock.now_ms = max(self.clock.now_ms, self.next_scan)
            self.rim.scan_not_active_broker()
            self.next_scan += SCAN_MS
        self.clock.now_ms = now
        for name in sorted(self.running):
            if now - self.last_hb.get(name, -HEARTBEAT_MS) >= HEARTBEAT_MS:
                self._register(name)

    def snapshots(self, first_step: int, count: int, period_ms: int) -> pa.Table:
        """`count` snapshots, one per `period_ms`, as one Arrow table (a collector's batch)."""
        batches = []
        for step in range(first_step, first_step + count):
            now = T0 + step * period_ms + self.index * 3_000
            self._advance(now)
            batches.append(snapshot_record_batch(self.rim, self.name, now))
        table = pa.Table.from_batches(batches, schema=arrow_schema())
        self.rows += table.num_rows
        return table

    def rows_emitted(self) -> int:
        return self.rows

    def encode_ipc(self, table: pa.Table) -> bytes:
        """The same rows as one Arrow IPC stream, the block format the executor JVMs read directly."""
        return table_to_arrow_ipc(table)
