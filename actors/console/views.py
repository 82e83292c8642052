"""What each page shows, computed from a `ConsoleState` alone (never from a server): plain dicts
and lists the templates lay out. Ray-free and aiohttp-free."""

from __future__ import annotations

from typing import Any

from actors.console.model import ConsoleState, Divergence, QueueRoute, RouteView, divergence
from actors.console.svg import role_timeline as role_timeline_svg
from actors.console.svg import sparkline
from namesrv.broker.subscription.config import SubscriptionGroupConfig
from namesrv.protocol.constants import TOPIC_PERMS, Perm

LIST_LIMIT = 500
"""Rows a list page renders at most (the filter narrows the rest)."""


def state_divergence(state: ConsoleState) -> Divergence:
    """The NameServers' divergence, computed once per state version."""
    div: Divergence = state.derive("divergence", lambda: divergence(state.namesrvs))
    return div


def _topic_messages(state: ConsoleState) -> dict[str, int]:
    totals: dict[str, int] = {}
    for b in state.brokers.values():
        for (t, _q), n in b.queues.items():
            totals[t] = totals.get(t, 0) + n
    return totals


def cluster_page(state: ConsoleState) -> dict[str, Any]:
    """Brokers by set (masters first), each with which NameServers list it."""
    listed: dict[str, list[str]] = {}
    for name, view in sorted(state.namesrvs.items()):
        for entry in view.brokers:
            listed.setdefault(entry.broker_addr, []).append(name)
    sets: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for b in sorted(state.brokers.values(), key=lambda v: (v.cluster, v.broker_name, v.broker_id)):
        if b.error is not None and not listed.get(b.addr):
            continue  # dead and no NameServer lists it: gone from the cluster
        sets.setdefault((b.cluster, b.broker_name), []).append({
            "b": b, "listed_on": listed.get(b.addr, []),
            "chart": sparkline(list(state.tps_history.get(b.addr, [])), label="put TPS"),
        })
    unknown = sorted(addr for addr in listed if addr not in state.brokers)
    return {"sets": [{"cluster": c, "name": n, "members": m} for (c, n), m in sorted(sets.items())],
            "unknown": [{"addr": a, "listed_on": listed[a]} for a in unknown],
            "roles": role_timeline(state)}


def role_timeline(state: ConsoleState, limit: int = 50) -> list[dict[str, Any]]:
    """Every broker's role changes (its first role included), newest first: failovers in order."""
    rows = [{"at_ms": at, "broker": b.actor_name or b.addr, "role": role, "epoch": epoch}
            for b in state.brokers.values() for at, role, epoch in b.role_log]
    rows.sort(key=lambda r: (r["at_ms"], r["broker"]), reverse=True)
    return rows[:limit]


TIMELINE_MS = 10 * 60 * 1000
"""The HA page's timeline shows at most the last ten minutes."""


def ha_page(state: ConsoleState) -> dict[str, Any]:
    """Controller mode: each broker set as the controller holds it beside what each member says of
    itself (a member that disagrees is marked: e.g. a cut-off old master still calling itself master),
    the deaths the controller saw, and every broker's roles on a timeline."""
    ctl = state.controller
    brokers = sorted(state.brokers.values(), key=lambda b: (b.broker_name, b.controller_id or 0, b.addr))
    names = sorted(set(ctl.sets if ctl is not None else ()) | {b.broker_name for b in brokers
                                                                if b.controller_id is not None})
    sets = []
    for name in names:
        held = ctl.sets.get(name) if ctl is not None else None
        members = []
        for b in (b for b in brokers if b.broker_name == name):
            master = held is not None and b.controller_id is not None and b.controller_id == held.master_broker_id
            claims = "MASTER" in b.role
            agrees = b.error is not None or held is None or (
                claims == master and (not master or b.epoch == held.master_epoch))
            lease = b.lease or {}
            members.append({"b": b, "is_master": master, "agrees": agrees,
                            "in_sync": held is not None and b.controller_id in held.sync_state_set,
                            "lease": ("-" if not lease else
                                      f"{'valid' if lease.get('valid') else 'run out'}, last answered heartbeat "
                                      f"{lease.get('silent_ms')} ms ago, {lease.get('refused', 0)} sends refused")})
        sets.append({"name": name, "held": held, "members": members})
    now = max([b.seen_ms for b in brokers] + [ctl.seen_ms if ctl is not None else 0] + [0])
    start = now - TIMELINE_MS
    rows = []
    for b in brokers:
        log = sorted(b.role_log)
        if not log:
            continue
        end = b.seen_ms if b.error is not None else now
        spans = [(at, log[i + 1][0] if i + 1 < len(log) else end, role, epoch)
                 for i, (at, role, epoch) in enumerate(log)]
        rows.append((b.actor_name or b.addr, spans))
    first = min((s for _, spans in rows for s, *_ in spans), default=now)
    start = max(start, first)
    deaths = sorted(ctl.deaths, key=lambda d: int(d.get("atMs", 0)), reverse=True) if ctl is not None else []
    return {"controller": ctl, "sets": sets, "deaths": deaths[:50],
            "timeline": role_timeline_svg(rows, start, now) if rows else ""}


