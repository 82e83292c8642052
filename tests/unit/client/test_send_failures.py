"""Failed send attempts in the send engine: whatever a transport raises is a failed attempt, retried
on another broker within the budget and counted by kind; async sends retry as RocketMQ 4.9's
`retryTimesWhenSendAsyncFailed` does (only attempts that got no answer, on another broker).

The fake transport and route helpers are test_producer_core's (no Ray, a manual clock).
"""

from __future__ import annotations

import pytest

from namesrv.client.config import ProducerConfig
from namesrv.client.errors import SendFailedError
from namesrv.client.send_result import SendResult
from namesrv.common.clock import ManualClock
from namesrv.protocol.codes import ResponseCode
from tests.support.producer import Call, FakeTransport, make_engine, msg, publish_info


class CrashingTransport(FakeTransport):
    """`fail[name] = "crash"`: the call raises something that is neither an answer nor a remoting
    error (as a Ray transport surfacing a broker's exception would)."""

    def send(self, broker_addr, mq, msg, msg_id, timeout_ms, default_topic) -> SendResult:  # type: ignore[no-untyped-def]
        if self.fail.get(mq.broker_name) == "crash":
            self.calls.append(Call("send", broker_addr, mq, msg_id, timeout_ms, default_topic, self.clock()))
            raise RuntimeError(f"disk of {mq.broker_name} on fire")
        return super().send(broker_addr, mq, msg, msg_id, timeout_ms, default_topic)


@pytest.fixture
def crashing(clock: ManualClock) -> CrashingTransport:
    return CrashingTransport(clock)


@pytest.fixture
def transport(clock: ManualClock) -> FakeTransport:
    return FakeTransport(clock)


def test_an_unexpected_error_is_a_failed_attempt_retried_on_another_broker(crashing: CrashingTransport,
                                                                          clock: ManualClock) -> None:
    engine = make_engine(crashing, clock)
    crashing.fail["broker-a"] = "crash"

    result = engine.send(msg(), publish_info())  # the first queue is broker-a's

    assert crashing.brokers_called == ["broker-a", "broker-b"]
    assert result.attempts == 2 and result.brokers_tried == ["broker-a", "broker-b"]
    stats = engine.stats_snapshot()
    assert stats["failed_attempts.unexpected"] == 1 and stats["failed_attempts"] == 1
    assert (stats["attempts"], stats["retries"], stats["sends_ok"]) == (2, 1, 1)


def test_when_every_attempt_fails_the_error_carries_each_brokers_message(crashing: CrashingTransport,
                                                                         clock: ManualClock) -> None:
    engine = make_engine(crashing, clock)
    crashing.fail = {"broker-a": "crash", "broker-b": "dead", "broker-c": int(ResponseCode.SYSTEM_ERROR)}

    with pytest.raises(SendFailedError) as err:
        engine.send(msg(), publish_info())

    failures = dict(err.value.failures)
    assert failures["broker-a"] == "RuntimeError: disk of broker-a on fire"
    assert "unavailable" in failures["broker-b"] and "code 1" in failures["broker-c"]
    stats = engine.stats_snapshot()
    assert {k: stats.get(f"failed_attempts.{k}", 0) for k in ("unexpected", "no_answer", "broker_error")} == {
        "unexpected": 1, "no_answer": 1, "broker_error": 1}
    assert stats["sends_failed"] == 1 and "sends_ok" not in stats


def test_an_unexpected_error_on_an_ordered_send_is_a_send_failure_not_a_crash(crashing: CrashingTransport,
                                                                             clock: ManualClock) -> None:
    engine = make_engine(crashing, clock)
    crashing.fail["broker-a"] = "crash"
    with pytest.raises(SendFailedError, match="disk of broker-a on fire"):
        engine.send_orderly(msg(), publish_info(), lambda mqs, m, arg: mqs[0], None)
    assert engine.stats_snapshot()["failed_attempts.unexpected"] == 1


def test_async_retry_times_default_to_rocketmq_49s() -> None:
    assert ProducerConfig().retry_times_when_send_async_failed == 2


def test_async_send_retries_an_unanswered_attempt_on_another_broker(transport: FakeTransport,
                                                                    clock: ManualClock) -> None:
    engine = make_engine(transport, clock)
    transport.fail = {"broker-a": "dead", "broker-b": "dead"}
    async_total = 1 + engine.config.retry_times_when_send_async_failed

    result = engine.send(msg(), publish_info(), times_total=async_total, retry_broker_errors=False)

    assert transport.brokers_called == ["broker-a", "broker-b", "broker-c"]
    assert result.attempts == 3 and result.message_queue.broker_name == "broker-c"


def test_async_send_gives_up_after_its_retry_times(transport: FakeTransport, clock: ManualClock) -> None:
    engine = make_engine(transport, clock, retry_times_when_send_async_failed=1)
    transport.fail = {"broker-a": "dead", "broker-b": "dead"}
    with pytest.raises(SendFailedError) as err:
        engine.send(msg(), publish_info(), times_total=1 + engine.config.retry_times_when_send_async_failed,
                    retry_broker_errors=False)
    assert err.value.brokers_tried == ["broker-a", "broker-b"]


def test_async_send_takes_a_brokers_error_answer_as_final(transport: FakeTransport, clock: ManualClock) -> None:
    """RocketMQ 4.9 retries an async send only when no answer came (onExceptionImpl needRetry)."""
    engine = make_engine(transport, clock)
    transport.fail = {"broker-a": int(ResponseCode.SYSTEM_BUSY)}
    with pytest.raises(SendFailedError) as err:
        engine.send(msg(), publish_info(), times_total=3, retry_broker_errors=False)
    assert err.value.brokers_tried == ["broker-a"] == transport.brokers_called


def test_brief_keeps_one_short_line_of_an_error() -> None:
    from namesrv.client.errors import brief

    ray_like = RuntimeError("Failed to look up actor with name 'broker-b-0'.\nThis could because 1. ...\n2. ...")
    assert brief(ray_like) == "RuntimeError: Failed to look up actor with name 'broker-b-0'."
    assert brief(TimeoutError()) == "TimeoutError"
    long = brief(ValueError("x" * 500), limit=20)
    assert long == "ValueError: " + "x" * 19 + "…"
