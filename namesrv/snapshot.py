"""Flat route snapshots: one row per (broker address, topic) as a NameServer sees it at one instant.

The rows are what the Spark analysis reads (divergence between NameServers, liveness, skew), so the
schema is the contract between the NameServer and `clients.analysis`. A broker address hosting no
topic still gets one row with null topic columns, so liveness is visible without topics.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from namesrv.route_info_manager import RouteInfoManager

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


FAULT_TIMELINE_COLUMNS: tuple[tuple[str, str], ...] = (
    ("fault_id", "int64"),
    ("t_ms", "int64"),
    ("kind", "string"),
    ("target", "string"),
    ("broker_addr", "string"),
    ("detail", "string"),
)
"""The chaos fault timeline, the other table the analysis reads: one row per fault or recovery.
`kind` is one of kill_broker, sigkill_broker, sigstop_broker, sigcont_broker, restart_broker,
kill_namesrv, restart_namesrv; `target` is the broker address or the NameServer name."""


def snapshot_columns(rim: RouteInfoManager, namesrv: str, now_ms: int | None = None) -> dict[str, list[Any]]:
    """The snapshot as columns (plain lists), taken in one pass without yielding."""
    now = rim.clock() if now_ms is None else now_ms
    cols: dict[str, list[Any]] = {name: [] for name, _ in SNAPSHOT_COLUMNS}
    topics_by_broker: dict[str, list[str]] = {
        name: sorted(rim.topics_of_broker(name)) for name in rim.broker_addr_table
    }
    for broker_name, bd in rim.broker_addr_table.items():
        topics = topics_by_broker[broker_name]
        for broker_id, addr in sorted(bd.broker_addrs.items()):
            live = rim.broker_live_table.get(addr)
            if live is not None:
                hb = live.last_update_timestamp
                dv_ts, dv_c = live.data_version.timestamp, live.data_version.counter
                alive = hb + live.heartbeat_timeout_millis >= now
            else:
                hb = dv_ts = dv_c = None
                alive = False
            rows: list[tuple[str | None, int | None, int | None, int | None]] = []
            for topic in topics:
                qd = rim.topic_queue_table[topic][broker_name]
                rows.append((topic, qd.read_queue_nums, qd.write_queue_nums, qd.perm))
            if not rows:
                rows.append((None, None, None, None))
            n = len(rows)
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
            for topic, rq, wq, perm in rows:
                cols["topic"].append(topic)
                cols["read_queue_nums"].append(rq)
                cols["write_queue_nums"].append(wq)
                cols["perm"].append(perm)
    return cols


def arrow_schema() -> pa.Schema:
    import pyarrow as pa

    return pa.schema([(name, pa.type_for_alias(t)) for name, t in SNAPSHOT_COLUMNS])


def snapshot_record_batch(rim: RouteInfoManager, namesrv: str, now_ms: int | None = None) -> pa.RecordBatch:
    import pyarrow as pa

    return pa.RecordBatch.from_pydict(snapshot_columns(rim, namesrv, now_ms), schema=arrow_schema())
