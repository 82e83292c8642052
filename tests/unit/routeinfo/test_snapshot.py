"""Route snapshots: the exact rows for a small known table, and their Arrow form."""

from __future__ import annotations

import pyarrow as pa
import pytest

from namesrv.common.clock import ManualClock
from namesrv.protocol.models import DataVersion, TopicConfig, TopicConfigSerializeWrapper
from namesrv.routeinfo.route_info_manager import RouteInfoManager
from namesrv.routeinfo.snapshot import SNAPSHOT_COLUMNS, arrow_schema, snapshot_columns, snapshot_record_batch

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


def _batch(n: int) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict({"n": list(range(n))})


def test_buffer_with_one_reader_is_a_plain_drain() -> None:
    from namesrv.routeinfo.snapshot import SnapshotBuffer

    buf = SnapshotBuffer(max_rows=100)
    first, second = _batch(1), _batch(2)
    buf.append(first)
    buf.append(second)
    assert buf.drain() == [first, second] and len(buf) == 0
    assert buf.drain() == []


def test_buffer_gives_every_reader_every_snapshot() -> None:
    """A chaos run and `namesrv snapshot` draining the same NameServer both get everything."""
    from namesrv.routeinfo.snapshot import SnapshotBuffer

    buf = SnapshotBuffer(max_rows=100)
    a, b, c = _batch(1), _batch(1), _batch(1)
    buf.append(a)
    assert buf.drain() == [a]
    buf.append(b)
    assert buf.drain("chaos") == [b], "a new reader gets what is still held"
    buf.append(c)
    assert buf.drain() == [b, c], "b was held for the default reader"
    assert len(buf) == 1, "c is held for the chaos reader only"
    assert buf.drain("chaos") == [c] and len(buf) == 0
    buf.append(a)
    buf.release("chaos")
    assert len(buf) == 1, "releasing the last reader forgets nothing unread"
    assert buf.drain() == [a]


def test_buffer_bound_holds_with_a_reader_that_stopped_draining() -> None:
    from namesrv.routeinfo.snapshot import SnapshotBuffer

    buf = SnapshotBuffer(max_rows=3)
    buf.drain("gone")  # a reader that never comes back
    for _ in range(5):
        buf.append(_batch(1))
    assert len(buf) == 3 and buf.dropped == 2
    assert len(buf.drain()) == 3 and len(buf) == 3, "still held for the silent reader"
    buf.release("gone")
    assert len(buf) == 0


def test_buffer_leases_run_out_and_renewals_extend_them() -> None:
    from namesrv.routeinfo.snapshot import SnapshotBuffer

    buf = SnapshotBuffer(max_rows=100, lease_ms=1_000)
    assert not buf.active(0), "nobody collects yet: no snapshot should be taken"
    buf.lease("collector", 0)
    assert buf.active(1_000)
    buf.append(_batch(1))
    buf.lease("collector", 900)  # what each drain_snapshots call does first: renewed until 1_900
    assert len(buf.drain("collector")) == 1
    assert buf.active(1_900)
    assert not buf.active(1_901), "a collector gone silent stops costing anything"
    buf.lease("slow", 0, lease_ms=10_000)
    assert buf.active(9_000), "a reader may ask for a longer lease than the buffer's"
    buf.release("slow")
    assert not buf.active(9_000)


def test_buffer_drops_a_snapshot_of_several_batches_as_one() -> None:
    from namesrv.routeinfo.snapshot import SnapshotBuffer

    buf = SnapshotBuffer(max_rows=4)
    old = [_batch(2), _batch(2)]
    buf.append(*old)
    new = [_batch(1), _batch(2)]
    buf.append(*new)
    assert buf.dropped == 1 and buf.taken == 2
    assert buf.drain() == new


def test_sliced_snapshot_holds_the_same_rows_as_the_one_pass_snapshot() -> None:
    from namesrv.common.slices import run_to_end
    from namesrv.routeinfo.snapshot import SNAPSHOT_SLICE_ROWS, snapshot_steps

    clock = ManualClock(T0)
    rim = RouteInfoManager(clock=clock)
    many = {f"T{i:05d}": (4, 6) for i in range(SNAPSHOT_SLICE_ROWS + 10)}  # one group over a slice
    rim.register_broker("C1", A0, "broker-a", 0, "", _wrapper(many, (1, 1)), [])
    rim.register_broker("C1", A1, "broker-a", 1, "", _wrapper({}, (1, 1)), [])
    rim.register_broker("C2", B0, "broker-b", 0, "", _wrapper({"Tb": (2, 6)}, (1, 1)), [])
    steps = snapshot_steps(rim, "ns-1")
    sliced = pa.Table.from_batches(run_to_end(steps), schema=arrow_schema())
    whole = pa.Table.from_batches([snapshot_record_batch(rim, "ns-1")])
    assert sliced.num_rows == 2 * len(many) + 1
    assert sorted(sliced.to_pylist(), key=repr) == sorted(whole.to_pylist(), key=repr)
