"""Plain-text tables for the CLI: no dependency, aligned columns, readable in any terminal."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from namesrv.protocol.constants import perm_to_string
from namesrv.protocol.models import TopicRouteData


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


# ------------------------------------------------------------------------------ times for people
def duration(ms: float | None) -> str:
    """850 ms, 2.35 s, 3 min 05 s; '-' for none."""
    if ms is None:
        return "-"
    if abs(ms) < 1_000:
        return f"{ms:.0f} ms"
    if abs(ms) < 60_000:
        return f"{ms / 1000:.2f} s"
    minutes, seconds = divmod(round(ms / 1000), 60)
    return f"{minutes} min {seconds:02d} s"


def since(ms: int | None, t0_ms: int) -> str:
    """Seconds since `t0_ms` (the start of a run): '+12.34 s'."""
    return "-" if ms is None else f"{(ms - t0_ms) / 1000:+.2f} s"


def clock(ms: int | None) -> str:
    """Wall-clock time of an epoch-ms instant, UTC, to the millisecond: '10:15:02.123'."""
    if ms is None:
        return "-"
    from datetime import UTC, datetime

    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%H:%M:%S.%f")[:-3]


def when(ms: int | None, t0_ms: int) -> str:
    """Both: '+12.34 s (10:15:02.123)'."""
    return "-" if ms is None else f"{since(ms, t0_ms)} ({clock(ms)})"
