"""The table a person reads first: one row per injected fault, saying what it hit, when every
NameServer and every producer followed, when it was revived and back everywhere, and whether a
message was lost on its account.

Pure functions over plain rows (dicts, as `pyarrow.Table.to_pylist()` gives them), so the chaos
report and the Spark analysis build the same table from the same files: `faults.parquet`,
`detections.parquet` and `sends.parquet` of a chaos output directory.

Pairing rules (the same the Spark analyses use): a broker fault is revived by the next
restart_broker / sigcont_broker of the same target; a NameServer kill by the next restart_namesrv
of the same NameServer. A message counts against a broker fault when the faulted broker
acknowledged it between that broker's previous revival (or the run's start) and this fault's
revival; against a NameServer kill when it was acknowledged while that NameServer was down.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from clients.chaos.schema import BROKER_FAULTS, BROKER_REVIVALS, KILL_NAMESRV, MIX_KINDS, RESTART_NAMESRV
from clients.cli.render import duration

SUMMARY_COLUMNS: tuple[str, ...] = (
    "fault_id", "t_ms", "kind", "target", "broker_name",
    "namesrvs", "namesrvs_detected", "namesrv_detect_delay_ms",
    "producers", "producers_followed", "producer_follow_delay_ms",
    "revival_kind", "revived_ms", "namesrvs_back", "namesrv_back_delay_ms",
    "acknowledged", "lost",
)
"""t_ms and revived_ms are instants; each `*_delay_ms` is the slowest observer's delay after the fault
(detect, follow) or after the revival (back), None unless every observer followed."""


def revival_of(timeline: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """fault_id of each fault -> the timeline row that revived it (broker and NameServer faults)."""
    out: dict[int, dict[str, Any]] = {}
    for f in timeline:
        if f["kind"] not in MIX_KINDS:
            continue
        kinds = BROKER_REVIVALS if f["kind"] in BROKER_FAULTS else {RESTART_NAMESRV}
        later = [r for r in timeline if r["kind"] in kinds and r["target"] == f["target"] and r["t_ms"] > f["t_ms"]]
        if later:
            out[f["fault_id"]] = min(later, key=lambda r: (r["t_ms"], r["fault_id"]))
    return out


def _slowest(rows: list[dict[str, Any]]) -> tuple[int, int | None]:
    """(how many observers saw it, the slowest one's elapsed ms when all did)."""
    seen = [r["elapsed_ms"] for r in rows if r["elapsed_ms"] is not None]
    return len(seen), (max(seen) if rows and len(seen) == len(rows) else None)


def fault_summary(
    timeline: list[dict[str, Any]],
    detections: Iterable[dict[str, Any]] = (),
    sends: Iterable[dict[str, Any]] | None = None,
    broker_names: dict[str, str] | None = None,
    end_ms: int | None = None,
) -> list[dict[str, Any]]:
    """One row per fault (kinds of MIX_KINDS) in time order, columns `SUMMARY_COLUMNS`.

    `detections` are the harness' own rows (`Detection` as dicts); `sends` the per-send records with
    `lost` filled in (None: message columns stay None); `broker_names` maps broker address to broker
    name (default: the address without its '-<brokerId>' suffix, the launcher's naming)."""
    dets = list(detections)
    acked = None if sends is None else [s for s in sends if s.get("ok")]
    names = broker_names or {}
    revived = revival_of(timeline)
    horizon = end_ms if end_ms is not None else max((r["t_ms"] for r in timeline), default=0) + 10**9
    out = []
    for f in sorted((r for r in timeline if r["kind"] in MIX_KINDS), key=lambda r: (r["t_ms"], r["fault_id"])):
        fid, rev = f["fault_id"], revived.get(f["fault_id"])
        broker = None if f["kind"] == KILL_NAMESRV else names.get(f["target"], f["target"].rsplit("-", 1)[0])
        ns = [d for d in dets if d["fault_id"] == fid and d["observer_kind"] == "namesrv"]
        prod = [d for d in dets if d["fault_id"] == fid and d["observer_kind"] == "producer"]
        rev_id = None if rev is None else rev["fault_id"]
        back = [d for d in dets if d["fault_id"] == rev_id and d["observer_kind"] == "namesrv"]
        ns_seen, ns_ms = _slowest(ns)
        prod_seen, prod_ms = _slowest(prod)
        back_seen, back_ms = _slowest(back)
        row: dict[str, Any] = {
            "fault_id": fid, "t_ms": f["t_ms"], "kind": f["kind"], "target": f["target"], "broker_name": broker,
            "namesrvs": len(ns), "namesrvs_detected": ns_seen, "namesrv_detect_delay_ms": ns_ms,
            "producers": len(prod), "producers_followed": prod_seen, "producer_follow_delay_ms": prod_ms,
            "revival_kind": None if rev is None else rev["kind"],
            "revived_ms": None if rev is None else rev["t_ms"],
            "namesrvs_back": back_seen, "namesrv_back_delay_ms": back_ms,
            "acknowledged": None, "lost": None,
        }
        if acked is not None:
            until = rev["t_ms"] if rev is not None else horizon
            if f["kind"] == KILL_NAMESRV:
                mine = [s for s in acked if f["t_ms"] <= s["t_ms"] <= until]
            else:
                since = max((r["t_ms"] for r in timeline if r["kind"] in BROKER_REVIVALS
                             and r["target"] == f["target"] and r["t_ms"] <= f["t_ms"]), default=0)
                mine = [s for s in acked if s.get("broker_name") == broker and since <= s["t_ms"] <= until]
            row["acknowledged"] = len(mine)
            row["lost"] = sum(1 for s in mine if s.get("lost"))
        out.append(row)
    return out


def followed(n_seen: int | None, n: int | None, ms: int | None, *, none: str = "-") -> str:
    """'after 12 ms (2/2)'; 'only 1/2'; `none` when there was nobody to follow."""
    if not n:
        return none
    if ms is not None:
        return f"after {duration(ms)} ({n_seen}/{n})"
    return f"only {n_seen or 0}/{n}"


def lost_text(row: dict[str, Any]) -> str:
    if row.get("acknowledged") is None:
        return "-"
    return f"{row['lost']} of {row['acknowledged']}"
