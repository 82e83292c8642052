"""Run every analysis, write one Parquet result per analysis, print tables, render an HTML report.

Results are written by Spark (exact schema, nested columns kept) and read back with pyarrow for
the tables and plots, so each analysis runs exactly once. Plots use matplotlib's Agg backend
(no display needed). Time axes are seconds since the first snapshot, which reads better than
epoch milliseconds; the tables keep the raw milliseconds.
"""

from __future__ import annotations

import html
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from clients.analysis import jobs

if TYPE_CHECKING:
    from matplotlib.figure import Figure
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)


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
    return jobs.divergence_windows(
        spark, s, bucket_ms=o.bucket_ms, carry_ms=o.carry_ms, instants=memo.get("instants")
    )


ANALYSES: dict[str, Analysis] = {
    "divergence_instants": _div_instants,
    "divergence_windows": _div_windows,
    "liveness_intervals": lambda spark, s, f, o, m: jobs.liveness_intervals(spark, s),
    "detection_delays": lambda spark, s, f, o, m: jobs.detection_delays(spark, s, f),
    "stale_route_exposure": lambda spark, s, f, o, m: jobs.stale_route_exposure(spark, s, f),
    "topic_placement_skew": lambda spark, s, f, o, m: jobs.topic_placement_skew(
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
) -> dict[str, pd.DataFrame]:
    """Run all analyses; returns each result as pandas (also written to OUT/<name>.parquet)."""
    from tqdm.auto import tqdm

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
    if print_tables:
        _print_tables(results, timings, max_rows)
    faults_pdf = faults.toPandas() if faults is not None else None
    plots = render_plots(results, out, t0_ms=summary["first_ms"], faults=faults_pdf, bucket_ms=opts.bucket_ms)
    write_html(out / "report.html", results, timings, summary, plots, max_rows=max(max_rows, 50))
    log.info("analysis report written to %s", out / "report.html")
    return results


_NULLABLE_TYPES = {pa.int64(): pd.Int64Dtype(), pa.int32(): pd.Int32Dtype(), pa.bool_(): pd.BooleanDtype()}


def _to_pandas(table: pa.Table) -> pd.DataFrame:
    """Nullable dtypes, so an epoch-ms column with a null prints as an integer, not as 1.7e12."""
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


def _print_tables(results: dict[str, pd.DataFrame], timings: dict[str, float], max_rows: int) -> None:
    with pd.option_context("display.width", 200, "display.max_columns", 30, "display.max_colwidth", 60):
        for name, pdf in results.items():
            print(f"\n== {name}: {len(pdf)} rows ({timings[name]:.1f} s)")
            if len(pdf):
                print(pdf.head(max_rows).to_string(index=False))
                if len(pdf) > max_rows:
                    print(f"... {len(pdf) - max_rows} more rows in {name}.parquet")


# ------------------------------------------------------------------------------------------ plots
def _figure(height: float) -> Figure:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    return Figure(figsize=(12, height), dpi=100, layout="constrained")


def _seconds(ms: pd.Series | float, t0_ms: int) -> Any:
    return (ms - t0_ms) / 1000.0


def _fault_lines(ax: Any, faults: pd.DataFrame | None, t0_ms: int) -> None:
    if faults is None or faults.empty:
        return
    for _, f in faults.sort_values("t_ms").iterrows():
        x = _seconds(f["t_ms"], t0_ms)
        ax.axvline(x, color="crimson", linestyle="--", linewidth=1, alpha=0.7)
        ax.annotate(  # above the plot area, so labels never cover the bars
            f"{f['kind']} {f['target']}",
            (x, 1.0),
            xycoords=("data", "axes fraction"),
            xytext=(0, 3),
            textcoords="offset points",
            rotation=35,
            va="bottom",
            ha="left",
            fontsize=7,
            color="crimson",
            annotation_clip=False,
        )


def plot_liveness(
    liveness: pd.DataFrame, t0_ms: int, faults: pd.DataFrame | None, max_lanes: int = 40
) -> Figure:
    lanes = sorted({(r.namesrv, r.broker_addr, r.broker_name) for r in liveness.itertuples()})
    truncated = len(lanes) > max_lanes
    lanes = lanes[:max_lanes]
    fig = _figure(max(3.0, 0.35 * len(lanes) + 1.8))
    ax = fig.add_subplot()
    colors = {"advertised": "#c8c8c8", "alive": "#2e8b57", "expired": "#ff8c00"}
    heights = {"advertised": 0.8, "alive": 0.5, "expired": 0.5}
    index = {(ns, addr): i for i, (ns, addr, _) in enumerate(lanes)}
    for state in ("advertised", "alive", "expired"):
        part = liveness[liveness["state"] == state]
        for r in part.itertuples():
            y = index.get((r.namesrv, r.broker_addr))
            if y is None:
                continue
            start = _seconds(r.start_ms, t0_ms)
            width = max(_seconds(r.end_ms, t0_ms) - start, 0.5)
            h = heights[state]
            ax.broken_barh([(start, width)], (y - h / 2, h), facecolors=colors[state])
    ax.set_yticks(range(len(lanes)))
    ax.set_yticklabels([f"{ns} | {name} {addr}" for ns, addr, name in lanes], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("seconds since first snapshot")
    title = "Broker liveness as each NameServer sees it (gray advertised, green alive, orange expired)"
    pad = 60 if faults is not None and not faults.empty else 6
    ax.set_title(title + (f" — first {max_lanes} lanes" if truncated else ""), fontsize=10, pad=pad)
    ax.grid(axis="x", alpha=0.3)
    _fault_lines(ax, faults, t0_ms)
    return fig


def plot_divergence(
    instants: pd.DataFrame, windows: pd.DataFrame, t0_ms: int, bucket_ms: int, max_windows: int = 30
) -> Figure:
    fig = _figure(7.5)
    top, bottom = fig.subplots(2, 1, height_ratios=[1, 1.4])
    if instants.empty:
        top.text(0.5, 0.5, "NameServers agreed at every aligned instant", ha="center", va="center")
    else:  # stacked per kind over the full bucket grid (zeros filled in), so every kind stays visible
        from matplotlib.ticker import MaxNLocator

        counts = instants.groupby(["instant_ms", "kind"]).size().unstack(fill_value=0).sort_index()
        first, last = int(counts.index.min()), int(counts.index.max())
        grid = range(first - bucket_ms, last + 2 * bucket_ms, bucket_ms)
        counts = counts.reindex(grid, fill_value=0)
        x = _seconds(pd.Series(counts.index, dtype="float64"), t0_ms).to_numpy()
        ys = [counts[k].to_numpy(dtype="float64") for k in counts.columns]
        colors = ["#4169e1", "#ff8c00", "#2e8b57", "#8b008b"][: len(ys)]
        top.stackplot(x, *ys, labels=list(counts.columns), colors=colors, step="post", alpha=0.85)
        top.yaxis.set_major_locator(MaxNLocator(integer=True))
        top.legend(fontsize=8, loc="upper left")
        top.set_ylabel("divergent entries (all pairs)")
        top.grid(axis="y", alpha=0.3)
    top.set_title("Divergence between NameServers over time", fontsize=10)
    if windows.empty:
        bottom.text(0.5, 0.5, "no divergence windows", ha="center", va="center")
    else:
        longest = windows.sort_values("duration_ms", ascending=False).head(max_windows)
        longest = longest.sort_values("start_ms").reset_index(drop=True)
        for i, r in longest.iterrows():
            start = _seconds(r["start_ms"], t0_ms)
            width = max(r["duration_ms"] / 1000.0, 0.5)
            color = "#4169e1" if r["resolved"] else "#b22222"
            bottom.broken_barh([(start, width)], (i - 0.35, 0.7), facecolors=color)
        labels = [
            f"{r.kind}: {r.key}  ({r.namesrv_with} has, {r.namesrv_without} lacks)"
            for r in longest.itertuples()
        ]
        bottom.set_yticks(range(len(longest)))
        bottom.set_yticklabels(labels, fontsize=7)
        bottom.invert_yaxis()
        bottom.set_title(
            f"Divergence windows (blue resolved, red still open; longest {len(longest)} of {len(windows)})",
            fontsize=10,
        )
    bottom.set_xlabel("seconds since first snapshot")
    bottom.grid(axis="x", alpha=0.3)
    if not instants.empty:
        top.sharex(bottom)
    return fig


def plot_skew(skew: pd.DataFrame, max_topics: int = 30) -> Figure:
    issues = skew[skew["any_issue"]] if not skew.empty else skew
    shown = issues.head(max_topics)
    fig = _figure(max(3.0, 0.32 * len(shown) + 1.8))
    ax = fig.add_subplot()
    if shown.empty:
        ax.text(0.5, 0.5, "no topic placement issues", ha="center", va="center")
        ax.set_axis_off()
        return fig
    y = range(len(shown))
    ax.barh(y, shown["cluster_broker_groups"], color="#dddddd", label="broker groups in cluster")
    ax.barh(y, shown["broker_groups"], height=0.5, color="#4169e1", label="groups hosting the topic")
    for i, r in enumerate(shown.itertuples()):
        notes = []
        if r.write_wiped:
            notes.append("write wiped: " + ",".join(r.wiped_brokers))
        if r.queue_imbalanced:
            notes.append(f"write queues {r.min_write_queues}..{r.max_write_queues}")
        if notes:
            ax.text(
                r.cluster_broker_groups + 0.05, i, "; ".join(notes), va="center", fontsize=7, color="#b22222"
            )
    ax.set_yticks(list(y))
    ax.set_yticklabels([f"{r.namesrv} | {r.cluster} | {r.topic}" for r in shown.itertuples()], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, max(shown["cluster_broker_groups"].max(), 1) * 1.8)
    ax.set_xlabel("broker groups")
    ax.legend(fontsize=8, loc="lower right")
    ax.set_title(
        f"Topic placement issues (latest snapshot per NameServer; {len(shown)} of {len(issues)})", fontsize=10
    )
    return fig


def plot_stale(stale: pd.DataFrame, max_rows: int = 30) -> Figure:
    shown = stale.sort_values("exposure_ms", ascending=False).head(max_rows) if not stale.empty else stale
    fig = _figure(max(3.0, 0.32 * len(shown) + 1.8))
    ax = fig.add_subplot()
    if shown.empty:
        ax.text(0.5, 0.5, "no stale routes observed", ha="center", va="center")
        ax.set_axis_off()
        return fig
    colors = ["#b22222" if b == "fault" else "#ff8c00" for b in shown["basis"]]
    ax.barh(range(len(shown)), shown["exposure_ms"] / 1000.0, color=colors)
    ax.set_yticks(range(len(shown)))
    ax.set_yticklabels(
        [
            f"{r.namesrv} | {r.broker_name} {r.broker_addr} ({r.basis}, {r.ended_by})"
            for r in shown.itertuples()
        ],
        fontsize=8,
    )
    ax.invert_yaxis()
    ax.set_xlabel("seconds a dead broker stayed advertised (from death / last heartbeat)")
    ax.set_title("Stale-route exposure (red: per fault timeline, orange: per expired heartbeat)", fontsize=10)
    ax.grid(axis="x", alpha=0.3)
    return fig


def render_plots(
    results: dict[str, pd.DataFrame],
    out: Path,
    *,
    t0_ms: int,
    faults: pd.DataFrame | None,
    bucket_ms: int = jobs.DEFAULT_BUCKET_MS,
) -> dict[str, str]:
    """Write the PNGs; returns section title -> file name (relative to `out`)."""
    figures = {
        "Liveness timeline": ("liveness.png", plot_liveness(results["liveness_intervals"], t0_ms, faults)),
        "Divergence over time": (
            "divergence.png",
            plot_divergence(results["divergence_instants"], results["divergence_windows"], t0_ms, bucket_ms),
        ),
        "Stale-route exposure": ("stale.png", plot_stale(results["stale_route_exposure"])),
        "Topic placement skew": ("skew.png", plot_skew(results["topic_placement_skew"])),
    }
    written: dict[str, str] = {}
    for title, (fname, fig) in figures.items():
        fig.savefig(out / fname)
        written[title] = fname
    return written


# ------------------------------------------------------------------------------------------ html
def _fmt_ms(ms: int | None) -> str:
    if ms is None:
        return "-"
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat(timespec="milliseconds")


def write_html(
    path: Path,
    results: dict[str, pd.DataFrame],
    timings: dict[str, float],
    summary: dict[str, Any],
    plots: dict[str, str],
    *,
    max_rows: int = 50,
) -> None:
    esc = html.escape
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>NameServer route analysis</title>",
        "<style>body{font-family:sans-serif;margin:2em;max-width:1400px}"
        "table{border-collapse:collapse;font-size:12px}td,th{border:1px solid #ccc;padding:2px 6px}"
        "th{background:#f0f0f0}img{max-width:100%;border:1px solid #ddd}</style></head><body>",
        "<h1>NameServer route analysis</h1>",
        "<p>"
        + esc(
            f"{summary['rows']:,} snapshot rows, {summary['snapshots']:,} snapshots "
            f"from {summary['namesrvs']} NameServer(s), {summary['broker_addrs']} broker address(es), "
            f"{summary['topics']} topic(s); "
            f"{_fmt_ms(summary['first_ms'])} .. {_fmt_ms(summary['last_ms'])} (UTC)."
        )
        + "</p>",
        "<h2>Plots</h2>",
    ]
    for title, fname in plots.items():
        parts.append(f'<h3>{esc(title)}</h3><img src="{esc(fname)}" alt="{esc(title)}">')
    parts.append("<h2>Results</h2>")
    for name, pdf in results.items():
        parts.append(
            f"<h3 id='{esc(name)}'>{esc(name)}</h3><p>{len(pdf):,} rows in <code>{esc(name)}.parquet</code>, "
            f"computed in {timings[name]:.1f} s.</p>"
        )
        if len(pdf):
            parts.append(pdf.head(max_rows).to_html(index=False, border=0))
            if len(pdf) > max_rows:
                parts.append(f"<p>… {len(pdf) - max_rows:,} more rows.</p>")
    parts.append("</body></html>")
    path.write_text("\n".join(parts), encoding="utf-8")
