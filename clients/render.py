"""Plain-text tables for the CLI: no dependency, aligned columns, readable in any terminal."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from namesrv.constants import perm_to_string
from namesrv.models import TopicRouteData


def table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    cells = [[str(h) for h in headers]] + [["" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def route_table(topic: str, route: TopicRouteData | None) -> str:
    """One row per broker address serving `topic`, RocketMQ admin style."""
    if route is None:
        return f"{topic}: no route"
    addrs = {bd.broker_name: bd.broker_addrs for bd in route.broker_datas}
    rows = []
    for qd in sorted(route.queue_datas, key=lambda q: q.broker_name):
        for broker_id, addr in sorted(addrs.get(qd.broker_name, {}).items()):
            rows.append(
                (topic, qd.broker_name, broker_id, addr, qd.read_queue_nums, qd.write_queue_nums,
                 perm_to_string(qd.perm))
            )
    return table(("topic", "broker", "id", "address", "read", "write", "perm"), rows)
