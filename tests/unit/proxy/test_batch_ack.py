"""AckMessage's entries grouped into BATCH_ACK_MESSAGE (namesrv.proxy.batch_ack): every entry in
exactly one plan, a batch only of handles of one pop of one queue, what goes alone; the request body
read back by the brokers' own parser; each entry's status from the answer's notInFlight body."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from namesrv.broker.pop.extra_info import ExtraInfo
from namesrv.broker.pop.headers import BatchAckAnswerBody, NotInFlight, batch_ack_body
from namesrv.protocol.types import InvalidInput
from namesrv.proxy import batch_ack as ba
from namesrv.proxy.consume import ReceiptHandle
from namesrv.proxy.status import Status


@st.composite
def handle(draw: st.DrawFn) -> ReceiptHandle:
    ck = draw(st.integers(0, 3))
    offset = draw(st.one_of(st.none(), st.integers(ck, ck + 6), st.just(ck + ba.MAX_BITS), st.integers(0, 10**9)))
    return ReceiptHandle(ExtraInfo(ck, draw(st.sampled_from([1000, 2000])), draw(st.sampled_from([10_000, 20_000])),
                                   draw(st.sampled_from([0, 999])), draw(st.sampled_from(["0", "1"])),
                                   draw(st.sampled_from(["broker-a", "broker-b"])), draw(st.integers(0, 2)), offset),
                         draw(st.integers(-1, 99)))


pendings = st.lists(handle(), max_size=40).map(lambda hs: [ba.Pending(i, h) for i, h in enumerate(hs)])


@given(pendings, st.booleans())
def test_every_entry_is_planned_exactly_once_on_its_own_broker(pending: list[ba.Pending], batch: bool) -> None:
    plans = ba.plan_acks(pending, batch)
    planned = [i for p in plans for i in p.batched + list(p.alone)]
    assert sorted(planned) == [p.index for p in pending]
    by_index = {p.index: p.handle for p in pending}
    assert len({p.broker_name for p in plans}) == len(plans)
    for p in plans:
        assert all(by_index[i].extra.broker_name == p.broker_name for i in p.batched + list(p.alone))
        assert list(p.alone) == sorted(p.alone), "what goes alone goes in the request's order"
        if not batch:
            assert not p.groups


@given(pendings)
def test_a_batch_holds_distinct_messages_of_one_pop_of_one_queue(pending: list[ba.Pending]) -> None:
    by_index = {p.index: p.handle for p in pending}
    for plan in ba.plan_acks(pending):
        assert not plan.groups or len(plan.batched) >= 2, "one message goes as ACK_MESSAGE"
        for g in plan.groups:
            offsets = [o for _, o in g.entries]
            assert len(set(offsets)) == len(offsets)
            for i, o in g.entries:
                x = by_index[i].extra
                assert (x.retry, x.queue_id, x.ck_queue_offset, x.pop_time, x.invisible_time, x.revive_qid) == g.key
                assert o == x.msg_queue_offset and 0 <= o - g.start_offset < ba.MAX_BITS
        for i in plan.alone:  # alone only when a batch could not carry it or the broker has one message
            x = by_index[i].extra
            off = x.msg_queue_offset
            carried = off is not None and 0 <= off - x.ck_queue_offset < ba.MAX_BITS
            dup = any(by_index[j].extra == x for j in plan.batched if j < i)
            assert not carried or dup or not plan.groups


@given(pendings)
def test_the_brokers_read_the_request_body_back_as_planned(pending: list[ba.Pending]) -> None:
    for plan in ba.plan_acks(pending):
        if not plan.groups:
            continue
        body = batch_ack_body(json.loads(ba.batch_ack_request("GID", "Topic", plan)))
        assert body.broker_name == plan.broker_name
        got = [((a.retry, a.queue_id, a.start_offset, a.pop_time, a.invisible_time, a.revive_queue_id),
                sorted(a.start_offset + b for b in a.bit_set), a.consumer_group, a.topic) for a in body.acks]
        assert got == [(g.key, sorted(o for _, o in g.entries), "GID", "Topic") for g in plan.groups]


def test_java_bitset_bytes_and_rocketmqs_field_names() -> None:
    hs = [ReceiptHandle(ExtraInfo(8, 1000, 30_000, 0, "1", "broker-a", 2, 8 + o)) for o in (0, 3, 9)]
    [plan] = ba.plan_acks([ba.Pending(i, h) for i, h in enumerate(hs)])
    assert json.loads(ba.batch_ack_request("G", "T", plan)) == {"brokerName": "broker-a", "acks": [
        {"c": "G", "t": "T", "r": "1", "so": 8, "q": 2, "rq": 0, "pt": 1000, "it": 30_000, "b": "CQI="}]}
    # bits 0, 3 (0b1001 = 9) and 9 (the second byte's bit 1): BitSet.toByteArray [0x09, 0x02]


def test_what_goes_alone() -> None:
    def h(broker: str = "a", offset: int | None = 5, pop_time: int = 1000) -> ReceiptHandle:
        return ReceiptHandle(ExtraInfo(0, pop_time, 10_000, 0, "0", broker, 0, offset))

    plans = ba.plan_acks([ba.Pending(i, x) for i, x in enumerate([
        h(), h(offset=6), h(offset=None), h(offset=ba.MAX_BITS), h(), h(pop_time=2000), h("b")])])
    assert [(p.broker_name, [g.entries for g in p.groups], p.alone) for p in plans] == [
        ("a", [((0, 5), (1, 6)), ((5, 5),)], (2, 3, 4)),  # 7 fields, too far, the same message again
        ("b", [], (6,))]  # the broker's one message: ACK_MESSAGE


def test_each_entry_is_answered_by_the_not_in_flight_body() -> None:
    hs = [ReceiptHandle(ExtraInfo(0, t, 10_000, 0, "0", "a", 0, o)) for t, o in ((1, 0), (1, 1), (2, 0))]
    [plan] = ba.plan_acks([ba.Pending(i + 10, h) for i, h in enumerate(hs)])
    assert ba.batch_results(plan, None) == {10: ba.OK, 11: ba.OK, 12: ba.OK}
    body = BatchAckAnswerBody(not_in_flight=[NotInFlight(ack=1, offset=0, remark="gone"),
                                             NotInFlight(ack=0, offset=1)])
    assert BatchAckAnswerBody.model_validate_json(body.encode()) == body
    assert ba.batch_results(plan, body.encode()) == {
        10: ba.OK, 11: Status("INVALID_RECEIPT_HANDLE", "receipt handle is invalid"),
        12: Status("INVALID_RECEIPT_HANDLE", "gone")}
    with pytest.raises(InvalidInput):
        ba.batch_results(plan, b'{"notInFlight": [{"ack": -1}]}')


@given(st.lists(st.tuples(st.integers(0, 2**31), st.integers(0, 2**62), st.text(max_size=30)), max_size=20))
def test_the_answer_body_round_trips(missed: list[tuple[int, int, str]]) -> None:
    body = BatchAckAnswerBody(not_in_flight=[NotInFlight(ack=a, offset=o, remark=r) for a, o, r in missed])
    assert BatchAckAnswerBody.model_validate_json(body.encode()) == body
