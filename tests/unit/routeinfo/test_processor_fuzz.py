"""Property-based: random request sequences at the processor, interleaved with expiry and channel loss.

For every request: no exception, a RemotingResponse with a known code, an error changes nothing,
a read-only request changes nothing, and the route tables stay consistent. Route versions must
move whenever a route changes. At the end, once every broker's timeout has passed, a scan must
leave all tables empty (nothing unexpirable is ever left behind).
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from namesrv.common.clock import ManualClock
from namesrv.protocol.bodies import body_crc32
from namesrv.protocol.codes import RequestCode, ResponseCode
from namesrv.protocol.constants import PERM_ALL
from namesrv.protocol.msgpack_codec import decode_body, encode_body
from namesrv.remoting.command import RemotingRequest, RemotingResponse
from namesrv.routeinfo.config import NamesrvConfig
from namesrv.routeinfo.kvconfig import KVConfigManager
from namesrv.routeinfo.processor import DefaultRequestProcessor
from namesrv.routeinfo.route_info_manager import RouteInfoManager
from tests.support.namesrv import state

CLUSTERS = ["C1", "C2"]
NAMES = ["b1", "b2", "b3"]
ADDRS = ["h:1", "h:2", "h:3", "h:4"]
IDS = [0, 0, 1, 2]
TOPICS = ["T1", "T2", "T3", "TBW102"]
CHANNELS = [None, "ch-1", "ch-2"]
VERSIONS = [(1, 1), (1, 2), (2, 2)]
KNOWN_RESPONSE_CODES = {int(c) for c in ResponseCode}
VALID_CODES = [int(c) for c in RequestCode]
READ_ONLY_CODES = {101, 105, 106, 206, 219, 224, 304, 319}
LIVENESS_ONLY_CODES = {322, 904}

garbage = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**40), max_value=2**40),
    st.floats(allow_nan=True),
    st.text(max_size=6),
    st.binary(max_size=6),
    st.lists(st.integers(-9, 9), max_size=2),
    st.sampled_from(["", " ", "0", "a b", "x\n", "T" * 130, "-1"]),
)


def weighted(*options: tuple[int, st.SearchStrategy[Any]]) -> st.SearchStrategy[Any]:
    """Pick a strategy with the given relative weights (st.one_of does not weight its branches)."""
    table = [strategy for weight, strategy in options for _ in range(weight)]
    return st.integers(0, len(table) - 1).flatmap(lambda i: table[i])


def mostly(pool: list[Any]) -> st.SearchStrategy[Any]:
    """Usually a valid-looking value from `pool`, sometimes garbage."""
    return weighted((40, st.sampled_from(pool)), (1, garbage))


topic_config = st.fixed_dictionaries(
    {
        "topicName": st.just("placeholder"),
        "readQueueNums": mostly([0, 1, 4, 8, 16, 1024]),
        "writeQueueNums": mostly([0, 1, 4, 8, 16, 1024]),
        "perm": weighted((30, st.integers(0, PERM_ALL)), (1, garbage)),
    },
    optional={"topicSysFlag": mostly([0, 1, 2, 3]), "order": mostly([True, False])},
)


@st.composite
def register_body(draw: st.DrawFn) -> dict[str, Any]:
    topics = draw(st.lists(st.sampled_from(TOPICS), unique=True, max_size=4))
    table = {}
    for topic in topics:
        tc = draw(topic_config)
        tc["topicName"] = draw(mostly(TOPICS)) if one_in(draw, 10) else topic
        table[topic] = tc
    version = draw(st.sampled_from(VERSIONS))
    data_version: Any = {"timestamp": version[0], "counter": version[1]}
    if one_in(draw, 16):
        data_version = draw(st.one_of(garbage, st.dictionaries(st.text(max_size=3), garbage, max_size=2)))
    body: dict[str, Any] = {"topicConfigSerializeWrapper": {"topicConfigTable": table, "dataVersion": data_version}}
    filters = draw(st.sampled_from([None, None, [], ["f:1"], ["f:2", "f:3"], [""], [5]]))
    if filters is not None:
        body["filterServerList"] = filters
    return body


msgpack_value = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-(2**63), max_value=2**64 - 1),
        st.floats(),
        st.text(max_size=8),
        st.binary(max_size=8),
    ),
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(st.one_of(st.text(max_size=4), st.integers(-9, 9)), children, max_size=4),
    ),
    max_leaves=6,
)

config_body = st.one_of(
    st.sampled_from(
        [
            {"orderMessageEnable": "true"},
            {"orderMessageEnable": "false"},
            {"deleteTopicWithBrokerRegistration": "true"},
            {"brokerChannelExpiredTimeMs": "60000"},
            {"enableAllTopicList": "false"},
            {"kvConfigPath": "/tmp/x"},
            {"configBlackList": ""},
            {"noSuchKey": "1"},
            {"maxBodySize": "-1"},
        ]
    ),
    st.dictionaries(st.text(max_size=6), st.text(max_size=6), max_size=2),
)


def one_in(draw: st.DrawFn, n: int) -> bool:
    """True about once in n draws (a middle value: Hypothesis favours the ends of a range)."""
    return draw(st.integers(0, n - 1)) == n // 2


BODY_KINDS = ["register", "version", "config", "random", "binary", "none"]
PREFERRED_BODY = {103: "register", 322: "version", 318: "config"}


@st.composite
def body_bytes(draw: st.DrawFn, code: object) -> bytes | bytearray | None:
    preferred = PREFERRED_BODY.get(code) if type(code) is int else None  # type: ignore[call-overload]
    kind = preferred if preferred and not one_in(draw, 4) else draw(st.sampled_from(BODY_KINDS))
    if kind == "register":
        payload = encode_body(draw(register_body()))
    elif kind == "version":
        version = draw(st.sampled_from(VERSIONS))
        payload = encode_body({"timestamp": version[0], "counter": version[1]})
    elif kind == "config":
        payload = encode_body(draw(config_body))
    elif kind == "random":
        payload = encode_body(draw(msgpack_value))
    elif kind == "binary":
        return draw(st.binary(max_size=24))
    else:
        return None
    if one_in(draw, 8):
        mutation = draw(st.sampled_from(["truncate", "append", "flip", "bytearray"]))
        if mutation == "truncate":
            payload = payload[: draw(st.integers(0, len(payload) - 1))]
        elif mutation == "append":
            payload = payload + draw(st.binary(min_size=1, max_size=4))
        elif mutation == "flip":
            i = draw(st.integers(0, len(payload) - 1))
            payload = payload[:i] + bytes([payload[i] ^ draw(st.integers(1, 255))]) + payload[i + 1 :]
        else:
            return bytearray(payload)
    return payload


@st.composite
def ext_fields(draw: st.DrawFn, body: bytes | bytearray | None) -> Any:
    if one_in(draw, 50):
        return draw(st.one_of(garbage, st.dictionaries(st.one_of(st.text(max_size=4), st.integers(-9, 9)), garbage)))
    ext = draw(
        st.fixed_dictionaries(
            {
                "clusterName": mostly(CLUSTERS),
                "brokerAddr": mostly(ADDRS),
                "brokerName": mostly(NAMES),
                "brokerId": mostly(IDS),
                "topic": mostly(TOPICS),
                "cluster": mostly(CLUSTERS),
                "namespace": mostly(["ns", "ORDER_TOPIC_CONFIG"]),
                "key": mostly([*TOPICS, "k"]),
                "value": mostly(["v", "b1:4"]),
            },
            optional={
                "haServerAddr": mostly(ADDRS),
                "heartbeatTimeoutMillis": mostly([1_000, 30_000, 120_000]),
                "clusterName ": garbage,
            },
        )
    )
    if draw(st.booleans()):
        del ext["brokerId"]  # defaults to the master
    if draw(st.booleans()):
        del ext["value"]
    if body is not None and one_in(draw, 5):
        ext["bodyCrc32"] = body_crc32(body)
    elif one_in(draw, 25):
        ext["bodyCrc32"] = draw(st.one_of(st.integers(0, 2**32 - 1), garbage))
    return ext


@st.composite
def request(draw: st.DrawFn) -> Any:
    if one_in(draw, 40):
        return draw(st.one_of(garbage, st.just(RemotingRequest)))  # not a request at all
    code = draw(
        weighted(
            (12, st.sampled_from(VALID_CODES)),
            (6, st.just(int(RequestCode.REGISTER_BROKER))),
            (2, st.just(int(RequestCode.GET_ROUTEINFO_BY_TOPIC))),
            (1, st.integers(-5, 2_000)),
            (1, st.sampled_from(["103", None, 103.0, True])),
        )
    )
    body = draw(body_bytes(code))
    if one_in(draw, 30):
        body = draw(st.sampled_from(["text", [1], 5, memoryview(b"\x80")]))
    return RemotingRequest(code, draw(ext_fields(body if isinstance(body, (bytes, bytearray)) else None)), body)


@st.composite
def clean_register(draw: st.DrawFn) -> RemotingRequest:
    """A valid registration, so the random requests that follow find brokers and topics to act on."""
    topics = draw(st.lists(st.sampled_from(TOPICS), unique=True, max_size=4))
    queues = draw(st.sampled_from([1, 4, 8]))
    table = {t: {"topicName": t, "readQueueNums": queues, "writeQueueNums": queues, "perm": 6} for t in topics}
    version = draw(st.sampled_from(VERSIONS))
    body = {
        "topicConfigSerializeWrapper": {
            "topicConfigTable": table,
            "dataVersion": {"timestamp": version[0], "counter": version[1]},
        }
    }
    ext = {
        "clusterName": draw(st.sampled_from(CLUSTERS)),
        "brokerAddr": draw(st.sampled_from(ADDRS)),
        "brokerName": draw(st.sampled_from(NAMES)),
        "brokerId": draw(st.sampled_from(IDS)),
    }
    return RemotingRequest(RequestCode.REGISTER_BROKER, ext, encode_body(body))


action = weighted(
    (8, st.tuples(st.just("request"), request(), st.sampled_from(CHANNELS))),
    (1, st.tuples(st.just("tick"), st.sampled_from([0, 1_000, 29_999, 30_001, 60_000, 120_000, 120_001]), st.none())),
    (1, st.tuples(st.just("close"), st.sampled_from(ADDRS), st.sampled_from(CHANNELS))),
)


# ---------------------------------------------------------------------------- checks


def check_invariants(rim: RouteInfoManager) -> None:
    clusters, groups, live = rim.cluster_addr_table, rim.broker_addr_table, rim.broker_live_table
    for cluster, names in clusters.items():
        assert names, f"empty cluster {cluster} left behind"
        assert names <= groups.keys(), f"cluster {cluster} lists unknown groups {names - groups.keys()}"
    for name, bd in groups.items():
        assert bd.broker_name == name
        assert bd.broker_addrs, f"empty group {name} left behind"
        assert name in clusters.get(bd.cluster, ()), f"group {name} missing from its cluster {bd.cluster}"
        addrs = list(bd.broker_addrs.values())
        assert len(addrs) == len(set(addrs)), f"group {name} lists one address twice: {bd.broker_addrs}"
        for addr in addrs:
            assert addr in live, f"{name} lists {addr} with no live entry: it could never expire"
    pairs = set()
    for topic, queue_map in rim.topic_queue_table.items():
        assert queue_map, f"empty topic {topic} left behind"
        for name, qd in queue_map.items():
            assert name in groups, f"topic {topic} points at removed group {name}"
            assert qd.broker_name == name
            assert 0 <= qd.perm <= PERM_ALL
            assert 0 <= qd.read_queue_nums <= 1024 and 0 <= qd.write_queue_nums <= 1024
            pairs.add((name, topic))
        assert rim.pickup_topic_route_data(topic) is not None, f"listed topic {topic} has no route"
    index = rim.tables.broker_topics
    assert all(index.values()), "empty index set left behind"
    assert {(name, t) for name, topics in index.items() for t in topics} == pairs, "topic index out of sync"
    for addr, servers in rim.filter_server_table.items():
        assert servers, f"empty filter list for {addr}"
        assert addr in live, f"filter servers for {addr} outlive its live entry"


def routes(rim: RouteInfoManager) -> dict[str, tuple[int, Any]]:
    topics = set(TOPICS) | set(rim.topic_queue_table)
    out = {}
    for topic in topics:
        route = rim.pickup_topic_route_data(topic)
        out[topic] = (rim.route_version(topic), route.to_wire() if route is not None else None)
    return out


def check_route_versions(before: dict[str, tuple[int, Any]], after: dict[str, tuple[int, Any]]) -> None:
    for topic, (version, route) in after.items():
        old_version, old_route = before.get(topic, (0, None))
        assert version >= old_version, f"route version of {topic} went backwards"
        if version == old_version:
            assert route == old_route, f"route of {topic} changed but its version {version} did not"


# ---------------------------------------------------------------------------- the property


@settings(
    max_examples=160,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    prelude=st.lists(clean_register(), min_size=1, max_size=6),
    actions=st.lists(action, min_size=1, max_size=25),
)
def test_random_requests_never_raise_and_never_corrupt_tables(
    prelude: list[RemotingRequest], actions: list[tuple[str, Any, Any]]
) -> None:
    clock = ManualClock()
    rim = RouteInfoManager(NamesrvConfig(), clock)
    processor = DefaultRequestProcessor(rim, KVConfigManager(None))
    for register in prelude:
        assert processor.process_request(register, "ch-1").code == ResponseCode.SUCCESS
    check_invariants(rim)

    for kind, arg, channel in actions:
        before_state, before_routes, before_seq = state(processor), routes(rim), rim.route_seq
        before_no_heartbeats = state(processor, drop_heartbeat_times=True)
        if kind == "tick":
            clock.advance(arg)
            removed = rim.scan_not_active_broker()
            assert removed >= 0
        elif kind == "close":
            rim.on_channel_destroy(arg, channel)
        else:
            response = processor.process_request(arg, channel)
            assert isinstance(response, RemotingResponse)
            assert response.code in KNOWN_RESPONSE_CODES, response.code
            if response.body is not None:
                decode_body(response.body)  # every body we send is valid msgpack
            code = getattr(arg, "code", None)
            label = code if type(code) is int and code in VALID_CODES else "other"
            event(f"code {label} -> response {int(response.code)}")
            if response.code != ResponseCode.SUCCESS:
                assert isinstance(response.remark, str) and response.remark
                assert not response.remark.startswith("internal error"), f"a handler raised: {response.remark}"
                assert state(processor) == before_state, f"error response {response.remark!r} changed state"
            elif code in READ_ONLY_CODES:
                assert state(processor) == before_state, f"read-only request {code} changed state"
            elif code in LIVENESS_ONLY_CODES:
                after = state(processor, drop_heartbeat_times=True)
                assert after == before_no_heartbeats, f"request {code} changed more than liveness"
        check_invariants(rim)
        assert rim.route_seq >= before_seq
        check_route_versions(before_routes, routes(rim))

    # Everything registered must be able to expire: after the longest timeout, nothing is left.
    longest = max((li.heartbeat_timeout_millis for li in rim.broker_live_table.values()), default=0)
    clock.advance(longest + 1)
    rim.scan_not_active_broker()
    assert rim.broker_live_table == {}
    assert rim.broker_addr_table == {}
    assert rim.cluster_addr_table == {}
    assert rim.topic_queue_table == {}
    assert rim.filter_server_table == {}
    assert rim.tables.broker_topics == {}


@settings(max_examples=150, deadline=None)
@given(
    code=st.sampled_from(VALID_CODES),
    ext=st.dictionaries(st.one_of(st.text(max_size=12), st.integers()), garbage, max_size=6),
    body=st.one_of(st.none(), st.binary(max_size=64)),
)
def test_any_code_with_random_fields_respects_what_it_may_change(code: int, ext: dict, body: bytes | None) -> None:
    clock = ManualClock()
    rim = RouteInfoManager(NamesrvConfig(), clock)
    processor = DefaultRequestProcessor(rim, KVConfigManager(None))
    register = RemotingRequest(
        RequestCode.REGISTER_BROKER,
        {"clusterName": "C1", "brokerAddr": "h:1", "brokerName": "b1", "brokerId": 0},
        encode_body({"topicConfigSerializeWrapper": {"topicConfigTable": {"T1": {"topicName": "T1"}}}}),
    )
    assert processor.process_request(register).code == ResponseCode.SUCCESS
    clock.advance(1_000)
    before, before_no_heartbeats = state(processor), state(processor, drop_heartbeat_times=True)

    response = processor.process_request(RemotingRequest(code, ext, body))

    assert isinstance(response, RemotingResponse)
    assert response.code in KNOWN_RESPONSE_CODES
    if response.code != ResponseCode.SUCCESS or code in READ_ONLY_CODES:
        assert state(processor) == before
    if code in LIVENESS_ONLY_CODES:
        assert state(processor, drop_heartbeat_times=True) == before_no_heartbeats
    check_invariants(rim)
