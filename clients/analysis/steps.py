"""Building blocks shared by the analyses: input checks, each NameServer's snapshot steps, broker
presence per snapshot, runs of steps (gaps-and-islands) and the dead periods the fault timeline
gives. See `clients.analysis.jobs` for the vocabulary (step, run)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import Column, Window
from pyspark.sql import functions as F

from clients.analysis.errors import AnalysisInputError
from clients.analysis.faults import fault_spark_schema
from clients.chaos.schema import BROKER_FAULTS, BROKER_REVIVALS, FAULT_TIMELINE_COLUMNS
from namesrv.routeinfo.snapshot import SNAPSHOT_COLUMNS

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

KIND_BROKER = "broker_addr"
KIND_TOPIC = "topic_route"
TOPIC_KEY_SEP = "@"
"""topic_route keys are 'topic@brokerName'; topic names cannot contain '@', so the key is unique."""


def _require(df: DataFrame, columns: list[str], what: str) -> None:
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise AnalysisInputError(f"{what} lacks columns {missing}")


def check_snapshots(snapshots: DataFrame) -> None:
    _require(snapshots, [name for name, _ in SNAPSHOT_COLUMNS], "snapshot DataFrame")


def _faults_or_empty(spark: SparkSession, faults: DataFrame | None) -> DataFrame:
    if faults is None:
        return spark.createDataFrame([], fault_spark_schema())
    _require(faults, [name for name, _ in FAULT_TIMELINE_COLUMNS], "fault DataFrame")
    return faults


def snapshot_steps(snapshots: DataFrame) -> DataFrame:
    """(namesrv, snapshot_ms, seq, next_ms): each NameServer's snapshots numbered 1..n in time order."""
    w = Window.partitionBy("namesrv").orderBy("snapshot_ms")
    return (
        snapshots.select("namesrv", "snapshot_ms")
        .distinct()
        .withColumn("seq", F.row_number().over(w))
        .withColumn("next_ms", F.lead("snapshot_ms").over(w))
    )


def broker_presence(snapshots: DataFrame) -> DataFrame:
    """(namesrv, snapshot_ms, broker_addr, broker_name, alive, last_heartbeat_ms): one row per
    advertised broker address per snapshot (the per-topic rows collapsed)."""
    return snapshots.groupBy("namesrv", "snapshot_ms", "broker_addr").agg(
        F.max("broker_name").alias("broker_name"),
        (F.max(F.col("alive").cast("int")) == 1).alias("alive"),
        F.max("last_heartbeat_ms").alias("last_heartbeat_ms"),
    )


def _runs(flagged: DataFrame, group_cols: list[str], seq_col: str, time_col: str, *aggs: Column) -> DataFrame:
    """Gaps-and-islands: rows (one per step where a condition holds) -> one row per run with
    start_ms, last_ms, last_seq and steps. `seq_col` must number the steps without gaps."""
    w = Window.partitionBy(*group_cols).orderBy(seq_col)
    return (
        flagged.withColumn("_island", F.col(seq_col) - F.row_number().over(w))
        .groupBy(*group_cols, "_island")
        .agg(
            F.min(time_col).alias("start_ms"),
            F.max(time_col).alias("last_ms"),
            F.max(seq_col).alias("last_seq"),
            F.count(F.lit(1)).alias("steps"),
            *aggs,
        )
        .drop("_island")
    )


def _broker_events(
    snapshots: DataFrame, faults: DataFrame, kinds: frozenset[str], until_kinds: frozenset[str], at: str, until: str
) -> DataFrame:
    """(fault_id, kind, target, broker_addr, <at>, <until>): each timeline event of `kinds`, resolved
    to broker addresses (the event's own; else every address ever seen under the target broker
    name, or the target itself when it is an address), bounded by the next event of `until_kinds`
    on the same target (null: none followed)."""
    events = faults.where(F.col("kind").isin(sorted(kinds))).select(
        "fault_id",
        "kind",
        "target",
        F.col("broker_addr").alias("fault_addr"),
        F.col("t_ms").alias(at),
    )
    ends = faults.where(F.col("kind").isin(sorted(until_kinds))).select(
        F.col("target").alias("u_target"), F.col("t_ms").alias(until)
    )
    bounded = (
        events.join(
            F.broadcast(ends),
            (events["target"] == ends["u_target"]) & (ends[until] > events[at]),
            "left",
        )
        .groupBy("fault_id", "kind", "target", "fault_addr", at)
        .agg(F.min(until).alias(until))
    )
    names = snapshots.select(
        F.col("broker_name").alias("n_broker_name"), F.col("broker_addr").alias("n_addr")
    )
    names = names.distinct()
    cols = ["fault_id", "kind", "target", "broker_addr", at, until]
    given = bounded.where(F.col("fault_addr").isNotNull()).withColumnRenamed("fault_addr", "broker_addr")
    resolved = (
        bounded.where(F.col("fault_addr").isNull())
        .join(names, (F.col("target") == F.col("n_broker_name")) | (F.col("target") == F.col("n_addr")))
        .withColumnRenamed("n_addr", "broker_addr")
    )
    return given.select(*cols).unionByName(resolved.select(*cols).distinct())


def _death_periods(snapshots: DataFrame, faults: DataFrame) -> DataFrame:
    """(fault_id, kind, target, broker_addr, fault_ms, revive_ms): each broker-death fault, bounded
    by the next revive fault of the same target (null: never revived)."""
    return _broker_events(snapshots, faults, BROKER_FAULTS, BROKER_REVIVALS, "fault_ms", "revive_ms")


def _revival_periods(snapshots: DataFrame, faults: DataFrame) -> DataFrame:
    """(fault_id, kind, target, broker_addr, revive_ms, next_fault_ms): each revival, bounded by the
    next death fault of the same target (null: none)."""
    return _broker_events(snapshots, faults, BROKER_REVIVALS, BROKER_FAULTS, "revive_ms", "next_fault_ms")


def _in_dead_period(time_col: str = "snapshot_ms") -> Column:
    t = F.col(time_col)
    return (t >= F.col("fault_ms")) & (F.col("revive_ms").isNull() | (t < F.col("revive_ms")))
