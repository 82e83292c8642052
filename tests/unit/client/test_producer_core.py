"""The producer's pure logic: latency fault tolerance, queue selection, retries, ordered sends, the
TBW102 fallback and every client-side validation rule.

No Ray here. Time is a ManualClock; brokers are a fake in-memory transport that records every call
and moves the clock by the latency it is told to show, so every rule is checked to the millisecond.
The same engine runs over Ray actors in tests/test_producer_ray.py.
"""

from __future__ import annotations

import itertools
import uuid
from collections import defaultdict

import pytest

from clients.impl.client_instance import MQClientInstance
from clients.impl.namesrv_client import NameServerClient
from clients.producer.producer import Producer
from namesrv.client.config import ProducerConfig
from namesrv.client.errors import MQBrokerError, MQClientError, SendFailedError, TopicNotFound
from namesrv.client.fault import FAULT_TABLE_4_9, FAULT_TABLE_5_X, FAULT_TABLES, FaultTable, LatencyFaultTolerance
from namesrv.client.message import MAX_PROPERTIES_SIZE, Message, check_group, check_message
from namesrv.client.publish_info import topic_route_data_to_publish_info
from namesrv.client.send_engine import RETRY_RESPONSE_CODES, select_by_hash
from namesrv.common.clock import ManualClock
from namesrv.protocol.codes import ResponseCode
from namesrv.protocol.constants import AUTO_CREATE_TOPIC_KEY_TOPIC, MAX_MESSAGE_SIZE, PERM_ALL, Perm
from namesrv.protocol.models import MessageQueue, TopicRouteData
from tests.support.producer import (
    BROKERS,
    TOPIC,
    FakeTransport,
    make_engine,
    make_route,
    msg,
    publish_info,
)

# ---------------------------------------------------------------------------- fakes










@pytest.fixture
def transport(clock: ManualClock) -> FakeTransport:
    return FakeTransport(clock)






# ---------------------------------------------------------------------------- fault tables
TABLES = [pytest.param(FAULT_TABLE_4_9, id="4.9"), pytest.param(FAULT_TABLE_5_X, id="5.x")]


def test_fault_tables_are_rocketmqs() -> None:
    assert FAULT_TABLE_4_9.latency_max == (50, 100, 550, 1000, 2000, 3000, 15000)
    assert FAULT_TABLE_4_9.not_available_duration == (0, 0, 30000, 60000, 120000, 180000, 600000)
    assert FAULT_TABLE_4_9.failure_latency == 30000
    assert FAULT_TABLE_5_X.latency_max == (50, 100, 550, 1800, 3000, 5000, 15000)
    assert FAULT_TABLE_5_X.not_available_duration == (0, 0, 2000, 5000, 6000, 10000, 30000)
    assert FAULT_TABLE_5_X.failure_latency == 10000
    assert set(FAULT_TABLES) == {"4.9", "5.x"}


@pytest.mark.parametrize("table", TABLES)
def test_isolation_duration_per_latency_bucket(table: FaultTable, clock: ManualClock) -> None:
    """At each bucket's lower edge the broker is isolated for that bucket's duration; 1 ms below the
    edge, for the previous bucket's; the broker is back exactly when the window ends, not 1 ms sooner."""
    lft = LatencyFaultTolerance(table, clock)
    edges = list(zip(table.latency_max, table.not_available_duration, strict=True))
    for i, (latency, duration) in enumerate(edges):
        below = edges[i - 1][1] if i > 0 else 0
        assert lft.compute_not_available_duration(latency) == duration
        assert lft.compute_not_available_duration(latency - 1) == below
        name = f"b{i}"
        start = clock()
        assert lft.update_fault_item(name, latency, isolation=False) == duration
        assert lft.fault_items[name].start_timestamp == start + duration
        if duration:
            clock.advance(duration - 1)
            assert not lft.is_available(name), f"{name} back 1 ms before its {duration} ms window ended"
            clock.advance(1)
        assert lft.is_available(name), f"{name} not back when its {duration} ms window ended"
    assert lft.compute_not_available_duration(0) == 0
    assert lft.compute_not_available_duration(10**9) == table.not_available_duration[-1]


