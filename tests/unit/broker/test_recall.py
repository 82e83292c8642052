"""RECALL_MESSAGE (RocketMQ 5.3), pure: a timed send is answered with a recall handle in RocketMQ's
format; recalling it before it is due keeps it from its queue (also across a restart of the timer
service) while the other timers of its slot arrive; every refusal answers RocketMQ's code and
stores nothing."""

from __future__ import annotations

import asyncio
import base64
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from namesrv.broker.schedule.delivery import TIMER_TOPIC, parse_delay_levels
from namesrv.broker.schedule.service import ScheduleService
from namesrv.protocol.codes import BrokerRequestCode as Code
from namesrv.protocol.codes import ResponseCode
from namesrv.protocol.message.recall import RecallHandle, RecallHandleInvalid
from namesrv.protocol.models import TopicConfig
from namesrv.store.types import BrokerRole
from tests.support.broker import Broker

DUE_MS = 10_000


def test_a_handle_is_rocketmqs_v1_form_and_round_trips() -> None:
    handle = RecallHandle("T", "broker-a", "1700000001001", "7F0000010001")
    text = handle.encode()
    assert base64.urlsafe_b64decode(text).decode() == "v1 T broker-a 1700000001001 7F0000010001"
    assert RecallHandle.decode(text) == handle


@pytest.mark.parametrize("bad", ["", "not base64!", base64.urlsafe_b64encode(b"v2 T b 1 id").decode(),
                                 base64.urlsafe_b64encode(b"v1 T b 1").decode(),
                                 base64.urlsafe_b64encode(b"\xff\xfe").decode()])
def test_handles_that_do_not_decode_are_refused(bad: str) -> None:
    with pytest.raises(RecallHandleInvalid, match="recall handle is invalid"):
        RecallHandle.decode(bad)


@given(st.text(max_size=200))
def test_decoding_any_text_either_gives_a_handle_or_says_it_is_invalid(text: str) -> None:
    try:
        RecallHandle.decode(text)
    except RecallHandleInvalid:
        pass


class Timed:
    """A broker with recall on and its timer service, on one manual clock."""

    def __init__(self, root: Path, **config: object) -> None:
        self.broker = Broker(root, **({"recall_message_enable": True} | config))
        self.broker.clock.advance(1_700_000_000_000 - self.broker.clock())
        self.service = self.timers()

    def timers(self) -> ScheduleService:
        return ScheduleService(self.broker.store, None, self.broker.clock, parse_delay_levels(), self.broker.store.put)

    def send_timed(self, body: bytes, due_in_ms: int = DUE_MS) -> str:
        answer = self.broker.send(body, TIMER_DELIVER_MS=str(self.broker.clock() + due_in_ms))
        assert answer.code == ResponseCode.SUCCESS, answer.remark
        return str((answer.ext_fields or {})["recallHandle"])

    def recall(self, handle: str, topic: str = "T") -> tuple[int, str | None]:
        answer = self.broker.call(Code.RECALL_MESSAGE, {"producerGroup": "PG", "topic": topic,
                                                        "recallHandle": handle})
        return answer.code, answer.remark

    def delivered(self) -> list[bytes]:
        return [m.body for m in self.broker.store.get_message("T", 0, 0, 100)]

    def pass_at_due(self, service: ScheduleService | None = None) -> int:
        self.broker.clock.advance(DUE_MS)
        return asyncio.run((service or self.service).pass_once())


def test_a_recalled_timer_never_arrives_and_its_slot_mates_do(tmp_path: Path) -> None:
    t = Timed(tmp_path)
    keep, drop = t.send_timed(b"keep"), t.send_timed(b"dropped")
    decoded = RecallHandle.decode(drop)
    assert (decoded.topic, decoded.broker_name) == ("T", "broker-a")
    assert int(decoded.timestamp) > t.broker.clock(), "the slot + 1 ms: in the future"
    assert keep != drop
    assert t.recall(drop) == (ResponseCode.SUCCESS, None)
    assert t.pass_at_due() == 1
    assert t.delivered() == [b"keep"]
    assert t.service.timers_recalled == 1 and t.service.timers_delivered == 1
    assert t.recall(drop)[0] == ResponseCode.ILLEGAL_OPERATION, "its time has passed"


