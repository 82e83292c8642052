"""report.html: one self-contained page (plots embedded as data URIs, no file beside it), rendered
from `templates/report.html.j2` with jinja2 (autoescaped: names and details from the snapshots can
never break the page)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from clients.analysis.plots import Plot

TEMPLATE = "report.html.j2"


def render(**context: Any) -> str:
    from jinja2 import Environment, PackageLoader, StrictUndefined

    env = Environment(loader=PackageLoader("clients.analysis", "templates"), autoescape=True,
                      undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    return env.get_template(TEMPLATE).render(**context)


def write_report(
    path: Path,
    *,
    intro: Sequence[str],
    faults: tuple[Sequence[str], Sequence[Sequence[str]]] | None,
    invariants: Sequence[dict[str, Any]],
    plots: Sequence[Plot],
    sections: Sequence[dict[str, Any]],
    title: str = "NameServer route analysis",
    failovers: dict[str, Any] | None = None,
) -> None:
    """`faults`: (headers, rows) of the per-fault table, or None without a fault timeline;
    `invariants`: the chaos run's own verdict (name, ok, value, detail); `sections`: one per
    analysis (name, rows, seconds, file, headers, cells, more); `failovers`: the failover view
    (line, headers, cells), or None when the input is no chaos run with role logs."""
    html = render(title=title, intro=list(intro), faults=faults, invariants=list(invariants), plots=list(plots),
                  sections=list(sections), failovers=failovers)
    path.write_text(html, encoding="utf-8")