@pytest.mark.parametrize(
    ("table", "expected_ms"),
    [pytest.param(FAULT_TABLE_4_9, 600_000, id="4.9"), pytest.param(FAULT_TABLE_5_X, 10_000, id="5.x")],
)
def test_failure_counts_as_failure_latency(table: FaultTable, expected_ms: int, clock: ManualClock) -> None:
    """A failed send counts as 30000 ms (4.9: a 10-minute isolation) or 10000 ms (5.x: 10 s),
    whatever its real latency."""
    lft = LatencyFaultTolerance(table, clock)
    assert lft.update_fault_item("broker-a", 3, isolation=True) == expected_ms
    assert lft.fault_items["broker-a"].current_latency == table.failure_latency
    clock.advance(expected_ms - 1)
    assert not lft.is_available("broker-a")
    clock.advance(1)
    assert lft.is_available("broker-a")
    # A fast success afterwards clears the isolation at once (its bucket is 0 ms).
    lft.update_fault_item("broker-a", 3, isolation=True)
    assert not lft.is_available("broker-a")
    lft.update_fault_item("broker-a", 10, isolation=False)
    assert lft.is_available("broker-a")


@pytest.mark.parametrize("table", TABLES)
def test_engine_isolates_a_failed_broker_for_exactly_the_table_window(
    table: FaultTable, transport: FakeTransport, clock: ManualClock
) -> None:
    """Through the engine: after broker-a fails once, every send avoids it until the window ends,
    and it takes traffic again from that very millisecond."""
    engine = make_engine(transport, clock, fault_table=table, send_latency_fault_enable=True)
    info = publish_info()
    transport.fail["broker-a"] = "dead"
    engine.send(msg(), info)  # round-robin starts at broker-a, which fails; the retry succeeds elsewhere
    assert transport.brokers_called[0] == "broker-a" and len(transport.calls) == 2
    failed_at = clock()
    window = engine.fault.compute_not_available_duration(table.failure_latency)
    assert engine.fault.fault_items["broker-a"].start_timestamp == failed_at + window
    del transport.fail["broker-a"]
    transport.calls.clear()
    clock.advance(window - 1)
    for _ in range(12):
        engine.send(msg(), info)
    assert "broker-a" not in transport.brokers_called
    clock.advance(1)
    for _ in range(12):
        engine.send(msg(), info)
    assert "broker-a" in transport.brokers_called[12:]


@pytest.mark.parametrize("table", TABLES)
def test_slow_success_isolates_by_latency_bucket(
    table: FaultTable, transport: FakeTransport, clock: ManualClock
) -> None:
    """A successful but slow send (latency in the third bucket) isolates the broker for that
    bucket's duration; a fast one (under 100 ms) does not isolate at all."""
    engine = make_engine(transport, clock, fault_table=table, send_latency_fault_enable=True)
    info = publish_info()
    transport.latency = {"broker-a": 99, "broker-b": table.latency_max[2], "broker-c": 0}
    for _ in range(6):
        engine.send(msg(), info)
    assert engine.fault.is_available("broker-a")
    assert not engine.fault.is_available("broker-b")
    b_item = engine.fault.fault_items["broker-b"]
    assert b_item.current_latency == table.latency_max[2]
    back = b_item.start_timestamp
    transport.calls.clear()
    transport.latency = {}
    clock.advance(back - 1 - clock())
    for _ in range(6):
        engine.send(msg(), info)
    assert "broker-b" not in transport.brokers_called
    clock.advance(1)
    for _ in range(6):
        engine.send(msg(), info)
    assert "broker-b" in transport.brokers_called[6:]


@pytest.mark.parametrize("table", TABLES)
def test_pick_one_at_least_when_all_are_isolated(table: FaultTable, clock: ManualClock) -> None:
    """Every broker isolated: the pick rotates over the better half (lowest latency), never the worst."""
    lft = LatencyFaultTolerance(table, clock)
    assert lft.pick_one_at_least() is None
    latencies = {"b1": table.latency_max[2], "b2": table.latency_max[3], "b3": table.latency_max[4],
                 "b4": table.latency_max[5]}
    for name, latency in latencies.items():
        lft.update_fault_item(name, latency, isolation=False)
        assert not lft.is_available(name)
    picks = [lft.pick_one_at_least() for _ in range(10)]
    assert set(picks) == {"b1", "b2"}, picks
    assert all(a != b for a, b in itertools.pairwise(picks)), f"no rotation: {picks}"
    # Candidates restrict the pick (the engine passes the topic's brokers minus the one that just failed).
    assert {lft.pick_one_at_least(["b3", "b4"]) for _ in range(4)} == {"b3"}
    assert lft.pick_one_at_least(["b4"]) == "b4"
    assert lft.pick_one_at_least(["nobody"]) is None
    # An available broker sorts before every isolated one, whatever its latency.
    lft.fault_items["b4"].start_timestamp = clock()
    assert lft.is_available("b4") and not lft.is_available("b1")
    assert {lft.pick_one_at_least() for _ in range(4)} == {"b4", "b1"}


