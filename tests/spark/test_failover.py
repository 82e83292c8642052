"""The failover view over recorded inputs of a scripted run, each recorded the way `namesrv chaos`
records it: route snapshots of two real RouteInfoManagers (the higher-epoch rule deciding who is
brokerId 0) written as the snapshot dataset, the fault timeline as faults.parquet, the role spans
from the brokers' role logs (`clients.chaos.roles.role_spans`), and the producers' send records.

Scenario (seconds after T0), broker set broker-a = A0 (master, epoch 1) + A1 (slave), broker-b = B0:
  10    SIGKILL of A0 (sigkill_master); A1 elected at 12 (epoch 2), registers as brokerId 0 with
        stateVersion 2 on ns-a at 12.2 and on ns-b at 13.0; first send acknowledged at 12.53
  15    A0 restarted: a slave (brokerId 1)
  20    A1 killed (kill_master); A0 elected at 21.5 (epoch 3), registers at 21.7 on both; ack at 22.02
  25    A1 restarted, still claiming brokerId 0 at stateVersion 2: both NameServers refuse it; it
        registers as a slave at 25.5
  27    A1 killed again while a slave: no failover
  30    B0 killed (no slave, no role log); restarted at 32 as master, registers at 32.5 (ns-b lists it
        in its 32.5 snapshot, ns-a at 33.0); ack at 33.01
Snapshots: ns-a at every whole second, ns-b at every half past.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

pytest.importorskip("pyspark")
pytest.importorskip("raydp")

from clients.analysis.failover import (
    FAILOVER_COLUMNS,
    failover_percentiles,
    failover_report,
    failover_view,
    report_failovers,
)
from clients.analysis.faults import read_faults_spark, write_faults
from clients.chaos.plan import FaultRecord
from clients.chaos.roles import Incarnation, role_spans
from clients.chaos.schema import FAULTS_FILE, ROLE_SCHEMA, ROLES_FILE, SEND_SCHEMA, SENDS_FILE, SNAPSHOTS_DIR
from clients.snapshots.dataset import append_snapshots, read_snapshots_spark
from namesrv.common.clock import ManualClock
from namesrv.protocol.models import DataVersion, TopicConfig, TopicConfigSerializeWrapper
from namesrv.routeinfo.route_info_manager import RouteInfoManager
from namesrv.routeinfo.snapshot import snapshot_record_batch

pytestmark = pytest.mark.spark

T0 = 1_700_000_000_000
A0, A1, B0 = "10.0.0.1:10911", "10.0.0.2:10911", "10.0.0.3:10911"
SET_OF = {A0: "broker-a", A1: "broker-a", B0: "broker-b"}
END = T0 + 40_000


def ms(seconds: float) -> int:
    return T0 + round(seconds * 1000)


def register(rim: RouteInfoManager, addr: str, broker_id: int, epoch: int) -> None:
    table = {"TopicF": TopicConfig(topic_name="TopicF", read_queue_nums=4, write_queue_nums=4)}
    wrapper = TopicConfigSerializeWrapper(topic_config_table=table, data_version=DataVersion(rim.clock(), 1, epoch))
    rim.register_broker("C", addr, SET_OF[addr], broker_id, addr, wrapper, [], None, 600_000)


# (seconds, NameServer or None for both, what) in time order
EVENTS: list[tuple[float, str | None, tuple[Any, ...]]] = [
    (0.0, None, ("reg", A0, 0, 1)), (0.0, None, ("reg", A1, 1, 1)), (0.0, None, ("reg", B0, 0, 0)),
    (12.2, "ns-a", ("reg", A1, 0, 2)), (13.0, "ns-b", ("reg", A1, 0, 2)),
    (15.2, None, ("reg", A0, 1, 2)),
    (21.7, None, ("reg", A0, 0, 3)),
    (25.1, None, ("reg", A1, 0, 2)),  # refused: A0 holds brokerId 0 at stateVersion 3
    (25.5, None, ("reg", A1, 1, 3)),
    (30.1, None, ("gone", B0, 0)),
    (32.5, None, ("reg", B0, 0, 0)),
]


def to(clock: ManualClock, t: int) -> None:
    clock.advance(max(0, t - clock.now_ms))


def record_snapshots(root: Path) -> None:
    clocks = {ns: ManualClock(T0) for ns in ("ns-a", "ns-b")}
    rims = {ns: RouteInfoManager(clock=clocks[ns]) for ns in clocks}
    instants = sorted([(ms(s), "ns-a") for s in range(40)] + [(ms(s + 0.5), "ns-b") for s in range(40)])
    pending = sorted(((ms(t), ns, what) for t, ns, what in EVENTS), key=lambda e: e[0])
    for at, ns in instants:
        while pending and pending[0][0] <= at:
            t, who, what = pending.pop(0)
            for name in ([who] if who else list(rims)):
                to(clocks[name], t)
                if what[0] == "reg":
                    register(rims[name], *what[1:])
                    if t == ms(25.1):  # the returning old master was refused: A0 stays brokerId 0
                        assert rims[name].broker_addr_table["broker-a"].broker_addrs[0] == A0
                else:
                    rims[name].unregister_broker("C", what[1], SET_OF[what[1]], what[2])
        to(clocks[ns], at)
        append_snapshots(root, snapshot_record_batch(rims[ns], ns, at))


TIMELINE = [
    FaultRecord(0, ms(10), "sigkill_master", A0, A0), FaultRecord(1, ms(15), "restart_broker", A0, A0, revives=0),
    FaultRecord(2, ms(20), "kill_master", A1, A1), FaultRecord(3, ms(25), "restart_broker", A1, A1, revives=2),
    FaultRecord(4, ms(27), "kill_broker", A1, A1), FaultRecord(5, ms(29), "restart_broker", A1, A1, revives=4),
    FaultRecord(6, ms(30), "kill_broker", B0, B0), FaultRecord(7, ms(32), "restart_broker", B0, B0, revives=6),
]


def incarnation(addr: str, name: str, log: list[tuple[float, str, int]] | None, seen: float) -> Incarnation:
    entries = [{"atMs": ms(t), "role": r, "epoch": e} for t, r, e in (log or [(seen, "SYNC_MASTER", 0)])]
    return Incarnation(SET_OF[addr], addr, name, ms(seen), END, entries, log is not None)


INCARNATIONS = [
    incarnation(A0, "a0-1", [(0, "SYNC_MASTER", 1)], 0),
    incarnation(A1, "a1-1", [(0, "SLAVE", 1), (12, "SYNC_MASTER", 2)], 0),
    incarnation(A0, "a0-2", [(15, "SLAVE", 2), (21.5, "SYNC_MASTER", 3)], 15.1),
    incarnation(A1, "a1-2", [(25, "SLAVE", 3)], 25.1),
    incarnation(B0, "b0-1", None, 0.2),  # a broker without role_log: its configured role from its start
    incarnation(B0, "b0-2", None, 32.6),
]

SENDS = [  # (seconds, ok, set, latency ms)
    (9.0, True, "broker-a", 5), (10.5, False, "broker-a", 3000), (12.5, True, "broker-a", 30),
    (13.0, True, "broker-a", 5), (21.0, False, "broker-a", 500), (22.0, True, "broker-a", 20),
    (29.0, True, "broker-b", 5), (31.0, False, "broker-b", 900), (33.0, True, "broker-b", 10),
    (34.0, True, "broker-b", 3),
]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A chaos output directory as `namesrv chaos --out` writes it (the parts the view reads)."""
    root = tmp_path_factory.mktemp("failover")
    record_snapshots(root / SNAPSHOTS_DIR)
    faults = pa.table({"fault_id": [r.fault_id for r in TIMELINE], "t_ms": [r.t_ms for r in TIMELINE],
                       "kind": [r.kind for r in TIMELINE], "target": [r.target for r in TIMELINE],
                       "broker_addr": [r.broker_addr for r in TIMELINE], "detail": ["" for _ in TIMELINE]})
    write_faults(root / FAULTS_FILE, faults)
    spans = role_spans(INCARNATIONS, TIMELINE, END, run_start_ms=T0)
    pq.write_table(pa.Table.from_pylist([asdict(s) for s in spans], schema=ROLE_SCHEMA), root / ROLES_FILE)
    sends = [{"t_ms": ms(t), "ok": ok, "broker_name": name, "latency_ms": float(lat)} for t, ok, name, lat in SENDS]
    pq.write_table(pa.Table.from_pylist([{k: r.get(k) for k in SEND_SCHEMA.names} for r in sends],
                                        schema=SEND_SCHEMA), root / SENDS_FILE)
    return root


