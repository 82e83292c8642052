"""The whole pipeline for real: a short seeded chaos run collecting every NameServer's route
snapshots -> `namesrv analyze DIR` in Spark via RayDP -> the detection delays Spark computes from the
snapshots match the ones the chaos harness measured itself (within the snapshot interval), and the
report holds one row per fault.

The chaos run uses the session's Ray (its actors take no CPU; Spark's executor holds one).
"""

from __future__ import annotations

import argparse
import time
import uuid
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

pytest.importorskip("pyspark")
ray = pytest.importorskip("ray")
pytest.importorskip("raydp")

from clients.analysis import cli  # noqa: E402
from clients.chaos.plan import ChaosConfig  # noqa: E402
from clients.chaos.run import run_chaos  # noqa: E402
from clients.chaos.schema import (  # noqa: E402
    BROKER_FAULTS,
    FAULT_KINDS,
    HEAL,
    HOST_FAULTS,
    SET_FAULTS,
    TIMELINE_KINDS,
)

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]

SEED = 3
"""Covers every fault kind and revival in 12 s (see tests/ray/chaos/test_chaos.py)."""


def test_chaos_then_spark_sees_every_fault(spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "chaos"
    cfg = ChaosConfig(duration_s=12, fault_interval_s=1.8, seed=SEED, rate=40,
                      namespace=f"pipeline-{uuid.uuid4().hex[:8]}")
    started = time.perf_counter()
    report = run_chaos(cfg, out)
    chaos_s = time.perf_counter() - started
    assert report.ok, [i for i in report.invariants if not i.ok]
    assert {r.kind for r in report.timeline} == set(TIMELINE_KINDS) - SET_FAULTS - HOST_FAULTS - {HEAL}

    parser = argparse.ArgumentParser(prog="namesrv")
    cli.add_parser(parser.add_subparsers(dest="command"))
    started = time.perf_counter()
    assert cli.run(parser.parse_args(["analyze", str(out), "--no-progress"])) == 0
    analyze_s = time.perf_counter() - started
    printed = capsys.readouterr().out
    print(f"pipeline: chaos {chaos_s:.1f} s, analyze {analyze_s:.1f} s")
    analysis = out / "analysis"  # the default beside the run's files
    # the failover view: every master kill of this run is a failover (each master restarted from its store)
    assert "failovers: " in printed
    deaths = [r.fault_id for r in report.timeline if r.kind in ("kill_broker", "sigkill_broker")]
    failovers = pq.read_table(analysis / "failovers.parquet").to_pylist()
    assert [r["fault_id"] for r in failovers] == deaths and all(r["same_broker"] for r in failovers)

    # Spark's detection delay per (fault, NameServer) against the harness' own, from its records
    interval = cfg.snapshot_interval_ms
    harness = {(d.fault_id, d.observer): d for d in report.detections
               if d.observer_kind == "namesrv" and d.kind in BROKER_FAULTS}
    spark_rows = pq.read_table(analysis / "detection_delays.parquet").to_pylist()
    broker_faults = [r.fault_id for r in report.timeline if r.kind in BROKER_FAULTS]
    assert sorted(r["fault_id"] for r in spark_rows) == broker_faults, "Spark saw every broker fault"
    compared = []
    for row in spark_rows:
        assert row["all_removed"], row
        for removal in row["removals"]:
            d = harness[row["fault_id"], removal["namesrv"]]
            if d.cause not in ("channel", "expired"):
                continue  # the NameServer was killed first: it dropped the broker by restarting empty
            compared.append((row["fault_id"], removal["namesrv"], removal["delay_ms"], d.elapsed_ms))
            assert abs(removal["delay_ms"] - d.elapsed_ms) <= interval, (row, d)
    assert len(compared) >= len(broker_faults), compared
    print("detection delay ms (fault, NameServer, Spark, harness):", compared)

    # one row per fault, first in print and in the self-contained report
    faults = [r for r in report.timeline if r.kind in FAULT_KINDS]
    summary = pq.read_table(analysis / "fault_summary.parquet").to_pylist()
    assert [r["fault_id"] for r in summary] == [r.fault_id for r in faults]
    assert all(r["lost"] == 0 for r in summary)
    for r in summary:
        if r["kind"] in BROKER_FAULTS:
            assert r["spark_detect_delay_ms"] is not None and r["spark_back_delay_ms"] is not None, r
    assert f"== faults: {len(faults)} (read this first)" in printed
    html = (analysis / "report.html").read_text()
    assert html.count('<tr class="fault">') == len(faults)
    assert html.count('src="data:image/png;base64,') == 4 and "Timeline: faults over liveness" in html
    for r in faults:
        assert f"<td>#{r.fault_id}</td>" in html and r.target in html
