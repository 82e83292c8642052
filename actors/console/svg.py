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


ROLE_COLOURS = {"SYNC_MASTER": "#2e7d32", "ASYNC_MASTER": "#66bb6a", "SLAVE": "#90a4ae"}


def role_timeline(rows: Sequence[tuple[str, Sequence[tuple[int, int, str, int]]]], start_ms: int, end_ms: int,
                  width: int = 720, row_height: int = 22, label_width: int = 120) -> str:
    """One row per broker: its roles as bars over [start_ms, end_ms] (each span: start, end, role,
    epoch), masters green, slaves grey, the epoch written in a bar wide enough to hold it; a tick
    and the time span under the rows."""
    span = max(end_ms - start_ms, 1)
    plot = width - label_width - 4
    height = row_height * len(rows) + 18
    parts = [f'<svg class="roles" width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" '
             f'aria-label="roles over time">']
    for i, (label, spans) in enumerate(rows):
        y = i * row_height
        parts.append(f'<text x="0" y="{y + row_height - 7}" font-size="11">{escape(label)}</text>')
        for s, e, role, epoch in spans:
            x0 = label_width + plot * (max(s, start_ms) - start_ms) / span
            x1 = label_width + plot * (min(e, end_ms) - start_ms) / span
            if x1 <= x0:
                continue
            colour = ROLE_COLOURS.get(role, "#bbdefb")
            parts.append(f'<rect x="{x0:.1f}" y="{y + 3}" width="{x1 - x0:.1f}" height="{row_height - 6}" '
                         f'fill="{colour}"><title>{escape(role)} epoch {epoch}</title></rect>')
            if x1 - x0 > 28:
                parts.append(f'<text x="{x0 + 3:.1f}" y="{y + row_height - 7}" font-size="10" fill="#fff">'
                             f'e{epoch}</text>')
    parts.append(f'<text x="{label_width}" y="{height - 4}" font-size="10">-{span / 1000:.0f} s</text>')
    parts.append(f'<text x="{width - 2}" y="{height - 4}" font-size="10" text-anchor="end">now</text>')
    parts.append("</svg>")
    return "".join(parts)
