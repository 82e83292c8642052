"""What `namesrv analyze PATH` reads: a snapshot dataset, or a chaos output directory as it is.

A chaos output directory (`namesrv chaos --out DIR`) holds the route snapshots of every NameServer
in DIR/snapshots, the fault timeline in DIR/faults.parquet, and the harness' own records
(detections, sends, summary.json); the analysis finds them itself and relates every result to the
faults. Everything is checked here, with pyarrow, before Spark starts.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from clients.analysis.errors import AnalysisInputError
from clients.chaos.schema import DETECTIONS_FILE, FAULTS_FILE, SENDS_FILE, SNAPSHOTS_DIR, SUMMARY_FILE


@dataclass(frozen=True)
class ChaosRun:
    """A chaos run's own records, beside its snapshots."""

    root: Path
    summary: dict[str, Any] = field(default_factory=dict)
    detections: list[dict[str, Any]] = field(default_factory=list)
    """The harness' measurements (`clients.chaos.invariants.Detection` rows)."""
    sends: list[dict[str, Any]] | None = None

    @property
    def started_ms(self) -> int | None:
        v = self.summary.get("started_ms")
        return int(v) if v is not None else None

    @property
    def snapshot_interval_ms(self) -> int | None:
        v = (self.summary.get("snapshots") or {}).get("interval_ms")
        return int(v) if v is not None else None

    @property
    def bucket_ms(self) -> int | None:
        """Divergence grid for a run: a tenth of its snapshot interval (a chaos run lasts seconds and its
        faults open divergences of tens of ms; NameServers snapshot on every route change)."""
        return None if self.snapshot_interval_ms is None else max(50, self.snapshot_interval_ms // 10)

    @property
    def carry_ms(self) -> int | None:
        """How far a NameServer's last snapshot is carried: one snapshot interval (it snapshots at
        least that often while it lives)."""
        return self.snapshot_interval_ms

    @property
    def broker_names(self) -> dict[str, str]:
        return dict(self.summary.get("broker_names") or {})

    def describe(self) -> str:
        s = self.summary
        cfg = s.get("config") or {}
        ok = s.get("ok")
        verdict = "verdict unknown" if ok is None else ("every invariant held" if ok else "an invariant FAILED")
        target = s.get("target", "private")
        return (f"chaos run of {target} deployment in namespace {s.get('namespace', '?')}: "
                f"seed {cfg.get('seed', '?')}, {cfg.get('duration_s', '?')} s of sending, {verdict}")


@dataclass(frozen=True)
class AnalysisInputs:
    snapshots: Path
    faults: Path | None
    run: ChaosRun | None = None


def is_chaos_dir(path: Path) -> bool:
    return path.is_dir() and ((path / FAULTS_FILE).is_file() or (path / SUMMARY_FILE).is_file())


def _read_rows(path: Path) -> list[dict[str, Any]]:
    try:
        return pq.read_table(path).to_pylist()
    except (pa.ArrowException, OSError) as exc:
        raise AnalysisInputError(f"corrupt chaos record {path}: {exc}") from exc


def resolve_inputs(path: str | os.PathLike[str], faults: str | os.PathLike[str] | None = None) -> AnalysisInputs:
    """PATH is a snapshot dataset (faults optional), or a chaos output directory (its snapshots/ and
    faults.parquet are used; --faults may still point elsewhere)."""
    root = Path(path)
    if not is_chaos_dir(root):
        return AnalysisInputs(root, Path(faults) if faults else None)
    snaps = root / SNAPSHOTS_DIR
    if not snaps.is_dir():
        raise AnalysisInputError(
            f"{root} is a chaos output directory without {SNAPSHOTS_DIR}/ (a run from before snapshots were "
            f"collected?): run `namesrv chaos --out DIR` again, or analyze a snapshot dataset with --faults "
            f"{root / FAULTS_FILE}")
    summary: dict[str, Any] = {}
    if (root / SUMMARY_FILE).is_file():
        try:
            summary = json.loads((root / SUMMARY_FILE).read_text())
        except (OSError, ValueError) as exc:
            raise AnalysisInputError(f"unreadable {root / SUMMARY_FILE}: {exc}") from exc
    detections = _read_rows(root / DETECTIONS_FILE) if (root / DETECTIONS_FILE).is_file() else []
    sends = _read_rows(root / SENDS_FILE) if (root / SENDS_FILE).is_file() else None
    if sends is not None and sends and "lost" not in sends[0]:
        sends = None  # written before per-send loss was recorded: message columns stay empty
    fault_path = Path(faults) if faults else root / FAULTS_FILE
    return AnalysisInputs(snaps, fault_path if fault_path.exists() or faults else None,
                          ChaosRun(root, summary, detections, sends))
