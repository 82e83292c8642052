"""Spark analyses over snapshots of a scripted two-NameServer scenario, driven by the real core.

The scenario (times in seconds after T0; both NameServers share one ManualClock):
  0    brokers a, b, c (cluster C1) register with NameServers A and B; heartbeats every 25 s
  15   broker-a creates AutoTopic (only on itself: the auto-create skew) and re-registers
  27   admin wipes broker-b's write perm on both NameServers (undone for the topics broker-b
       still registers by its changed registration at 100)
  42   broker-c is killed: A sees its channel close at once; B does not, and expires it in its
       scan at 155 (last heartbeat 25 + 120 s timeout = 145 < 155)
  95   admin deletes TopicImb from both brokers and from A only; B never hears of it and keeps
       it (a lasting divergence: RocketMQ restores a topic a broker still registers, so the
       brokers must drop it too)
  180  broker-c restarts and registers again
  190  broker-a is SIGSTOPped, SIGCONTed at 195 (too short for any NameServer to notice)
Snapshots: A at 0, 10, ..., 200; B at 3, 13, ..., 203 but misses 123 (independent, offset
instants: the analysis must align them). Scans on both at 5, 15, ..., 205.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

pyspark = pytest.importorskip("pyspark")
ray = pytest.importorskip("ray")
pytest.importorskip("raydp")

from clients.analysis import bridge, cli, fault_jobs, jobs, placement, report  # noqa: E402
from clients.analysis.errors import FaultTimelineError  # noqa: E402
from clients.analysis.faults import read_faults_spark, write_faults  # noqa: E402
from clients.analysis.spark import SparkSettings, jdk17_java_options  # noqa: E402
from clients.snapshots import SnapshotDatasetError  # noqa: E402
from clients.snapshots.dataset import (  # noqa: E402
    append_snapshots,
    read_snapshots_arrow,
    read_snapshots_spark,
    validate_dataset,
)
from namesrv.common.clock import ManualClock  # noqa: E402
from namesrv.protocol.models import DataVersion, TopicConfig, TopicConfigSerializeWrapper  # noqa: E402
from namesrv.routeinfo.route_info_manager import RouteInfoManager  # noqa: E402
from namesrv.routeinfo.snapshot import snapshot_record_batch  # noqa: E402

pytestmark = pytest.mark.spark

T0 = 1_700_000_000_000
CLUSTER = "C1"
A, B = "ns-a", "ns-b"
ADDR = {"broker-a": "10.0.0.1:10911", "broker-b": "10.0.0.2:10911", "broker-c": "10.0.0.3:10911"}


def ms(seconds: float) -> int:
    return T0 + int(seconds * 1000)


class ScriptedBroker:
    """Just enough of a broker to drive RouteInfoManager the way the real one does."""

    def __init__(self, name: str, topics: dict[str, int]) -> None:
        self.name = name
        self.addr = ADDR[name]
        self.topics = dict(topics)
        self.version = DataVersion(T0, 1)
        self.incarnation = 1

    def wrapper(self) -> TopicConfigSerializeWrapper:
        table = {
            t: TopicConfig(topic_name=t, read_queue_nums=q, write_queue_nums=q)
            for t, q in self.topics.items()
        }
        return TopicConfigSerializeWrapper(topic_config_table=table, data_version=self.version)

    def register(self, rim: RouteInfoManager) -> None:
        channel = f"{self.name}#{self.incarnation}"
        rim.register_broker(CLUSTER, self.addr, self.name, 0, self.addr, self.wrapper(), [], channel=channel)

    def create_topic(self, topic: str, queues: int, now_ms: int) -> None:
        self.topics[topic] = queues
        self.version = self.version.next_version(now_ms)

    def delete_topic(self, topic: str, now_ms: int) -> None:
        del self.topics[topic]
        self.version = self.version.next_version(now_ms)


def build_scenario() -> tuple[list[pa.RecordBatch], pa.Table]:
    """Run the scripted timeline; return every snapshot batch and the fault timeline."""
    clock = ManualClock(T0)
    rims = {A: RouteInfoManager(clock=clock), B: RouteInfoManager(clock=clock)}
    brokers = {
        "broker-a": ScriptedBroker("broker-a", {"TopicAll": 4, "TopicImb": 4}),
        "broker-b": ScriptedBroker("broker-b", {"TopicAll": 4, "TopicImb": 8}),
        "broker-c": ScriptedBroker("broker-c", {"TopicAll": 4}),
    }
    running = {"broker-a", "broker-b", "broker-c"}
    batches: list[pa.RecordBatch] = []
    for t in range(0, 206):
        clock.now_ms = ms(t)
        # 1. broker-side events, 2. admin and faults, 3. scans, 4. snapshots
        if t % 25 == 0:
            for name in sorted(running):
                for rim in rims.values():
                    brokers[name].register(rim)
        if t == 15:
            brokers["broker-a"].create_topic("AutoTopic", 4, ms(t))
            for rim in rims.values():
                brokers["broker-a"].register(rim)
        if t == 27:
            for rim in rims.values():
                rim.wipe_write_perm_of_broker("broker-b")
        if t == 42:
            running.discard("broker-c")
            rims[A].on_channel_destroy(ADDR["broker-c"], channel="broker-c#1")
        if t == 95:
            for name in ("broker-a", "broker-b"):
                brokers[name].delete_topic("TopicImb", ms(t))
            rims[A].delete_topic("TopicImb")
        if t == 180:
            running.add("broker-c")
            brokers["broker-c"].incarnation += 1
            for rim in rims.values():
                brokers["broker-c"].register(rim)
        if t == 190:
            running.discard("broker-a")
        if t == 195:
            running.add("broker-a")
        if t % 10 == 5:
            for rim in rims.values():
                rim.scan_not_active_broker()
        if t % 10 == 0 and t <= 200:
            batches.append(snapshot_record_batch(rims[A], A, ms(t)))
        if t % 10 == 3 and t != 123:
            batches.append(snapshot_record_batch(rims[B], B, ms(t)))
    faults = pa.table(
        {
            "fault_id": [1, 2, 3, 4],
            "t_ms": [ms(42), ms(180), ms(190), ms(195)],
            "kind": ["kill_broker", "restart_broker", "sigstop_broker", "sigcont_broker"],
            # broker-c by name (resolved through the snapshots), broker-a by address as the chaos
            # suite writes it
            "target": ["broker-c", "broker-c", ADDR["broker-a"], ADDR["broker-a"]],
            "broker_addr": [None, ADDR["broker-c"], None, None],
            "detail": ["", "", "", ""],
        }
    )
    return batches, faults


# ------------------------------------------------------------------------------------ fixtures
@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("analysis")
    batches, faults = build_scenario()
    snaps = root / "snapshots"
    for batch in batches:  # one append per snapshot, as a collector would do
        append_snapshots(snaps, batch)
    faults_path = root / "faults.parquet"
    write_faults(faults_path, faults)
    return {"snapshots": snaps, "faults": faults_path, "root": root}


@pytest.fixture(scope="module")
def frames(spark: Any, dataset: dict[str, Path]) -> dict[str, Any]:
    snaps = read_snapshots_spark(spark, dataset["snapshots"]).cache()
    faults = read_faults_spark(spark, dataset["faults"]).cache()
    return {"snapshots": snaps, "faults": faults}


def rows(df: Any, *cols: str) -> list[tuple[Any, ...]]:
    return [tuple(r[c] for c in cols) for r in df.collect()]


# ------------------------------------------------------------------------------------ dataset
def test_dataset_layout_and_roundtrip(dataset: dict[str, Path]) -> None:
    info = validate_dataset(dataset["snapshots"], deep=True)
    assert len(info.files) == 21 + 20  # one file per snapshot, unique names
    dirs = sorted({p.parent.relative_to(dataset["snapshots"]).as_posix() for p in info.files})
    assert dirs == ["date=2023-11-14/namesrv=ns-a", "date=2023-11-14/namesrv=ns-b"]
    table = read_snapshots_arrow(dataset["snapshots"])
    assert table.num_rows == info.num_rows
    assert set(table.column("namesrv").to_pylist()) == {A, B}
    # B at 153: broker-c still listed but its heartbeat (25 s + 120 s) has expired
    at = table.filter(pa.compute.equal(table["snapshot_ms"], ms(153))).to_pylist()
    c_rows = [r for r in at if r["broker_addr"] == ADDR["broker-c"]]
    assert c_rows and all(r["alive"] is False and r["last_heartbeat_ms"] == ms(25) for r in c_rows)


def test_partition_value_with_colon_survives(tmp_path: Path, spark: Any) -> None:
    clock = ManualClock(T0)
    rim = RouteInfoManager(clock=clock)
    ScriptedBroker("broker-a", {"T": 1}).register(rim)
    append_snapshots(tmp_path, snapshot_record_batch(rim, "10.0.0.9:9876", T0))
    assert read_snapshots_arrow(tmp_path).column("namesrv").to_pylist() == ["10.0.0.9:9876"]
    assert [r.namesrv for r in read_snapshots_spark(spark, tmp_path).select("namesrv").collect()] == [
        "10.0.0.9:9876"
    ]


@pytest.mark.parametrize("case", ["missing", "empty_dir", "zero_rows", "corrupt", "wrong_schema", "stray"])
def test_bad_dataset_raises_clear_error(tmp_path: Path, case: str) -> None:
    root = tmp_path / "ds"
    part = root / "date=2023-11-14" / "namesrv=ns-a"
    if case != "missing":
        root.mkdir()
    if case == "zero_rows":
        append_snapshots(root, [])  # writes nothing
        part.mkdir(parents=True)
        from clients.snapshots.dataset import file_schema

        pq.write_table(file_schema().empty_table(), part / "part-0.parquet")
    elif case == "corrupt":
        part.mkdir(parents=True)
        (part / "part-0.parquet").write_bytes(b"PAR1 this is not parquet")
    elif case == "wrong_schema":
        part.mkdir(parents=True)
        pq.write_table(pa.table({"snapshot_ms": ["not", "ints"]}), part / "part-0.parquet")
    elif case == "stray":
        part.mkdir(parents=True)
        (part / "notes.txt").write_text("hello")
    expected = {
        "missing": "does not exist",
        "empty_dir": "is empty",
        "zero_rows": "no rows",
        "corrupt": "corrupt Parquet file",
        "wrong_schema": "snapshot_ms",
        "stray": "unexpected file",
    }[case]
    with pytest.raises(SnapshotDatasetError, match=expected):
        validate_dataset(root, deep=True)


def test_corrupt_fault_timeline(tmp_path: Path) -> None:
    bad = tmp_path / "faults.parquet"
    pq.write_table(pa.table({"fault_id": [1]}), bad)
    with pytest.raises(FaultTimelineError, match="lacks columns"):
        from clients.analysis.faults import read_faults_arrow

        read_faults_arrow(bad)


# ------------------------------------------------------------------------------------ analyses
def test_divergence_windows(spark: Any, frames: dict[str, Any]) -> None:
    snaps = frames["snapshots"]
    instants = jobs.divergence_instants(spark, snaps, bucket_ms=10_000).cache()
    windows = jobs.divergence_windows(spark, snaps, bucket_ms=10_000, instants=instants)
    got = rows(
        windows,
        "kind",
        "key",
        "namesrv_with",
        "namesrv_without",
        "start_ms",
        "end_ms",
        "duration_ms",
        "resolved",
        "instants",
    )
    c = ADDR["broker-c"]
    assert sorted(got) == sorted(
        [
            ("broker_addr", c, B, A, ms(50), ms(160), 110_000, True, 11),
            ("topic_route", "TopicAll@broker-c", B, A, ms(50), ms(160), 110_000, True, 11),
            ("topic_route", "TopicImb@broker-a", B, A, ms(100), ms(200), 100_000, False, 11),
            ("topic_route", "TopicImb@broker-b", B, A, ms(100), ms(200), 100_000, False, 11),
        ]
    )
    # As-of alignment: B missed its 123 s snapshot, so bucket 120 compares A@120 with B@113.
    at_120 = rows(
        instants.where(f"instant_ms = {ms(120)} and kind = 'broker_addr'"),
        "snapshot_ms_with",
        "snapshot_ms_without",
    )
    assert at_120 == [(ms(113), ms(120))]
    # The last divergent instant for broker-c is 150 (B@153 still lists it, expired or not).
    last = instants.where(f"key = '{c}'").agg({"instant_ms": "max"}).collect()[0][0]
    assert last == ms(150)


def test_divergence_without_carry_skips_the_missed_snapshot(spark: Any, frames: dict[str, Any]) -> None:
    # carry_ms=0: only snapshots inside a bucket count, so B is absent at bucket 120 (it missed its
    # 123 s snapshot). Nothing is compared there, and the window neither breaks nor counts it.
    instants = jobs.divergence_instants(spark, frames["snapshots"], bucket_ms=10_000, carry_ms=0).cache()
    assert instants.where(f"instant_ms = {ms(120)}").count() == 0
    windows = jobs.divergence_windows(
        spark, frames["snapshots"], bucket_ms=10_000, carry_ms=0, instants=instants
    )
    got = rows(windows.where("kind = 'broker_addr'"), "start_ms", "end_ms", "resolved", "instants")
    assert got == [(ms(50), ms(160), True, 10)]


def test_liveness_intervals(spark: Any, frames: dict[str, Any]) -> None:
    df = jobs.liveness_intervals(spark, frames["snapshots"]).where(f"broker_addr = '{ADDR['broker-c']}'")
    got = rows(df, "namesrv", "state", "start_ms", "end_ms", "duration_ms", "closed", "snapshots")
    assert sorted(got) == sorted(
        [
            (A, "advertised", ms(0), ms(50), 50_000, True, 5),
            (A, "alive", ms(0), ms(50), 50_000, True, 5),
            (A, "advertised", ms(180), ms(200), 20_000, False, 3),
            (A, "alive", ms(180), ms(200), 20_000, False, 3),
            (B, "advertised", ms(3), ms(163), 160_000, True, 15),
            (B, "alive", ms(3), ms(153), 150_000, True, 14),
            (B, "expired", ms(153), ms(163), 10_000, True, 1),
            (B, "advertised", ms(183), ms(203), 20_000, False, 3),
            (B, "alive", ms(183), ms(203), 20_000, False, 3),
        ]
    )


def test_detection_delays(spark: Any, frames: dict[str, Any]) -> None:
    df = fault_jobs.detection_delays(spark, frames["snapshots"], frames["faults"])
    got = [r.asDict(recursive=True) for r in df.collect()]
    assert len(got) == 2
    kill, stop = got
    assert kill["fault_id"] == 1 and kill["broker_addr"] == ADDR["broker-c"]  # resolved from the name
    assert (kill["namesrvs"], kill["removed"], kill["all_removed"]) == (2, 2, True)
    assert (kill["first_namesrv"], kill["first_removal_ms"], kill["first_delay_ms"]) == (A, ms(50), 8_000)
    assert (kill["last_namesrv"], kill["last_removal_ms"], kill["last_delay_ms"]) == (B, ms(163), 121_000)
    assert kill["removals"] == [
        {"namesrv": A, "removal_ms": ms(50), "delay_ms": 8_000},
        {"namesrv": B, "removal_ms": ms(163), "delay_ms": 121_000},
    ]
    # SIGSTOP for 5 s: nobody removed broker-a before the SIGCONT.
    assert stop["fault_id"] == 3 and stop["broker_addr"] == ADDR["broker-a"]
    assert (stop["namesrvs"], stop["removed"], stop["all_removed"], stop["first_delay_ms"]) == (
        2,
        0,
        False,
        None,
    )


def test_detection_delays_without_faults_is_empty(spark: Any, frames: dict[str, Any]) -> None:
    df = fault_jobs.detection_delays(spark, frames["snapshots"], None)
    assert df.count() == 0 and "first_delay_ms" in df.columns


def test_stale_route_exposure(spark: Any, frames: dict[str, Any]) -> None:
    df = fault_jobs.stale_route_exposure(spark, frames["snapshots"], frames["faults"])
    got = rows(
        df,
        "basis",
        "namesrv",
        "broker_addr",
        "fault_id",
        "dead_since_ms",
        "start_ms",
        "end_ms",
        "duration_ms",
        "exposure_ms",
        "stale_snapshots",
        "ended_by",
    )
    a, c = ADDR["broker-a"], ADDR["broker-c"]
    assert sorted(got, key=str) == sorted(
        [
            ("fault", B, c, 1, ms(42), ms(43), ms(163), 120_000, 121_000, 11, "removed"),
            ("fault", A, a, 3, ms(190), ms(190), ms(195), 5_000, 5_000, 1, "revived"),
            ("fault", B, a, 3, ms(190), ms(193), ms(195), 2_000, 5_000, 1, "revived"),
            ("heartbeat", B, c, None, ms(25), ms(153), ms(163), 10_000, 138_000, 1, "removed"),
        ],
        key=str,
    )


def test_partition_views_weigh_belief_against_reach(spark: Any, frames: dict[str, Any], tmp_path: Path) -> None:
    """broker-c's silence from 42 s read as a partition from NameServer A (healed at 180 s) beside
    the clients' cut from broker-a (190-195 s): A cannot reach broker-c and advertised it 8 s of the
    138 s (stale), B can and advertised it 121 s (lost 17 s); after the heal A has it at once, B
    3 s later (its next snapshot). The clients' cut leaves both NameServers reaching broker-a."""
    from clients.analysis import partition_jobs

    path = tmp_path / "partition_faults.parquet"
    write_faults(path, pa.table({
        "fault_id": [1, 2, 3, 4], "t_ms": [ms(42), ms(180), ms(190), ms(195)],
        "kind": ["partition_broker_namesrv", "heal", "partition_client_broker", "heal"],
        "target": [ADDR["broker-c"], ADDR["broker-c"], ADDR["broker-a"], ADDR["broker-a"]],
        "broker_addr": [ADDR["broker-c"], ADDR["broker-c"], ADDR["broker-a"], ADDR["broker-a"]],
        "detail": ["", "", "", ""], "peer": [A, None, None, None]}))
    df = partition_jobs.partition_views(spark, frames["snapshots"], read_faults_spark(spark, path))
    got = rows(df, "fault_id", "namesrv", "reachable", "window_duration_ms", "believed_duration_ms",
               "wrong_duration_ms", "back_after_heal_delay_ms")
    assert got == [
        (1, A, False, 138_000, 8_000, 8_000, 0),
        (1, B, True, 138_000, 121_000, 17_000, 3_000),
        (3, A, True, 5_000, 5_000, 0, 0),
        (3, B, True, 5_000, 5_000, 0, 0),
    ]
    assert partition_jobs.partition_views(spark, frames["snapshots"], frames["faults"]).count() == 0


