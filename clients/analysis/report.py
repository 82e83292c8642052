"""Run every analysis, write one Parquet result per analysis, print the tables, write report.html.

Results are written by Spark (exact schema, nested columns kept) and read back with pyarrow for the
tables and plots, so each analysis runs exactly once. With a fault timeline, the per-fault table
(`per_fault`) comes first, in print and in the report. The Parquet results keep epoch milliseconds;
what people read shows seconds since the run began and UTC wall-clock time (`display`). Plots are
in `plots`, the page in `templates/report.html.j2` (`report_html`).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from clients.analysis import fault_jobs, jobs, partition_jobs, per_fault, placement
from clients.analysis.display import humanize
from clients.analysis.inputs import ChaosRun
from clients.cli.render import clock, table

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from clients.analysis.failover import FailoverReport

log = logging.getLogger(__name__)

FAULT_SUMMARY = "fault_summary"
"""Name of the per-fault table (and of its Parquet file)."""


@dataclass(frozen=True, slots=True)
class ReportOptions:
    bucket_ms: int = jobs.DEFAULT_BUCKET_MS
    carry_ms: int | None = None
    include_system_topics: bool = False


Analysis = Callable[
    ["SparkSession", "DataFrame", "DataFrame | None", ReportOptions, dict[str, Any]], "DataFrame"
]


def _div_instants(
    spark: SparkSession, s: DataFrame, f: DataFrame | None, o: ReportOptions, memo: dict[str, Any]
) -> DataFrame:
    return jobs.divergence_instants(spark, s, bucket_ms=o.bucket_ms, carry_ms=o.carry_ms)


def _div_windows(
    spark: SparkSession, s: DataFrame, f: DataFrame | None, o: ReportOptions, memo: dict[str, Any]
) -> DataFrame:
    windows = jobs.divergence_windows(
        spark, s, bucket_ms=o.bucket_ms, carry_ms=o.carry_ms, instants=memo.get("instants")
    )
    return fault_jobs.divergence_opened_by(spark, windows, s, f, o.bucket_ms)


ANALYSES: dict[str, Analysis] = {
    "divergence_instants": _div_instants,
    "divergence_windows": _div_windows,
    "liveness_intervals": lambda spark, s, f, o, m: jobs.liveness_intervals(spark, s),
    "detection_delays": lambda spark, s, f, o, m: fault_jobs.detection_delays(spark, s, f),
    "return_delays": lambda spark, s, f, o, m: fault_jobs.return_delays(spark, s, f),
    "stale_route_exposure": lambda spark, s, f, o, m: fault_jobs.stale_route_exposure(spark, s, f),
    "partition_views": lambda spark, s, f, o, m: partition_jobs.partition_views(spark, s, f),
    "topic_placement_skew": lambda spark, s, f, o, m: placement.topic_placement_skew(
        spark, s, include_system_topics=o.include_system_topics
    ),
}
"""Name -> analysis, in run order; each name is also its Parquet result's file name."""


