"""What every benchmark shares: the machine it ran on, latency figures, a side-by-side ratio table.

Percentiles come from `namesrv.stats` (the project's one percentile); tables are rendered with
`clients.render.table`. Benchmarks import this module as `_common` (run as scripts, their own
directory is on sys.path).
"""

from __future__ import annotations

import os
import platform
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import psutil

from clients.render import table
from namesrv.stats import percentile


# ---------------------------------------------------------------------------- the machine
def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def _disk(path: str) -> str:
    """The filesystem holding `path`: device, type, size, free space, and the kernel's rotational
flag (1 = spinning disk, or a virtual disk that does not say)."""
    path = os.path.realpath(path)
    best = None
    for part in psutil.disk_partitions(all=False):
        if path.startswith(part.mountpoint) and (best is None or len(part.mountpoint) > len(best.mountpoint)):
            best = part
    usage = psutil.disk_usage(path)
    kind = ""
    if best is not None:
        dev = os.path.basename(best.device)
        for candidate in (dev, dev.rstrip("0123456789"), dev.split("p")[0] if dev.startswith("nvme") else dev):
            flag = Path(f"/sys/block/{candidate}/queue/rotational")
            if flag.exists():
                kind = f" rotational={flag.read_text().strip()}"
                break
    where = f"{best.device} ({best.fstype}) at {best.mountpoint}" if best else path
    return f"{where}{kind}, {usage.total / 2**30:.0f} GiB, {usage.free / 2**30:.0f} GiB free"


def machine_info(data_dir: str | None = None) -> dict[str, Any]:
    """Cores, RAM, CPU model, the disk under `data_dir` (default: the temp dir), versions, load."""
    info: dict[str, Any] = {
        "cpu_model": _cpu_model(),
        "cores": f"{psutil.cpu_count(logical=False)} physical / {os.cpu_count()} logical",
        "memory": f"{psutil.virtual_memory().total / 2**30:.1f} GiB total, "
                  f"{psutil.virtual_memory().available / 2**30:.1f} GiB available",
        "disk": _disk(data_dir or tempfile.gettempdir()),
        "platform": platform.platform(),
        "python": platform.python_version(),
    }
    try:
        import ray

        info["ray"] = ray.__version__
    except ImportError:
        pass
    info["load_avg"] = " / ".join(f"{x:.2f}" for x in os.getloadavg()) + " (1/5/15 min)"
    return info


def print_machine(data_dir: str | None = None) -> dict[str, Any]:
    """Print the machine description (one field a line) and return it."""
    info = machine_info(data_dir)
    print("== machine")
    for key, value in info.items():
        print(f"  {key:10s} {value}")
    return info


# ---------------------------------------------------------------------------- figures
def pct_ms(seconds: Iterable[float], p: float) -> float:
    """The p-th percentile (p in [0, 1]) of durations in seconds, in milliseconds (nan for none)."""
    value = percentile(seconds, p)
    return float("nan") if value is None else value * 1000


def latency_ms(seconds: Sequence[float]) -> str:
    """`p50 x ms  p99 y ms  max z ms  (n=...)` of durations given in seconds."""
    if not seconds:
        return "no samples"
    return (f"p50 {pct_ms(seconds, 0.5):8.3f} ms  p99 {pct_ms(seconds, 0.99):8.3f} ms  "
            f"max {max(seconds) * 1000:8.3f} ms  (n={len(seconds)})")


def ratio(value: float | None, base: float | None) -> str:
    """`value / base` as `1.23x`, or `-` when either is missing or the base is zero."""
    if value is None or base is None or base == 0 or value != value or base != base:
        return "-"
    return f"{value / base:.2f}x"


def fmt(value: object, digits: int = 2) -> str:
    if isinstance(value, float):
        if value != value:
            return "-"
        return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:,.{digits}f}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return "-" if value is None else str(value)


def ratio_table(
    rows: Iterable[tuple[str, float | None, float | None]], baseline: str, measured: str,
    label: str = "figure", digits: int = 2,
) -> str:
    """Side by side: one row per figure (name, baseline value, measured value) and their ratio,
    measured / baseline."""
    return table(
        (label, baseline, measured, f"{measured} / {baseline}"),
        [(name, fmt(base, digits), fmt(value, digits), ratio(value, base)) for name, base, value in rows],
    )
