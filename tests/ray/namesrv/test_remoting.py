"""NameServer actors as RocketMQ remoting servers: real TCP sockets on 127.0.0.1, our own encoder
in both header serializations, brokers registering over TCP, bad input on the wire."""

from __future__ import annotations

import json
import socket
import struct
import time
from collections.abc import Iterator
from typing import Any

import pytest
import ray
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from actors.deployment.launcher import Deployment
from actors.deployment.spec import BrokerSpec
from namesrv.common.waiting import wait_until
from namesrv.protocol import fastjson
from namesrv.protocol.bodies import body_crc32
from namesrv.protocol.codes import RequestCode, ResponseCode
from namesrv.remoting.client import RemotingClient, parse_namesrv_addr
from namesrv.remoting.codec import encode_command
from namesrv.remoting.wire_command import SerializeType
from tests.support.ray_cluster import (
    DeploymentFactory,
    registered_deployment,
    route_of,
    stable_tables,
    wait_for_route,
)

TCP_BROKER = "tcp-broker"
TCP_ADDR = "127.0.0.1:30911"


def client_of(dep: Deployment, name: str = "namesrv-0", kind: SerializeType = SerializeType.JSON,
              timeout_s: float = 5.0) -> RemotingClient:
    host, port = parse_namesrv_addr(ray.get(dep.namesrvs[name].get_remoting_address.remote(), timeout=60))[0]
    return RemotingClient(host, port, timeout_s=timeout_s, serialize_type=kind)


def register_over_tcp(client: RemotingClient, topics: dict[str, int], counter: int = 1,
                      addr: str = TCP_ADDR) -> int:
    body = json.dumps({"topicConfigSerializeWrapper": {
        "dataVersion": {"counter": counter, "stateVersion": 0, "timestamp": 1},
        "topicConfigTable": {t: {"topicName": t, "readQueueNums": q, "writeQueueNums": q, "perm": 6,
                                 "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0, "order": False}
                             for t, q in topics.items()}},
        "filterServerList": []}).encode()
    answer = client.invoke(RequestCode.REGISTER_BROKER, {
        "brokerAddr": addr, "brokerId": "0", "brokerName": TCP_BROKER, "clusterName": "DefaultCluster",
        "haServerAddr": addr, "bodyCrc32": body_crc32(body), "compressed": False}, body)
    return answer.code


TWO_AND_TWO: dict[str, Any] = {"brokers": [BrokerSpec("broker-a"), BrokerSpec("broker-b")], "namesrv_count": 2,
                               "namesrv_overrides": {"broker_channel_expired_time_ms": 60_000}}


@pytest.fixture(scope="module")
def dep(ray_local: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    """The module's deployment: its tests leave the tables as they found them."""
    with registered_deployment(tmp_path_factory.mktemp("remoting"), **TWO_AND_TWO) as d:
        yield d


def test_the_address_list_is_rocketmqs_form(dep: Deployment) -> None:
    addrs = parse_namesrv_addr(dep.namesrv_addr())
    assert len(addrs) == 2 and all(h == "127.0.0.1" and p > 0 for h, p in addrs)
    assert len({p for _, p in addrs}) == 2


@pytest.mark.parametrize("kind", list(SerializeType))
def test_admin_codes_over_tcp(dep: Deployment, kind: SerializeType) -> None:
    """Wipes broker-a's write permission and deletes TBW102 from namesrv-0, then waits for the tables
    to be as it found them (permission added back, TBW102 registered again by its brokers)."""
    before = stable_tables(dep.namesrvs["namesrv-0"])
    with client_of(dep, kind=kind) as c:
        info = fastjson.loads(c.invoke(RequestCode.GET_BROKER_CLUSTER_INFO).body or b"")
        assert set(info["brokerAddrTable"]) == {"broker-a", "broker-b"}
        assert info["brokerAddrTable"]["broker-a"]["brokerAddrs"] == {"0": "broker-a-0"}
        topics = json.loads(c.invoke(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER).body or b"")
        assert "TBW102" in topics["topicList"]
        by_cluster = json.loads(c.invoke(RequestCode.GET_TOPICS_BY_CLUSTER, {"cluster": "DefaultCluster"}).body or b"")
        assert "TBW102" in by_cluster["topicList"]
        kv = {"namespace": "ns", "key": "k"}
        assert c.invoke(RequestCode.PUT_KV_CONFIG, kv | {"value": "v"}).code == ResponseCode.SUCCESS
        assert c.invoke(RequestCode.GET_KV_CONFIG, kv).ext_fields == {"value": "v"}
        assert c.invoke(RequestCode.DELETE_KV_CONFIG, kv).code == ResponseCode.SUCCESS
        assert c.invoke(RequestCode.GET_KV_CONFIG, kv).code == ResponseCode.QUERY_NOT_FOUND
        assert c.invoke(RequestCode.WIPE_WRITE_PERM_OF_BROKER, {"brokerName": "broker-a"}).ext_fields is not None
        route = fastjson.loads(c.invoke(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "TBW102"}).body or b"")
        perms = {q["brokerName"]: q["perm"] for q in route["queueDatas"]}
        assert perms["broker-a"] & 2 == 0 and perms["broker-b"] & 2
        assert c.invoke(RequestCode.ADD_WRITE_PERM_OF_BROKER, {"brokerName": "broker-a"}).code == 0
        assert c.invoke(RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": "TBW102"}).code == ResponseCode.SUCCESS
        answer = c.invoke(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "TBW102"})
        assert answer.code == ResponseCode.TOPIC_NOT_EXIST
        assert answer.remark == "No topic route info in name server for the topic: TBW102"
    log = ray.get(dep.namesrvs["namesrv-0"].get_wire_log.remote(), timeout=60)
    assert any(r.code == RequestCode.GET_ROUTEINFO_BY_TOPIC and r.subject == "TBW102"
               and r.response_code == ResponseCode.TOPIC_NOT_EXIST for r in log)
    wait_until(lambda: stable_tables(dep.namesrvs["namesrv-0"]) == before, 30, "TBW102 registered again")


def test_single_topic_registration_over_tcp_wakes_the_topics_long_pollers(dep: Deployment) -> None:
    """REGISTER_TOPIC_IN_NAMESRV (217) as a RocketMQ 5 broker sends it: the held route is pushed."""
    ns = dep.namesrvs["namesrv-0"]
    waiter = ns.listen_for_change.remote({"TopicSingle": 0}, 60)
    queue_data = {"brokerName": "broker-b", "perm": 6, "readQueueNums": 2, "topicSysFlag": 0, "writeQueueNums": 2}
    body = fastjson.dumps({"brokerDatas": [], "filterServerTable": {}, "queueDatas": [queue_data]}, standard=False)
    with client_of(dep) as c:
        answer = c.invoke(RequestCode.REGISTER_TOPIC_IN_NAMESRV, {"topic": "TopicSingle"}, body)
        assert (answer.code, answer.remark) == (ResponseCode.SUCCESS, None)
    change = ray.get(waiter, timeout=60)["TopicSingle"]
    assert change.route is not None and [q.to_wire() for q in change.route.queue_datas] == [queue_data]
    other = route_of(dep.namesrvs["namesrv-1"], "TopicSingle")
    assert other.code == ResponseCode.TOPIC_NOT_EXIST, "NameServers share nothing: only the one asked has it"


def test_many_requests_in_flight_on_one_connection(dep: Deployment) -> None:
    with client_of(dep) as c:
        cmds = [c.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "TBW102" if i % 2 else "Nope"})
                for i in range(50)]
        cmds[0].opaque = 0  # 0 is a valid opaque
        oneway = c.request(RequestCode.GET_BROKER_CLUSTER_INFO, oneway=True)
        c._sock.sendall(b"".join(encode_command(x) for x in [*cmds[:25], oneway, *cmds[25:]]))
        answers = {cmd.opaque: c.receive(cmd.opaque) for cmd in reversed(cmds)}
        assert sorted(answers) == sorted(x.opaque for x in cmds)
        for cmd in cmds:
            want = ResponseCode.SUCCESS if cmd.ext_fields and cmd.ext_fields["topic"] == "TBW102" else 17
            assert answers[cmd.opaque].code == want
        assert c._pending == {}, "a oneway request is never answered"


