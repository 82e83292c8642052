"""Flat route snapshots: one row per (broker address, topic) as a NameServer sees it at one instant.

The rows are what the Spark analysis reads (divergence between NameServers, liveness, skew), so the
schema is the contract between the NameServer and `clients.analysis`. A broker address hosting no
topic still gets one row with null topic columns, so liveness is visible without topics.
"""

from __future__ import annotations

import collections
from typing import TYPE_CHECKING, Any

from namesrv.common.slices import Steps
from namesrv.protocol.models import BrokerData
from namesrv.routeinfo.route_info_manager import RouteInfoManager

if TYPE_CHECKING:
    import pyarrow as pa

SNAPSHOT_COLUMNS: tuple[tuple[str, str], ...] = (
    ("snapshot_ms", "int64"),
    ("namesrv", "string"),
    ("route_seq", "int64"),
    ("cluster", "string"),
    ("broker_name", "string"),
    ("broker_id", "int64"),
    ("broker_addr", "string"),
    ("last_heartbeat_ms", "int64"),
    ("dv_timestamp", "int64"),
    ("dv_counter", "int64"),
    ("topic", "string"),
    ("read_queue_nums", "int32"),
    ("write_queue_nums", "int32"),
    ("perm", "int32"),
    ("alive", "bool"),
)


def snapshot_columns(rim: RouteInfoManager, namesrv: str, now_ms: int | None = None) -> dict[str, list[Any]]:
    """The snapshot as columns (plain lists), taken in one pass without yielding."""
    now = rim.clock() if now_ms is None else now_ms
    cols: dict[str, list[Any]] = {name: [] for name, _ in SNAPSHOT_COLUMNS}
    for broker_name, bd in list(rim.broker_addr_table.items()):
        for name, values in group_columns(rim, namesrv, now, broker_name, bd).items():
            cols[name].extend(values)
    return cols


def group_columns(rim: RouteInfoManager, namesrv: str, now: int, broker_name: str, bd: BrokerData
                  ) -> dict[str, list[Any]]:
    """The rows of one broker group (each of its addresses x each of its topics), read in one go:
    a consistent image of that group at `rim.route_seq`."""
    cols: dict[str, list[Any]] = {name: [] for name, _ in SNAPSHOT_COLUMNS}
    topics = sorted(rim.topics_of_broker(broker_name))
    queue_table = rim.topic_queue_table
    rows: list[tuple[str | None, int | None, int | None, int | None]] = []
    for name in topics:
        qd = queue_table[name][broker_name]
        rows.append((name, qd.read_queue_nums, qd.write_queue_nums, qd.perm))
    if not rows:
        rows.append((None, None, None, None))
    topic_col, read_col, write_col, perm_col = (list(c) for c in zip(*rows, strict=True))
    n = len(rows)
    for broker_id, addr in sorted(bd.broker_addrs.items()):
        live = rim.broker_live_table.get(addr)
        hb: int | None
        dv_ts: int | None
        dv_c: int | None
        if live is not None:
            hb = live.last_update_timestamp
            dv_ts, dv_c = live.data_version.timestamp, live.data_version.counter
            alive = hb + live.heartbeat_timeout_millis >= now
        else:
            hb = dv_ts = dv_c = None
            alive = False
        cols["snapshot_ms"].extend([now] * n)
        cols["namesrv"].extend([namesrv] * n)
        cols["route_seq"].extend([rim.route_seq] * n)
        cols["cluster"].extend([bd.cluster] * n)
        cols["broker_name"].extend([broker_name] * n)
        cols["broker_id"].extend([broker_id] * n)
        cols["broker_addr"].extend([addr] * n)
        cols["last_heartbeat_ms"].extend([hb] * n)
        cols["dv_timestamp"].extend([dv_ts] * n)
        cols["dv_counter"].extend([dv_c] * n)
        cols["alive"].extend([alive] * n)
        cols["topic"].extend(topic_col)
        cols["read_queue_nums"].extend(read_col)
        cols["write_queue_nums"].extend(write_col)
        cols["perm"].extend(perm_col)
    return cols


SNAPSHOT_SLICE_ROWS = 4096
"""Rows turned into Arrow between two yields of `snapshot_steps`."""


