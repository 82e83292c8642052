"""The union of NameServers' routes (namesrv.client.route_union): every broker any view lists, each
taken whole from the first view that lists it, whatever the others say."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from namesrv.client.route_union import union_of_routes
from namesrv.protocol.constants import Perm
from namesrv.protocol.models import BrokerData, QueueData, TopicRouteData

RW = int(Perm.READ | Perm.WRITE)


def route(*brokers: tuple[str, int, str], conf: str | None = None) -> TopicRouteData:
    """(name, queues, master address) per broker."""
    return TopicRouteData(
        queue_datas=tuple(QueueData(n, q, q, RW) for n, q, _ in brokers),
        broker_datas=tuple(BrokerData("c", n, {0: a}) for n, _, a in brokers),
        order_topic_conf=conf,
    )


def test_views_that_agree_give_the_same_route() -> None:
    r = route(("broker-a", 4, "10.0.0.2:10911"), ("broker-b", 4, "10.0.0.3:10911"))
    assert union_of_routes([r, route(("broker-a", 4, "10.0.0.2:10911"), ("broker-b", 4, "10.0.0.3:10911"))]) == r


def test_a_broker_one_namesrv_lost_is_kept() -> None:
    """NameServer-1 expired broker-a, NameServer-0 still lists it: the union has both, whichever the
    client prefers."""
    both = route(("broker-a", 4, "a:1"), ("broker-b", 4, "b:1"))
    lost_a = route(("broker-b", 4, "b:1"))
    assert union_of_routes([both, lost_a]) == both
    assert union_of_routes([lost_a, both]) == both
    assert union_of_routes([None, lost_a]) == lost_a


def test_the_first_view_listing_a_broker_wins_whole() -> None:
    """Two views disagree about broker-a (queue count, perm, master): its queues and addresses come
    together from the first view that lists it; a broker only the second lists comes from it."""
    first = route(("broker-a", 4, "a-old:1"), conf="broker-a:4")
    second = TopicRouteData(
        queue_datas=(QueueData("broker-a", 8, 8, int(Perm.READ)), QueueData("broker-c", 2, 2, RW)),
        broker_datas=(BrokerData("c", "broker-a", {0: "a-new:1"}), BrokerData("c", "broker-c", {0: "c:1", 1: "c1:1"})),
    )
    u = union_of_routes([first, second])
    assert u is not None
    assert u.queue_datas == (QueueData("broker-a", 4, 4, RW), QueueData("broker-c", 2, 2, RW))
    assert [dict(bd.broker_addrs) for bd in u.broker_datas] == [{0: "a-old:1"}, {0: "c:1", 1: "c1:1"}]
    assert u.order_topic_conf == "broker-a:4"


def test_no_view_has_a_route() -> None:
    assert union_of_routes([]) is None
    assert union_of_routes([None, None]) is None


NAMES = st.sampled_from(["broker-a", "broker-b", "broker-c", "broker-d"])
VIEW = st.one_of(st.none(), st.lists(st.tuples(NAMES, st.integers(1, 8), st.sampled_from(["x:1", "y:1"])),
                                     unique_by=lambda b: b[0]).map(lambda bs: route(*bs)))


@given(st.lists(VIEW, max_size=4))
def test_union_lists_every_broker_once_as_its_first_view_has_it(views: list[TopicRouteData | None]) -> None:
    u = union_of_routes(views)
    routes = [v for v in views if v is not None]
    listed = {qd.broker_name for r in routes for qd in r.queue_datas}
    if not listed and not routes:
        assert u is None
        return
    assert u is not None
    assert sorted(qd.broker_name for qd in u.queue_datas) == sorted(listed)  # each once
    for qd in u.queue_datas:
        first = next(r for r in routes if any(q.broker_name == qd.broker_name for q in r.queue_datas))
        assert qd in first.queue_datas
        assert next(bd for bd in u.broker_datas if bd.broker_name == qd.broker_name) in first.broker_datas
