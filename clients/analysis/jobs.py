"""The analyses: PySpark DataFrame functions over route snapshots (and, optionally, chaos faults).

Input `snapshots` has the columns of `namesrv.snapshot.SNAPSHOT_COLUMNS` (extra columns are
ignored): one row per (NameServer, snapshot instant, broker address, topic); presence of a broker
address in a NameServer's snapshot means that NameServer advertises it. Input `faults` follows
`clients.analysis.faults.FAULT_TIMELINE_COLUMNS`. Every time column is epoch milliseconds (int64).

Vocabulary used in the docstrings:
- step: one snapshot of one NameServer; steps of a NameServer are numbered in time order.
- run: a maximal sequence of consecutive steps in which a condition holds. A run "ends" at the
  first later step where it no longer holds (`end_ms` is that step's time, `closed`/`resolved`
  true); a run still holding at the last step is open and `end_ms` is its last step's time, so its
  duration is a lower bound. Resolution is therefore the snapshot period: a change happening
  between two snapshots is dated at the later one.

No Python UDFs: everything is built-in Spark SQL, so executors never start a Python worker.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import Window
from pyspark.sql import functions as F

from clients.analysis.steps import (
    KIND_BROKER,
    KIND_TOPIC,
    TOPIC_KEY_SEP,
    _runs,
    broker_presence,
    check_snapshots,
    snapshot_steps,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

DEFAULT_BUCKET_MS = 10_000
"""Snapshot alignment grid; 10 s is the NameServer's scan period, a natural snapshot period."""




# ------------------------------------------------------------------------------ a. divergence
def _asof_steps(snapshots: DataFrame, bucket_ms: int, carry_ms: int) -> DataFrame:
    """(namesrv, bucket, snapshot_ms): the snapshot that stands for each NameServer at each bucket.

    NameServers snapshot independently, so their instants never line up. Time is cut into buckets
    of `bucket_ms` (epoch-aligned); the grid is every bucket in which any NameServer snapshotted.
    A NameServer's state at bucket b is its latest snapshot taken before the bucket's end, provided
    it was taken at most `carry_ms` before the bucket's start (an as-of join with a tolerance:
    carry_ms = 0 uses only snapshots inside the bucket; the default, one bucket, bridges one missed
    snapshot). With none, the NameServer is absent at b and is not compared there (it may be down).
    """
    steps = snapshot_steps(snapshots)
    lo = F.expr(f"snapshot_ms div {bucket_ms}")
    hi_age = F.expr(f"(snapshot_ms + {carry_ms}) div {bucket_ms}")
    hi_next = F.expr(f"next_ms div {bucket_ms}") - 1
    covered = (
        steps.withColumn("b_lo", lo)
        .withColumn("b_hi", F.least(hi_age, hi_next))
        .where(F.col("b_hi") >= F.col("b_lo"))
        .select("namesrv", "snapshot_ms", F.explode(F.sequence("b_lo", "b_hi")).alias("bucket"))
    )
    grid = steps.select(lo.alias("bucket")).distinct()
    return covered.join(grid, "bucket")


def _entries(snapshots: DataFrame) -> DataFrame:
    """(namesrv, snapshot_ms, kind, key): what a snapshot advertises, as comparable keys."""
    brokers = snapshots.select(
        "namesrv", "snapshot_ms", F.lit(KIND_BROKER).alias("kind"), F.col("broker_addr").alias("key")
    )
    topics = snapshots.where(F.col("topic").isNotNull()).select(
        "namesrv",
        "snapshot_ms",
        F.lit(KIND_TOPIC).alias("kind"),
        F.concat_ws(TOPIC_KEY_SEP, "topic", "broker_name").alias("key"),
    )
    return brokers.unionByName(topics).distinct()