@pytest.fixture(scope="module")
def view(spark: Any, run_dir: Path) -> Any:
    roles = spark.read.parquet(str(run_dir / ROLES_FILE))
    sends = spark.read.parquet(str(run_dir / SENDS_FILE))
    return failover_view(read_faults_spark(spark, run_dir / FAULTS_FILE), roles,
                         read_snapshots_spark(spark, run_dir / SNAPSHOTS_DIR), sends).cache()


def test_each_failover_from_death_to_election_routes_and_first_ack(view: Any) -> None:
    rows = [r.asDict() for r in view.collect()]
    assert view.columns == list(FAILOVER_COLUMNS)
    got = [(r["fault_id"], r["broker_set"], r["new_master"], r["epoch"], r["same_broker"], r["election_delay_ms"],
            r["namesrvs"], r["routed_namesrvs"], r["routed_delay_ms"], r["first_ack_delay_ms"]) for r in rows]
    assert got == [
        (0, "broker-a", A1, 2, False, 2_000, 2, 2, 3_500, 2_530),  # ns-a at 13.0, ns-b at 13.5
        (2, "broker-a", A0, 3, False, 1_500, 2, 2, 2_500, 2_020),  # both registered at 21.7: ns-b at 22.5
        (6, "broker-b", B0, 0, True, 2_000, 2, 2, 3_000, 3_010),   # restarted from its store; ns-a at 33.0
    ], "the slave killed at 27 s is no failover; the refused old master at 25 s never routed"