def test_stale_route_exposure_without_faults(spark: Any, frames: dict[str, Any]) -> None:
    df = fault_jobs.stale_route_exposure(spark, frames["snapshots"])
    assert rows(df, "basis", "namesrv", "broker_addr") == [("heartbeat", B, ADDR["broker-c"])]


def test_topic_placement_skew(spark: Any, frames: dict[str, Any]) -> None:
    df = placement.topic_placement_skew(spark, frames["snapshots"])
    got = rows(
        df,
        "namesrv",
        "snapshot_ms",
        "topic",
        "broker_groups",
        "cluster_broker_groups",
        "brokers",
        "wiped_brokers",
        "min_write_queues",
        "max_write_queues",
        "imbalance_ratio",
        "placement_skewed",
        "write_wiped",
        "queue_imbalanced",
    )
    ab, abc = ["broker-a", "broker-b"], ["broker-a", "broker-b", "broker-c"]
    assert got == [
        (A, ms(200), "AutoTopic", 1, 3, ["broker-a"], [], 4, 4, 1.0, True, False, False),
        # broker-b's registration at 100 carried a new data version (TopicImb deleted at 95): like
        # RocketMQ, the NameServers rewrote its TopicAll queue data from the broker's config, so the
        # wipe of 27 is undone there; TopicImb, no longer registered, stays wiped on B.
        (A, ms(200), "TopicAll", 3, 3, abc, [], 4, 4, 1.0, False, False, False),
        (B, ms(203), "AutoTopic", 1, 3, ["broker-a"], [], 4, 4, 1.0, True, False, False),
        (B, ms(203), "TopicAll", 3, 3, abc, [], 4, 4, 1.0, False, False, False),
        (B, ms(203), "TopicImb", 2, 3, ab, ["broker-b"], 4, 8, 2.0, True, True, True),
    ]


