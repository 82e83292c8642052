"""The analyses that relate route snapshots to a chaos fault timeline: how long after each broker
fault every NameServer stopped advertising it (detection), how long after each revival every
NameServer advertised it again (return), the windows in which a dead broker was still advertised
(stale routes, per fault), and which fault opened each divergence window.

Vocabulary and conventions: see `clients.analysis.jobs`. Every time column is epoch ms.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import Window
from pyspark.sql import functions as F

from clients.analysis.steps import (
    KIND_BROKER,
    KIND_TOPIC,
    TOPIC_KEY_SEP,
    _death_periods,
    _faults_or_empty,
    _in_dead_period,
    _revival_periods,
    _runs,
    broker_presence,
    check_snapshots,
    snapshot_steps,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


# ------------------------------------------------------------------------------ detection
def detection_delays(spark: SparkSession, snapshots: DataFrame, faults: DataFrame | None = None) -> DataFrame:
    """How long after a broker died each NameServer stopped advertising it (empty without faults).

    For each broker-death fault and each address of the broker: the NameServers that advertised
    the address in their last snapshot before the fault; for each, the removal time is its first
    snapshot at or after the fault (and before a revive) that no longer lists the address.

    Output schema:
      fault_id long, kind string, target string, broker_addr string, fault_ms long
      namesrvs long              NameServers advertising the address before the fault
      removed long               of those, how many removed it (before any revive)
      first_removal_ms long, first_namesrv string, first_delay_ms long    fastest NameServer
      last_removal_ms long, last_namesrv string, last_delay_ms long       slowest that removed it
      all_removed boolean
      removals array<struct<namesrv string, removal_ms long, delay_ms long>>  sorted by namesrv
    """
    check_snapshots(snapshots)
    periods = F.broadcast(_death_periods(snapshots, _faults_or_empty(spark, faults)))
    steps = snapshot_steps(snapshots).select("namesrv", "snapshot_ms")
    present = snapshots.select("namesrv", "snapshot_ms", "broker_addr").distinct()
    key = ["fault_id", "broker_addr", "namesrv"]
    before = (
        steps.join(periods, steps["snapshot_ms"] < periods["fault_ms"])
        .groupBy(*key)
        .agg(F.max("snapshot_ms").alias("snapshot_ms"))
        .join(present, ["namesrv", "snapshot_ms", "broker_addr"])
        .select(*key)
    )
    removal = (
        steps.join(periods, _in_dead_period())
        .join(present, ["namesrv", "snapshot_ms", "broker_addr"], "left_anti")
        .groupBy(*key)
        .agg(F.min("snapshot_ms").alias("removal_ms"))
    )
    per_ns = (
        before.join(removal, key, "left")
        .join(periods.select("fault_id", "broker_addr", "fault_ms"), ["fault_id", "broker_addr"])
        .withColumn("delay_ms", F.col("removal_ms") - F.col("fault_ms"))
    )
    removed_struct = F.when(F.col("removal_ms").isNotNull(), F.struct("removal_ms", "namesrv"))
    agg = per_ns.groupBy("fault_id", "broker_addr").agg(
        F.count(F.lit(1)).alias("namesrvs"),
        F.count("removal_ms").alias("removed"),
        F.min(removed_struct).alias("first"),
        F.max(removed_struct).alias("last"),
        F.array_sort(F.collect_list(F.struct("namesrv", "removal_ms", "delay_ms"))).alias("removals"),
    )
    return (
        periods.join(agg, ["fault_id", "broker_addr"], "left")
        .select(
            "fault_id",
            "kind",
            "target",
            "broker_addr",
            "fault_ms",
            F.coalesce("namesrvs", F.lit(0)).alias("namesrvs"),
            F.coalesce("removed", F.lit(0)).alias("removed"),
            F.col("first.removal_ms").alias("first_removal_ms"),
            F.col("first.namesrv").alias("first_namesrv"),
            (F.col("first.removal_ms") - F.col("fault_ms")).alias("first_delay_ms"),
            F.col("last.removal_ms").alias("last_removal_ms"),
            F.col("last.namesrv").alias("last_namesrv"),
            (F.col("last.removal_ms") - F.col("fault_ms")).alias("last_delay_ms"),
            "removals",
        )
        .withColumn("all_removed", (F.col("namesrvs") > 0) & (F.col("removed") == F.col("namesrvs")))
        .orderBy("fault_ms", "fault_id", "broker_addr")
    )


# ------------------------------------------------------------------------------ return
def return_delays(spark: SparkSession, snapshots: DataFrame, faults: DataFrame | None = None) -> DataFrame:
    """How long after a broker was revived (restart, SIGCONT) each NameServer advertised it again
    (empty without faults).

    For each revival and each address of the broker: the NameServers with a snapshot between the
    revival and the broker's next death fault (or the end); for each, the return time is its first
    such snapshot that lists the address (a NameServer that never dropped the broker is back at its
    first snapshot after the revival).

    Output schema:
      fault_id long, kind string, target string, broker_addr string, revive_ms long
      namesrvs long              NameServers with a snapshot after the revival
      back long                  of those, how many advertised the broker again
      last_back_ms long, last_namesrv string, last_delay_ms long    slowest NameServer that did
      all_back boolean
      backs array<struct<namesrv string, back_ms long, delay_ms long>>  sorted by namesrv
    """
    check_snapshots(snapshots)
    periods = F.broadcast(_revival_periods(snapshots, _faults_or_empty(spark, faults)))
    steps = snapshot_steps(snapshots).select("namesrv", "snapshot_ms")
    present = snapshots.select("namesrv", "snapshot_ms", "broker_addr").distinct()
    key = ["fault_id", "broker_addr", "namesrv"]
    t = F.col("snapshot_ms")
    after = steps.join(
        periods, (t >= F.col("revive_ms")) & (F.col("next_fault_ms").isNull() | (t < F.col("next_fault_ms")))
    )
    seen = after.select(*key).distinct()
    back = (
        after.join(present, ["namesrv", "snapshot_ms", "broker_addr"])
        .groupBy(*key)
        .agg(F.min("snapshot_ms").alias("back_ms"))
    )
    per_ns = (
        seen.join(back, key, "left")
        .join(periods.select("fault_id", "broker_addr", "revive_ms"), ["fault_id", "broker_addr"])
        .withColumn("delay_ms", F.col("back_ms") - F.col("revive_ms"))
    )
    agg = per_ns.groupBy("fault_id", "broker_addr").agg(
        F.count(F.lit(1)).alias("namesrvs"),
        F.count("back_ms").alias("back"),
        F.max(F.when(F.col("back_ms").isNotNull(), F.struct("back_ms", "namesrv"))).alias("last"),
        F.array_sort(F.collect_list(F.struct("namesrv", "back_ms", "delay_ms"))).alias("backs"),
    )
    return (
        periods.join(agg, ["fault_id", "broker_addr"], "left")
        .select(
            "fault_id",
            "kind",
            "target",
            "broker_addr",
            "revive_ms",
            F.coalesce("namesrvs", F.lit(0)).alias("namesrvs"),
            F.coalesce("back", F.lit(0)).alias("back"),
            F.col("last.back_ms").alias("last_back_ms"),
            F.col("last.namesrv").alias("last_namesrv"),
            (F.col("last.back_ms") - F.col("revive_ms")).alias("last_delay_ms"),
            "backs",
        )
        .withColumn("all_back", (F.col("namesrvs") > 0) & (F.col("back") == F.col("namesrvs")))
        .orderBy("revive_ms", "fault_id", "broker_addr")
    )


# ------------------------------------------------------------------------------ divergence, per fault
OPENED_BY_COLUMNS: tuple[str, ...] = ("opened_by_fault_id", "opened_by_kind", "opened_by_target", "opened_by_ms")


def divergence_opened_by(
    spark: SparkSession, windows: DataFrame, snapshots: DataFrame, faults: DataFrame | None, bucket_ms: int
) -> DataFrame:
    """`windows` (from `divergence_windows`) with the timeline event that opened each one.

    An event touches a window when it hit the window's broker (its address, or its broker name for
    a topic_route key) or one of the two NameServers compared. The opener is the latest touching
    event (fault or revival) no later than the window's first divergent bucket ends
    (start_ms + bucket_ms: instants are bucket starts); null when none did.

    Output schema: the windows' columns, then
      opened_by_fault_id long, opened_by_kind string, opened_by_target string, opened_by_ms long
    """
    check_snapshots(snapshots)
    names = snapshots.select(F.col("broker_addr").alias("n_addr"), F.col("broker_name").alias("n_name")).distinct()
    win_cols = windows.columns
    key = ["kind", "key", "namesrv_with", "namesrv_without", "start_ms"]
    w = (
        windows.withColumn("_addr", F.when(F.col("kind") == KIND_BROKER, F.col("key")))
        .withColumn(
            "_topic_broker",
            F.when(F.col("kind") == KIND_TOPIC, F.substring_index(F.col("key"), TOPIC_KEY_SEP, -1)),
        )
        .join(F.broadcast(names), F.col("_addr") == F.col("n_addr"), "left")
        .withColumn("_bname", F.coalesce("_topic_broker", "n_name"))
        .drop("n_addr", "n_name")
    )
    events = (
        _faults_or_empty(spark, faults)
        .select(
            F.col("fault_id").alias("opened_by_fault_id"),
            F.col("kind").alias("opened_by_kind"),
            F.col("target").alias("opened_by_target"),
            F.col("t_ms").alias("opened_by_ms"),
            F.coalesce("broker_addr", "target").alias("_f_addr"),
        )
        .join(F.broadcast(names), F.col("_f_addr") == F.col("n_addr"), "left")
        .withColumn("_f_name", F.coalesce("n_name", "opened_by_target"))
        .drop("n_addr", "n_name")
    )
    touches = (F.col("opened_by_ms") < F.col("start_ms") + F.lit(bucket_ms)) & (
        (F.col("_f_addr") == F.col("_addr"))
        | (F.col("_f_name") == F.col("_bname"))
        | F.col("opened_by_target").isin(F.col("namesrv_with"), F.col("namesrv_without"))
    )
    latest = Window.partitionBy(*key).orderBy(F.col("opened_by_ms").desc_nulls_last(),
                                              F.col("opened_by_fault_id").desc_nulls_last())
    return (
        w.join(F.broadcast(events), touches, "left")
        .withColumn("_rank", F.row_number().over(latest))
        .where(F.col("_rank") == 1)
        .select(*win_cols, *OPENED_BY_COLUMNS)
        .orderBy("start_ms", "kind", "key", "namesrv_with", "namesrv_without")
    )


# ------------------------------------------------------------------------------ c. stale routes
STALE_COLUMNS: tuple[str, ...] = (
    "basis",
    "namesrv",
    "broker_addr",
    "broker_name",
    "fault_id",
    "dead_since_ms",
    "start_ms",
    "end_ms",
    "duration_ms",
    "exposure_ms",
    "stale_snapshots",
    "ended_by",
)


def stale_route_exposure(
    spark: SparkSession, snapshots: DataFrame, faults: DataFrame | None = None
) -> DataFrame:
    """Windows in which a NameServer still advertised a broker that was dead.

    Two bases, both reported: 'fault' (dead from a death fault until a revive fault of the same
    target) and 'heartbeat' (the snapshot row itself says alive = false: heartbeat expired, the
    NameServer's scan has not removed it yet). A window is a run of such stale snapshots.

    Output schema:
      basis string           'fault' | 'heartbeat'
      namesrv string, broker_addr string, broker_name string
      fault_id long          null for 'heartbeat'
      dead_since_ms long     fault time ('fault'); last heartbeat, the last sign of life ('heartbeat')
      start_ms long          first stale snapshot
      end_ms long            when the run ended (see ended_by), else its last stale snapshot
      duration_ms long       end_ms - start_ms
      exposure_ms long       end_ms - dead_since_ms: how long clients could be sent to a dead broker
      stale_snapshots long
      ended_by string        'removed' (next snapshot lacks it) | 'revived' (revive fault first) |
                             'recovered' (heartbeat resumed) | 'open' (still stale at the last snapshot)
    """
    check_snapshots(snapshots)
    steps = snapshot_steps(snapshots)
    pres = broker_presence(snapshots)
    periods = F.broadcast(_death_periods(snapshots, _faults_or_empty(spark, faults)))
    nxt = steps.select("namesrv", (F.col("seq") - 1).alias("last_seq"), F.col("snapshot_ms").alias("next_ms"))

    # fault basis
    stale_f = (
        steps.select("namesrv", "snapshot_ms", "seq")
        .join(periods, _in_dead_period())
        .join(
            pres.select("namesrv", "snapshot_ms", "broker_addr", "broker_name"),
            ["namesrv", "snapshot_ms", "broker_addr"],
        )
    )
    runs_f = _runs(
        stale_f,
        ["namesrv", "broker_addr", "fault_id"],
        "seq",
        "snapshot_ms",
        F.max("broker_name").alias("broker_name"),
        F.max("fault_ms").alias("dead_since_ms"),
        F.max("revive_ms").alias("revive_ms"),
    ).join(nxt, ["namesrv", "last_seq"], "left")
    removed_first = F.col("next_ms").isNotNull() & (
        F.col("revive_ms").isNull() | (F.col("next_ms") < F.col("revive_ms"))
    )
    by_fault = runs_f.select(
        F.lit("fault").alias("basis"),
        "namesrv",
        "broker_addr",
        "broker_name",
        "fault_id",
        "dead_since_ms",
        "start_ms",
        F.when(removed_first, F.col("next_ms"))
        .when(F.col("revive_ms").isNotNull(), F.col("revive_ms"))
        .otherwise(F.col("last_ms"))
        .alias("end_ms"),
        F.col("steps").alias("stale_snapshots"),
        F.when(removed_first, "removed")
        .when(F.col("revive_ms").isNotNull(), "revived")
        .otherwise("open")
        .alias("ended_by"),
    )

    # heartbeat basis
    stale_h = pres.where(~F.col("alive")).join(
        steps.select("namesrv", "snapshot_ms", "seq"), ["namesrv", "snapshot_ms"]
    )
    runs_h = _runs(
        stale_h,
        ["namesrv", "broker_addr"],
        "seq",
        "snapshot_ms",
        F.max("broker_name").alias("broker_name"),
        F.min("last_heartbeat_ms").alias("dead_since_ms"),
    ).join(nxt, ["namesrv", "last_seq"], "left")
    at_next = pres.select(
        "namesrv", F.col("snapshot_ms").alias("next_ms"), "broker_addr", F.col("alive").alias("alive_next")
    )
    runs_h = runs_h.join(at_next, ["namesrv", "next_ms", "broker_addr"], "left")
    by_heartbeat = runs_h.select(
        F.lit("heartbeat").alias("basis"),
        "namesrv",
        "broker_addr",
        "broker_name",
        F.lit(None).cast("long").alias("fault_id"),
        "dead_since_ms",
        "start_ms",
        F.coalesce("next_ms", "last_ms").alias("end_ms"),
        F.col("steps").alias("stale_snapshots"),
        F.when(F.col("next_ms").isNull(), "open")
        .when(F.col("alive_next").isNull(), "removed")
        .otherwise("recovered")
        .alias("ended_by"),
    )
    return (
        by_fault.unionByName(by_heartbeat)
        .withColumn("duration_ms", F.col("end_ms") - F.col("start_ms"))
        .withColumn("exposure_ms", F.col("end_ms") - F.col("dead_since_ms"))
        .select(*STALE_COLUMNS)
        .orderBy("basis", "namesrv", "broker_addr", "start_ms")
    )