def namesrvs_page(state: ConsoleState) -> dict[str, Any]:
    div = state_divergence(state)
    columns = []
    for _name, view in sorted(state.namesrvs.items()):
        columns.append({
            "view": view,
            "brokers": [{"b": b, "diverged": b.key in div.brokers} for b in sorted(
                view.brokers, key=lambda e: (e.cluster, e.broker_name, e.broker_id))],
            "topics_diverged": sorted(t for t in div.topics if t in view.topics),
            "chart": sparkline(list(state.route_change_history.get(view.name, [])), label="route changes"),
        })
    return {"columns": columns, "div": div,
            "broker_divergence": [{"key": k, "on": sorted(v),
                                   "missing": sorted(set(state.namesrvs) - v)} for k, v in sorted(div.brokers.items())],
            "topic_divergence": [{"topic": t, "on": sorted(v), "missing": sorted(set(state.namesrvs) - v)}
                                 for t, v in sorted(div.topics.items())][:LIST_LIMIT],
            "route_divergence": sorted(div.routes)[:LIST_LIMIT],
            "events": list(state.events)[:50]}


def _route_text(route: RouteView | None) -> str:
    if route is None:
        return "no route"
    return ", ".join(f"{q.broker_name} r{q.read_queue_nums}/w{q.write_queue_nums} perm {q.perm}" for q in route.queues)


def queue_offsets(state: ConsoleState, topic: str) -> list[dict[str, Any]]:
    """Per queue of `topic` on every broker that holds messages of it: its max offset."""
    rows = []
    for b in sorted(state.brokers.values(), key=lambda v: (v.broker_name, v.broker_id)):
        for (t, q), offset in sorted(b.queues.items()):
            if t == topic:
                rows.append({"broker": b.actor_name or b.addr, "broker_name": b.broker_name, "queue_id": q,
                             "max_offset": offset})
    return rows


def topics_page(state: ConsoleState, needle: str = "", show_system: bool = False) -> dict[str, Any]:
    names: list[str] = state.derive("topic_names", lambda: sorted(state.all_topics()))
    needle = needle.strip()
    matched = [t for t in names if needle.lower() in t.lower()] if needle else names
    if not show_system:
        matched = [t for t in matched if not _system_topic(t)]
    div = state_divergence(state)
    offsets: dict[str, int] = state.derive("topic_messages", lambda: _topic_messages(state))
    rows = []
    for t in matched[:LIST_LIMIT]:
        on = [n for n, v in sorted(state.namesrvs.items()) if t in v.topics]
        some = next((v.routes[t] for v in state.namesrvs.values() if t in v.routes), None)
        rows.append({"topic": t, "on": on, "diverged": t in div.topics or t in div.routes,
                     "route": _route_text(some), "messages": offsets.get(t, 0)})
    return {"rows": rows, "total": len(names), "matched": len(matched), "needle": needle,
            "show_system": show_system, "limit": LIST_LIMIT}


def topic_detail(state: ConsoleState, topic: str) -> dict[str, Any]:
    routes = [{"namesrv": n, "has": topic in v.topics, "route": v.routes.get(topic),
               "text": _route_text(v.routes.get(topic)), "error": v.error}
              for n, v in sorted(state.namesrvs.items())]
    groups = sorted(g.group for g in state.groups.values() if any(q.topic == topic for q in g.offsets))
    queues = [q for _, v in sorted(state.namesrvs.items())
              if (route := v.routes.get(topic)) is not None for q in route.queues]
    return {"topic": topic, "routes": routes, "queues": queue_offsets(state, topic), "groups": groups,
            "exists": any(topic in v.topics for v in state.namesrvs.values()),
            "current": queues[0] if queues else QueueRoute("", 8, 8, int(Perm.READ | Perm.WRITE)),
            "perms": TOPIC_PERMS}


def groups_page(state: ConsoleState, needle: str = "") -> dict[str, Any]:
    rows = []
    for g in sorted(state.groups.values(), key=lambda v: v.group):
        if needle and needle.lower() not in g.group.lower():
            continue
        rows.append({"g": g, "lag": g.lag, "topics": sorted({q.topic for q in g.offsets}),
                     "chart": sparkline(list(state.lag_history.get(g.group, [])), label="lag")})
    return {"rows": rows[:LIST_LIMIT], "needle": needle, "total": len(state.groups)}


def group_detail(state: ConsoleState, group: str) -> dict[str, Any]:
    g = state.groups.get(group)
    configs = sorted(g.configs.items()) if g is not None else []
    names = {b.addr: b.actor_name or b.broker_name or b.addr for b in state.brokers.values()}
    return {"group": group, "g": g, "lag": g.lag if g is not None else 0,
            "chart": sparkline(list(state.lag_history.get(group, [])), width=480, height=60, label="lag"),
            "topics": sorted({q.topic for q in g.offsets}) if g is not None else [],
            "configs": [(names.get(addr, addr), c) for addr, c in configs],
            "config": configs[0][1] if configs else SubscriptionGroupConfig(group_name=group or "-")}


def producers_page(state: ConsoleState) -> dict[str, Any]:
    return {"producers": [state.producers[g] for g in sorted(state.producers)]}


def _system_topic(topic: str) -> bool:
    return topic.startswith(("rmq_sys_", "RMQ_SYS_", "%RETRY%", "%DLQ%", "SCHEDULE_TOPIC", "TBW102",
                             "BenchmarkTest", "OFFSET_MOVED_EVENT", "SELF_TEST_TOPIC", "TRANS_CHECK_MAX")) \
        or topic in ("DefaultCluster", "DefaultCluster_REPLY_TOPIC")
