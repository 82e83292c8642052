"""The console's Ray-free model: divergence between NameServers' views, the pages' data, the
charts, and that these modules import neither Ray nor aiohttp; and how the collector counts the
calls it makes by origin (what the cheapness check in tests/ray/console/test_console.py reads)."""

from __future__ import annotations

import ast
from pathlib import Path

from actors.console import views
from actors.console.model import (
    BrokerEntry,
    BrokerSetState,
    BrokerView,
    ConsoleState,
    ControllerView,
    GroupView,
    NamesrvView,
    QueueOffset,
    QueueRoute,
    RouteView,
    broker_diff,
    divergence,
)
from actors.console.svg import sparkline

A0 = BrokerEntry("C", "broker-a", 0, "127.0.0.1:10911", 100, 3, True)
B0 = BrokerEntry("C", "broker-b", 0, "127.0.0.1:10921", 200, 3, True)
ROUTE = RouteView(4, (QueueRoute("broker-a", 8, 8, 6),), (("broker-a", ((0, "127.0.0.1:10911"),)),))


def ns(name: str, brokers: list[BrokerEntry], topics: set[str] | None = None,
       routes: dict[str, RouteView] | None = None, error: str | None = None) -> NamesrvView:
    return NamesrvView(name, error=error, ready=True, brokers=brokers, topics=topics or set(), routes=routes or {})


def test_views_that_agree_have_no_divergence():
    views_ = {"ns-0": ns("ns-0", [A0, B0], {"T"}, {"T": ROUTE}),
              "ns-1": ns("ns-1", [B0, A0], {"T"}, {"T": RouteView(9, ROUTE.queues, ROUTE.brokers)})}
    d = divergence(views_)
    assert not d.any  # route versions are each NameServer's own counter: only the content counts
    assert d.summary() == "the NameServers agree"


def test_a_broker_on_one_namesrv_only_is_a_divergence_naming_where():
    d = divergence({"ns-0": ns("ns-0", [A0, B0]), "ns-1": ns("ns-1", [A0])})
    assert d.brokers == {B0.key: {"ns-0"}}
    assert "1 broker(s) not on every NameServer" in d.summary()


def test_same_broker_name_at_another_address_diverges_on_both_sides():
    moved = BrokerEntry("C", "broker-a", 0, "127.0.0.1:20911")
    d = divergence({"ns-0": ns("ns-0", [A0]), "ns-1": ns("ns-1", [moved])})
    assert d.brokers == {A0.key: {"ns-0"}, moved.key: {"ns-1"}}


def test_topics_and_routes_that_differ():
    other = RouteView(1, (QueueRoute("broker-a", 4, 4, 6),), ROUTE.brokers)
    d = divergence({"ns-0": ns("ns-0", [A0], {"T", "U"}, {"T": ROUTE}),
                    "ns-1": ns("ns-1", [A0], {"T"}, {"T": other})})
    assert d.topics == {"U": {"ns-0"}}
    assert set(d.routes) == {"T"}


def test_an_unreachable_namesrv_is_not_a_divergence():
    d = divergence({"ns-0": ns("ns-0", [A0, B0]), "ns-1": ns("ns-1", [], error="GetTimeoutError")})
    assert not d.any


def test_broker_diff_names_arrivals_and_departures():
    came, left = broker_diff([A0], [B0])
    assert came == {B0.key} and left == {A0.key}


def state() -> ConsoleState:
    s = ConsoleState(namesrvs={"ns-0": ns("ns-0", [A0, B0], {"T", "Orders", "%RETRY%g"}, {"T": ROUTE}),
                               "ns-1": ns("ns-1", [A0], {"T", "Orders", "%RETRY%g"}, {"T": ROUTE})})
    s.brokers = {"127.0.0.1:10911": BrokerView("127.0.0.1:10911", "broker-a-0", "C", "broker-a", 0, role="ASYNC_MASTER",
                                               queues={("T", 0): 5, ("T", 1): 7})}
    s.groups = {"g": GroupView("g", members=["c1"], offsets=[QueueOffset("T", "broker-a", 0, 5, 2),
                                                            QueueOffset("T", "broker-a", 1, 7, 9)])}
    return s


def test_pages_data_come_from_the_state():
    s = state()
    cluster = views.cluster_page(s)
    assert [m["b"].actor_name for m in cluster["sets"][0]["members"]] == ["broker-a-0"]
    assert cluster["sets"][0]["members"][0]["listed_on"] == ["ns-0", "ns-1"]
    assert [u["addr"] for u in cluster["unknown"]] == ["127.0.0.1:10921"]  # listed, but no broker answers there

    page = views.namesrvs_page(s)
    assert [d["key"] for d in page["broker_divergence"]] == [B0.key]
    assert page["broker_divergence"][0]["missing"] == ["ns-1"]

    topics = views.topics_page(s)
    assert [r["topic"] for r in topics["rows"]] == ["Orders", "T"]  # system topics hidden by default
    assert topics["rows"][1]["messages"] == 12
    assert [r["topic"] for r in views.topics_page(s, "ord")["rows"]] == ["Orders"]
    assert "%RETRY%g" in [r["topic"] for r in views.topics_page(s, show_system=True)["rows"]]

    detail = views.topic_detail(s, "T")
    assert [q["max_offset"] for q in detail["queues"]] == [5, 7]
    assert [r["text"] for r in detail["routes"]] == ["broker-a r8/w8 perm 6"] * 2
    assert detail["groups"] == ["g"]


