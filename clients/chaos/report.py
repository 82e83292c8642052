"""What a chaos run leaves: the `ChaosReport` (plan, timeline, records, invariants, figures), its
Parquet files for the Spark analysis, and its text rendering for the terminal.

Output directory (`write_parquet`): faults.parquet (the contract with the Spark analysis, see
`clients.chaos.schema`), sends, detections, removals, producer_routes, namesrv_routes .parquet,
summary.json, and snapshots/ (every NameServer's route snapshots, collected during the run).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from clients.chaos.checks import Invariant
from clients.chaos.invariants import Detection
from clients.chaos.observe import RouteLog, RouteObservation
from clients.chaos.plan import ChaosConfig, FaultRecord, PlannedFault, Timing
from clients.chaos.schema import (
    BROKER_FAULTS,
    BROKER_REVIVALS,
    DETECTION_SCHEMA,
    NAMESRV_ROUTE_SCHEMA,
    NODE_FAULTS,
    PRODUCER_ROUTE_SCHEMA,
    REMOVAL_SCHEMA,
    RESTART_NAMESRV,
    ROLE_SCHEMA,
    SEND_SCHEMA,
    SNAPSHOTS_DIR,
    SUMMARY_FILE,
    TIMELINE_KINDS,
    TIMELINE_SCHEMA,
)
from clients.chaos.summary import fault_summary, followed, lost_text
from clients.cli.render import clock, duration, since, table
from namesrv.common.stats import summarize as stats_of

PRIVATE, EXISTING = "private", "existing"


@dataclass
class ChaosReport:
    config: ChaosConfig
    namespace: str
    data_dir: str
    plan: list[PlannedFault]
    timeline: list[FaultRecord]
    sends: list[dict[str, Any]]
    detections: list[Detection]
    removals: list[dict[str, Any]]
    route_logs: dict[str, RouteLog]
    route_history: list[RouteObservation]
    invariants: list[Invariant]
    figures: dict[str, Any]
    started_ms: int
    """When sending started (the plan's time zero), epoch ms."""
    target: str = PRIVATE
    """'private' (a deployment of its own, torn down after) or 'existing' (the one in `namespace`)."""
    broker_names: dict[str, str] = field(default_factory=dict)
    """Broker address -> broker name, for every broker of the deployment."""
    snapshot_rows: int = 0
    """Route snapshot rows collected into OUT/snapshots (0 without an output directory)."""
    ended_ms: int = 0
    files: dict[str, str] = field(default_factory=dict)
    roles: list[dict[str, Any]] = field(default_factory=list)
    """The brokers' role spans (ROLE_SCHEMA rows), from their own role logs."""

    @property
    def ok(self) -> bool:
        return all(i.ok for i in self.invariants)

    def timeline_table(self) -> pa.Table:
        rows = [{"fault_id": r.fault_id, "t_ms": r.t_ms, "kind": r.kind, "target": r.target,
                 "broker_addr": r.broker_addr, "detail": r.detail, "peer": r.peer} for r in self.timeline]
        return pa.Table.from_pylist(rows, schema=TIMELINE_SCHEMA)

    def fault_summary(self) -> list[dict[str, Any]]:
        """One row per fault: see `clients.chaos.summary`."""
        return fault_summary([asdict(r) for r in self.timeline], [asdict(d) for d in self.detections], self.sends,
                             self.broker_names, self.ended_ms or None)

    def write_parquet(self, out_dir: str | os.PathLike[str]) -> dict[str, str]:
        """faults.parquet (the Spark contract), sends, detections, removals, producer_routes and
        namesrv_routes .parquet, and summary.json, under `out_dir` (snapshots/ is written while the
        run lasts)."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        tables = {
            "faults": self.timeline_table(),
            "sends": pa.Table.from_pylist([{k: r.get(k) for k in SEND_SCHEMA.names} for r in self.sends],
                                          schema=SEND_SCHEMA),
            "detections": pa.Table.from_pylist([asdict(d) for d in self.detections], schema=DETECTION_SCHEMA),
            "removals": pa.Table.from_pylist(self.removals, schema=REMOVAL_SCHEMA),
            "producer_routes": pa.Table.from_pylist(
                [{"producer": p, "topic": topic, "t_ms": t, "source": src, "brokers": ",".join(brokers)}
                 for p, entries in sorted(self.route_logs.items()) for topic, t, src, brokers in entries],
                schema=PRODUCER_ROUTE_SCHEMA),
            "namesrv_routes": pa.Table.from_pylist(
                [{"t_ms": o.t_ms, "namesrv": o.namesrv, "topic": o.topic,
                  "addrs": None if o.addrs is None else ",".join(o.addrs)} for o in self.route_history],
                schema=NAMESRV_ROUTE_SCHEMA),
            "roles": pa.Table.from_pylist(self.roles, schema=ROLE_SCHEMA),
        }
        files = {}
        for name, tbl in tables.items():
            path = out / f"{name}.parquet"
            pq.write_table(tbl, path)
            files[name] = str(path)
        if (out / SNAPSHOTS_DIR).is_dir():
            files["snapshots"] = str(out / SNAPSHOTS_DIR)
        summary = {
            "ok": self.ok,
            "target": self.target,
            "namespace": self.namespace,
            "started_ms": self.started_ms,
            "ended_ms": self.ended_ms,
            "broker_names": self.broker_names,
            "snapshots": {"dir": SNAPSHOTS_DIR, "rows": self.snapshot_rows,
                          "interval_ms": self.config.snapshot_interval_ms},
            "config": self.config.model_dump(mode="json"),
            "invariants": [asdict(i) for i in self.invariants],
            "figures": self.figures,
            "plan": [asdict(p) for p in self.plan],
        }
        path = out / SUMMARY_FILE
        path.write_text(json.dumps(summary, indent=2, default=str))
        files["summary"] = str(path)
        self.files = files
        return files


def summarize(timeline: list[FaultRecord], detections: list[Detection], recovery_ms: dict[int, float],
              send_counts: dict[str, Any], loss_counts: dict[str, int], timing: Timing) -> dict[str, Any]:
    """The figures a run is judged by: per fault kind, how long detection and recovery took."""
    figures: dict[str, Any] = {"sends": send_counts, "messages": loss_counts, "faults": {}}
    for kind in TIMELINE_KINDS:
        figures["faults"][kind] = sum(1 for r in timeline if r.kind == kind)

    def elapsed(kind: str, who: str) -> list[float]:
        return [float(d.elapsed_ms) for d in detections
                if d.kind == kind and d.observer_kind == who and d.elapsed_ms is not None]

    figures["detection_ms"] = {
        kind: {"namesrv": stats_of(elapsed(kind, "namesrv")), "producer": stats_of(elapsed(kind, "producer")),
               "causes": sorted({d.cause for d in detections if d.kind == kind and d.observer_kind == "namesrv"})}
        for kind in sorted(BROKER_FAULTS)
    }
    figures["return_ms"] = {
        kind: {"namesrv": stats_of(elapsed(kind, "namesrv")), "producer": stats_of(elapsed(kind, "producer"))}
        for kind in sorted(BROKER_REVIVALS)
    }
    figures["broker_restart_up_ms"] = stats_of(list(recovery_ms.values()))
    ns_back = [float(r.t_ms - timeline[r.revives].t_ms) for r in timeline
               if r.kind == RESTART_NAMESRV and r.revives is not None]
    figures["namesrv_restart_ms"] = stats_of(ns_back)
    figures["timing"] = asdict(timing)
    return figures


# ---------------------------------------------------------------------------------------- text
def _ms(v: float | None) -> str:
    return "-" if v is None else duration(v)


def summary_table(rows: list[dict[str, Any]], t0_ms: int) -> str:
    """The per-fault summary as a text table (times since the run began and wall clock, UTC)."""
    out = []
    for r in rows:
        if r["kind"] in NODE_FAULTS:
            revived = "never (node lost)"
        elif r["revived_ms"] is None:
            revived = "never"
        elif r["kind"] in BROKER_FAULTS:
            revived = f"{r['revival_kind']} after {duration(r['revived_ms'] - r['t_ms'])}"
        else:
            revived = f"restarted after {duration(r['revived_ms'] - r['t_ms'])}"
        out.append((
            r["fault_id"], since(r["t_ms"], t0_ms), clock(r["t_ms"]), r["kind"], r["target"],
            followed(r["namesrvs_detected"], r["namesrvs"], r["namesrv_detect_delay_ms"]),
            followed(r["producers_followed"], r["producers"], r["producer_follow_delay_ms"]),
            revived,
            followed(r["namesrvs_back"], r["namesrvs"] if r["kind"] in BROKER_FAULTS - NODE_FAULTS else 0,
                     r["namesrv_back_delay_ms"]),
            lost_text(r),
        ))
    return table(("fault", "at", "UTC", "kind", "target", "every NameServer dropped it", "producers followed",
                  "revived", "back in every NameServer", "lost"), out)


def render_report(report: ChaosReport) -> str:
    """The per-fault summary first, then the timeline, per-kind detection and recovery figures, and
    the invariants, as text tables."""
    t0 = report.started_ms
    where = ("a private deployment (torn down)" if report.target == PRIVATE
             else "the EXISTING deployment (left running)")
    out = [f"chaos run: seed {report.config.seed}, {where} in namespace {report.namespace}; "
           f"t=0 is {clock(t0)} UTC, when sending began", "", "faults (read this first)"]
    out.append(summary_table(report.fault_summary(), t0))
    out += ["", "fault timeline"]
    out.append(table(
        ("id", "at", "UTC", "kind", "target", "detail"),
        [(r.fault_id, since(r.t_ms, t0), clock(r.t_ms), r.kind, r.target, r.detail) for r in report.timeline],
    ))
    f = report.figures
    rows: list[tuple[Any, ...]] = []
    for kind, by in f["detection_ms"].items():
        for who in ("namesrv", "producer"):
            s = by[who]
            if s["n"]:
                rows.append((kind, who, s["n"], _ms(s["p50"]), _ms(s["p99"]), _ms(s["max"]),
                             ",".join(by["causes"]) if who == "namesrv" else ""))
    for kind, by in f["return_ms"].items():
        for who in ("namesrv", "producer"):
            s = by[who]
            if s["n"]:
                rows.append((kind, who, s["n"], _ms(s["p50"]), _ms(s["p99"]), _ms(s["max"]), "back in routes"))
    for label, s in (("broker restart", f["broker_restart_up_ms"]), ("namesrv restart", f["namesrv_restart_ms"])):
        if s["n"]:
            rows.append((label, "actor up", s["n"], _ms(s["p50"]), _ms(s["p99"]), _ms(s["max"]), ""))
    out += ["", "detection and recovery (after the fault / revival)"]
    out.append(table(("kind", "seen by", "n", "p50", "p99", "max", "how"), rows))
    sends, msgs = f["sends"], f["messages"]
    out += ["", table(
        ("sends attempted", "acknowledged", "failed", "unexplained", "success", "lost", "duplicates",
         "stored unacked"),
        [(sends["attempted"], sends["acknowledged"], sends["failed"], sends["unexplained_failures"],
          f"{sends['success_rate']:.2%}", msgs["lost"], msgs["duplicates"], msgs["stored_unacknowledged"])],
    )]
    spurious = f.get("spurious_removals") or []
    if spurious:
        out += ["", f"invariant 3d: {len(spurious)} removals of brokers no fault touched (live brokers dropped):"]
        out.append(table(("namesrv", "broker", "cause", "at"),
                         [(r["namesrv"], r["broker_addr"], r["cause"], since(r["t_ms"], t0)) for r in spurious]))
    out += ["", "invariants"]
    out.append(table(("invariant", "result", "value", "detail"),
                     [(i.name, "PASS" if i.ok else "FAIL", i.value, i.detail) for i in report.invariants]))
    if report.files:
        out += ["", "written: " + ", ".join(sorted(report.files.values()))]
        if "snapshots" in report.files:
            out.append(f"{report.snapshot_rows:,} route snapshot rows of every NameServer in "
                       f"{report.files['snapshots']}; analyze them with: namesrv analyze "
                       f"{Path(report.files['summary']).parent}")
    out += ["", "OK: every invariant holds" if report.ok else "FAILED: see the invariants above"]
    return "\n".join(out)