def snapshot_steps(rim: RouteInfoManager, namesrv: str, now_ms: int | None = None
                   ) -> Steps[list[pa.RecordBatch]]:
    """The snapshot in slices, yielding between broker groups and between Arrow conversions, so a
    NameServer with 100s of brokers x 10,000s of topics keeps answering while it is taken. Each
    group's rows are one consistent image (their `route_seq` says when it was read); groups are read
    in successive loop turns, all stamped with the snapshot's `snapshot_ms`. Returns the batches
    (one empty batch when there is no broker, so the instant is still recorded)."""
    import pyarrow as pa

    now = rim.clock() if now_ms is None else now_ms
    schema = arrow_schema()
    batches: list[pa.RecordBatch] = []
    for broker_name in list(rim.broker_addr_table):
        bd = rim.broker_addr_table.get(broker_name)
        if bd is None:  # removed since the snapshot began
            continue
        cols = group_columns(rim, namesrv, now, broker_name, bd)
        yield
        rows = len(cols["snapshot_ms"])
        for start in range(0, rows, SNAPSHOT_SLICE_ROWS):
            part = cols if rows <= SNAPSHOT_SLICE_ROWS else {
                k: v[start : start + SNAPSHOT_SLICE_ROWS] for k, v in cols.items()}
            batches.append(pa.RecordBatch.from_pydict(part, schema=schema))
            yield
    return batches or [empty_record_batch()]


def arrow_schema() -> pa.Schema:
    import pyarrow as pa

    return pa.schema([(name, pa.type_for_alias(t)) for name, t in SNAPSHOT_COLUMNS])


def empty_record_batch() -> pa.RecordBatch:
    """A snapshot of no broker: the instant is still recorded."""
    import pyarrow as pa

    return pa.RecordBatch.from_pydict({name: [] for name, _ in SNAPSHOT_COLUMNS}, schema=arrow_schema())


def snapshot_record_batch(rim: RouteInfoManager, namesrv: str, now_ms: int | None = None) -> pa.RecordBatch:
    import pyarrow as pa

    return pa.RecordBatch.from_pydict(snapshot_columns(rim, namesrv, now_ms), schema=arrow_schema())


DEFAULT_READER = "default"
"""The reader `namesrv snapshot` drains as; other collectors (a chaos run) name their own."""
RESTART_READER = "(readers before the restart)"
"""The lease a NameServer restarted by Ray grants itself: a lease only, it holds no snapshot back."""


class SnapshotBuffer:
    """Snapshots waiting to be collected, bounded by rows: beyond the bound the oldest are dropped
    (and counted), so an uncollected NameServer never grows without limit.

    Several collectors may drain it, each under its own reader name: a reader gets every snapshot
    buffered since its previous drain (its first drain: everything still held), and a snapshot is
    forgotten once every reader that has drained has taken it. With one reader this is a plain
    drain. `release` forgets a reader that is done, so it holds nothing back.

    A reader holds a lease (`lease`, which the NameServer's drain_snapshots renews before every
    drain; at least `lease_ms`); `active` says whether any reader still holds one. The NameServer
    snapshots only while one does: a snapshot nobody collects is never taken, and a collector that
    went away without releasing stops costing anything once its lease runs out.
    """

    def __init__(self, max_rows: int, lease_ms: int = 60_000) -> None:
        self.max_rows = max_rows
        self.lease_ms = lease_ms
        self._batches: collections.deque[tuple[int, pa.RecordBatch]] = collections.deque()
        self._rows = 0
        self._seq = 0
        self._cursors: dict[str, int] = {}
        self._leases: dict[str, int] = {}
        self.dropped = 0

    def __len__(self) -> int:
        return len(self._batches)

    @property
    def taken(self) -> int:
        """Snapshots appended since start."""
        return self._seq

    def append(self, *batches: pa.RecordBatch) -> None:
        """One snapshot (in one or more batches): drained together, dropped together."""
        self._seq += 1
        for batch in batches:
            self._batches.append((self._seq, batch))
            self._rows += batch.num_rows
        while self._rows > self.max_rows and len(self._batches) > 1:
            seq = self._batches[0][0]
            while self._batches and self._batches[0][0] == seq and len(self._batches) > 1:
                _, old = self._batches.popleft()
                self._rows -= old.num_rows
            self.dropped += 1

    def lease(self, reader: str, now_ms: int, lease_ms: int | None = None) -> None:
        """`reader` collects until `now_ms` + its lease (`lease_ms`, at least this buffer's)."""
        self._leases[reader] = now_ms + max(self.lease_ms, lease_ms or 0)

    def drain(self, reader: str = DEFAULT_READER) -> list[pa.RecordBatch]:
        """Every snapshot buffered since `reader`'s previous drain (its lease is renewed by `lease`)."""
        after = self._cursors.get(reader, 0)
        batches = [b for seq, b in self._batches if seq > after]
        self._cursors[reader] = self._seq
        self._forget_read()
        return batches

    def active(self, now_ms: int) -> bool:
        """Whether a reader holds a lease; readers whose lease ran out are released."""
        for reader in [r for r, until in self._leases.items() if until < now_ms]:
            self.release(reader)
        return bool(self._leases)

    def release(self, reader: str) -> None:
        self._cursors.pop(reader, None)
        self._leases.pop(reader, None)
        self._forget_read()

    def _forget_read(self) -> None:
        read_by_all = min(self._cursors.values(), default=0)  # no reader left: keep what is unread
        while self._batches and self._batches[0][0] <= read_by_all:
            _, old = self._batches.popleft()
            self._rows -= old.num_rows
