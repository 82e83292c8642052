"""The report's first table: one row per injected fault, relating every analysis to it.

The harness' columns (`clients.chaos.summary`: what the chaos run measured itself, producers, lost
messages) are joined with what Spark found in the snapshots: when every NameServer stopped
advertising the broker (`detection_delays`), when every one advertised it again after its revival
(`return_delays`), how long a dead broker stayed advertised (`stale_route_exposure`, per fault) and
how many divergence windows the fault or its revival opened (`divergence_windows.opened_by_*`).
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from clients.analysis.inputs import ChaosRun
from clients.chaos.schema import BROKER_FAULTS
from clients.chaos.summary import SUMMARY_COLUMNS, fault_summary, followed, lost_text, revival_of
from clients.cli.render import clock, duration, since

SPARK_COLUMNS: tuple[str, ...] = (
    "spark_namesrvs", "spark_removed", "spark_detect_delay_ms",
    "spark_back_namesrvs", "spark_back", "spark_back_delay_ms",
    "stale_windows", "stale_max_exposure_ms",
    "divergence_windows", "divergence_max_duration_ms",
)
COLUMNS = SUMMARY_COLUMNS + SPARK_COLUMNS

HEADERS: tuple[str, ...] = (
    "fault", "at", "UTC", "kind", "target",
    "every NameServer dropped it (snapshots)", "the harness measured", "producers followed", "revived",
    "back in every NameServer (snapshots)", "stale route, longest", "divergence windows opened", "messages lost",
)


def _rows(pdf: pd.DataFrame | None, column: str, value: Any) -> list[dict[str, Any]]:
    if pdf is None or pdf.empty or column not in pdf.columns:
        return []
    return [r for r in pdf.to_dict("records") if r[column] is not None and not pd.isna(r[column])
            and r[column] == value]


def _int(v: Any) -> int | None:
    return None if v is None or pd.isna(v) else int(v)


def fault_table(results: dict[str, pd.DataFrame], faults: pd.DataFrame, run: ChaosRun | None,
                broker_names: dict[str, str]) -> pd.DataFrame:
    """One row per fault (kinds of MIX_KINDS), columns `COLUMNS` (raw numbers, epoch ms)."""
    timeline: list[dict[str, Any]] = [
        {k: (None if v is None or (not isinstance(v, str) and pd.isna(v)) else v) for k, v in r.items()}
        for r in faults.to_dict("records")
    ]
    for r in timeline:
        r["fault_id"], r["t_ms"] = int(str(r["fault_id"])), int(str(r["t_ms"]))
    end_ms = None
    if run is not None and run.summary.get("ended_ms"):
        end_ms = int(run.summary["ended_ms"])
    base = fault_summary(timeline, run.detections if run else [], run.sends if run else None, broker_names, end_ms)
    revived = revival_of(timeline)
    det, ret = results.get("detection_delays"), results.get("return_delays")
    stale, div = results.get("stale_route_exposure"), results.get("divergence_windows")
    for row in base:
        fid = row["fault_id"]
        rev_id = revived[fid]["fault_id"] if fid in revived else None
        d = _rows(det, "fault_id", fid)
        row["spark_namesrvs"] = max((_int(x["namesrvs"]) or 0 for x in d), default=None)
        row["spark_removed"] = min((_int(x["removed"]) or 0 for x in d), default=None)
        all_removed = bool(d) and all(bool(x["all_removed"]) for x in d)
        row["spark_detect_delay_ms"] = max(_int(x["last_delay_ms"]) or 0 for x in d) if all_removed else None
        b = _rows(ret, "fault_id", rev_id) if rev_id is not None else []
        row["spark_back_namesrvs"] = max((_int(x["namesrvs"]) or 0 for x in b), default=None)
        row["spark_back"] = min((_int(x["back"]) or 0 for x in b), default=None)
        all_back = bool(b) and all(bool(x["all_back"]) for x in b)
        row["spark_back_delay_ms"] = max(_int(x["last_delay_ms"]) or 0 for x in b) if all_back else None
        s = [x for x in _rows(stale, "fault_id", fid) if x["basis"] == "fault"]
        row["stale_windows"] = len(s)
        row["stale_max_exposure_ms"] = max((_int(x["exposure_ms"]) or 0 for x in s), default=None)
        w = _rows(div, "opened_by_fault_id", fid) + (_rows(div, "opened_by_fault_id", rev_id) if rev_id else [])
        row["divergence_windows"] = len(w)
        row["divergence_max_duration_ms"] = max((_int(x["duration_ms"]) or 0 for x in w), default=None)
    return pd.DataFrame(base, columns=list(COLUMNS), dtype=object)


def _spark_followed(n_seen: Any, n: Any, ms: Any) -> str:
    if n is None or pd.isna(n) or not n:
        return "-"
    if ms is not None and not pd.isna(ms):
        return f"after {duration(float(ms))} ({int(n_seen)}/{int(n)})"
    return f"only {int(n_seen or 0)}/{int(n)}"


def for_people(table: pd.DataFrame, t0_ms: int) -> list[tuple[str, ...]]:
    """The table's rows as text, in the order of `HEADERS`."""
    out: list[tuple[str, ...]] = []
    for r in table.to_dict("records"):
        broker = r["kind"] in BROKER_FAULTS
        rev = r["revived_ms"]
        if rev is None or pd.isna(rev):
            revived = "never"
        else:
            after = duration(float(rev) - r["t_ms"])
            revived = f"{r['revival_kind']} after {after}" if broker else f"answering again after {after}"
        stale = "-"
        if r["stale_windows"]:
            stale = f"{duration(float(r['stale_max_exposure_ms']))} ({r['stale_windows']} windows)"
        div = "none" if not r["divergence_windows"] else (
            f"{r['divergence_windows']}, longest {duration(float(r['divergence_max_duration_ms']))}")
        out.append((
            f"#{r['fault_id']}", since(r["t_ms"], t0_ms), clock(r["t_ms"]), str(r["kind"]), str(r["target"]),
            _spark_followed(r["spark_removed"], r["spark_namesrvs"], r["spark_detect_delay_ms"]) if broker else "-",
            followed(r["namesrvs_detected"], r["namesrvs"], _int(r["namesrv_detect_delay_ms"])),
            followed(r["producers_followed"], r["producers"], _int(r["producer_follow_delay_ms"])),
            revived,
            _spark_followed(r["spark_back"], r["spark_back_namesrvs"], r["spark_back_delay_ms"]) if broker else "-",
            stale, div, lost_text({k: _int(r[k]) for k in ("acknowledged", "lost")}),
        ))
    return out