def run_report(
    spark: SparkSession,
    snapshots: DataFrame,
    faults: DataFrame | None,
    out_dir: str | os.PathLike[str],
    *,
    options: ReportOptions | None = None,
    progress: bool = True,
    print_tables: bool = True,
    max_rows: int = 20,
    run: ChaosRun | None = None,
    failovers: FailoverReport | None = None,
) -> dict[str, pd.DataFrame]:
    """Run all analyses; returns each result as pandas (also written to OUT/<name>.parquet), plus
    `fault_summary` (one row per fault) when there is a fault timeline. `run`: the chaos run the
    snapshots come from, whose own records join the per-fault table. `failovers`: the run's failover
    view (`failover.failover_report`), shown as report.html's Failovers section."""
    from tqdm.auto import tqdm

    from clients.analysis import report_html
    from clients.analysis.plots import render_plots

    opts = options or ReportOptions()
    out = Path(out_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    snapshots = snapshots.cache()
    summary = _summary(snapshots)
    results: dict[str, pd.DataFrame] = {}
    timings: dict[str, float] = {}
    memo: dict[str, Any] = {}
    try:
        bar = tqdm(ANALYSES.items(), total=len(ANALYSES), disable=not progress, unit="analysis")
        for name, analysis in bar:
            bar.set_description(name)
            started = time.perf_counter()
            df = analysis(spark, snapshots, faults, opts, memo)
            path = out / f"{name}.parquet"
            df.write.mode("overwrite").parquet(str(path))
            results[name] = _to_pandas(pq.read_table(path))
            timings[name] = time.perf_counter() - started
            if name == "divergence_instants":  # reused by the windows: read the written result back
                memo["instants"] = spark.read.parquet(str(path))
    finally:
        snapshots.unpersist()
    faults_pdf = faults.toPandas() if faults is not None else None
    t0_ms, x_label, t0_text = _time_zero(run, summary, faults_pdf)
    by_fault = None
    if faults_pdf is not None and not faults_pdf.empty:
        names = (run.broker_names if run is not None else {}) or _broker_names(results["liveness_intervals"])
        by_fault = per_fault.fault_table(results, faults_pdf, run, names)
        pq.write_table(pa.Table.from_pandas(by_fault, preserve_index=False), out / f"{FAULT_SUMMARY}.parquet")
        results[FAULT_SUMMARY] = by_fault
    if print_tables:
        _print_tables(results, timings, max_rows, t0_ms, t0_text, by_fault)
    plots = render_plots(results, t0_ms=t0_ms, faults=faults_pdf, bucket_ms=opts.bucket_ms, x_label=x_label)
    report_html.write_report(
        out / "report.html",
        intro=_intro(summary, run, t0_text, opts),
        faults=None if by_fault is None else (per_fault.HEADERS, per_fault.for_people(by_fault, t0_ms)),
        invariants=(run.summary.get("invariants") or []) if run is not None else [],
        failovers=None if failovers is None else _failover_section(failovers, t0_ms),
        plots=plots,
        sections=[_section(name, results[name], timings[name], t0_ms, max(max_rows, 50)) for name in ANALYSES],
    )
    log.info("analysis report written to %s", out / "report.html")
    return results


_NULLABLE_TYPES = {pa.int64(): pd.Int64Dtype(), pa.int32(): pd.Int32Dtype(), pa.bool_(): pd.BooleanDtype()}


def _to_pandas(table: pa.Table) -> pd.DataFrame:
    """Nullable dtypes, so an epoch-ms column with a null stays an integer, not 1.7e12."""
    return table.to_pandas(types_mapper=_NULLABLE_TYPES.get)


def _summary(snapshots: DataFrame) -> dict[str, Any]:
    from pyspark.sql import functions as F

    row = snapshots.agg(
        F.count(F.lit(1)).alias("rows"),
        F.min("snapshot_ms").alias("first_ms"),
        F.max("snapshot_ms").alias("last_ms"),
        F.countDistinct("namesrv").alias("namesrvs"),
        F.countDistinct("namesrv", "snapshot_ms").alias("snapshots"),
        F.countDistinct("broker_addr").alias("broker_addrs"),
        F.countDistinct("topic").alias("topics"),
    ).collect()[0]
    return row.asDict()


def _time_zero(run: ChaosRun | None, summary: dict[str, Any],
               faults: pd.DataFrame | None) -> tuple[int, str, str]:
    """(t0 ms, axis label, one sentence): the run's start when known, else the first snapshot."""
    if run is not None and run.started_ms is not None:
        t0 = run.started_ms
        return t0, "seconds since the run began", f"times are seconds since the run began ({clock(t0)} UTC)"
    t0 = int(summary["first_ms"])
    if faults is not None and not faults.empty:
        t0 = min(t0, int(faults["t_ms"].min()))
    return t0, "seconds since the first snapshot", f"times are seconds since the first record ({clock(t0)} UTC)"


def _broker_names(liveness: pd.DataFrame) -> dict[str, str]:
    return {str(r.broker_addr): str(r.broker_name) for r in liveness.itertuples()}


def _intro(summary: dict[str, Any], run: ChaosRun | None, t0_text: str, opts: ReportOptions) -> list[str]:
    from datetime import UTC, datetime

    day = datetime.fromtimestamp(int(summary["first_ms"]) / 1000, tz=UTC).date().isoformat()
    lines = [run.describe() + "."] if run is not None else []
    lines.append(
        f"{summary['rows']:,} snapshot rows, {summary['snapshots']:,} snapshots from {summary['namesrvs']} "
        f"NameServer(s), {summary['broker_addrs']} broker address(es), {summary['topics']} topic(s), "
        f"{clock(summary['first_ms'])} .. {clock(summary['last_ms'])} UTC on {day}; "
        f"NameServers compared every {opts.bucket_ms / 1000:g} s (a snapshot stands for "
        f"{(opts.bucket_ms if opts.carry_ms is None else opts.carry_ms) / 1000:g} s)."
    )
    lines.append(t0_text[0].upper() + t0_text[1:] + "; durations in ms, s or min.")
    return lines


def _failover_section(failovers: FailoverReport, t0_ms: int) -> dict[str, Any]:
    """The failover view for report.html: its p50/p99 line and one row per failover, for people."""
    from clients.analysis.failover import FAILOVER_COLUMNS

    shown = humanize(pd.DataFrame(failovers.rows, columns=list(FAILOVER_COLUMNS)), t0_ms)
    return {"line": failovers.line, "headers": list(shown.columns), "cells": shown.values.tolist()}


def _section(name: str, pdf: pd.DataFrame, seconds: float, t0_ms: int, max_rows: int) -> dict[str, Any]:
    shown = humanize(pdf.head(max_rows), t0_ms)
    return {
        "name": name, "rows": len(pdf), "seconds": seconds, "file": f"{name}.parquet",
        "headers": list(shown.columns), "cells": shown.values.tolist(), "more": max(0, len(pdf) - max_rows),
    }


def _print_tables(results: dict[str, pd.DataFrame], timings: dict[str, float], max_rows: int, t0_ms: int,
                  t0_text: str, by_fault: pd.DataFrame | None) -> None:
    print(f"\n({t0_text}; durations in ms / s)")
    if by_fault is not None:
        print(f"\n== faults: {len(by_fault)} (read this first)")
        print(table(per_fault.HEADERS, per_fault.for_people(by_fault, t0_ms)))
    with pd.option_context("display.width", 250, "display.max_columns", 30, "display.max_colwidth", 70):
        for name in ANALYSES:
            pdf = results[name]
            print(f"\n== {name}: {len(pdf)} rows ({timings[name]:.1f} s)")
            if len(pdf):
                print(humanize(pdf.head(max_rows), t0_ms).to_string(index=False))
                if len(pdf) > max_rows:
                    print(f"... {len(pdf) - max_rows} more rows in {name}.parquet")
