"""The report's plots (matplotlib, Agg backend: no display needed), embedded in report.html as PNG
data URIs so the report is one self-contained file. Time axes are seconds since the run began (or
since the first snapshot, for a dataset without a chaos run)."""

from __future__ import annotations

import base64
import io
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pandas as pd

from clients.chaos.schema import (
    HOST_FAULTS,
    ISOLATE_HOST,
    KILL_NAMESRV,
    MIX_KINDS,
    PARTITION_BROKER_NAMESRV,
    TIMELINE_KINDS,
)
from clients.chaos.summary import revival_of

if TYPE_CHECKING:
    from matplotlib.figure import Figure


@dataclass(frozen=True, slots=True)
class Plot:
    title: str
    caption: str
    data_uri: str
    """`data:image/png;base64,...`: the image itself, no file beside the report."""


FAULT_COLOR, OUTAGE_COLOR, CUT_COLOR = "crimson", "#8b008b", "#d2691e"
LIVENESS_COLORS = {"advertised": "#c8c8c8", "alive": "#2e8b57", "expired": "#ff8c00"}


def _figure(height: float) -> Figure:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    return Figure(figsize=(12, height), dpi=100, layout="constrained")


def _seconds(ms: pd.Series | float, t0_ms: int) -> Any:
    return (ms - t0_ms) / 1000.0


def _fault_lines(ax: Any, faults: pd.DataFrame | None, t0_ms: int) -> None:
    """A faint dashed line at each fault (the timeline plot names them)."""
    if faults is None or faults.empty:
        return
    for t in faults.loc[faults["kind"].isin(MIX_KINDS), "t_ms"]:
        ax.axvline(_seconds(t, t0_ms), color=FAULT_COLOR, linestyle="--", linewidth=0.8, alpha=0.5)


