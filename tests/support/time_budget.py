"""Per-file time budgets for the test suite (a pytest plugin, loaded by tests/conftest.py).

Every test file's wall time (setup, call and teardown of its tests, module fixtures included) is
added up and held against `tests/time_budgets.toml`: a budget per file that needs one, a default for
the rest, and one for the whole run. The table is printed at the end of every run; a file over its
budget fails the run when budgets are enforced: on CI (`CI` set) or with `--time-budgets`. Budgets
are about twice what a file took on the project's 2-core machine, so only a real slowdown (a new
fixed wait, a test that stopped sharing its cluster) trips them, not a busy machine."""

from __future__ import annotations

import os
import time
import tomllib
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import pytest

BUDGETS = Path(__file__).resolve().parents[1] / "time_budgets.toml"


@dataclass
class Budgets:
    default_s: float
    total_s: float
    files: dict[str, float] = field(default_factory=dict)

    @classmethod
    def load(cls, path: Path = BUDGETS) -> Budgets:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
        return cls(float(data["default_s"]), float(data["total_s"]),
                   {k: float(v) for k, v in data.get("files", {}).items()})

    def of(self, test_file: str) -> float:
        return self.files.get(test_file, self.default_s)


class TimeBudget:
    def __init__(self, budgets: Budgets, enforce: bool) -> None:
        self.budgets = budgets
        self.enforce = enforce
        self.spent: dict[str, float] = defaultdict(float)
        self.started = time.monotonic()
        self.over: list[tuple[str, float, float]] = []

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.spent[report.nodeid.split("::", 1)[0]] += report.duration

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        self.over = [(f, s, self.budgets.of(f)) for f, s in self.spent.items() if s > self.budgets.of(f)]
        total = time.monotonic() - self.started
        if total > self.budgets.total_s and len(self.spent) > 1:
            self.over.append(("(the whole run)", total, self.budgets.total_s))
        if self.over and self.enforce and session.exitstatus == 0:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        tr = terminalreporter
        tr.section("time per test file (budget: tests/time_budgets.toml)")
        for f, s in sorted(self.spent.items(), key=lambda kv: -kv[1])[:40]:
            tr.write_line(f"{s:8.1f} s / {self.budgets.of(f):6.0f} s  {f}")
        tr.write_line(f"{sum(self.spent.values()):8.1f} s in {len(self.spent)} files")
        for f, s, budget in self.over:
            verdict = "FAILED" if self.enforce else "warning"
            tr.write_line(f"{verdict}: {f} took {s:.1f} s, over its budget of {budget:.0f} s", red=True)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--time-budgets", action="store_true",
                     help="fail the run when a test file takes longer than its budget (on by default with CI set)")


SHARED_CORES_FACTOR = 1.5
"""A file's budget on a run with two or more xdist workers: its wall time is measured while another
worker's files share the two cores (the whole-run budget is not scaled)."""


def pytest_configure(config: pytest.Config) -> None:
    enforce = bool(config.getoption("--time-budgets") or os.environ.get("CI"))
    budgets = Budgets.load()
    workers = config.getoption("numprocesses", None) if config.pluginmanager.has_plugin("xdist") else None
    if isinstance(workers, int) and workers > 1:
        budgets = Budgets(budgets.default_s * SHARED_CORES_FACTOR, budgets.total_s,
                          {f: b * SHARED_CORES_FACTOR for f, b in budgets.files.items()})
    config.pluginmanager.register(TimeBudget(budgets, enforce), "time-budget")