def test_a_broker_registered_over_tcp_leaves_when_its_connection_closes(dep: Deployment) -> None:
    ns = dep.namesrvs["namesrv-0"]
    c = client_of(dep)
    assert register_over_tcp(c, {"TcpTopic": 4}) == ResponseCode.SUCCESS
    wait_for_route(ns, "TcpTopic", lambda r: r is not None, 10)
    t0 = time.monotonic()
    c.close()
    wait_for_route(ns, "TcpTopic", lambda r: r is None, 5, "after the broker's connection closed")
    assert time.monotonic() - t0 < 5, "removed at once, not after the 60 s expiry"
    removals = ray.get(ns.get_removals.remote(), timeout=60)
    assert [(r.broker_addr, r.cause) for r in removals if r.broker_addr == TCP_ADDR] == [(TCP_ADDR, "channel")]


def test_a_stale_connection_closing_never_removes_a_fresh_registration(dep: Deployment) -> None:
    ns = dep.namesrvs["namesrv-0"]
    old, new = client_of(dep), client_of(dep)
    assert register_over_tcp(old, {"TcpTopic": 4}) == ResponseCode.SUCCESS
    assert register_over_tcp(new, {"TcpTopic": 4}) == ResponseCode.SUCCESS  # the broker reconnected
    old.close()
    with client_of(dep) as probe:  # served after the close was processed (same event loop, in order)
        for _ in range(20):
            assert probe.invoke(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "TcpTopic"}).code == 0
    assert TCP_ADDR in cluster_addresses(ns)
    new.close()
    wait_for_route(ns, "TcpTopic", lambda r: r is None, 5)


def cluster_addresses(ns: object) -> set[str]:
    info = ray.get(ns.get_broker_cluster_info.remote(), timeout=60).payload  # type: ignore[attr-defined]
    return {a for bd in info.broker_addr_table.values() for a in bd.broker_addrs.values()}


