"""The one percentile: nearest rank, as every benchmark, the chaos report and the producer use."""

from __future__ import annotations

import math
from collections.abc import Iterable


def percentile(values: Iterable[float], p: float) -> float | None:
    """Nearest-rank percentile, `p` in [0, 1] (0.5 is the median, 0.99 the p99); None for no values."""
    data = sorted(values)
    if not data:
        return None
    return data[min(len(data) - 1, max(0, math.ceil(p * len(data)) - 1))]


def summarize(values: Iterable[float]) -> dict[str, float | int | None]:
    """n, p50, p99 and max of `values` (None for each figure when there are none)."""
    data = sorted(values)
    return {
        "n": len(data),
        "p50": percentile(data, 0.50),
        "p99": percentile(data, 0.99),
        "max": data[-1] if data else None,
    }
