"""The async send's attempts (namesrv.client.send_async), on the manual clock: answers are
delivered by the test, in any order, the way a connection's reader would, and whatever runs
"on the executor" is queued and run by the test, so every step is deterministic."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from namesrv.client.errors import MQBrokerError, RemotingError, SendFailedError
from namesrv.client.message import Message
from namesrv.client.send_async import AnswerCallback
from namesrv.client.send_engine import SendEngine
from namesrv.client.send_result import SendResult
from namesrv.common.clock import ManualClock
from namesrv.protocol.codes import ResponseCode
from namesrv.protocol.models import MessageQueue
from tests.support.producer import FakeTransport, make_engine, msg, publish_info


class AsyncFake(FakeTransport):
    """FakeTransport whose sends are written now and answered when the test says (`answer`)."""

    def __init__(self, clock: ManualClock) -> None:
        super().__init__(clock)
        self.outstanding: list[tuple[str, MessageQueue, Message, str, AnswerCallback]] = []
        self.unreachable: set[str] = set()
        """Brokers whose request cannot even be written (send_async raises)."""

    def send_async(self, broker_addr: str, mq: MessageQueue, msg: Message, msg_id: str, timeout_ms: int,
                   default_topic: str | None, callback: AnswerCallback) -> bool:
        if mq.broker_name in self.unreachable:
            raise RemotingError(f"cannot connect to broker {broker_addr}")
        self.outstanding.append((broker_addr, mq, msg, msg_id, callback))
        return True

    def answer(self, i: int = 0) -> None:
        """Answer the i-th outstanding request as FakeTransport.send would (its failure rules)."""
        addr, mq, m, msg_id, callback = self.outstanding.pop(i)
        try:
            result = FakeTransport.send(self, addr, mq, m, msg_id, 3000, None)
        except (RemotingError, MQBrokerError) as e:
            callback(None, e)
            return
        callback(result, None)


class Executor:
    def __init__(self) -> None:
        self.queue: list[Callable[[], None]] = []

    def submit(self, fn: Callable[[], None]) -> None:
        self.queue.append(fn)

    def run_all(self) -> None:
        while self.queue:
            self.queue.pop(0)()


class Outcome:
    def __init__(self) -> None:
        self.results: list[tuple[SendResult | None, BaseException | None]] = []

    def done(self, result: SendResult | None, error: BaseException | None) -> None:
        self.results.append((result, error))


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(1_000_000)


@pytest.fixture
def fake(clock: ManualClock) -> AsyncFake:
    return AsyncFake(clock)


def start(engine: SendEngine, executor: Executor, body: bytes = b"m", **kw: object) -> Outcome:
    out = Outcome()
    engine.send_async(msg(body), kw.pop("info", None) or publish_info(), executor.submit, out.done, **kw)  # type: ignore[arg-type]
    return out


def test_answers_in_any_order_complete_their_own_sends_on_the_executor(fake: AsyncFake, clock: ManualClock) -> None:
    engine, executor = make_engine(fake, clock), Executor()
    info = publish_info()
    outs = [start(engine, executor, f"m{i}".encode(), info=info) for i in range(6)]
    assert len(fake.outstanding) == 6 and executor.queue == []  # written, nobody waits
    for i in (5, 0, 3, 1, 2, 0):
        fake.answer(min(i, len(fake.outstanding) - 1))
    assert all(o.results == [] for o in outs)  # nothing completes on the thread that delivered the answer
    executor.run_all()
    for i, o in enumerate(outs):
        [(result, error)] = o.results
        assert error is None and result is not None and result.attempts == 1
        assert fake.queues[result.message_queue][result.queue_offset] == f"m{i}".encode()
    assert engine.stats_snapshot() == {"attempts": 6, "sends_ok": 6}


def test_no_answer_is_retried_on_another_broker_and_an_error_answer_is_not(fake: AsyncFake, clock: ManualClock) -> None:
    engine, executor = make_engine(fake, clock, retry_times_when_send_async_failed=2,
                                   send_latency_fault_enable=True), Executor()
    fake.fail = {"broker-a": "dead"}
    out = start(engine, executor)
    fake.answer()  # broker-a: no answer
    assert fake.outstanding == [] and len(executor.queue) == 1  # the retry goes to the executor
    executor.run_all()
    assert [r[1].broker_name for r in fake.outstanding] == ["broker-b"]
    fake.answer()
    executor.run_all()
    [(result, error)] = out.results
    assert error is None and result is not None
    assert result.attempts == 2 and result.brokers_tried == ["broker-a", "broker-b"]
    assert not engine.fault.is_available("broker-a")  # fed to the fault table like a sync send's

    fake.fail = dict.fromkeys(("broker-a", "broker-b", "broker-c"), ResponseCode.SYSTEM_BUSY)
    out = start(engine, executor)
    fake.answer()
    executor.run_all()
    [(result, error)] = out.results
    assert result is None and isinstance(error, SendFailedError) and len(error.failures) == 1
    assert isinstance(error.__cause__, MQBrokerError)
    stats = engine.stats_snapshot()
    assert stats["failed_attempts.no_answer"] == 1 and stats["failed_attempts.broker_error"] == 1
    assert stats["sends_failed"] == 1 and stats["retries"] == 1


def test_a_broker_that_cannot_be_written_to_is_a_failed_attempt_retried_elsewhere(
        fake: AsyncFake, clock: ManualClock) -> None:
    engine, executor = make_engine(fake, clock), Executor()
    fake.unreachable = {"broker-a"}
    out = start(engine, executor)
    executor.run_all()
    assert [r[1].broker_name for r in fake.outstanding] == ["broker-b"]
    fake.answer()
    executor.run_all()
    assert out.results[0][0] is not None and out.results[0][0].brokers_tried == ["broker-a", "broker-b"]


def test_attempts_share_one_timeout_budget(fake: AsyncFake, clock: ManualClock) -> None:
    engine, executor = make_engine(fake, clock, retry_times_when_send_async_failed=5), Executor()
    fake.fail = {"broker-a": "dead", "broker-b": "dead", "broker-c": "dead"}
    fake.latency = {"broker-a": 2_000, "broker-b": 1_500}
    out = start(engine, executor, timeout_ms=3_000)
    for _ in range(3):
        if fake.outstanding:
            fake.answer()
        executor.run_all()
    [(result, error)] = out.results
    assert result is None and isinstance(error, SendFailedError) and error.timed_out
    assert fake.brokers_called == ["broker-a", "broker-b"]  # 3.5 s spent: no third attempt


def test_all_attempts_failing_ends_with_every_broker_tried(fake: AsyncFake, clock: ManualClock) -> None:
    engine, executor = make_engine(fake, clock, retry_times_when_send_async_failed=2), Executor()
    fake.fail = dict.fromkeys(("broker-a", "broker-b", "broker-c"), "dead")
    out = start(engine, executor)
    while fake.outstanding:
        fake.answer()
        executor.run_all()
    [(result, error)] = out.results
    assert result is None
    assert isinstance(error, SendFailedError) and len(error.brokers_tried) == 3 == len(set(error.brokers_tried))


def test_a_transport_without_async_sends_blocking_on_the_executor(clock: ManualClock) -> None:
    plain = FakeTransport(clock)  # only `send`: e.g. brokers reached by actor call
    engine, executor = make_engine(plain, clock), Executor()
    out = start(engine, executor)
    assert plain.calls == [] and len(executor.queue) == 1  # the blocking call is the executor's
    executor.run_all()
    [(result, error)] = out.results
    assert error is None and result is not None and len(plain.calls) == 1
