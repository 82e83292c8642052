"""The partition view: for each fault the kernel made on the multi-host test bed (a broker's host cut
from one NameServer's, the clients cut from a broker, a broker's host isolated) and each NameServer,
what it believed about the broker (advertised it or not) against what it could reach, over the
fault's window from the cut to its heal, and how long after the heal it advertised the broker again.

A NameServer cannot reach the broker when the fault isolates the broker's host, or when it is the
partition's peer (the fault timeline's `peer` column); otherwise it can (the clients' cut leaves
every NameServer reaching the broker). Its belief is wrong while it advertises a broker it cannot
reach (a stale route) or does not advertise one it can (a lost route).

Vocabulary and conventions: see `clients.analysis.jobs`. Every time column is epoch ms.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import functions as F

from clients.analysis.jobs import liveness_intervals
from clients.analysis.steps import _death_periods, _faults_or_empty, check_snapshots
from clients.chaos.schema import HOST_FAULTS, ISOLATE_HOST, PARTITION_BROKER_NAMESRV

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def partition_views(spark: SparkSession, snapshots: DataFrame, faults: DataFrame | None = None) -> DataFrame:
    """One row per host fault, broker address and NameServer (empty without host faults).

    Output schema:
      fault_id long, kind string, broker_addr string, peer string, namesrv string
      fault_ms long, heal_ms long     the window (heal_ms: the heal, else the NameServer's last snapshot)
      reachable boolean               could this NameServer reach the broker during the window
      window_duration_ms long, believed_duration_ms long   how long the window lasted / it advertised
                                      the broker in it
      wrong_duration_ms long          how long its belief contradicted reachability
      back_after_heal_delay_ms long   from the heal until it advertised the broker (0: it still did;
                                      null: never, or no heal)
    """
    check_snapshots(snapshots)
    timeline = _faults_or_empty(spark, faults)
    peers = timeline.select("fault_id", "peer")
    periods = (
        _death_periods(snapshots, timeline)
        .where(F.col("kind").isin(sorted(HOST_FAULTS)))
        .join(peers, "fault_id", "left")
        .withColumnRenamed("revive_ms", "heal_ms_")
    )
    last = snapshots.groupBy("namesrv").agg(F.max("snapshot_ms").alias("last_ms"))
    per_ns = (
        periods.crossJoin(last)
        .withColumn("heal_ms", F.coalesce("heal_ms_", "last_ms"))
        .withColumn(
            "reachable",
            ~((F.col("kind") == ISOLATE_HOST)
              | ((F.col("kind") == PARTITION_BROKER_NAMESRV) & (F.col("namesrv") == F.col("peer")))),
        )
    )
    advertised = (
        liveness_intervals(spark, snapshots)
        .where(F.col("state") == "advertised")
        .select("namesrv", "broker_addr", "start_ms", "end_ms")
    )
    joined = per_ns.join(advertised, ["namesrv", "broker_addr"], "left")
    overlap = F.greatest(
        F.lit(0), F.least(F.col("end_ms"), F.col("heal_ms")) - F.greatest(F.col("start_ms"), F.col("fault_ms"))
    )
    after_heal = F.when(
        F.col("heal_ms_").isNotNull() & (F.col("end_ms") > F.col("heal_ms_")),
        F.greatest(F.col("start_ms"), F.col("heal_ms_")) - F.col("heal_ms_"),
    )
    key = ["fault_id", "kind", "broker_addr", "peer", "namesrv", "fault_ms", "heal_ms", "reachable"]
    return (
        joined.groupBy(*key)
        .agg(F.sum(F.coalesce(overlap, F.lit(0))).cast("long").alias("believed_duration_ms"),
             F.min(after_heal).cast("long").alias("back_after_heal_delay_ms"))
        .withColumn("window_duration_ms", F.col("heal_ms") - F.col("fault_ms"))
        .withColumn(
            "wrong_duration_ms",
            F.when(F.col("reachable"), F.col("window_duration_ms") - F.col("believed_duration_ms"))
            .otherwise(F.col("believed_duration_ms")),
        )
        .select(*key, "window_duration_ms", "believed_duration_ms", "wrong_duration_ms", "back_after_heal_delay_ms")
        .orderBy("fault_id", "broker_addr", "namesrv")
    )