def test_lag_never_goes_negative_and_sums_per_group():
    g = state().groups["g"]
    assert [q.lag for q in g.offsets] == [3, 0]
    assert g.lag == 3
    assert views.groups_page(state())["rows"][0]["lag"] == 3


def test_sparkline_scales_to_the_maximum():
    svg = sparkline([0, 5, 10], width=100, height=20, label="tps")
    assert svg.startswith("<svg") and svg.endswith("</svg>")
    assert "98.0,2.0" in svg  # the maximum at the top right
    assert "tps 10 (max 10)" in svg
    assert "polyline" not in sparkline([], label="empty")


def test_the_pure_modules_import_neither_ray_nor_aiohttp():
    root = Path(__file__).resolve().parents[3] / "actors" / "console"
    for name in ("model.py", "views.py", "svg.py", "decode.py"):
        tree = ast.parse((root / name).read_text())
        imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        imported |= {(n.module or "").split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        assert not imported & {"ray", "aiohttp"}, name


def test_calls_are_counted_under_the_origin_of_the_context_that_makes_them():
    import asyncio
    import contextvars

    from actors.console.calls import ORIGIN, ServerCalls

    c = ServerCalls("ns", ConsoleState())
    c.count("broker")  # no origin set: a page view's context
    context = contextvars.copy_context()
    context.run(ORIGIN.set, "collector")
    context.run(c.count, "broker", 2)

    async def action() -> None:
        ORIGIN.set("action")
        c.count("namesrv")
    asyncio.run(action())
    assert c.counts == {"namesrv": 1, "broker": 3, "controller": 0}
    assert c.by_origin == {"collector": 2, "action": 1, "view": 1}


def test_role_timeline_lists_every_brokers_roles_newest_first():
    s = state()
    s.brokers["127.0.0.1:10911"].role_log = [(1_000, "SLAVE", 0), (5_000, "SYNC_MASTER", 2)]
    s.brokers["127.0.0.1:10921"] = BrokerView("127.0.0.1:10921", "broker-a-1", "C", "broker-a", 1,
                                              role_log=[(2_000, "SYNC_MASTER", 1), (5_000, "SLAVE", 2)])
    assert [(r["broker"], r["role"], r["epoch"]) for r in views.role_timeline(s)] == [
        ("broker-a-1", "SLAVE", 2), ("broker-a-0", "SYNC_MASTER", 2), ("broker-a-1", "SYNC_MASTER", 1),
        ("broker-a-0", "SLAVE", 0)]
    assert len(views.role_timeline(s, limit=1)) == 1


def test_ha_page_sets_the_controllers_view_beside_each_members_own():
    """A cut-off old master still calling itself master (epoch 1) beside the one the controller
    elected (epoch 2) is marked; the timeline has a row per broker; deaths newest first."""
    s = state()
    assert views.ha_page(s)["controller"] is None and views.ha_page(s)["sets"] == []
    old = s.brokers["127.0.0.1:10911"]
    old.role, old.epoch, old.controller_id, old.seen_ms = "ASYNC_MASTER", 1, 1, 9_000
    old.role_log = [(1_000, "ASYNC_MASTER", 1)]
    old.lease = {"valid": False, "silent_ms": 4_000, "lease_ms": 2_500, "refused": 7}
    s.brokers["127.0.0.1:10921"] = BrokerView(
        "127.0.0.1:10921", "broker-a-1", "C", "broker-a", 0, role="ASYNC_MASTER", epoch=2, controller_id=2,
        role_log=[(1_000, "SLAVE", 1), (6_000, "ASYNC_MASTER", 2)], seen_ms=9_000)
    s.controller = ControllerView("controller", sets={"broker-a": BrokerSetState(
        "broker-a", 2, "127.0.0.1:10921", 2, (2,), 3, ((1, "127.0.0.1:10911"), (2, "127.0.0.1:10921")))},
        elections=2, deaths=[{"brokerName": "broker-a", "brokerId": 1, "how": "heartbeat expired", "atMs": 5_900},
                             {"brokerName": "broker-b", "brokerId": 1, "how": "channel closed", "atMs": 100}],
        seen_ms=9_000)
    page = views.ha_page(s)
    [a] = page["sets"]
    rows = {m["b"].actor_name: m for m in a["members"]}
    assert not rows["broker-a-0"]["agrees"] and not rows["broker-a-0"]["is_master"]
    assert "run out" in rows["broker-a-0"]["lease"] and "7 sends refused" in rows["broker-a-0"]["lease"]
    assert rows["broker-a-1"]["agrees"] and rows["broker-a-1"]["is_master"] and rows["broker-a-1"]["in_sync"]
    assert [d["atMs"] for d in page["deaths"]] == [5_900, 100]
    assert page["timeline"].count("<rect") == 3 and "broker-a-1" in page["timeline"] and "e2" in page["timeline"]
