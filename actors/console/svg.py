"""Charts as server-rendered SVG (no chart library in the page): a sparkline of a series with its
last value and its maximum. Pure: text in, text out."""

from __future__ import annotations

from collections.abc import Sequence
from html import escape


def sparkline(values: Sequence[float], width: int = 240, height: int = 40, label: str = "") -> str:
    """An inline <svg> polyline of `values` (oldest first), scaled to their maximum; an empty
    series is an empty frame."""
    pad = 2
    parts = [f'<svg class="spark" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
             f'role="img" aria-label="{escape(label)}">',
             f'<rect x="0" y="0" width="{width}" height="{height}" fill="none" stroke="#ccc"/>']
    if values:
        top = max(max(values), 1e-9)
        step = (width - 2 * pad) / max(len(values) - 1, 1)
        points = " ".join(f"{pad + i * step:.1f},{height - pad - (v / top) * (height - 2 * pad):.1f}"
                          for i, v in enumerate(values))
        parts.append(f'<polyline fill="none" stroke="#1565c0" stroke-width="1.5" points="{points}"/>')
        parts.append(f'<text x="{width - pad}" y="11" font-size="10" text-anchor="end">'
                     f'{escape(label)} {values[-1]:g} (max {max(values):g})</text>')
    parts.append("</svg>")
    return "".join(parts)