@pytest.mark.parametrize("table", TABLES)
def test_engine_still_sends_when_every_broker_is_isolated(
    table: FaultTable, transport: FakeTransport, clock: ManualClock
) -> None:
    engine = make_engine(transport, clock, fault_table=table)
    info = publish_info()
    for i, name in enumerate(BROKERS):
        engine.fault.update_fault_item(name, table.latency_max[2 + i], isolation=False)
    assert not any(engine.fault.is_available(n) for n in BROKERS)
    mq = engine.select_one_message_queue(info, None)
    assert mq is not None and mq.broker_name == "broker-a", mq  # the better half of three: the fastest
    assert 0 <= mq.queue_id < info.queue_count_of(mq.broker_name)
    mq = engine.select_one_message_queue(info, "broker-a")
    assert mq is not None and mq.broker_name != "broker-a", "the broker that just failed was chosen again"
    result = engine.send(msg(), info)
    assert result.send_status == "SEND_OK"


# ---------------------------------------------------------------------------- selection
def test_publish_info_from_route() -> None:
    route = make_route(
        {"broker-c": 2, "broker-a": 3, "broker-b": 1, "broker-d": 4, "broker-e": 2},
        perms={"broker-d": int(Perm.READ)}, no_master=("broker-e",),
    )
    info = topic_route_data_to_publish_info(TOPIC, route, route_version=7)
    assert info.ok and info.route_version == 7 and not info.order_topic
    assert [(m.broker_name, m.queue_id) for m in info.message_queues] == [
        ("broker-a", 0), ("broker-a", 1), ("broker-a", 2), ("broker-b", 0), ("broker-c", 0), ("broker-c", 1),
    ], "queues sorted by broker; read-only broker-d and master-less broker-e left out"
    assert info.broker_names() == ["broker-a", "broker-b", "broker-c"]
    ordered = topic_route_data_to_publish_info(TOPIC, make_route({"broker-a": 8}, order_conf="broker-b:2;broker-a:1"))
    assert ordered.order_topic
    assert [(m.broker_name, m.queue_id) for m in ordered.message_queues] == [
        ("broker-b", 0), ("broker-b", 1), ("broker-a", 0)
    ]
    assert not topic_route_data_to_publish_info(TOPIC, make_route({"broker-a": 4}, perm=int(Perm.READ))).ok


def test_round_robin_starts_at_random() -> None:
    """Fresh publish infos (a new producer, a pushed route, the TBW102 stand-in) do not all start at
    the first queue of the first broker."""
    route = make_route(dict.fromkeys(BROKERS, 2))
    firsts = {topic_route_data_to_publish_info(TOPIC, route).select_one_message_queue() for _ in range(200)}
    assert {mq.broker_name for mq in firsts if mq} == set(BROKERS)


@pytest.mark.parametrize("fault_enable", [True, False])
def test_round_robin_spreads_over_every_queue(fault_enable: bool, transport: FakeTransport, clock: ManualClock) -> None:
    engine = make_engine(transport, clock, send_latency_fault_enable=fault_enable)
    info = publish_info()
    for _ in range(60):
        engine.send(msg(), info)
    counts = {mq: len(v) for mq, v in transport.queues.items()}
    assert set(counts) == set(info.message_queues)
    assert set(counts.values()) == {10}


# ---------------------------------------------------------------------------- retries
FAILING_SETS = [s for r in (1, 2, 3) for s in itertools.combinations(BROKERS, r)]


@pytest.mark.parametrize("fault_enable", [True, False], ids=["fault", "nofault"])
@pytest.mark.parametrize("start", range(6), ids=lambda s: f"start{s}")
@pytest.mark.parametrize("failing", FAILING_SETS, ids=lambda s: "+".join(b[-1] for b in s))
def test_retries_cover_brokers_without_repeating_the_failed_one(
    failing: tuple[str, ...], start: int, fault_enable: bool, transport: FakeTransport, clock: ManualClock
) -> None:
    """3 brokers, any of them failing, the round-robin counter at any position (so the brokers fail
    in every order): no attempt goes to the broker that just failed, no broker is tried twice, a
    send succeeds when any broker is healthy, and when all fail the error names each broker tried."""
    engine = make_engine(transport, clock, send_latency_fault_enable=fault_enable)
    info = publish_info()
    for _ in range(start):
        info.next_index()
    for i, name in enumerate(failing):
        transport.fail[name] = "dead" if i % 2 == 0 else int(ResponseCode.SYSTEM_BUSY)
    try:
        result = engine.send(msg(), info)
    except SendFailedError as e:
        assert set(failing) == set(BROKERS), f"failed although {set(BROKERS) - set(failing)} was healthy: {e}"
        assert [b for b, _ in e.failures] == transport.brokers_called == e.brokers_tried
        assert sorted(e.brokers_tried) == sorted(BROKERS), e.failures
        assert all(b in str(e) for b in BROKERS)
        assert not e.timed_out
    else:
        assert set(failing) != set(BROKERS)
        assert result.message_queue.broker_name not in failing
        assert result.brokers_tried == transport.brokers_called
        assert result.attempts == len(transport.calls) <= len(failing) + 1
    tried = transport.brokers_called
    assert all(a != b for a, b in itertools.pairwise(tried)), f"retried on the broker that just failed: {tried}"
    assert len(set(tried)) == len(tried), f"a broker was tried twice: {tried}"
    assert len({c.msg_id for c in transport.calls}) == 1, "every attempt carries the same message id"


