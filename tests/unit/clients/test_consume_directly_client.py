"""A consumer's side of CONSUME_MESSAGE_DIRECTLY (309): the listener run once on the message, its
answer as a CMResult with the time spent, nothing committed; a consumer without a listener for the
group answers as RocketMQ's MQClientInstance does for a lite pull consumer."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from clients.consumer.consume_directly import consume_directly
from clients.consumer.core import ConsumerCore
from namesrv.client.consumer.config import ConsumerConfig
from namesrv.client.consumer.listener import ConsumeConcurrentlyStatus, ConsumeContext, ConsumeOrderlyStatus
from namesrv.protocol.codes import BrokerRequestCode as Code
from namesrv.protocol.codes import ResponseCode
from namesrv.protocol.consume_directly import CMResult, ConsumeMessageDirectlyResult
from namesrv.protocol.message.codec import encode_message_ext
from namesrv.protocol.message.decoder import MessageExt, decode_messages
from namesrv.remoting.wire_command import RemotingCommand
from tests.support.broker import ADDR, Broker


def _stored(tmp_path: Path, topic: str = "T", **props: str) -> bytes:
    broker = Broker(tmp_path)
    assert broker.send(b"payload", topic=topic, **props).code == ResponseCode.SUCCESS
    [found] = broker.store.get_message(topic, 0, 0)
    return encode_message_ext(found, ADDR)


def _message(tmp_path: Path, **kw: Any) -> MessageExt:
    [m] = decode_messages(_stored(tmp_path, **kw))
    return m


@pytest.mark.parametrize("status, expected", [
    (ConsumeConcurrentlyStatus.CONSUME_SUCCESS, CMResult.CR_SUCCESS),
    (ConsumeConcurrentlyStatus.RECONSUME_LATER, CMResult.CR_LATER), (None, CMResult.CR_RETURN_NULL)])
def test_a_concurrent_listener_runs_once_and_its_answer_is_the_result(tmp_path: Path, status: Any,
                                                                       expected: CMResult) -> None:
    seen: list[tuple[list[MessageExt], ConsumeContext]] = []

    def listener(msgs: list[MessageExt], ctx: ConsumeContext) -> Any:
        seen.append((msgs, ctx))
        return status

    result = consume_directly(listener, False, _message(tmp_path), "broker-a")
    assert (result.consume_result, result.order, result.auto_commit, result.remark) == (expected, False, True, None)
    [(msgs, ctx)] = seen
    assert [m.body for m in msgs] == [b"payload"] and (ctx.message_queue.broker_name, ctx.message_queue.topic) == (
        "broker-a", "T")
    assert result.spent_time_mills >= 0


def test_an_orderly_listener_and_one_that_throws(tmp_path: Path) -> None:
    later = consume_directly(lambda m, c: ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT, True,
                             _message(tmp_path / "a"), "b")
    assert (later.consume_result, later.order) == (CMResult.CR_LATER, True)
    ok = consume_directly(lambda m, c: ConsumeOrderlyStatus.SUCCESS, True, _message(tmp_path / "b"), "b")
    assert ok.consume_result is CMResult.CR_SUCCESS

    def boom(msgs: list[MessageExt], ctx: ConsumeContext) -> Any:
        raise ValueError("bad payload")
    thrown = consume_directly(boom, False, _message(tmp_path / "c"), "b")
    assert (thrown.consume_result, thrown.remark) == (CMResult.CR_THROW_EXCEPTION, "ValueError: bad payload")


def test_a_retried_message_is_seen_under_its_real_topic(tmp_path: Path) -> None:
    seen: list[str] = []
    msg = _message(tmp_path, topic="%RETRY%CG", RETRY_TOPIC="T")
    consume_directly(lambda m, c: seen.append(m[0].topic) or ConsumeConcurrentlyStatus.CONSUME_SUCCESS, False, msg, "b")
    assert seen == ["T"]


class Conn:
    """A connection that records answers."""

    address = "127.0.0.1:10911"

    def __init__(self) -> None:
        self.answers: list[tuple[int, str | None, bytes | None]] = []
        self.done = threading.Event()

    def answer(self, request: RemotingCommand, code: int, remark: str | None = None, body: bytes | None = None) -> None:
        self.answers.append((code, remark, body))
        self.done.set()


def _ask(core: ConsumerCore, body: bytes, group: str = "CG") -> tuple[int, str | None, bytes | None]:
    conn = Conn()
    request = RemotingCommand(Code.CONSUME_MESSAGE_DIRECTLY, 5, ext_fields={
        "consumerGroup": group, "clientId": core.client_id, "msgId": "X", "brokerName": "broker-a"}, body=body)
    core.processor.process_request(conn, request)  # type: ignore[arg-type]
    assert conn.done.wait(10), "answered off the reader, promptly"
    [answer] = conn.answers
    return answer


def test_the_core_answers_with_the_result_or_says_the_group_is_not_here(tmp_path: Path) -> None:
    core = ConsumerCore("CG", ConsumerConfig(), "CONSUME_ACTIVELY", None, "ns", "unit")
    body = _stored(tmp_path)
    assert _ask(core, body) == (ResponseCode.SYSTEM_ERROR, "The Consumer Group <CG> not exist in this consumer", None)
    ran: list[tuple[str, str]] = []

    def directly(msg: MessageExt, broker_name: str) -> ConsumeMessageDirectlyResult:
        ran.append((msg.topic, broker_name))
        return ConsumeMessageDirectlyResult(consume_result=CMResult.CR_SUCCESS, spent_time_mills=1)
    core.processor.consume_directly = directly
    code, remark, answered = _ask(core, body)
    assert (code, ConsumeMessageDirectlyResult.decode(answered).consume_result) == (0, CMResult.CR_SUCCESS)
    assert ran == [("T", "broker-a")]
    assert _ask(core, body, "Other")[:2] == (ResponseCode.SYSTEM_ERROR,
                                            "The Consumer Group <Other> not exist in this consumer")
    code, remark, _ = _ask(core, b"\x00garbage")
    assert code == ResponseCode.SYSTEM_ERROR and (remark or "").startswith("the body is not one message")
    assert len(ran) == 1, "only the good request ran the listener"
