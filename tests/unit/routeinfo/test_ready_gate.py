"""ReadyGate: route queries wait after a (re)start until brokers had a chance to register again."""

from __future__ import annotations

import pytest

from namesrv.common.clock import ManualClock
from namesrv.protocol.codes import RequestCode, ResponseCode
from namesrv.protocol.msgpack_codec import encode_body
from namesrv.remoting.command import RemotingRequest
from namesrv.routeinfo.kvconfig import KVConfigManager
from namesrv.routeinfo.processor import DefaultRequestProcessor
from namesrv.routeinfo.ready_gate import ReadyGate
from namesrv.routeinfo.route_info_manager import RouteInfoManager

WINDOW = 30_000
A, B = "10.0.0.1:10911", "10.0.0.3:10911"


@pytest.mark.parametrize("window", [0, -1])
def test_gate_without_a_window_is_open_from_the_start(clock: ManualClock, window: int) -> None:
    gate = ReadyGate(clock, window)
    assert gate.is_open
    assert gate.not_ready_reason([]) is None
    assert gate.remaining_ms() == 0


def test_gate_is_shut_for_the_whole_window_and_opens_exactly_at_its_end(clock: ManualClock) -> None:
    gate = ReadyGate(clock, WINDOW)
    assert not gate.is_open
    assert gate.remaining_ms() == WINDOW

    clock.advance(WINDOW - 1)
    reason = gate.not_ready_reason([])
    assert reason is not None
    assert "not ready" in reason and f"started {WINDOW - 1} ms ago" in reason and str(WINDOW) in reason
    assert gate.remaining_ms() == 1
    assert not gate.is_open

    clock.advance(1)
    assert gate.not_ready_reason([]) is None
    assert gate.is_open
    assert gate.remaining_ms() == 0


def test_gate_opens_early_once_every_expected_broker_is_back(clock: ManualClock) -> None:
    gate = ReadyGate(clock, WINDOW, expected_brokers=[A, B])
    clock.advance(1_000)

    reason = gate.not_ready_reason([A])
    assert reason is not None and "1 of 2 known brokers" in reason
    assert not gate.is_open

    assert gate.not_ready_reason([A, B, "10.0.0.99:1"]) is None
    assert gate.is_open


def test_gate_with_expected_brokers_still_opens_when_the_window_ends(clock: ManualClock) -> None:
    gate = ReadyGate(clock, WINDOW, expected_brokers=[A, B])
    clock.advance(WINDOW)
    assert gate.not_ready_reason([]) is None, "a broker that never returns must not block routes forever"


def test_an_open_gate_stays_open(clock: ManualClock) -> None:
    gate = ReadyGate(clock, WINDOW, expected_brokers=[A])
    assert gate.not_ready_reason({A: object()}) is None  # any iterable of addresses, e.g. the live table
    assert gate.not_ready_reason([]) is None
    clock.advance(1)
    assert gate.not_ready_reason([]) is None
    assert gate.is_open


def _processor_with_gate(clock: ManualClock, expected: list[str]) -> DefaultRequestProcessor:
    gate = ReadyGate(clock, WINDOW, expected_brokers=expected)
    return DefaultRequestProcessor(RouteInfoManager(clock=clock), KVConfigManager(None), ready_gate=gate)


def _register(processor: DefaultRequestProcessor, addr: str, name: str) -> None:
    body = {"topicConfigSerializeWrapper": {"topicConfigTable": {"TopicA": {"topicName": "TopicA"}}}}
    ext = {"clusterName": "C", "brokerAddr": addr, "brokerName": name, "brokerId": 0}
    response = processor.process_request(RemotingRequest(RequestCode.REGISTER_BROKER, ext, encode_body(body)))
    assert response.code == ResponseCode.SUCCESS, response.remark


def _route(processor: DefaultRequestProcessor, topic: str = "TopicA") -> tuple[int, str | None]:
    response = processor.process_request(RemotingRequest(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}))
    return response.code, response.remark


def test_processor_refuses_route_queries_until_expected_brokers_registered(clock: ManualClock) -> None:
    processor = _processor_with_gate(clock, [A, B])

    _register(processor, A, "broker-a")  # registrations are served while the gate is shut
    code, remark = _route(processor)
    assert code == ResponseCode.SYSTEM_ERROR
    assert remark is not None and "not ready" in remark and "1 of 2" in remark
    code, remark = _route(processor, "Unknown")
    assert code == ResponseCode.SYSTEM_ERROR, "a shut gate must not claim a topic does not exist"

    _register(processor, B, "broker-b")
    assert _route(processor) == (ResponseCode.SUCCESS, None)
    assert _route(processor, "Unknown")[0] == ResponseCode.TOPIC_NOT_EXIST


def test_processor_gate_leaves_other_queries_alone(clock: ManualClock) -> None:
    processor = _processor_with_gate(clock, [A])
    for code in (
        RequestCode.GET_BROKER_CLUSTER_INFO,
        RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER,
        RequestCode.GET_NAMESRV_CONFIG,
    ):
        assert processor.process_request(RemotingRequest(code)).code == ResponseCode.SUCCESS


def test_processor_gate_opens_with_time_alone(clock: ManualClock) -> None:
    processor = _processor_with_gate(clock, [])
    _register(processor, A, "broker-a")
    assert _route(processor)[0] == ResponseCode.SYSTEM_ERROR
    clock.advance(WINDOW)
    assert _route(processor)[0] == ResponseCode.SUCCESS


@pytest.mark.parametrize("name", ["default", "fast"])
def test_every_profile_sizes_its_window_from_period_timeout_and_restart(name: str) -> None:
    """A broker whose call failed during the restart retries a period later, that call may take the
    register timeout, and the actor's restart comes on top: the window covers all three."""
    from actors.deployment.profiles import DEFAULT_ACTOR_RESTART_MS, FAST_ACTOR_RESTART_MS, get_profile

    profile = get_profile(name)
    restart = {"default": DEFAULT_ACTOR_RESTART_MS, "fast": FAST_ACTOR_RESTART_MS}[name]
    broker = profile.broker
    period, timeout = broker.effective_register_period_ms(), broker.register_broker_timeout_ms
    assert profile.namesrv.not_ready_window_ms == period + timeout + restart
    assert restart > 0 and profile.namesrv.not_ready_window_ms > period + timeout
    if name == "default":
        assert profile.namesrv.not_ready_window_ms >= 45_000  # RocketMQ's NameServer waits 45 s


def test_expected_brokers_never_shrink_while_the_gate_is_shut(clock: ManualClock) -> None:
    gate = ReadyGate(clock, WINDOW, expected_brokers=[A, B])
    assert isinstance(gate.expected, frozenset)
    clock.advance(WINDOW // 2)
    assert gate.not_ready_reason([A]) is not None  # B is still awaited, however long A has been back
    clock.advance(WINDOW // 2 - 1)
    assert gate.not_ready_reason([A]) is not None


def test_the_window_counts_from_begin_not_from_construction(clock: ManualClock) -> None:
    gate = ReadyGate(clock, WINDOW, expected_brokers=[A])
    clock.advance(WINDOW)  # a slow start (imports, warm-up) before the host serves
    gate.begin()
    assert gate.not_ready_reason([]) is not None and gate.remaining_ms() == WINDOW
    clock.advance(WINDOW)
    assert gate.not_ready_reason([]) is None
