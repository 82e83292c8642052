"""Broker actors as RocketMQ remoting servers, with our own encoder over real TCP: addresses kept
across restarts, bad frames and bad requests that never touch the store, offsets that survive."""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterator

import pytest
import ray
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from actors.deployment.launcher import Deployment
from actors.deployment.spec import BrokerSpec
from clients.admin.client import AdminClient
from namesrv.protocol.codes import BrokerRequestCode, ResponseCode
from namesrv.protocol.constants import MAX_FRAME_SIZE
from namesrv.protocol.message.properties import properties_to_string
from namesrv.remoting.client import RemotingClient
from tests.support.ray_cluster import registered_deployment, wait_registered_everywhere


@pytest.fixture(scope="module")
def dep(ray_local: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    """One broker for the module: every test compares what it did with what the broker held before."""
    with registered_deployment(tmp_path_factory.mktemp("broker-remoting"), brokers=[BrokerSpec("broker-a")],
                               namesrv_count=1, broker_port=0) as d:
        AdminClient(d).create_topic("Wire", read_queue_nums=2, write_queue_nums=2)
        yield d


def client(dep: Deployment) -> RemotingClient:
    host, port = next(iter(dep.brokers)).rsplit(":", 1)
    return RemotingClient(host, int(port), timeout_s=5)


def send(c: RemotingClient, body: bytes, queue_id: int = 0) -> int:
    ext = {"producerGroup": "PG", "topic": "Wire", "queueId": queue_id, "sysFlag": 0, "bornTimestamp": 0,
           "flag": 0, "properties": properties_to_string({"UNIQ_KEY": f"u-{body[:8]!r}"})}
    return c.invoke(BrokerRequestCode.SEND_MESSAGE, ext, body).code


def queues(dep: Deployment) -> dict[str, int]:
    return ray.get(next(iter(dep.brokers.values())).get_runtime_info.remote(), timeout=60)["queues"]


def test_the_route_carries_a_dialable_address_kept_across_a_restart(dep: Deployment) -> None:
    addr = next(iter(dep.brokers))
    route = AdminClient(dep).route("Wire")
    assert route is not None and route.broker_datas[0].broker_addrs == {0: addr}
    with client(dep) as c:
        assert send(c, b"before the restart") == ResponseCode.SUCCESS
    held = queues(dep)["Wire:0"]
    dep.kill_broker(addr)
    dep.restart_broker(addr)
    wait_registered_everywhere(dep)
    assert next(iter(dep.brokers)) == addr, "same host:port after the restart"
    with client(dep) as c:
        assert send(c, b"after the restart") == ResponseCode.SUCCESS
    assert queues(dep)["Wire:0"] == held + 1, "the store came back with the broker"


def test_consumer_offsets_survive_a_broker_restart(dep: Deployment) -> None:
    q = {"consumerGroup": "CG", "topic": "Wire", "queueId": 1}
    with client(dep) as c:
        assert c.invoke(BrokerRequestCode.UPDATE_CONSUMER_OFFSET, q | {"commitOffset": 42}).code == 0
    addr = next(iter(dep.brokers))
    ray.get(dep.brokers[addr].shutdown.remote(), timeout=60)  # graceful: offsets are written at shutdown
    dep.restart_broker(addr)
    wait_registered_everywhere(dep)
    with client(dep) as c:
        assert c.invoke(BrokerRequestCode.QUERY_CONSUMER_OFFSET, q).ext_fields == {"offset": "42"}


@pytest.mark.parametrize(
    "garbage",
    [struct.pack(">i", -1), struct.pack(">i", MAX_FRAME_SIZE), struct.pack(">ii", 8, 99) + b"xxxx",
     b"\x16\x03\x01\x00\xa5\x01\x00"],
    ids=["negative", "too-long", "header-past-frame", "tls-hello"],
)
def test_a_bad_frame_closes_that_connection_and_touches_nothing(dep: Deployment, garbage: bytes) -> None:
    before = queues(dep)
    with client(dep) as good:
        bad = socket.create_connection(good._sock.getpeername(), timeout=5)
        bad.sendall(garbage)
        assert bad.recv(16) == b""
        bad.close()
        assert send(good, b"still served") == ResponseCode.SUCCESS
    after = queues(dep)
    assert after["Wire:0"] == before.get("Wire:0", 0) + 1


def test_oversized_bodies_and_wrong_headers_are_refused_without_a_write(dep: Deployment) -> None:
    with client(dep) as c:
        before = queues(dep)
        assert send(c, b"x" * (4 * 1024 * 1024 + 1)) == ResponseCode.MESSAGE_ILLEGAL
        assert c.invoke(BrokerRequestCode.SEND_MESSAGE, {"topic": "Wire", "queueId": "zero"}, b"x").code == 1
        assert c.invoke(BrokerRequestCode.SEND_BATCH_MESSAGE, {"producerGroup": "PG", "topic": "Wire",
                                                               "queueId": 0}, b"\x00" * 30).code != 0
        assert c.invoke(999).code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
        assert queues(dep) == before


@given(requests=st.lists(st.tuples(
    st.sampled_from([int(x) for x in BrokerRequestCode] + [1, 500]),
    st.dictionaries(st.sampled_from(["topic", "queueId", "queueOffset", "consumerGroup", "maxMsgNums", "group",
                                     "offset", "commitOffset", "producerGroup"]),
                    st.sampled_from(["Wire", "bad topic", "0", "-5", "x", "", "CG"]), max_size=5),
    st.one_of(st.none(), st.binary(max_size=40))), min_size=1, max_size=6))
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_fuzzed_requests_over_tcp_keep_the_broker_serving(dep: Deployment, requests: list) -> None:
    """Random requests without a topic name that could be created: every one answered on the same
    connection; nothing stored unless the broker said SUCCESS to a send."""
    with client(dep) as c:
        for code, ext, body in requests:
            before = queues(dep)
            answer = c.invoke(code, ext, body)
            assert answer.is_response
            if not (answer.code == ResponseCode.SUCCESS and code in (10, 310, 320, 36)):
                assert queues(dep) == before