def plot_divergence(
    instants: pd.DataFrame, windows: pd.DataFrame, t0_ms: int, bucket_ms: int, max_windows: int = 30, *,
    faults: pd.DataFrame | None = None, x_label: str = "seconds since the first snapshot",
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
            width = max(r["duration_ms"], bucket_ms / 2) / 1000.0
            color = "#4169e1" if r["resolved"] else "#b22222"
            bottom.broken_barh([(start, width)], (i - 0.35, 0.7), facecolors=color)
        def opener(r: Any) -> str:
            fid = getattr(r, "opened_by_fault_id", None)
            return "" if fid is None or pd.isna(fid) else f"  after #{fid} {r.opened_by_kind}"

        labels = [
            f"{r.kind}: {r.key}  ({r.namesrv_with} has, {r.namesrv_without} lacks){opener(r)}"
            for r in longest.itertuples()
        ]
        bottom.set_yticks(range(len(longest)))
        bottom.set_yticklabels(labels, fontsize=7)
        bottom.invert_yaxis()
        bottom.set_title(
            f"Divergence windows (blue resolved, red still open; longest {len(longest)} of {len(windows)})",
            fontsize=10,
        )
    bottom.set_xlabel(x_label)
    bottom.grid(axis="x", alpha=0.3)
    for ax in (top, bottom):
        _fault_lines(ax, faults, t0_ms)
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
    def which(r: Any) -> str:
        return r.basis if r.fault_id is None or pd.isna(r.fault_id) else f"fault #{r.fault_id}"

    ax.set_yticklabels(
        [f"{r.namesrv} | {r.broker_name} {r.broker_addr} ({which(r)}, {r.ended_by})" for r in shown.itertuples()],
        fontsize=8,
    )
    ax.invert_yaxis()
    ax.set_xlabel("seconds a dead broker stayed advertised (from death / last heartbeat)")
    ax.set_title("Stale-route exposure (red: per fault timeline, orange: per expired heartbeat)", fontsize=10)
    ax.grid(axis="x", alpha=0.3)
    return fig


def _fault_spans(faults: pd.DataFrame | None, end_ms: int) -> list[dict[str, Any]]:
    """Each fault with the instant its revival came (or `end_ms`), as plain rows."""
    if faults is None or faults.empty:
        return []
    rows = [r for r in faults.to_dict("records") if r["kind"] in TIMELINE_KINDS]
    revived = revival_of(rows)
    return [{**r, "until_ms": revived[r["fault_id"]]["t_ms"] if r["fault_id"] in revived else end_ms}
            for r in rows if r["kind"] in MIX_KINDS]


def plot_timeline(liveness: pd.DataFrame, faults: pd.DataFrame | None, t0_ms: int, *,
                  x_label: str = "seconds since the run began", max_lanes: int = 40) -> Figure:
    """Every NameServer's view of every broker (liveness bars), with the faults over it: a broker
    fault shades that broker's lanes from the fault to its revival, a NameServer kill shades that
    NameServer's lanes until it answered again, a host fault shades the lanes of the NameServers it
    cuts from the broker (belief against reach: an advertised bar under that shade is a stale route,
    a gap outside it a lost one) until the heal, and a dashed line marks each fault."""
    from matplotlib.patches import Patch

    lanes = sorted({(r.namesrv, r.broker_addr, r.broker_name) for r in liveness.itertuples()})
    truncated = len(lanes) > max_lanes
    lanes = lanes[:max_lanes]
    fig = _figure(max(3.5, 0.4 * len(lanes) + 2.2))
    ax = fig.add_subplot()
    index = {(ns, addr): i for i, (ns, addr, _) in enumerate(lanes)}
    heights = {"advertised": 0.8, "alive": 0.5, "expired": 0.5}
    for state in ("advertised", "alive", "expired"):
        for r in liveness[liveness["state"] == state].itertuples():
            y = index.get((r.namesrv, r.broker_addr))
            if y is None:
                continue
            start = _seconds(r.start_ms, t0_ms)
            width = max(_seconds(r.end_ms, t0_ms) - start, 0.05)
            h = heights[state]
            ax.broken_barh([(start, width)], (y - h / 2, h), facecolors=LIVENESS_COLORS[state])
    end_ms = int(liveness["end_ms"].max()) if not liveness.empty else t0_ms
    for f in _fault_spans(faults, end_ms):
        start = _seconds(f["t_ms"], t0_ms)
        width = max(_seconds(f["until_ms"], t0_ms) - start, 0.05)
        if f["kind"] == KILL_NAMESRV:
            hit = [i for i, (ns, _, _) in enumerate(lanes) if ns == f["target"]]
            color, hatch = OUTAGE_COLOR, "//"
        elif f["kind"] in HOST_FAULTS:  # only the lanes of NameServers the cut keeps from the broker
            addr = f.get("broker_addr") or f["target"]
            hit = [i for i, (ns, a, _) in enumerate(lanes) if a == addr and (
                f["kind"] == ISOLATE_HOST or (f["kind"] == PARTITION_BROKER_NAMESRV and ns == f.get("peer")))]
            color, hatch = CUT_COLOR, "xx"
        else:
            addr = f.get("broker_addr") or f["target"]
            hit = [i for i, (_, a, name) in enumerate(lanes) if a == addr or name == f["target"]]
            color, hatch = FAULT_COLOR, None
        for y in hit:
            ax.broken_barh([(start, width)], (y - 0.45, 0.9), facecolors=color, alpha=0.18, hatch=hatch,
                           edgecolor=color, linewidth=0)
        ax.axvline(start, color=color, linestyle="--", linewidth=1, alpha=0.8)
        ax.annotate(f"#{f['fault_id']} {f['kind']} {f['target']}", (start, 1.0), xycoords=("data", "axes fraction"),
                    xytext=(0, 3), textcoords="offset points", rotation=35, va="bottom", ha="left", fontsize=7,
                    color=color, annotation_clip=False)
    namesrvs = [ns for ns, _, _ in lanes]
    for i in range(1, len(namesrvs)):
        if namesrvs[i] != namesrvs[i - 1]:
            ax.axhline(i - 0.5, color="#888888", linewidth=0.8)
    ax.set_yticks(range(len(lanes)))
    ax.set_yticklabels([f"{ns} | {name} {addr}" for ns, addr, name in lanes], fontsize=8)
    ax.set_ylim(len(lanes) - 0.5, -0.5)
    ax.set_xlabel(x_label)
    ax.grid(axis="x", alpha=0.3)
    handles = [Patch(facecolor=LIVENESS_COLORS["alive"], label="advertised, heartbeat alive"),
               Patch(facecolor=LIVENESS_COLORS["expired"], label="advertised, heartbeat expired"),
               Patch(facecolor=LIVENESS_COLORS["advertised"], label="advertised"),
               Patch(facecolor=FAULT_COLOR, alpha=0.3, label="broker faulted until revived"),
               Patch(facecolor=OUTAGE_COLOR, alpha=0.3, hatch="//", label="NameServer killed until it answered")]
    if any(f["kind"] in HOST_FAULTS for f in _fault_spans(faults, end_ms)):
        handles.append(Patch(facecolor=CUT_COLOR, alpha=0.3, hatch="xx",
                             label="NameServer cut from the broker by the kernel until healed"))
    fig.legend(handles=handles, fontsize=7, loc="outside lower center", ncol=3, frameon=False)
    title = "Faults over each NameServer's view of broker liveness (one lane per NameServer and broker)"
    pad = 100 if faults is not None and not faults.empty else 6  # room for the rotated fault labels
    ax.set_title(title + (f" — first {max_lanes} lanes" if truncated else ""), fontsize=10, pad=pad)
    return fig


def data_uri(fig: Figure) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def render_plots(results: dict[str, pd.DataFrame], *, t0_ms: int, faults: pd.DataFrame | None, bucket_ms: int,
                 x_label: str) -> list[Plot]:
    """Every plot of the report, in reading order, as embedded images."""
    timeline = plot_timeline(results["liveness_intervals"], faults, t0_ms, x_label=x_label)
    divergence = plot_divergence(results["divergence_instants"], results["divergence_windows"], t0_ms, bucket_ms,
                                 faults=faults, x_label=x_label)
    return [
        Plot("Timeline: faults over liveness", "Each lane is one NameServer's view of one broker; shaded spans are "
             "faults, from the fault to the revival.", data_uri(timeline)),
        Plot("Divergence over time", "Entries one NameServer advertised and another did not, per aligned "
             "instant, and the longest windows.", data_uri(divergence)),
        Plot("Stale-route exposure", "How long a dead broker stayed advertised.",
             data_uri(plot_stale(results["stale_route_exposure"]))),
        Plot("Topic placement skew", "Latest snapshot per NameServer.",
             data_uri(plot_skew(results["topic_placement_skew"]))),
    ]