def test_namesrv_analyze_reports_the_failovers_of_a_chaos_dir(spark: Any, run_dir: Path, tmp_path: Path) -> None:
    line = report_failovers(spark, run_dir, read_snapshots_spark(spark, run_dir / SNAPSHOTS_DIR),
                            read_faults_spark(spark, run_dir / FAULTS_FILE), tmp_path)
    assert line is not None and line.startswith("failovers: 3; death -> election p50 2,000 ms p99 2,000 ms (3)")
    assert pq.read_table(tmp_path / "failovers.parquet").column("fault_id").to_pylist() == [0, 2, 6]
    assert report_failovers(spark, tmp_path, None, None, tmp_path) is None  # not a chaos run with roles


def test_p50_and_p99_across_the_run(view: Any) -> None:
    [row] = failover_percentiles(view).collect()
    assert row["failovers"] == 3 and row["election_n"] == row["routed_n"] == row["first_ack_n"] == 3
    assert (row["election_p50_ms"], row["election_p99_ms"]) == (2_000, 2_000)
    assert row["routed_p50_ms"] == 3_000 and row["routed_p99_ms"] == pytest.approx(3_490)
    assert row["first_ack_p50_ms"] == 2_530 and row["first_ack_p99_ms"] == pytest.approx(3_000.4)


def test_the_html_report_has_a_failovers_section_with_each_failover(spark: Any, run_dir: Path, tmp_path: Path) -> None:
    from clients.analysis.report import run_report

    snapshots = read_snapshots_spark(spark, run_dir / SNAPSHOTS_DIR)
    faults = read_faults_spark(spark, run_dir / FAULTS_FILE)
    failovers = failover_report(spark, run_dir, snapshots, faults, tmp_path)
    assert failovers is not None and len(failovers.rows) == 3
    run_report(spark, snapshots, faults, tmp_path, progress=False, print_tables=False, failovers=failovers)
    html = (tmp_path / "report.html").read_text(encoding="utf-8")
    assert '<a href="#failovers">Failovers</a>' in html and '<h2 id="failovers">Failovers</h2>' in html
    section = html[html.index('<h2 id="failovers">'):html.index('<h2 id="plots">')]
    assert "failovers: 3; death -&gt; election p50 2,000 ms p99 2,000 ms (3)" in section
    rows = section.split('<tr class="failover">')[1:]
    assert len(rows) == 3
    assert [r.split("<td>")[1].split("</td>")[0] for r in rows] == ["0", "2", "6"]  # fault ids, by death time
    assert A1 in rows[0] and A0 in rows[1] and B0 in rows[2]  # each new master
    assert "sigkill_master" in rows[0] and "kill_master" in rows[1]