# ------------------------------------------------------------------------------------ ray, report, cli
def test_results_round_trip_through_ray(spark: Any, frames: dict[str, Any]) -> None:
    skew = placement.topic_placement_skew(spark, frames["snapshots"]).select("namesrv", "topic", "broker_groups")
    ds = bridge.to_ray_dataset(skew)
    assert sorted((r["namesrv"], r["topic"], r["broker_groups"]) for r in ds.take_all()) == sorted(
        rows(skew, "namesrv", "topic", "broker_groups")
    )
    back = bridge.ray_to_spark(spark, ds)
    assert sorted(rows(back, "namesrv", "topic", "broker_groups")) == sorted(
        rows(skew, "namesrv", "topic", "broker_groups")
    )


def test_arrow_ipc_bridge(spark: Any, dataset: dict[str, Path]) -> None:
    table = read_snapshots_arrow(dataset["snapshots"]).drop_columns(["date"])
    refs = [ray.put(bridge.table_to_arrow_ipc(part)) for part in (table.slice(0, 100), table.slice(100))]
    df = bridge.arrow_ipc_refs_to_spark(spark, table.schema, refs)
    assert df.count() == table.num_rows
    got = df.where(f"snapshot_ms = {ms(153)} and broker_addr = '{ADDR['broker-c']}'").collect()
    assert [(r.alive, r.last_heartbeat_ms, r.topic) for r in got] == [(False, ms(25), "TopicAll")]


