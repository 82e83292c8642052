"""Route snapshots: the exact rows for a small known table, and their Arrow form."""

from __future__ import annotations

import pyarrow as pa
import pytest

from namesrv.clock import ManualClock
from namesrv.models import DataVersion, TopicConfig, TopicConfigSerializeWrapper
from namesrv.route_info_manager import RouteInfoManager
from namesrv.snapshot import SNAPSHOT_COLUMNS, arrow_schema, snapshot_columns, snapshot_record_batch

T0 = 1_700_000_000_000
A0, A1, B0 = "10.0.0.1:10911", "10.0.0.2:10911", "10.0.0.3:10911"


def _wrapper(topics: dict[str, tuple[int, int]], version: tuple[int, int]) -> TopicConfigSerializeWrapper:
    table = {
        name: TopicConfig(topic_name=name, read_queue_nums=q, write_queue_nums=q, perm=perm)
        for name, (q, perm) in topics.items()
    }
    return TopicConfigSerializeWrapper(topic_config_table=table, data_version=DataVersion(*version))


@pytest.fixture
def known() -> tuple[RouteInfoManager, ManualClock]:
    """broker-a: master + slave, two topics; broker-b: a master with no topics and a 30 s timeout."""
    clock = ManualClock(T0)
    rim = RouteInfoManager(clock=clock)
    rim.register_broker("C1", A0, "broker-a", 0, "", _wrapper({"TopicB": (4, 4), "TopicA": (8, 6)}, (100, 3)), [])
    rim.register_broker("C2", B0, "broker-b", 0, "", _wrapper({}, (50, 1)), [], heartbeat_timeout_millis=30_000)
    clock.advance(1_000)
    rim.register_broker("C1", A1, "broker-a", 1, "", _wrapper({}, (100, 3)), [])
    return rim, clock


def _rows(cols: dict[str, list]) -> list[tuple]:
    names = [name for name, _ in SNAPSHOT_COLUMNS]
    lengths = {len(cols[n]) for n in names}
    assert len(lengths) == 1, "every column has one value per row"
    return list(zip(*(cols[n] for n in names), strict=True))


def test_rows_for_a_known_table(known: tuple[RouteInfoManager, ManualClock]) -> None:
    rim, clock = known
    clock.advance(29_001)  # T0 + 30_001: broker-b is past its 30 s, not yet scanned
    seq = rim.route_seq
    now = clock()

    rows = _rows(snapshot_columns(rim, "ns-1"))

    # snapshot_ms, namesrv, route_seq, cluster, broker_name, broker_id, broker_addr, last_heartbeat_ms,
    # dv_timestamp, dv_counter, topic, read_queue_nums, write_queue_nums, perm, alive
    assert rows == [
        (now, "ns-1", seq, "C1", "broker-a", 0, A0, T0, 100, 3, "TopicA", 8, 8, 6, True),
        (now, "ns-1", seq, "C1", "broker-a", 0, A0, T0, 100, 3, "TopicB", 4, 4, 4, True),
        (now, "ns-1", seq, "C1", "broker-a", 1, A1, T0 + 1_000, 100, 3, "TopicA", 8, 8, 6, True),
        (now, "ns-1", seq, "C1", "broker-a", 1, A1, T0 + 1_000, 100, 3, "TopicB", 4, 4, 4, True),
        (now, "ns-1", seq, "C2", "broker-b", 0, B0, T0, 50, 1, None, None, None, None, False),
    ]


def test_alive_column_agrees_with_the_expiry_scan(known: tuple[RouteInfoManager, ManualClock]) -> None:
    rim, clock = known
    clock.advance(29_000)  # T0 + 30_000: broker-b exactly at its boundary
    alive = dict(zip(snapshot_columns(rim, "ns")["broker_addr"], snapshot_columns(rim, "ns")["alive"], strict=True))
    assert alive[B0] is True
    assert rim.scan_not_active_broker() == 0

    clock.advance(1)
    alive = dict(zip(snapshot_columns(rim, "ns")["broker_addr"], snapshot_columns(rim, "ns")["alive"], strict=True))
    assert alive[B0] is False
    assert rim.scan_not_active_broker() == 1
    assert B0 not in snapshot_columns(rim, "ns")["broker_addr"]


def test_explicit_snapshot_time_is_used(known: tuple[RouteInfoManager, ManualClock]) -> None:
    rim, _ = known
    cols = snapshot_columns(rim, "ns", now_ms=T0 + 500_000)
    assert set(cols["snapshot_ms"]) == {T0 + 500_000}
    assert not any(cols["alive"])


def test_address_without_live_entry_has_null_liveness(known: tuple[RouteInfoManager, ManualClock]) -> None:
    rim, _ = known
    del rim.broker_live_table[B0]  # defensive path: a listed address with no live entry
    rows = [r for r in _rows(snapshot_columns(rim, "ns")) if r[6] == B0]
    assert rows == [
        (rows[0][0], "ns", rim.route_seq, "C2", "broker-b", 0, B0, None, None, None, None, None, None, None, False)
    ]


def test_empty_table_has_no_rows(clock: ManualClock) -> None:
    rim = RouteInfoManager(clock=clock)
    cols = snapshot_columns(rim, "ns")
    assert list(cols) == [name for name, _ in SNAPSHOT_COLUMNS]
    assert all(values == [] for values in cols.values())
    batch = snapshot_record_batch(rim, "ns")
    assert batch.num_rows == 0
    assert batch.schema == arrow_schema()


def test_record_batch_matches_schema_and_rows(known: tuple[RouteInfoManager, ManualClock]) -> None:
    rim, _ = known
    batch = snapshot_record_batch(rim, "ns-1")

    assert batch.schema == arrow_schema()
    assert batch.num_rows == 5
    assert batch.schema.field("read_queue_nums").type == pa.int32()
    assert batch.schema.field("snapshot_ms").type == pa.int64()
    assert batch.schema.field("alive").type == pa.bool_()
    assert batch.column("topic").null_count == 1
    assert batch.column("perm").null_count == 1
    assert batch.to_pydict() == snapshot_columns(rim, "ns-1")


def test_schema_column_names_are_the_contract() -> None:
    assert [f.name for f in arrow_schema()] == [
        "snapshot_ms",
        "namesrv",
        "route_seq",
        "cluster",
        "broker_name",
        "broker_id",
        "broker_addr",
        "last_heartbeat_ms",
        "dv_timestamp",
        "dv_counter",
        "topic",
        "read_queue_nums",
        "write_queue_nums",
        "perm",
        "alive",
    ]