def test_two_brokers_both_failing_alternate(transport: FakeTransport, clock: ManualClock) -> None:
    """With two brokers and three attempts the third goes back to the first, never to the one that
    just failed."""
    engine = make_engine(transport, clock)
    info = publish_info({"broker-a": 2, "broker-b": 2})
    transport.fail = {"broker-a": "dead", "broker-b": "dead"}
    with pytest.raises(SendFailedError) as err:
        engine.send(msg(), info)
    assert err.value.brokers_tried in (["broker-a", "broker-b", "broker-a"], ["broker-b", "broker-a", "broker-b"])


def test_retry_times_bound_attempts(transport: FakeTransport, clock: ManualClock) -> None:
    engine = make_engine(transport, clock, retry_times_when_send_failed=2)
    info = publish_info({f"broker-{c}": 1 for c in "abcde"})
    transport.fail = {f"broker-{c}": "dead" for c in "abcde"}
    with pytest.raises(SendFailedError) as err:
        engine.send(msg(), info)
    assert len(err.value.failures) == 3 == len(transport.calls)
    assert len(set(err.value.brokers_tried)) == 3
    transport.calls.clear()
    with pytest.raises(SendFailedError):
        engine.send(msg(), info, times_total=1)  # async sends try once
    assert len(transport.calls) == 1


def test_timeout_budget_stops_retries(transport: FakeTransport, clock: ManualClock) -> None:
    """3000 ms for all attempts: each failing attempt takes 2000 ms, so the second one gets the 1000
    ms left and there is no third; the error says it timed out and names the two brokers tried."""
    engine = make_engine(transport, clock, send_msg_timeout_ms=3000)
    info = publish_info()
    transport.fail = dict.fromkeys(BROKERS, "dead")
    transport.latency = dict.fromkeys(BROKERS, 2000)
    begin = clock()
    with pytest.raises(SendFailedError) as err:
        engine.send(msg(), info)
    e = err.value
    assert e.timed_out and "send timeout" in str(e)
    assert len(transport.calls) == 2 and [b for b, _ in e.failures] == transport.brokers_called
    assert [c.timeout_ms for c in transport.calls] == [3000, 1000], "each attempt gets what is left of the budget"
    assert clock() - begin == 4000
    # A per-call timeout overrides the policy's.
    transport.calls.clear()
    with pytest.raises(SendFailedError) as err:
        engine.send(msg(), info, timeout_ms=1500)
    assert err.value.timed_out and len(transport.calls) == 1


@pytest.mark.parametrize("code", sorted(RETRY_RESPONSE_CODES), ids=lambda c: ResponseCode(c).name)
def test_retryable_broker_codes_move_to_another_broker(code: int, transport: FakeTransport, clock: ManualClock) -> None:
    engine = make_engine(transport, clock)
    info = publish_info()
    first = engine.select_one_message_queue(publish_info(), None)
    assert first is not None
    transport.fail[first.broker_name] = code
    result = engine.send(msg(), info)
    assert result.attempts == 2 and result.brokers_tried[0] == first.broker_name
    assert result.message_queue.broker_name != first.broker_name


@pytest.mark.parametrize("code", [ResponseCode.MESSAGE_ILLEGAL, ResponseCode.REQUEST_CODE_NOT_SUPPORTED])
def test_non_retryable_broker_code_stops_at_once(code: int, transport: FakeTransport, clock: ManualClock) -> None:
    engine = make_engine(transport, clock)
    info = publish_info()
    transport.fail = dict.fromkeys(BROKERS, int(code))
    with pytest.raises(SendFailedError) as err:
        engine.send(msg(), info)
    assert len(transport.calls) == 1, f"retried after a non-retryable code: {transport.brokers_called}"
    assert err.value.brokers_tried == transport.brokers_called
    cause = err.value.__cause__
    assert isinstance(cause, MQBrokerError) and cause.code == code