def test_cli_end_to_end(
    spark: Any, dataset: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`namesrv analyze` inside a process that already runs Spark: reuses it and leaves it running."""
    parser = argparse.ArgumentParser(prog="namesrv")
    cli.add_parser(parser.add_subparsers(dest="command"))
    out = tmp_path / "report"
    args = parser.parse_args(
        [
            "analyze",
            str(dataset["snapshots"]),
            "--faults",
            str(dataset["faults"]),
            "--out",
            str(out),
            "--no-progress",
        ]
    )
    assert args.func is cli.run
    assert cli.run(args) == 0
    printed = capsys.readouterr().out
    assert "== divergence_windows: 4 rows" in printed and "== topic_placement_skew: 5 rows" in printed
    for name in report.ANALYSES:
        rows_written = pq.read_table(out / f"{name}.parquet").num_rows
        assert rows_written == 0 if name == "partition_views" else rows_written > 0, name  # no host fault here
    assert pq.read_table(out / "stale_route_exposure.parquet").num_rows == 4
    # people read seconds since the start and UTC clock times, not epoch milliseconds
    assert str(ms(42)) not in printed and "+42.00 s 22:14:02.000" in printed
    assert "== faults: 2 (read this first)" in printed
    html = (out / "report.html").read_text()
    assert html.count('src="data:image/png;base64,') == 4, "plots embedded: the page is one file"
    assert 'src="' not in html.replace('src="data:image/png;base64,', "")
    assert not list(out.glob("*.png"))
    assert html.count('<tr class="fault">') == 2  # kill_broker and sigstop_broker
    assert html.index('id="faults"') < html.index('id="plots"')
    windows = pq.read_table(out / "divergence_windows.parquet").to_pylist()
    c_windows = [w for w in windows if w["key"] in (ADDR["broker-c"], "TopicAll@broker-c")]
    assert c_windows and {w["opened_by_fault_id"] for w in c_windows} == {1}, "broker-c's kill opened them"
    assert {w["opened_by_fault_id"] for w in windows if w["key"].startswith("TopicImb@")} == {None}
    assert spark.range(3).count() == 3  # the shared session survived


def test_jdk17_flags_are_complete() -> None:
    opts = jdk17_java_options().split()
    assert opts[0] == "-XX:+IgnoreUnrecognizedVMOptions"
    assert "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED" in opts and len(opts) == 15
    conf = SparkSettings().configs()
    for key in (
        "spark.ray.raydp_app_master.extraJavaOptions",
        "spark.driver.extraJavaOptions",
        "spark.executor.extraJavaOptions",
    ):
        assert conf[key] == jdk17_java_options()
    short = SparkSettings(jvm_options="-XX:TieredStopAtLevel=1").configs()
    assert short["spark.executor.extraJavaOptions"] == f"{jdk17_java_options()} -XX:TieredStopAtLevel=1"


def test_cli_refuses_a_chaos_directory_without_snapshots(
    tmp_path: Path, dataset: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """A chaos output directory is recognised by its faults.parquet; without snapshots/ it says why."""
    chaos = tmp_path / "chaos"
    chaos.mkdir()
    (chaos / "faults.parquet").write_bytes(dataset["faults"].read_bytes())
    parser = argparse.ArgumentParser(prog="namesrv")
    cli.add_parser(parser.add_subparsers(dest="command"))
    assert cli.run(parser.parse_args(["analyze", str(chaos)])) == 2
    err = capsys.readouterr().err
    assert "chaos output directory without snapshots/" in err and "Traceback" not in err
    assert not (chaos / "analysis").exists(), "bad input changes nothing"


@pytest.mark.parametrize("case", ["empty", "corrupt", "bad_faults"])
def test_cli_bad_input_exits_cleanly(
    tmp_path: Path, dataset: dict[str, Path], capsys: pytest.CaptureFixture[str], case: str
) -> None:
    parser = argparse.ArgumentParser(prog="namesrv")
    cli.add_parser(parser.add_subparsers(dest="command"))
    path = tmp_path / "ds"
    path.mkdir()
    argv = ["analyze", str(path), "--out", str(tmp_path / "out")]
    if case == "corrupt":
        part = path / "date=2023-11-14" / "namesrv=ns-a"
        part.mkdir(parents=True)
        (part / "part-1.parquet").write_bytes(b"garbage")
    if case == "bad_faults":
        argv = ["analyze", str(dataset["snapshots"]), "--faults", str(tmp_path / "nope.parquet")]
    args = parser.parse_args(argv)
    code = cli.run(args)
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("namesrv analyze: error: ")
    assert "Traceback" not in err
    assert {"empty": "is empty", "corrupt": "corrupt Parquet", "bad_faults": "does not exist"}[case] in err