def divergence_instants(
    spark: SparkSession,
    snapshots: DataFrame,
    *,
    bucket_ms: int = DEFAULT_BUCKET_MS,
    carry_ms: int | None = None,
) -> DataFrame:
    """Per aligned instant, every entry one NameServer advertises and another (present) one does not.

    Alignment: see `_asof_steps` (bucket grid + as-of with tolerance `carry_ms`, default one
    bucket). Entries: kind 'broker_addr' (key = broker address) and kind 'topic_route'
    (key = 'topic@brokerName').

    Output schema:
      instant_ms long        bucket start (bucket * bucket_ms)
      kind string            'broker_addr' | 'topic_route'
      key string
      namesrv_with string    advertises the key
      namesrv_without string does not
      snapshot_ms_with long, snapshot_ms_without long   the snapshots compared
    """
    check_snapshots(snapshots)
    carry = bucket_ms if carry_ms is None else carry_ms
    asof = _asof_steps(snapshots, bucket_ms, carry)
    present = asof.groupBy("bucket").agg(F.collect_set("namesrv").alias("present_set"))
    with_sets = (
        _entries(snapshots)
        .join(asof, ["namesrv", "snapshot_ms"])
        .groupBy("bucket", "kind", "key")
        .agg(F.collect_set("namesrv").alias("with_set"))
    )
    pairs = (
        with_sets.join(F.broadcast(present), "bucket")
        .where(F.size("with_set") < F.size("present_set"))
        .select(
            "bucket",
            "kind",
            "key",
            F.explode("with_set").alias("namesrv_with"),
            F.array_except("present_set", "with_set").alias("without_set"),
        )
        .select("bucket", "kind", "key", "namesrv_with", F.explode("without_set").alias("namesrv_without"))
    )
    snap_with = asof.select(
        "bucket", F.col("namesrv").alias("namesrv_with"), F.col("snapshot_ms").alias("snapshot_ms_with")
    )
    snap_without = asof.select(
        "bucket", F.col("namesrv").alias("namesrv_without"), F.col("snapshot_ms").alias("snapshot_ms_without")
    )
    return (
        pairs.join(F.broadcast(snap_with), ["bucket", "namesrv_with"])
        .join(F.broadcast(snap_without), ["bucket", "namesrv_without"])
        .select(
            (F.col("bucket") * F.lit(bucket_ms)).alias("instant_ms"),
            "kind",
            "key",
            "namesrv_with",
            "namesrv_without",
            "snapshot_ms_with",
            "snapshot_ms_without",
        )
        .orderBy("instant_ms", "kind", "key", "namesrv_with", "namesrv_without")
    )