# ---------------------------------------------------------------------------- ordered, async, oneway
def test_send_orderly_keeps_each_key_on_one_queue(transport: FakeTransport, clock: ManualClock) -> None:
    engine = make_engine(transport, clock)
    info = publish_info()
    for seq in range(20):
        for key in range(8):
            r = engine.send_orderly(msg(f"{key}:{seq}".encode()), info, select_by_hash, f"order-{key}")
            assert r.brokers_tried == [r.message_queue.broker_name]
    per_key: dict[str, set[MessageQueue]] = defaultdict(set)
    for mq, bodies in transport.queues.items():
        seqs: dict[str, list[int]] = defaultdict(list)
        for b in bodies:
            key, seq = b.decode().split(":")
            per_key[key].add(mq)
            seqs[key].append(int(seq))
        for key, got in seqs.items():
            assert got == list(range(20)), f"key {key} out of order on {mq}: {got}"
    assert all(len(qs) == 1 for qs in per_key.values()), per_key
    assert len({next(iter(qs)) for qs in per_key.values()}) > 1, "all keys hashed to one queue"


def test_send_orderly_never_moves_off_a_dead_broker(transport: FakeTransport, clock: ManualClock) -> None:
    engine = make_engine(transport, clock)
    info = publish_info()
    mq = select_by_hash(info.message_queues, msg(), "key-7")
    transport.fail[mq.broker_name] = "dead"
    for _ in range(3):
        with pytest.raises(SendFailedError) as err:
            engine.send_orderly(msg(), info, select_by_hash, "key-7")
        assert err.value.brokers_tried == [mq.broker_name]
    assert transport.brokers_called == [mq.broker_name] * 3, "an ordered message moved to another broker"
    assert all(c.mq == mq for c in transport.calls)
    # Keys on healthy brokers are unaffected.
    other = next(k for k in (f"k{i}" for i in range(100))
                 if select_by_hash(info.message_queues, msg(), k).broker_name != mq.broker_name)
    assert engine.send_orderly(msg(), info, select_by_hash, other).send_status == "SEND_OK"


def test_send_orderly_rejects_a_foreign_queue(transport: FakeTransport, clock: ManualClock) -> None:
    engine = make_engine(transport, clock)
    with pytest.raises(MQClientError, match="not a queue of"):
        engine.send_orderly(msg(), publish_info(), lambda mqs, m, a: MessageQueue(TOPIC, "broker-z", 0), None)
    assert transport.calls == []


def test_oneway_sends_once_without_waiting(transport: FakeTransport, clock: ManualClock) -> None:
    engine = make_engine(transport, clock)
    info = publish_info()
    mq = engine.send_oneway(msg(b"fire"), info)
    assert [c.kind for c in transport.calls] == ["oneway"] and transport.calls[0].mq == mq
    assert transport.queues[mq] == [b"fire"]


# ---------------------------------------------------------------------------- TBW102 fallback
class DictRouteSource:
    """A RouteSource answering from a dict (no Ray), recording every query."""

    def __init__(self, routes: dict[str, TopicRouteData]) -> None:
        self.routes = routes
        self.queries: list[str] = []

    def get_topic_route(self, topic: str) -> tuple[TopicRouteData, int]:
        self.queries.append(topic)
        route = self.routes.get(topic)
        if route is None:
            raise TopicNotFound(topic)
        return route, 1


class FakeNamesrvClient(MQClientInstance):
    """The real MQClientInstance with its routes from a DictRouteSource."""

    def __init__(self, routes: dict[str, TopicRouteData]) -> None:
        self.source = DictRouteSource(routes)
        super().__init__(f"127.0.0.1@fake-{uuid.uuid4().hex[:6]}", NameServerClient(["namesrv-fake"], "nowhere"),
                         route_source=self.source)

    @property
    def queries(self) -> list[str]:
        return self.source.queries


def tbw102_route(read_queues: dict[str, int]) -> TopicRouteData:
    return make_route({b: 8 for b in read_queues}, perm=PERM_ALL, read_queues=read_queues)


