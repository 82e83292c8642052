"""`namesrv top`: every NameServer of a Ray namespace, refreshed in place (rich Live).

Each refresh asks every NameServer at once for its status (brokers and their last-heartbeat age,
topic count, route sequence), its topic list and its removal log, then shows:
- the NameServers, one row each (an unreachable one says so);
- the brokers, one row each, with each NameServer's heartbeat age for it ("missing" where that
  NameServer does not hold it);
- where the NameServers disagree: brokers or topics one holds and another does not;
- broker removals (expiry, closed channel, unregistration) as they happen, the newest first.

Collecting is separate from drawing (`collect` / `render`), so both can be tested apart.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from actors.deployment.spec import DEFAULT_NAMESPACE
from clients.cli.render import clock, duration
from clients.cli.support import int_in, positive_float

REMOVALS_SHOWN = 10
NAMES_SHOWN = 8
STALE_HEARTBEAT_MS = 60_000
"""A heartbeat older than this is drawn in yellow (brokers register every 30 s by default)."""


@dataclass
class NamesrvView:
    name: str
    status: dict[str, Any] | None = None
    topics: set[str] | None = None
    removals: list[Any] = field(default_factory=list)
    error: str | None = None


@dataclass
class Frame:
    """One refresh: what every NameServer said, and when."""

    t_ms: int
    views: list[NamesrvView]
    seq: int = 1


def collect(namesrvs: dict[str, Any], timeout_s: float, seq: int = 1) -> Frame:
    """Ask every NameServer at once (status, topic list, removals); a silent one is marked."""
    import ray

    refs = {name: (h.get_status.remote(), h.get_all_topic_list_from_nameserver.remote(), h.get_removals.remote())
            for name, h in namesrvs.items()}
    views = []
    for name, (status_ref, topics_ref, removals_ref) in sorted(refs.items()):
        view = NamesrvView(name)
        try:
            view.status, topics, view.removals = ray.get([status_ref, topics_ref, removals_ref], timeout=timeout_s)
            if topics.ok:
                view.topics = set(topics.payload.topic_list)
        except Exception as e:  # dead, restarting or too slow: shown, not fatal
            view.error = type(e).__name__
        views.append(view)
    return Frame(int(time.time() * 1000), views, seq)


# ---------------------------------------------------------------------------- what the views disagree on
def _brokers(view: NamesrvView) -> dict[str, dict[str, Any]]:
    return {b["broker_addr"]: b for b in (view.status or {}).get("brokers", [])}


def broker_rows(frame: Frame) -> list[tuple[tuple[str, str, int, str], dict[str, int | None]]]:
    """One row per broker any NameServer holds: (cluster, name, id, addr) and, per NameServer that
    holds it, its heartbeat age in ms."""
    rows: dict[tuple[str, str, int, str], dict[str, int | None]] = {}
    for view in frame.views:
        for addr, b in _brokers(view).items():
            key = (b["cluster"], b["broker_name"], b["broker_id"], addr)
            rows.setdefault(key, {})[view.name] = b["last_heartbeat_age_ms"]
    return sorted(rows.items())


def _shorten(names: Iterable[str]) -> str:
    names = sorted(names)
    more = f" (+{len(names) - NAMES_SHOWN} more)" if len(names) > NAMES_SHOWN else ""
    return ", ".join(names[:NAMES_SHOWN]) + more


def disagreements(frame: Frame) -> list[str]:
    """Sentences: which brokers and topics some answering NameServers hold and others do not."""
    answering = [v for v in frame.views if v.error is None and v.status is not None]
    out = []
    for view in answering:
        others = [v for v in answering if v is not view]
        mine = set(_brokers(view))
        for other in others:
            only = mine - set(_brokers(other))
            if only:
                out.append(f"brokers on {view.name}, not on {other.name}: {_shorten(only)}")
        if view.topics is not None:
            for other in others:
                if other.topics is not None and (only := view.topics - other.topics):
                    out.append(f"topics on {view.name}, not on {other.name}: {_shorten(only)}")
    return out


def recent_removals(frame: Frame, since_ms: int) -> list[tuple[int, str, str, str, bool]]:
    """(t_ms, namesrv, broker_addr, cause, new since `since_ms`), the newest first."""
    events = [(int(r.t_ms), v.name, str(r.broker_addr), str(r.cause), int(r.t_ms) >= since_ms)
              for v in frame.views for r in v.removals]
    return sorted(events, reverse=True)[:REMOVALS_SHOWN]


# ---------------------------------------------------------------------------- drawing
def render(frame: Frame, where: str, started_ms: int) -> Any:
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    head = Text(f"namesrv top  {where}  refresh {frame.seq}  {clock(frame.t_ms)} UTC", style="bold")

    ns_table = Table(title="NameServers", title_justify="left", expand=False)
    for col in ("namesrv", "state", "brokers", "topics", "route seq", "removals", "address"):
        ns_table.add_column(col)
    for v in frame.views:
        if v.error is not None or v.status is None:
            ns_table.add_row(v.name, Text(f"UNREACHABLE {v.error}", style="red"), "", "", "", "", "")
            continue
        s = v.status
        state = Text("ready", style="green") if s["ready"] else Text("NOT READY", style="yellow")
        ns_table.add_row(v.name, state, str(len(s["brokers"])), str(s["topics"]), str(s["route_seq"]),
                         str(len(v.removals)), s.get("remoting_address") or "-")

    names = [v.name for v in frame.views]
    b_table = Table(title="Brokers (last heartbeat age per NameServer)", title_justify="left")
    for col in ("cluster", "broker", "id", "address", *names):
        b_table.add_column(col)
    for (cluster, broker, bid, addr), ages in broker_rows(frame):
        cells: list[Any] = [cluster, broker, str(bid), addr]
        for name in names:
            if name not in ages:
                cells.append(Text("missing", style="red"))
            else:
                age = ages[name]
                style = "yellow" if age is not None and age > STALE_HEARTBEAT_MS else ""
                cells.append(Text(duration(age), style=style))
        b_table.add_row(*cells)

    parts: list[Any] = [head, ns_table, b_table]
    diff = disagreements(frame)
    parts.append(Text("Disagreements", style="bold"))
    if diff:
        parts.extend(Text(f"  {line}", style="yellow") for line in diff)
    else:
        parts.append(Text("  none: every answering NameServer holds the same brokers and topics", style="green"))
    removals = recent_removals(frame, started_ms)
    r_table = Table(title="Broker removals (newest first)", title_justify="left")
    for col in ("time (UTC)", "namesrv", "broker", "cause", ""):
        r_table.add_column(col)
    for t_ms, ns, addr, cause, new in removals:
        r_table.add_row(clock(t_ms), ns, addr, cause, Text("NEW", style="bold red") if new else "")
    parts.append(r_table if removals else Text("Broker removals: none", style="dim"))
    return Group(*parts)


# ---------------------------------------------------------------------------- the command
def cmd_top(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.live import Live

    from clients.cli.support import connect_deployment

    dep = connect_deployment(args)
    where = f"Ray namespace {args.namespace!r}"
    started_ms = int(time.time() * 1000)
    console = Console()
    seq = 0
    try:
        with Live(console=console, auto_refresh=False, transient=False) as live:
            while args.iterations is None or seq < args.iterations:
                if seq:
                    time.sleep(args.interval)
                seq += 1
                frame = collect(dep.namesrvs, args.timeout, seq)
                live.update(render(frame, where, started_ms), refresh=True)
    except KeyboardInterrupt:  # Ctrl-C is how one leaves a live view: not an error
        pass
    return 0


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "top", help="a live view of every NameServer: brokers, heartbeat ages, disagreements, removals",
        description="Every NameServer of a Ray namespace, refreshed in place: brokers with their last-heartbeat "
                    "age on each NameServer, topic counts, brokers and topics the NameServers disagree on, and "
                    "broker removals as they happen. Ctrl-C leaves.",
    )
    p.add_argument("--address", default="auto", help="Ray cluster address (default: auto)")
    p.add_argument("--namespace", default=DEFAULT_NAMESPACE, help="Ray namespace of the actors")
    p.add_argument("--interval", type=positive_float, default=1.0, help="seconds between refreshes (default 1)")
    p.add_argument("--iterations", type=int_in(1), default=None, help="exit after this many refreshes")
    p.add_argument("--timeout", type=positive_float, default=5.0,
                   help="seconds to wait for each NameServer per refresh (default 5)")
    p.set_defaults(func=cmd_top)
