"""Results for people: the Parquet results keep epoch milliseconds (for machines); the printed
tables and the report show instants as seconds since the run began plus UTC wall-clock time, and
durations in ms / s / min.

Which column is which follows the naming of the analyses: a column ending in `duration_ms`,
`exposure_ms`, `delay_ms` or `elapsed_ms` is a duration, any other `*_ms` (or `*_ms_*`) column an
instant.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from clients.cli.render import clock, duration, since

DURATION_SUFFIXES: tuple[str, ...] = ("duration_ms", "exposure_ms", "delay_ms", "elapsed_ms")


def is_duration(column: str) -> bool:
    return column.endswith(DURATION_SUFFIXES)


def is_instant(column: str) -> bool:
    """`start_ms`, and the `snapshot_ms_with` kind too."""
    return (column.endswith("_ms") or "_ms_" in column) and not is_duration(column)


def _missing(v: Any) -> bool:
    try:
        return v is None or bool(pd.isna(v))
    except (TypeError, ValueError):  # an array: not missing
        return False


def instant(v: Any, t0_ms: int) -> str:
    return "-" if _missing(v) else f"{since(int(v), t0_ms)} {clock(int(v))}"


def _nested(v: Any, t0_ms: int) -> str:
    """An array of structs (e.g. removals: namesrv, removal_ms, delay_ms) as 'ns-a after 12 ms, ...'."""
    parts = []
    for item in v:
        if isinstance(item, dict):
            who = item.get("namesrv", "")
            d = next((item[k] for k in item if is_duration(k)), None)
            parts.append(f"{who} after {duration(d)}" if d is not None else f"{who} never")
        else:
            parts.append(str(item))
    return ", ".join(parts) if parts else "-"


def cell(column: str, v: Any, t0_ms: int) -> str:
    if isinstance(v, list | tuple) or (hasattr(v, "tolist") and not isinstance(v, str) and bool(getattr(v, "ndim", 0))):
        return _nested(list(v), t0_ms)
    if _missing(v):
        return "-"
    if is_duration(column):
        return duration(float(v))
    if is_instant(column):
        return instant(v, t0_ms)
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:.2f}"
    return str(v)


def header(column: str) -> str:
    """`start_ms` -> 'start', `duration_ms` -> 'duration', `snapshot_ms_with` -> 'snapshot_with'."""
    return column[:-3] if column.endswith("_ms") else column.replace("_ms_", "_")


def humanize(pdf: pd.DataFrame, t0_ms: int) -> pd.DataFrame:
    """Every cell as text for people (see the module doc); column names without `_ms`."""
    out = pd.DataFrame(index=pdf.index)
    for col in pdf.columns:
        out[header(col)] = [cell(col, v, t0_ms) for v in pdf[col].tolist()]
    return out