def test_no_route_with_auto_create_takes_tbw102(transport: FakeTransport, clock: ManualClock) -> None:
    """No route for the topic: the producer takes TBW102's route with min(4, readQueueNums) queues
    per broker, and the send names TBW102 as the default topic so the broker can create the topic."""
    tbw102 = tbw102_route({"broker-a": 8, "broker-b": 2, "broker-c": 16})
    client = FakeNamesrvClient({AUTO_CREATE_TOPIC_KEY_TOPIC: tbw102})
    info, default_topic = client.find_publish_info("NewTopic", auto_create=True)
    assert default_topic == AUTO_CREATE_TOPIC_KEY_TOPIC
    assert client.queries == ["NewTopic", AUTO_CREATE_TOPIC_KEY_TOPIC]
    assert info.topic == "NewTopic"
    assert {b: info.queue_count_of(b) for b in info.broker_names()} == {"broker-a": 4, "broker-b": 2, "broker-c": 4}
    assert all(mq.topic == "NewTopic" for mq in info.message_queues)
    assert client.publish_info("NewTopic") is None, "the TBW102 stand-in must not be cached as the topic's route"
    engine = make_engine(transport, clock)
    result = engine.send(msg(topic="NewTopic"), info, default_topic=default_topic)
    assert result.message_queue.topic == "NewTopic"
    assert [c.default_topic for c in transport.calls] == [AUTO_CREATE_TOPIC_KEY_TOPIC]
    assert transport.calls[0].mq.topic == "NewTopic", "the message goes out under its own topic, not TBW102"
    # A custom default_topic_queue_nums caps the queues instead of 4.
    info2, _ = client.find_publish_info("NewTopic2", auto_create=True, default_topic_queue_nums=1)
    assert {b: info2.queue_count_of(b) for b in info2.broker_names()} == dict.fromkeys(BROKERS, 1)


def test_topic_with_a_route_does_not_use_tbw102() -> None:
    client = FakeNamesrvClient(
        {TOPIC: make_route({"broker-b": 3}), AUTO_CREATE_TOPIC_KEY_TOPIC: tbw102_route({"broker-a": 8})}
    )
    info, default_topic = client.find_publish_info(TOPIC)
    assert default_topic is None and info.broker_names() == ["broker-b"]
    assert client.publish_info(TOPIC) is info, "a real route is cached"
    assert client.find_publish_info(TOPIC)[0] is info and client.queries == [TOPIC], "the cache is used"


@pytest.mark.parametrize(
    "routes", [{}, {AUTO_CREATE_TOPIC_KEY_TOPIC: tbw102_route({"broker-a": 8})}], ids=["no-tbw102", "tbw102"]
)
def test_no_route_without_auto_create_is_a_clear_error(routes: dict[str, TopicRouteData]) -> None:
    client = FakeNamesrvClient(routes)
    with pytest.raises(MQClientError, match="No route info of this topic: Missing"):
        client.find_publish_info("Missing", auto_create=False)
    assert AUTO_CREATE_TOPIC_KEY_TOPIC not in client.queries
    if not routes:  # auto-create on, but no broker offers TBW102
        with pytest.raises(MQClientError, match="No route info of this topic: Missing"):
            client.find_publish_info("Missing", auto_create=True)