def test_a_recall_of_a_timer_that_never_was_is_forgotten_when_its_slot_passes(tmp_path: Path) -> None:
    t = Timed(tmp_path)
    real = RecallHandle.decode(t.send_timed(b"keep"))
    ghost = RecallHandle(real.topic, real.broker_name, real.timestamp, "0" * 32).encode()
    assert t.recall(ghost) == (ResponseCode.SUCCESS, None), "RocketMQ does not look the message up either"
    assert t.pass_at_due() == 1 and t.delivered() == [b"keep"]
    assert t.service.recalled == set(), "the marker's key is let go once its slot has passed"


def test_a_recall_holds_across_a_restart_of_the_timer_service(tmp_path: Path) -> None:
    t = Timed(tmp_path)
    t.send_timed(b"keep")
    assert t.recall(t.send_timed(b"dropped"))[0] == ResponseCode.SUCCESS
    assert t.pass_at_due(t.timers()) == 1, "a new service reads the marker with the timers, from the floor"
    assert t.delivered() == [b"keep"]


def test_batch_and_untimed_sends_carry_no_handle(tmp_path: Path) -> None:
    t = Timed(tmp_path)
    assert "recallHandle" not in (t.broker.send(b"now").ext_fields or {})
    assert "recallHandle" not in (t.broker.send(b"delay level", DELAY="2").ext_fields or {})


def test_refusals_answer_rocketmqs_codes_and_store_nothing(tmp_path: Path) -> None:
    t = Timed(tmp_path)
    handle = t.send_timed(b"m")
    t.broker.topics.update_topic_config(TopicConfig(topic_name="Other", read_queue_nums=1, write_queue_nums=1))
    parked = t.broker.store.max_offset(TIMER_TOPIC, 0)
    other_broker = RecallHandle("T", "broker-b", RecallHandle.decode(handle).timestamp, "id").encode()
    past = RecallHandle("T", "broker-a", str(t.broker.clock() - 1), "id").encode()
    too_far = RecallHandle("T", "broker-a", str(t.broker.clock() + 4 * 86_400_000), "id").encode()
    cases = [
        (t.recall(handle, topic="NoSuchTopic"), ResponseCode.TOPIC_NOT_EXIST, "not exist"),
        (t.recall("garbage"), ResponseCode.ILLEGAL_OPERATION, "recall handle is invalid"),
        (t.recall(handle, topic="Other"), ResponseCode.ILLEGAL_OPERATION, "topic not match"),
        (t.recall(other_broker), ResponseCode.ILLEGAL_OPERATION, "broker service not available"),
        (t.recall(past), ResponseCode.ILLEGAL_OPERATION, "timestamp invalid"),
        (t.recall(too_far), ResponseCode.ILLEGAL_OPERATION, "timestamp invalid"),
        (t.recall(""), ResponseCode.SYSTEM_ERROR, "recallHandle"),
        (t.recall("x" * 5000), ResponseCode.SYSTEM_ERROR, "recallHandle"),
    ]
    for (code, remark), want, says in cases:
        assert code == want and remark is not None and says in remark, (code, remark, want, says)
    assert t.broker.store.max_offset(TIMER_TOPIC, 0) == parked, "a refused recall parks no marker"
    assert t.pass_at_due() == 1 and t.delivered() == [b"m"]


def test_recall_is_off_by_default_and_refused_on_a_slave(tmp_path: Path) -> None:
    off = Timed(tmp_path / "off", recall_message_enable=False)
    code, remark = off.recall(off.send_timed(b"m"))
    assert code == ResponseCode.NO_PERMISSION and remark == "recall failed, operation is forbidden"
    slave = Timed(tmp_path / "slave")
    handle = slave.send_timed(b"m")
    slave.broker.processor.context.guard.change_role(BrokerRole.SLAVE, 2)
    assert slave.recall(handle)[0] == ResponseCode.SLAVE_NOT_AVAILABLE