def divergence_windows(
    spark: SparkSession,
    snapshots: DataFrame,
    *,
    bucket_ms: int = DEFAULT_BUCKET_MS,
    carry_ms: int | None = None,
    instants: DataFrame | None = None,
) -> DataFrame:
    """Runs of divergence: for how long one NameServer advertised an entry another did not.

    Steps are the instants at which both NameServers of the pair are present (see
    `divergence_instants`); a window ends at the first such instant where they agree on the key.
    An instant where one of them is absent neither extends nor breaks a window.
    Pass `instants` (from `divergence_instants` with the same settings) to reuse it.

    Output schema:
      kind string, key string, namesrv_with string, namesrv_without string
      start_ms long          first divergent instant
      end_ms long            first instant they agree again (resolved), else last divergent instant
      duration_ms long       end_ms - start_ms (a lower bound when not resolved)
      resolved boolean
      instants long          divergent instants in the window
    """
    check_snapshots(snapshots)
    carry = bucket_ms if carry_ms is None else carry_ms
    if instants is None:
        instants = divergence_instants(spark, snapshots, bucket_ms=bucket_ms, carry_ms=carry)
    asof = _asof_steps(snapshots, bucket_ms, carry).select("namesrv", "bucket")
    a, b = asof.alias("a"), asof.alias("b")
    w = Window.partitionBy("namesrv_with", "namesrv_without").orderBy("bucket")
    pair_grid = (
        a.join(b, (F.col("a.bucket") == F.col("b.bucket")) & (F.col("a.namesrv") != F.col("b.namesrv")))
        .select(
            F.col("a.namesrv").alias("namesrv_with"),
            F.col("b.namesrv").alias("namesrv_without"),
            F.col("a.bucket").alias("bucket"),
        )
        .withColumn("idx", F.row_number().over(w))
    )
    divergent = instants.select(
        "kind",
        "key",
        "namesrv_with",
        "namesrv_without",
        F.expr(f"instant_ms div {bucket_ms}").alias("bucket"),
    ).join(pair_grid, ["namesrv_with", "namesrv_without", "bucket"])
    runs = _runs(divergent, ["kind", "key", "namesrv_with", "namesrv_without"], "idx", "bucket")
    nxt = pair_grid.select(
        "namesrv_with", "namesrv_without", F.col("idx").alias("last_seq"), F.col("bucket").alias("end_bucket")
    ).withColumn("last_seq", F.col("last_seq") - 1)
    return (
        runs.join(nxt, ["namesrv_with", "namesrv_without", "last_seq"], "left")
        .select(
            "kind",
            "key",
            "namesrv_with",
            "namesrv_without",
            (F.col("start_ms") * bucket_ms).alias("start_ms"),
            (F.coalesce("end_bucket", "last_ms") * bucket_ms).alias("end_ms"),
            F.col("end_bucket").isNotNull().alias("resolved"),
            F.col("steps").alias("instants"),
        )
        .withColumn("duration_ms", F.col("end_ms") - F.col("start_ms"))
        .select(
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
        .orderBy("start_ms", "kind", "key", "namesrv_with", "namesrv_without")
    )


# ------------------------------------------------------------------------------ b. liveness
def liveness_intervals(spark: SparkSession, snapshots: DataFrame) -> DataFrame:
    """Per (NameServer, broker address): runs of steps in which it was advertised / alive / expired.

    'advertised' = present in the snapshot; 'alive' = present with its heartbeat not expired;
    'expired' = present but expired (waiting for the next scan). alive and expired partition
    advertised, so the three overlap by design (the plot draws them as layers).

    Output schema:
      namesrv string, broker_addr string, broker_name string
      state string           'advertised' | 'alive' | 'expired'
      start_ms long          first step in the state
      end_ms long            first step out of it (closed), else the last step in it
      duration_ms long, closed boolean, snapshots long
    """
    check_snapshots(snapshots)
    steps = snapshot_steps(snapshots)
    pres = broker_presence(snapshots).join(
        steps.select("namesrv", "snapshot_ms", "seq"), ["namesrv", "snapshot_ms"]
    )
    flagged = (
        pres.withColumn("state", F.lit("advertised"))
        .unionByName(pres.where("alive").withColumn("state", F.lit("alive")))
        .unionByName(pres.where(~F.col("alive")).withColumn("state", F.lit("expired")))
    )
    runs = _runs(
        flagged,
        ["namesrv", "broker_addr", "state"],
        "seq",
        "snapshot_ms",
        F.max("broker_name").alias("broker_name"),
    )
    nxt = steps.select(
        "namesrv", (F.col("seq") - 1).alias("last_seq"), F.col("snapshot_ms").alias("end_step_ms")
    )
    return (
        runs.join(nxt, ["namesrv", "last_seq"], "left")
        .select(
            "namesrv",
            "broker_addr",
            "broker_name",
            "state",
            "start_ms",
            F.coalesce("end_step_ms", "last_ms").alias("end_ms"),
            F.col("end_step_ms").isNotNull().alias("closed"),
            F.col("steps").alias("snapshots"),
        )
        .withColumn("duration_ms", F.col("end_ms") - F.col("start_ms"))
        .select(
            "namesrv",
            "broker_addr",
            "broker_name",
            "state",
            "start_ms",
            "end_ms",
            "duration_ms",
            "closed",
            "snapshots",
        )
        .orderBy("namesrv", "broker_addr", "state", "start_ms")
    )
