"""Route bodies joined from their parts' JSON are fastjson's bytes exactly, in both JSON flavours,
for any route the tables could hold; a group's new version is written anew."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from namesrv.common.clock import ManualClock
from namesrv.protocol import fastjson
from namesrv.protocol.models import BrokerData, QueueData, TopicRouteData
from namesrv.routeinfo import route_json
from namesrv.routeinfo.config import NamesrvConfig
from namesrv.routeinfo.route_info_manager import RouteInfoManager
from namesrv.routeinfo.route_json import RouteJson
from tests.support.namesrv import register

names = st.text(min_size=1, max_size=12)  # any text: quotes, backslashes, control and non-ASCII characters
queue = st.builds(QueueData, names, st.integers(0, 1024), st.integers(0, 1024), st.integers(0, 7),
                  st.integers(0, 2**31 - 1))
group = st.builds(BrokerData, names, names, st.dictionaries(st.integers(0, 2**60), names, max_size=4))
route = st.builds(
    TopicRouteData, st.lists(queue, max_size=6), st.lists(group, max_size=6),
    st.one_of(st.none(), st.dictionaries(names, st.lists(names, max_size=3), max_size=3)),
    st.one_of(st.none(), names),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(route, min_size=1, max_size=4), st.booleans())
def test_a_route_joined_from_its_parts_is_fastjsons_bytes(routes: list[TopicRouteData], standard: bool) -> None:
    encoder = RouteJson()
    for r in routes + routes:  # the second time every part is remembered
        assert encoder.dumps(r, standard=standard) == fastjson.dumps(r.to_wire(), standard=standard)


def test_parts_are_written_once_and_a_groups_new_version_anew() -> None:
    rim = RouteInfoManager(NamesrvConfig(), ManualClock())
    topics = [f"T{t}" for t in range(20)]
    for b in range(3):
        register(rim, *topics, name=f"broker-{b}", addr=f"10.0.0.{b}:10911")
    encoder = RouteJson()
    for t in range(20):
        r = rim.pickup_topic_route_data(f"T{t}")
        assert r is not None
        assert encoder.dumps(r, standard=False) == fastjson.dumps(r.to_wire(), standard=False)
    assert encoder.parts_written == 6  # 3 queue shapes and 3 groups, for 20 routes

    register(rim, "T0", name="broker-0", addr="10.0.0.9:10911", broker_id=1)  # a slave joins broker-0
    r = rim.pickup_topic_route_data("T0")
    assert r is not None
    body = encoder.dumps(r, standard=True)
    assert body == fastjson.dumps(r.to_wire(), standard=True) and b"10.0.0.9:10911" in body


def test_the_parts_memory_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(route_json, "PARTS_MAX", 4)
    encoder = RouteJson()
    for n in range(10):
        r = TopicRouteData([QueueData(f"b{n}", 4, 4, 6)], [BrokerData("c", f"b{n}", {0: f"a{n}"})])
        assert encoder.dumps(r, standard=False) == fastjson.dumps(r.to_wire(), standard=False)
    assert all(len(m) <= 4 for m in (*encoder._queues, *encoder._groups))
