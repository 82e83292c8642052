"""QueryRoute / QueryAssignment answers and the send queue choice (namesrv.proxy.route), in cluster
and local mode."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from namesrv.protocol.models import BrokerData, QueueData, TopicRouteData
from namesrv.proxy.route import (
    GRPC_PORT_OFFSET,
    address_scheme,
    assignments,
    consistent_hash,
    java_string_hash,
    local_endpoint,
    local_first,
    message_queues,
    select_queue,
    write_queues,
)


def route(*groups: tuple[str, int, int, int], slaves: bool = False) -> TopicRouteData:
    brokers = [BrokerData("c", name, {0: f"10.0.0.{i}:10911"} | ({1: f"10.0.1.{i}:10911"} if slaves else {}))
               for i, (name, *_) in enumerate(groups)]
    return TopicRouteData([QueueData(name, r, w, perm) for name, r, w, perm in groups], brokers)


def test_queues_by_permission() -> None:
    queues = message_queues(route(("a", 4, 2, 6), ("b", 2, 2, 4)))
    assert [(q.broker_name, q.queue_id, q.permission) for q in queues] == [
        ("a", 0, "READ"), ("a", 1, "READ"), ("a", 2, "READ_WRITE"), ("a", 3, "READ_WRITE"),
        ("b", 0, "READ"), ("b", 1, "READ")]
    no_access = message_queues(route(("a", 0, 0, 0)))
    assert [q.permission for q in no_access] == ["NONE"]
    with_slave = message_queues(route(("a", 1, 1, 6), slaves=True))
    assert [q.broker_id for q in with_slave] == [0, 1]
    assert (address_scheme("127.0.0.1"), address_scheme("proxy.local")) == ("IPv4", "DOMAIN_NAME")


def test_assignments_one_per_readable_master_or_each_queue_when_fifo() -> None:
    r = route(("a", 4, 4, 6), ("b", 2, 2, 2), ("c", 3, 3, 4))
    assert [(q.broker_name, q.broker_id, q.queue_id) for q in assignments(r, False)] == [("a", 0, -1), ("c", 0, -1)]
    assert len(assignments(r, True)) == 7
    assert assignments(route(("a", 4, 4, 2)), False) == []


def test_write_queues_and_selection() -> None:
    queues = write_queues(route(("b", 2, 2, 6), ("a", 2, 3, 6), ("c", 2, 2, 4)))
    assert [(q.broker_name, q.queue_id) for q in queues] == [("a", 0), ("a", 1), ("a", 2), ("b", 0), ("b", 1)]
    assert [select_queue(queues, None, i).queue_id for i in range(6)] == [0, 1, 2, 0, 1, 0]
    assert len({select_queue(queues, "order-9", i) for i in range(10)}) == 1, "a message group keeps its queue"


def test_local_mode_each_broker_at_its_own_proxy_and_its_own_queues_first() -> None:
    r = route(("a", 2, 2, 6), ("b", 2, 2, 6), slaves=True)
    assert [(q.broker_name, q.broker_id, q.broker_addr) for q in message_queues(r)][::2] == [
        ("a", 0, "10.0.0.0:10911"), ("a", 1, "10.0.1.0:10911"), ("b", 0, "10.0.0.1:10911"), ("b", 1, "10.0.1.1:10911")]
    assert {q.broker_addr for q in assignments(r, False)} == {"10.0.0.0:10911", "10.0.0.1:10911"}
    assert local_endpoint("10.0.0.1:10911") == ("10.0.0.1", 10911 + GRPC_PORT_OFFSET)
    for no_port in ("broker-a-0", "10.0.0.1:", ":10911", "host:port"):
        with pytest.raises(ValueError, match="no TCP port"):
            local_endpoint(no_port)
    queues = write_queues(r)
    assert {q.broker_name for q in local_first(queues, "b")} == {"b"}, "a local proxy stores in its own broker"
    assert local_first(queues, "x") == queues, "a broker without the topic's queues sends on over TCP"
    assert local_first(queues, None) == queues, "cluster mode: every writable queue"


def test_java_hash() -> None:
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("") == 0
    assert java_string_hash("polygenelubricants") == -2147483648


@given(key=st.integers(-(2 ** 63), 2 ** 63 - 1), buckets=st.integers(1, 500))
def test_consistent_hash_moves_a_key_only_to_a_new_bucket(key: int, buckets: int) -> None:
    """Guava's contract: in range, and growing n -> n+1 buckets moves a key only into the new one."""
    before, after = consistent_hash(key, buckets), consistent_hash(key, buckets + 1)
    assert 0 <= before < buckets
    assert after in (before, buckets)
