"""The failover view (issue 21): for every master death in a chaos run, how long until its broker
set had a master again, until every NameServer routed to that master, and until a send through it
was acknowledged; p50/p99 of each across the run.

Inputs (all recorded by `namesrv chaos`):
- `faults`: the fault timeline (`clients.chaos.schema.FAULT_TIMELINE_COLUMNS`);
- `roles`: the brokers' role spans (`clients.chaos.schema.ROLE_COLUMNS`, roles.parquet, from the brokers' own role logs:
  `clients.chaos.roles.role_spans`), which say who was master when, at which epoch;
- `snapshots`: every NameServer's route snapshots (`namesrv.routeinfo.snapshot.SNAPSHOT_COLUMNS`);
- `sends`: the producers' send records (`clients.chaos.schema.SEND_SCHEMA`).

A failover is a death fault (kill, SIGKILL, node loss; of a broker or of a set's master) whose broker was a
writable master at that instant, by its role spans. Its steps, each an epoch-ms instant and a delay
after the death:
- election: the first writable-master span of another broker (or a new incarnation of the same
  one: a master restarted from its store, `same_broker`) of the set starting at or after the
  death, before the set's next master death;
- routed: the first snapshot, at or after the election, in which a NameServer lists that broker as
  brokerId 0 of the set; `routed_ms` is the slowest NameServer's (null unless every NameServer with
  a snapshot after the election did);
- first acknowledgement: the first send to the set acknowledged (`t_ms + latency_ms`) at or after
  the election, before the next master death.

Built-in Spark SQL only (no Python UDFs), as the other analyses.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pyspark.sql import Window
from pyspark.sql import functions as F

from clients.analysis.errors import AnalysisInputError
from clients.chaos.schema import (
    KILL_BROKER,
    KILL_MASTER,
    LOSE_MASTER_NODE,
    ROLE_COLUMNS,
    ROLES_FILE,
    SENDS_FILE,
    SIGKILL_BROKER,
    SIGKILL_MASTER,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

DEATH_KINDS = (KILL_BROKER, SIGKILL_BROKER, KILL_MASTER, SIGKILL_MASTER, LOSE_MASTER_NODE)
MASTER_ROLES = ("SYNC_MASTER", "ASYNC_MASTER")
STEPS = ("election", "routed", "first_ack")

FAILOVER_COLUMNS = (
    "fault_id", "kind", "broker_set", "dead_addr", "death_ms", "new_master", "epoch", "same_broker",
    "election_ms", "election_delay_ms", "namesrvs", "routed_namesrvs", "routed_ms", "routed_delay_ms",
    "first_ack_ms", "first_ack_delay_ms",
)


def _require(df: DataFrame, columns: list[str], what: str) -> None:
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise AnalysisInputError(f"{what} lacks columns {missing}")


def failover_view(faults: DataFrame, roles: DataFrame, snapshots: DataFrame, sends: DataFrame) -> DataFrame:
    """One row per failover, columns `FAILOVER_COLUMNS` (see the module docstring), by death time."""
    _require(faults, ["fault_id", "kind", "target", "t_ms"], "fault DataFrame")
    _require(roles, [c for c, _ in ROLE_COLUMNS], "role DataFrame")
    _require(snapshots, ["namesrv", "snapshot_ms", "broker_name", "broker_id", "broker_addr"], "snapshot DataFrame")
    _require(sends, ["t_ms", "ok", "broker_name", "latency_ms"], "send DataFrame")
    masters = roles.where(F.col("role").isin(*MASTER_ROLES))
    deaths = faults.where(F.col("kind").isin(*DEATH_KINDS)).select(
        "fault_id", "kind", F.col("target").alias("dead_addr"), F.col("t_ms").alias("death_ms"))
    held = masters.select(F.col("broker").alias("h_broker"), F.col("incarnation").alias("dead_incarnation"),
                          F.col("broker_set"), F.col("start_ms").alias("h_start"), F.col("end_ms").alias("h_end"))
    was_master = (
        deaths.join(held, (F.col("dead_addr") == F.col("h_broker")) & (F.col("h_start") <= F.col("death_ms"))
                    & (F.col("death_ms") <= F.col("h_end")))
        .groupBy("fault_id", "kind", "dead_addr", "death_ms", "broker_set")
        .agg(F.max("dead_incarnation").alias("dead_incarnation"))
        .withColumn("next_death_ms", F.lead("death_ms").over(Window.partitionBy("broker_set").orderBy("death_ms")))
    )
    before_next = F.col("next_death_ms").isNull() | (F.col("e_start") < F.col("next_death_ms"))
    successor = masters.select(F.col("broker_set").alias("e_set"), F.col("broker").alias("e_broker"),
                               F.col("incarnation").alias("e_incarnation"), F.col("epoch").alias("e_epoch"),
                               F.col("start_ms").alias("e_start"))
    elected = (
        was_master.join(successor, (F.col("e_set") == F.col("broker_set")) & (F.col("e_start") >= F.col("death_ms"))
                        & before_next & ((F.col("e_broker") != F.col("dead_addr"))
                                         | (F.col("e_incarnation") != F.col("dead_incarnation"))), "left")
        .groupBy(*was_master.columns)
        .agg(F.min(F.when(F.col("e_start").isNotNull(), F.struct("e_start", "e_broker", "e_epoch"))).alias("e"))
        .select(*was_master.columns, F.col("e.e_start").alias("election_ms"), F.col("e.e_broker").alias("new_master"),
                F.col("e.e_epoch").alias("epoch"))
    )
    return _with_acks(_with_routes(elected, snapshots), sends).select(*FAILOVER_COLUMNS).orderBy("death_ms", "fault_id")


def _with_routes(elected: DataFrame, snapshots: DataFrame) -> DataFrame:
    steps = snapshots.select("namesrv", "snapshot_ms").distinct()
    listed = (snapshots.where(F.col("broker_id") == 0)
              .select("namesrv", "snapshot_ms", F.col("broker_name").alias("r_set"),
                      F.col("broker_addr").alias("r_addr"))
              .distinct())
    key = ["fault_id", "namesrv"]
    after = elected.where(F.col("election_ms").isNotNull()).join(steps, F.col("snapshot_ms") >= F.col("election_ms"))
    seen = after.select(*key).distinct()
    routed = (
        after.join(listed, ["namesrv", "snapshot_ms"])
        .where((F.col("r_set") == F.col("broker_set")) & (F.col("r_addr") == F.col("new_master")))
        .groupBy(*key).agg(F.min("snapshot_ms").alias("routed_at"))
    )
    per_failover = (
        seen.join(routed, key, "left").groupBy("fault_id")
        .agg(F.count(F.lit(1)).alias("namesrvs"), F.count("routed_at").alias("routed_namesrvs"),
             F.max("routed_at").alias("slowest"))
        .withColumn("routed_ms", F.when(F.col("namesrvs") == F.col("routed_namesrvs"), F.col("slowest")))
        .drop("slowest")
    )
    return (elected.join(per_failover, "fault_id", "left")
            .withColumn("namesrvs", F.coalesce("namesrvs", F.lit(0)))
            .withColumn("routed_namesrvs", F.coalesce("routed_namesrvs", F.lit(0))))


def _with_acks(routed: DataFrame, sends: DataFrame) -> DataFrame:
    acks = sends.where(F.col("ok")).select(
        F.col("broker_name").alias("a_set"), (F.col("t_ms") + F.col("latency_ms").cast("long")).alias("ack_ms"))
    in_term = ((F.col("a_set") == F.col("broker_set")) & (F.col("ack_ms") >= F.col("election_ms"))
               & (F.col("next_death_ms").isNull() | (F.col("ack_ms") < F.col("next_death_ms"))))
    first = routed.join(acks, in_term, "left").groupBy("fault_id").agg(F.min("ack_ms").alias("first_ack_ms"))
    death = F.col("death_ms")
    return (
        routed.join(first, "fault_id", "left")
        .withColumn("same_broker", F.col("new_master") == F.col("dead_addr"))
        .withColumn("election_delay_ms", F.col("election_ms") - death)
        .withColumn("routed_delay_ms", F.col("routed_ms") - death)
        .withColumn("first_ack_delay_ms", F.col("first_ack_ms") - death)
    )


def failover_percentiles(view: DataFrame) -> DataFrame:
    """One row: how many failovers, how many completed each step, and the exact p50 / p99 of each
    step's delay after the death (null when no failover completed it)."""
    aggs = [F.count(F.lit(1)).alias("failovers")]
    for step in STEPS:
        col = f"{step}_delay_ms"
        pct = F.expr(f"percentile({col}, array(0.5, 0.99))")
        aggs += [F.count(col).alias(f"{step}_n"), pct.alias(f"_{step}")]
    out = view.agg(*aggs)
    for step in STEPS:
        out = (out.withColumn(f"{step}_p50_ms", F.col(f"_{step}")[0])
               .withColumn(f"{step}_p99_ms", F.col(f"_{step}")[1]).drop(f"_{step}"))
    return out


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f} ms"