# ---------------------------------------------------------------------------- validation
BAD_MESSAGES = [
    pytest.param(None, "message is null", id="none"),
    pytest.param({"topic": TOPIC, "body": b"x"}, "expected a Message", id="not-a-message"),
    pytest.param(Message("", b"x"), "topic is blank", id="empty-topic"),
    pytest.param(Message("   ", b"x"), "topic is blank", id="blank-topic"),
    pytest.param(Message(None, b"x"), "topic is blank", id="none-topic"),  # type: ignore[arg-type]
    pytest.param(Message(123, b"x"), "topic is blank", id="int-topic"),  # type: ignore[arg-type]
    pytest.param(Message("a b", b"x"), "illegal characters", id="space-in-topic"),
    pytest.param(Message("topic/x", b"x"), "illegal characters", id="slash-in-topic"),
    pytest.param(Message("Topic\n", b"x"), "illegal characters", id="trailing-newline"),
    pytest.param(Message("主题", b"x"), "illegal characters", id="non-ascii-topic"),
    pytest.param(Message("t" * 128, b"x"), "longer than topic max length 127", id="topic-128"),
    pytest.param(Message("SCHEDULE_TOPIC_XXXX", b"x"), "forbidden", id="SCHEDULE_TOPIC_XXXX"),
    pytest.param(Message("RMQ_SYS_TRANS_HALF_TOPIC", b"x"), "forbidden", id="RMQ_SYS_TRANS_HALF"),
    pytest.param(Message("RMQ_SYS_TRANS_OP_HALF_TOPIC", b"x"), "forbidden", id="RMQ_SYS_TRANS_OP_HALF"),
    pytest.param(Message("TRANS_CHECK_MAX_TIME_TOPIC", b"x"), "forbidden", id="TRANS_CHECK_MAX_TIME"),
    pytest.param(Message("SELF_TEST_TOPIC", b"x"), "forbidden", id="SELF_TEST_TOPIC"),
    pytest.param(Message("OFFSET_MOVED_EVENT", b"x"), "forbidden", id="OFFSET_MOVED_EVENT"),
    pytest.param(Message(TOPIC, b""), "body length is zero", id="empty-body"),
    pytest.param(Message(TOPIC, "text"), "must be bytes", id="str-body"),  # type: ignore[arg-type]
    pytest.param(Message(TOPIC, None), "must be bytes", id="none-body"),  # type: ignore[arg-type]
    pytest.param(Message(TOPIC, memoryview(b"x")), "must be bytes", id="memoryview-body"),  # type: ignore[arg-type]
    pytest.param(Message(TOPIC, b"x" * (MAX_MESSAGE_SIZE + 1)), "body size over max value", id="body-4MiB+1"),
    pytest.param(Message(TOPIC, b"x", properties=[("a", "b")]), "properties must be a dict", id="props-list"),  # type: ignore[arg-type]
    pytest.param(Message(TOPIC, b"x", properties={"a": 1}), "non-empty strings", id="prop-int-value"),  # type: ignore[dict-item]
    pytest.param(Message(TOPIC, b"x", properties={1: "a"}), "non-empty strings", id="prop-int-key"),  # type: ignore[dict-item]
    pytest.param(Message(TOPIC, b"x", properties={"": "a"}), "non-empty strings", id="prop-empty-key"),
    pytest.param(Message(TOPIC, b"x", properties={"a\x01": "b"}), "separator", id="prop-sep1"),
    pytest.param(Message(TOPIC, b"x", properties={"a": "b\x02"}), "separator", id="prop-sep2"),
    pytest.param(Message(TOPIC, b"x", properties={"UNIQ_KEY": "u"}), "reserved", id="prop-UNIQ_KEY"),
    pytest.param(Message(TOPIC, b"x", properties={"__STARTDELIVERTIME": "1"}), "reserved", id="prop-STARTDELIVERTIME"),
    pytest.param(
        Message(TOPIC, b"x", properties={"k": "v" * MAX_PROPERTIES_SIZE}), "properties size over", id="props-too-big"
    ),
    pytest.param(Message(TOPIC, b"x", tags=5), "tags must be a string", id="int-tags"),  # type: ignore[arg-type]
    pytest.param(Message(TOPIC, b"x", keys=["k"]), "keys must be a string", id="list-keys"),  # type: ignore[arg-type]
]


@pytest.mark.parametrize(("bad", "match"), BAD_MESSAGES)
def test_every_bad_message_is_refused_before_any_network_call(
    bad: object, match: str, transport: FakeTransport, clock: ManualClock
) -> None:
    with pytest.raises(MQClientError, match=match):
        check_message(bad)
    engine = make_engine(transport, clock)
    info = publish_info()
    for send in (
        lambda: engine.send(bad, info),  # type: ignore[arg-type]
        lambda: engine.send_oneway(bad, info),  # type: ignore[arg-type]
        lambda: engine.send_orderly(bad, info, select_by_hash, "k"),  # type: ignore[arg-type]
    ):
        with pytest.raises(MQClientError, match=match):
            send()
    assert transport.calls == []


@pytest.mark.parametrize(
    "topic",
    [AUTO_CREATE_TOPIC_KEY_TOPIC, "BenchmarkTest", "RMQ_SYS_TRACE_TOPIC", "rmq_sys_anything", "CHECKPOINT_TOPIC"],
)
def test_system_topics_outside_the_not_allowed_send_list_are_sendable(topic: str) -> None:
    """RocketMQ's producer refuses only TopicValidator's not-allowed-send set; message traces go to
    RMQ_SYS_TRACE_TOPIC and the benchmark tool to BenchmarkTest."""
    assert check_message(Message(topic, b"x")).topic == topic


def test_latency_fault_tolerance_is_off_by_default_as_in_rocketmq(transport: FakeTransport, clock: ManualClock) -> None:
    """DefaultMQProducer's sendLatencyFaultEnable defaults to false: a failed broker is avoided by
    the retry of that send only, and the next send may pick it again."""
    assert ProducerConfig().send_latency_fault_enable is False
    engine = make_engine(transport, clock)
    info = publish_info()
    transport.fail["broker-a"] = "dead"
    for _ in range(6):
        assert engine.send(msg(), info).send_status == "SEND_OK"
    assert engine.fault.fault_items == {}
    assert transport.brokers_called.count("broker-a") >= 2, "no isolation: round-robin reaches it again"
    assert ProducerConfig(send_latency_fault_enable=True).fault_table == "5.x", "the 5.x table when on"


