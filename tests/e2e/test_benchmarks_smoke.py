"""Every benchmark the README lists runs exactly as the README writes it: `bash run.sh bench NAME
--quick` exits 0 and prints its machine line and its figures side by side. A smoke run: nothing here
asserts a timing. The list comes from the README, so a benchmark it names cannot go untested, and
one in benchmarks/ that it does not name fails the drift check.

They run on the suite's shared Ray (RAY_ADDRESS, which `benchmarks/_common.ray_init` joins) rather
than each starting and stopping one of its own; bench_analysis keeps its own, sized for RayDP."""

from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path

import pytest

from tests.support.readme import ROOT, benchmark_names, run_in_session

VENV = Path(sys.executable).parent.parent
BENCHMARKS = benchmark_names()
ANALYSIS_BENCHMARKS = {"bench_analysis"}
ONE_PATH_WHEN_QUICK = {"bench_analysis": "load throughput"}
"""--quick times one way into Spark only, so it prints figures but no ratio between ways"""
RATIO = re.compile(r"\d[\d.,]*\s?[x\u00d7](?!\w)|\b1 : [\d,]+")  # "1.09x", "0.42 x", "1 : 1,560"


def test_the_readme_lists_every_benchmark_in_benchmarks_dir() -> None:
    on_disk = sorted(p.stem for p in (ROOT / "benchmarks").glob("bench_*.py"))
    assert sorted(BENCHMARKS) == on_disk


def test_no_benchmark_deploys_on_the_default_ports() -> None:
    """A benchmark runs beside the suite's other tests (and beside someone's `namesrv up`): every
    ClusterSpec it builds names its NameServer and broker ports (0: free ones, None: Ray only), so
    none binds 9876 / 10911 under a test that does (a NameServer that cannot bind dies in its
    constructor)."""
    import ast

    bare = []
    for path in sorted((ROOT / "benchmarks").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) == "ClusterSpec":
                named = {k.arg for k in node.keywords}
                if not {"namesrv_port", "broker_port"} <= named:
                    bare.append(f"{path.name}:{node.lineno}")
    assert not bare, f"ClusterSpec without namesrv_port and broker_port: {bare}"


@pytest.mark.timeout(420)
@pytest.mark.parametrize("name", [
    pytest.param(n, marks=pytest.mark.spark) if n in ANALYSIS_BENCHMARKS else n for n in BENCHMARKS
])
def test_benchmark_quick_runs_from_the_readme_command(name: str, ray_local: str) -> None:
    import ray

    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "RAY_"))}
    env["NAMESRV_VENV"] = str(VENV)  # run.sh's venv is the one these tests run in
    if name not in ANALYSIS_BENCHMARKS:  # joined with this session's authentication mode (tokens when on)
        env["RAY_ADDRESS"] = ray.get_runtime_context().gcs_address
        env.update({k: v for k, v in os.environ.items() if k.startswith("RAY_AUTH_")})
    argv = ["bash", "run.sh", "bench", name, "--quick"]
    started = time.monotonic()
    result, leftovers = run_in_session(argv, cwd=ROOT, env=env, timeout=360)
    took = time.monotonic() - started
    shown = (f"{' '.join(argv)} ({took:.0f} s):\n--- stdout\n{result.stdout[-4000:]}\n"
             f"--- stderr\n{result.stderr[-4000:]}")
    print(f"{name} --quick: {took:.1f} s")
    assert result.returncode == 0, shown
    assert not leftovers, f"left running after it ended: {leftovers}\n{shown}"
    assert "== machine" in result.stdout, f"no machine line\n{shown}"
    if "RAY_ADDRESS" in env:  # Ray logs this line whenever ray.init starts a Ray of its own
        assert "Started a local Ray instance" not in result.stdout + result.stderr, f"started a Ray of its own\n{shown}"
    if name in ONE_PATH_WHEN_QUICK:  # nothing to set side by side: its figures instead
        assert ONE_PATH_WHEN_QUICK[name] in result.stdout, f"no figures printed\n{shown}"
    else:
        assert RATIO.search(result.stdout), f"no ratio printed\n{shown}"