@dataclass(frozen=True)
class FailoverReport:
    """The failover view of a chaos run, for the printed line and report.html's Failovers section."""

    rows: list[dict[str, Any]]
    """One per failover, `FAILOVER_COLUMNS` (epoch ms instants, ms delays)."""
    line: str
    """One line: how many, and each step's p50 / p99."""


def failover_report(spark: SparkSession, root: Path, snapshots: DataFrame, faults: DataFrame | None,
                    out: str | Path) -> FailoverReport | None:
    """With a chaos run's roles.parquet and sends.parquet under `root`: the failover view, written to
    OUT/failovers.parquet; None when the run recorded neither."""
    roles_path, sends_path = root / ROLES_FILE, root / SENDS_FILE
    if faults is None or not roles_path.is_file() or not sends_path.is_file():
        return None
    import pyarrow as pa
    import pyarrow.parquet as pq

    roles = spark.read.parquet(str(roles_path.resolve()))
    sends = spark.read.parquet(str(sends_path.resolve()))
    view = failover_view(faults, roles, snapshots, sends).cache()
    rows = [r.asDict() for r in view.collect()]
    Path(out).mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows) if rows else pa.table({c: [] for c in FAILOVER_COLUMNS}),
                   Path(out) / "failovers.parquet")
    if not rows:
        return FailoverReport(rows, "failovers: none (no master died while a master, by the brokers' role logs)")
    p = failover_percentiles(view).collect()[0].asDict()
    return FailoverReport(rows, (
        f"failovers: {p['failovers']}; death -> election p50 {_ms(p['election_p50_ms'])} p99 "
        f"{_ms(p['election_p99_ms'])} ({p['election_n']}); -> every NameServer routing the new master p50 "
        f"{_ms(p['routed_p50_ms'])} p99 {_ms(p['routed_p99_ms'])} ({p['routed_n']}); -> first acknowledged "
        f"send p50 {_ms(p['first_ack_p50_ms'])} p99 {_ms(p['first_ack_p99_ms'])} ({p['first_ack_n']})"))


def report_failovers(spark: SparkSession, root: Path, snapshots: DataFrame, faults: DataFrame | None,
                     out: str | Path) -> str | None:
    """`failover_report`'s one line (None when the run recorded no roles or sends)."""
    report = failover_report(spark, root, snapshots, faults, out)
    return None if report is None else report.line