def test_an_idle_connection_is_closed_and_its_broker_removed(deployments: DeploymentFactory) -> None:
    d = deployments.deploy(brokers=[BrokerSpec("broker-a")], namesrv_count=1,
                           namesrv_overrides={"broker_channel_expired_time_ms": 60_000},
                           remoting_overrides={"server_channel_max_idle_time_seconds": 1.0})
    ns = d.namesrvs["namesrv-0"]
    c = client_of(d)
    assert register_over_tcp(c, {"IdleTopic": 1}) == ResponseCode.SUCCESS
    wait_for_route(ns, "IdleTopic", lambda r: r is None, 10, "after the connection went idle")
    assert ray.get(ns.get_status.remote(), timeout=60)["remoting"]["idle_closed"] >= 1
    c.close()


@pytest.mark.parametrize(
    "garbage",
    [
        struct.pack(">i", -5),
        struct.pack(">i", 17 * 1024 * 1024),
        struct.pack(">ii", 8, 200) + b"xxxx",
        struct.pack(">ii", 6, 2) + b"{]",
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
    ],
    ids=["negative", "over-16MiB", "header-longer-than-frame", "bad-json", "http"],
)
def test_a_bad_frame_closes_that_connection_only(dep: Deployment, garbage: bytes) -> None:
    ns = dep.namesrvs["namesrv-0"]
    before = stable_tables(ns)
    with client_of(dep) as good:
        bad = socket.create_connection(good._sock.getpeername(), timeout=5)
        bad.sendall(garbage)
        assert bad.recv(100) == b"", "the server closes the connection without an answer"
        bad.close()
        assert good.invoke(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "TBW102"}).code == ResponseCode.SUCCESS
    assert stable_tables(ns) == before
    assert ray.get(ns.get_status.remote(), timeout=60)["remoting"]["bad_frames"] >= 1


def test_silent_and_half_frame_clients_cost_only_their_sockets(dep: Deployment) -> None:
    with client_of(dep) as good:
        addr = good._sock.getpeername()
        silent = socket.create_connection(addr, timeout=5)
        half = socket.create_connection(addr, timeout=5)
        half.sendall(encode_command(good.request(RequestCode.GET_BROKER_CLUSTER_INFO))[:-3])
        for _ in range(10):
            assert good.invoke(RequestCode.GET_BROKER_CLUSTER_INFO).code == ResponseCode.SUCCESS
        silent.close()
        half.close()


def test_wrong_header_types_answer_system_error_naming_the_field(dep: Deployment) -> None:
    ns = dep.namesrvs["namesrv-0"]
    before = stable_tables(ns)
    with client_of(dep) as c:
        answer = c.invoke(RequestCode.WIPE_WRITE_PERM_OF_BROKER, {})
        assert answer.code == ResponseCode.SYSTEM_ERROR and "brokerName" in (answer.remark or "")
        answer = c.invoke(RequestCode.UNREGISTER_BROKER, {"brokerAddr": "a", "brokerName": "b",
                                                          "clusterName": "c", "brokerId": "first"})
        assert answer.code == ResponseCode.SYSTEM_ERROR and "brokerId" in (answer.remark or "")
        answer = c.invoke(4242)
        assert (answer.code, answer.remark) == (ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                                                " request type 4242 not supported")
    assert stable_tables(ns) == before


READ_ONLY_OR_REFUSED = [int(c) for c in RequestCode if c not in (
    RequestCode.REGISTER_BROKER, RequestCode.PUT_KV_CONFIG, RequestCode.DELETE_KV_CONFIG,
    RequestCode.UPDATE_NAMESRV_CONFIG)] + [3, 999]
MUTATING = {RequestCode.WIPE_WRITE_PERM_OF_BROKER, RequestCode.ADD_WRITE_PERM_OF_BROKER,
            RequestCode.DELETE_TOPIC_IN_NAMESRV, RequestCode.UNREGISTER_BROKER}
FIELDS = st.dictionaries(
    st.sampled_from(["topic", "brokerName", "brokerAddr", "clusterName", "brokerId", "namespace", "key", "value",
                     "cluster", "compressed", "bodyCrc32"]),
    st.one_of(st.text(max_size=20), st.sampled_from(["0", "-1", "true", "", "broker-a", "TBW102"])),
    max_size=5,
)


@given(requests=st.lists(st.tuples(st.sampled_from(READ_ONLY_OR_REFUSED), FIELDS,
                                   st.one_of(st.none(), st.binary(max_size=30))), min_size=1, max_size=8))
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_fuzzed_requests_over_tcp_never_disturb_the_server(dep: Deployment, requests: list) -> None:
    """Random, mostly wrong requests (mutating codes always with an invalid name): every one answered
    on the same connection, the route tables untouched."""
    ns = dep.namesrvs["namesrv-1"]
    before = stable_tables(ns)
    with client_of(dep, "namesrv-1") as c:
        for code, fields, body in requests:
            if code in MUTATING:
                fields = fields | {"brokerName": "bad name", "topic": "bad topic"}
            assert c.invoke(code, fields, body).is_response
    assert stable_tables(ns) == before
