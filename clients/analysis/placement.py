"""Topic placement skew over route snapshots: which topics sit on fewer broker groups than their
cluster has, lost write permission, or have unequal queue counts. Vocabulary: see `clients.analysis.jobs`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import Column, Window
from pyspark.sql import functions as F

from clients.analysis.steps import check_snapshots
from namesrv.protocol.constants import (
    DLQ_GROUP_TOPIC_PREFIX,
    MASTER_ID,
    RETRY_GROUP_TOPIC_PREFIX,
    RMQ_SYS_PREFIX,
    SYSTEM_TOPICS,
    Perm,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

SKEW_COLUMNS = ("namesrv", "snapshot_ms", "cluster", "topic", "broker_groups", "cluster_broker_groups", "brokers",
                "wiped_brokers", "min_write_queues", "max_write_queues", "total_write_queues", "imbalance_ratio",
                "placement_skewed", "write_wiped", "queue_imbalanced", "any_issue")
"""topic_placement_skew's columns, in order."""


def _is_system_topic(topic: Column) -> Column:
    return (
        topic.isin(sorted(SYSTEM_TOPICS))
        | topic.startswith(RMQ_SYS_PREFIX)
        | topic.startswith(RETRY_GROUP_TOPIC_PREFIX)
        | topic.startswith(DLQ_GROUP_TOPIC_PREFIX)
    )


def topic_placement_skew(
    spark: SparkSession, snapshots: DataFrame, *, include_system_topics: bool = False
) -> DataFrame:
    """Topic placement problems in each NameServer's latest snapshot, one row per (namesrv, cluster,
    topic), every topic included with flags (filter on `any_issue` for the problems).

    - placement_skewed: the topic's queues live on fewer broker groups than its cluster has — what
      auto-creation through TBW102 produces (the first broker that receives a message owns it).
    - write_wiped: some hosting broker group lacks the WRITE bit (2) for it (wipeWritePermOfBroker).
    - queue_imbalanced: write queue counts differ between the hosting groups.
    System topics (TBW102, rmq_sys_*, %RETRY%*, %DLQ%*, and topics named after a cluster or broker,
    which RocketMQ creates per broker on purpose) are left out unless `include_system_topics`.

    Output schema:
      namesrv string, snapshot_ms long, cluster string, topic string
      broker_groups long, cluster_broker_groups long
      brokers array<string>, wiped_brokers array<string>
      min_write_queues int, max_write_queues int, total_write_queues long
      imbalance_ratio double  max/min write queues (null when min is 0)
      placement_skewed boolean, write_wiped boolean, queue_imbalanced boolean, any_issue boolean
    """
    check_snapshots(snapshots)
    latest = snapshots.groupBy("namesrv").agg(F.max("snapshot_ms").alias("snapshot_ms"))
    rows = snapshots.join(latest, ["namesrv", "snapshot_ms"])
    groups = rows.groupBy("namesrv", "snapshot_ms", "cluster").agg(
        F.countDistinct("broker_name").alias("cluster_broker_groups")
    )
    # Queue data belongs to the group; master rows carry it, slave rows of a group repeat it.
    queues = (
        rows.where(F.col("topic").isNotNull())
        .withColumn("_master_first", F.when(F.col("broker_id") == MASTER_ID, 0).otherwise(1))
        .withColumn(
            "_rank",
            F.row_number().over(
                Window.partitionBy("namesrv", "topic", "broker_name").orderBy("_master_first", "broker_id")
            ),
        )
        .where(F.col("_rank") == 1)
    )
    if not include_system_topics:
        names = rows.select("namesrv", F.col("cluster").alias("_name")).unionByName(
            rows.select("namesrv", F.col("broker_name").alias("_name"))
        )
        named_after = names.distinct().withColumnRenamed("_name", "topic")
        queues = queues.where(~_is_system_topic(F.col("topic"))).join(
            named_after, ["namesrv", "topic"], "left_anti"
        )
    write_bit = int(Perm.WRITE)
    per_topic = queues.groupBy("namesrv", "snapshot_ms", "cluster", "topic").agg(
        F.array_sort(F.collect_set("broker_name")).alias("brokers"),
        F.array_sort(
            F.collect_set(F.when((F.col("perm").bitwiseAND(write_bit)) == 0, F.col("broker_name")))
        ).alias("wiped_brokers"),
        F.min("write_queue_nums").alias("min_write_queues"),
        F.max("write_queue_nums").alias("max_write_queues"),
        F.sum("write_queue_nums").alias("total_write_queues"),
    )
    return (
        per_topic.join(groups, ["namesrv", "snapshot_ms", "cluster"])
        .withColumn("broker_groups", F.size("brokers").cast("long"))
        .withColumn(
            "imbalance_ratio",
            F.when(F.col("min_write_queues") > 0, F.col("max_write_queues") / F.col("min_write_queues")).cast(
                "double"
            ),
        )
        .withColumn("placement_skewed", F.col("broker_groups") < F.col("cluster_broker_groups"))
        .withColumn("write_wiped", F.size("wiped_brokers") > 0)
        .withColumn("queue_imbalanced", F.col("max_write_queues") != F.col("min_write_queues"))
        .withColumn("any_issue", F.col("placement_skewed") | F.col("write_wiped") | F.col("queue_imbalanced"))
        .select(*SKEW_COLUMNS)
        .orderBy("namesrv", "cluster", "topic")
    )