def test_boundary_messages_are_accepted() -> None:
    check_message(Message("t" * 127, b"x"))
    check_message(Message("%RETRY%group_1|a-b", b"x"))
    check_message(Message(TOPIC, b"x" * MAX_MESSAGE_SIZE))
    check_message(Message(TOPIC, bytearray(b"x"), tags="TagA", keys="k1 k2", properties={"a": "b"}))
    with pytest.raises(MQClientError, match="over max value, MAX: 10"):
        check_message(Message(TOPIC, b"x" * 11), max_message_size=10)


BAD_GROUPS = [
    pytest.param("", "blank", id="empty"),
    pytest.param("  ", "blank", id="spaces"),
    pytest.param(None, "blank", id="none"),
    pytest.param("my group", "illegal characters", id="space"),
    pytest.param("group\n", "illegal characters", id="newline"),
    pytest.param("g" * 256, "longer than group max length 255", id="256-chars"),
    pytest.param("DEFAULT_PRODUCER", "can not equal DEFAULT_PRODUCER", id="DEFAULT_PRODUCER"),
]


class RecordingNamesrv:
    """A RouteSource standing in for every NameServer call a Producer could make; records any."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def get_topic_route(self, topic: str) -> tuple[TopicRouteData, int]:
        self.calls.append(topic)
        raise AssertionError(f"route lookup of {topic} made before validation")


@pytest.fixture
def offline_producer(transport: FakeTransport, clock: ManualClock):
    """A started Producer whose name servers do not exist (no Ray anywhere): its route lookups and
    broker sends are replaced by recorders, so any network call shows up."""
    group = f"g_{uuid.uuid4().hex[:8]}"
    recorder = RecordingNamesrv()
    p = Producer(group, namesrv=["namesrv-does-not-exist"], namespace="nowhere", instance_name=group,
                 route_source=recorder, route_push=False)
    p.start()
    assert p.instance is not None and p.engine is not None
    p.engine.transport = transport
    try:
        yield p, recorder
    finally:
        p.shutdown()


@pytest.mark.parametrize(("bad", "match"), BAD_MESSAGES)
def test_producer_refuses_bad_messages_before_any_network_call(offline_producer, bad: object, match: str) -> None:
    p, recorder = offline_producer
    for send in (
        lambda: p.send(bad),
        lambda: p.send_async(bad),
        lambda: p.send_oneway(bad),
        lambda: p.send_orderly(bad, select_by_hash, "k"),
    ):
        with pytest.raises(MQClientError, match=match):
            send()
    assert recorder.calls == [] and p.engine.transport.calls == []


@pytest.mark.parametrize(("group", "match"), BAD_GROUPS)
def test_bad_producer_groups_are_refused_at_start(group: object, match: str) -> None:
    if group != "DEFAULT_PRODUCER":
        with pytest.raises(MQClientError, match=match):
            check_group(group)
    p = Producer(group, namesrv=["namesrv-does-not-exist"], namespace="nowhere", route_push=False)  # type: ignore[arg-type]
    with pytest.raises(MQClientError, match=match):
        p.start()
    assert p.instance is None
    with pytest.raises(MQClientError, match="call start"):
        p.send(msg())


def test_group_boundaries_are_accepted() -> None:
    assert check_group("g" * 255) == "g" * 255
    assert check_group("%|group_A-1") == "%|group_A-1"


def test_starting_twice_and_same_group_twice_in_one_instance() -> None:
    group = f"g_{uuid.uuid4().hex[:8]}"
    kw = {"namesrv": ["namesrv-does-not-exist"], "namespace": "nowhere", "instance_name": group, "route_push": False}
    p1 = Producer(group, **kw).start()
    try:
        with pytest.raises(MQClientError, match="maybe started once"):
            p1.start()
        p2 = Producer(group, **kw)
        with pytest.raises(MQClientError, match=rf"producer group\[{group}\] has been created before"):
            p2.start()
        # Another group in the same client instance shares it.
        p3 = Producer(group + "_other", **kw).start()
        try:
            assert p3.instance is p1.instance
        finally:
            p3.shutdown()
        # Another instance name is another client instance: the same group is fine there.
        p4 = Producer(group, **{**kw, "instance_name": group + "_2"}).start()
        try:
            assert p4.instance is not p1.instance
        finally:
            p4.shutdown()
    finally:
        p1.shutdown()
    # After shutdown the group can start again.
    Producer(group, **kw).start().shutdown()


def test_unknown_fault_table_and_empty_namesrv_list() -> None:
    with pytest.raises(MQClientError, match="fault_table"):
        Producer("g1", fault_table="3.x")
    with pytest.raises(MQClientError, match="no name server available"):
        Producer("g_empty", namesrv=[], namespace="nowhere", instance_name=f"x{uuid.uuid4().hex[:6]}").start()
