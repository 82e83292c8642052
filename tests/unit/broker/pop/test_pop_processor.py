"""POP_MESSAGE, ACK_MESSAGE, BATCH_ACK_MESSAGE and CHANGE_MESSAGE_INVISIBLETIME over the wire,
pure (real store and journal files, a manual clock): handles, revive into the pop retry topic and
the DLQ, stale and bad handles refused with nothing changed, orderly pops, and a restart that
loses nothing in flight."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from namesrv.broker.config import BrokerConfig, BrokerRole
from namesrv.broker.pop.extra_info import decode_extra_info, parse_offset_info
from namesrv.broker.pop.headers import BatchAckAnswerBody, encode_bit_set
from namesrv.broker.processor.dispatcher import BrokerProcessor
from namesrv.broker.processor.types import BrokerIdentity
from namesrv.broker.subscription.config import SubscriptionGroupConfig
from namesrv.protocol.codes import BrokerRequestCode as Code
from namesrv.protocol.codes import ResponseCode
from namesrv.protocol.models import TopicConfig
from namesrv.remoting.command import RemotingRequest, RemotingResponse
from namesrv.remoting.pipeline import RequestContext
from namesrv.remoting.wire_command import RemotingCommand
from tests.support.broker import ADDR, Broker, decode_messages

INVISIBLE = 10_000


class PopBroker(Broker):
    """The unit tests' broker with its pop state journalled under `root`."""

    def __init__(self, root: Path, **config: Any) -> None:
        super().__init__(root, **config)
        self.root = root
        self.processor = self._processor(config)

    def _processor(self, config: dict[str, Any]) -> BrokerProcessor:
        return BrokerProcessor(BrokerIdentity("DefaultCluster", "broker-a", 0, ADDR), BrokerConfig(**config),
                               self.topics, self.store, self.offsets, self.clock, self.created.append,
                               pop_journal=self.root / "pop.journal")

    def restart(self) -> None:
        self.processor.pop_state.close()
        self.processor = self._processor({})

    def pop(self, queue_id: int = -1, nums: int = 32, invisible: int = INVISIBLE, group: str = "CG",
            **extra: Any) -> RemotingCommand:
        ext = {"consumerGroup": group, "topic": "T", "queueId": queue_id, "maxMsgNums": nums,
               "invisibleTime": invisible, "pollTime": 0, "bornTime": self.clock(), "initMode": 0} | extra
        return self.call(Code.POP_MESSAGE, ext)

    def ack(self, m: dict[str, Any], topic: str = "T", group: str = "CG", handle: str | None = None,
            code: int = Code.ACK_MESSAGE, **extra: Any) -> RemotingCommand:
        ext = {"consumerGroup": group, "topic": topic, "queueId": m["queue_id"], "offset": m["queue_offset"],
               "extraInfo": handle if handle is not None else m["props"]["POP_CK"]} | extra
        return self.call(code, ext)

    def change(self, m: dict[str, Any], invisible: int, **kw: Any) -> RemotingCommand:
        return self.ack(m, code=Code.CHANGE_MESSAGE_INVISIBLETIME, invisibleTime=invisible, **kw)

    def revive(self) -> int:
        async def run() -> int:
            n = await self.processor.revive.revive_due()
            await self.processor.revive.journalled()
            return n
        return asyncio.run(run())


@pytest.fixture
def broker(tmp_path: Path) -> PopBroker:
    return PopBroker(tmp_path)


def popped(answer: RemotingCommand) -> list[dict[str, Any]]:
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    return decode_messages(answer.body or b"")


def test_pop_hides_messages_and_answers_rocketmqs_header(broker: PopBroker) -> None:
    for i in range(3):
        broker.send(f"m{i}".encode(), queue_id=i % 2)
    answer = broker.pop()
    msgs = popped(answer)
    assert sorted(m["body"] for m in msgs) == [b"m0", b"m1", b"m2"]
    ext = answer.ext_fields or {}
    assert ext["popTime"] == str(broker.clock()) and ext["invisibleTime"] == str(INVISIBLE)
    assert ext["reviveQid"] == "0" and ext["restNum"] == "0" and "orderCountInfo" not in ext
    assert parse_offset_info(ext["startOffsetInfo"]) == {"0@0": "0", "0@1": "0"}
    assert parse_offset_info(ext["msgOffsetInfo"]) == {"0@0": "0,1", "0@1": "0"}
    for m in msgs:
        info = decode_extra_info(m["props"]["POP_CK"])
        assert (info.pop_time, info.invisible_time, info.retry, info.broker_name) == (
            broker.clock(), INVISIBLE, "0", "broker-a")
        assert (info.queue_id, info.msg_queue_offset, info.ck_queue_offset) == (m["queue_id"], m["queue_offset"], 0)
    assert broker.offsets.query_offset("CG", "T", 0) == 2 and broker.offsets.query_offset("CG", "T", 1) == 1
    nothing = broker.pop()  # in flight: invisible to the group
    assert nothing.code == ResponseCode.POLLING_TIMEOUT and not nothing.body
    assert popped(broker.pop(group="OTHER"))  # another group has its own offsets


def test_pop_caps_and_refusals_change_nothing(broker: PopBroker) -> None:
    broker.send(b"x")
    before = broker.state()
    assert broker.pop(nums=33).code == ResponseCode.INVALID_PARAMETER
    assert broker.pop(queue_id=2).code == ResponseCode.INVALID_PARAMETER
    assert broker.call(Code.POP_MESSAGE, {"consumerGroup": "CG", "topic": "Nope", "queueId": -1, "maxMsgNums": 1,
                                          "invisibleTime": 1, "pollTime": 0, "bornTime": 0, "initMode": 0}
                       ).code == ResponseCode.TOPIC_NOT_EXIST
    assert broker.pop(invisible=0).code == ResponseCode.SYSTEM_ERROR
    assert broker.state() == before and len(broker.processor.pop_state.index) == 0


def test_ack_is_final_and_a_second_ack_is_refused(broker: PopBroker) -> None:
    broker.send(b"a")
    [m] = popped(broker.pop())
    assert broker.ack(m).code == ResponseCode.SUCCESS
    again = broker.ack(m)
    assert again.code == ResponseCode.NO_MESSAGE and "no message in flight" in (again.remark or "")
    broker.clock.advance(INVISIBLE + 1)
    assert broker.revive() == 0 and broker.pop().code == ResponseCode.POLLING_TIMEOUT


def test_bad_handles_are_refused_and_change_nothing(broker: PopBroker) -> None:
    broker.send(b"a")
    [m] = popped(broker.pop())
    index = broker.processor.pop_state.index
    entries = dict(index.entries)
    handle = m["props"]["POP_CK"]
    parts = handle.split(" ")
    stale = " ".join([parts[0], str(int(parts[1]) - 1), *parts[2:]])
    assert broker.ack(m, handle="garbage").code == ResponseCode.INVALID_PARAMETER
    assert broker.ack(m, handle=handle.replace(" 0 broker-a", " 7 broker-a")).code == ResponseCode.INVALID_PARAMETER
    assert broker.ack(m, handle=stale).code == ResponseCode.NO_MESSAGE
    assert broker.ack(m, offset=5).code == ResponseCode.NO_MESSAGE  # past the queue's end
    assert broker.ack({**m, "queue_offset": 5}, handle=handle).code == ResponseCode.NO_MESSAGE
    assert broker.ack({**m, "queue_id": 9}).code == ResponseCode.MESSAGE_ILLEGAL
    assert broker.ack(m, topic="Nope").code == ResponseCode.TOPIC_NOT_EXIST
    assert broker.change(m, 5, handle=stale).code == ResponseCode.NO_MESSAGE
    assert index.entries == entries
    assert broker.ack(m).code == ResponseCode.SUCCESS


def test_change_invisible_time_gives_a_new_handle_and_the_old_one_stops_working(broker: PopBroker) -> None:
    broker.send(b"a")
    [m] = popped(broker.pop())
    broker.clock.advance(1000)
    changed = broker.change(m, 60_000)
    assert changed.code == ResponseCode.SUCCESS and changed.ext_fields is not None
    assert changed.ext_fields == {"popTime": str(broker.clock()), "invisibleTime": "60000", "reviveQid": "0"}
    broker.clock.advance(INVISIBLE)  # past the first invisible time: not due, it was changed
    assert broker.revive() == 0
    assert broker.ack(m).code == ResponseCode.NO_MESSAGE  # the old handle
    old = decode_extra_info(m["props"]["POP_CK"])
    new = " ".join([str(old.ck_queue_offset), changed.ext_fields["popTime"], "60000", "0", "0", "broker-a", "0", "0"])
    assert broker.ack(m, handle=new).code == ResponseCode.SUCCESS  # apache/rocketmq #9583: not ignored


def test_a_lapsed_message_comes_back_from_the_retry_topic_then_goes_to_the_dlq(broker: PopBroker) -> None:
    broker.processor.context.subscription_groups.update(
        SubscriptionGroupConfig(group_name="CG", retry_max_times=2))
    broker.send(b"a", TAGS="tag")
    [m] = popped(broker.pop())
    for attempt in (1, 2):
        broker.clock.advance(INVISIBLE)
        assert broker.revive() == 1
        [again] = popped(broker.pop())
        info = decode_extra_info(again["props"]["POP_CK"])
        assert again["topic"] == "T" and again["body"] == b"a" and again["reconsume"] == attempt
        assert info.retry == "1" and again["props"]["TAGS"] == "tag" and "1ST_POP_TIME" in again["props"]
        assert broker.store.max_offset("%RETRY%CG_T", 0) == attempt
        assert broker.ack(m).code == ResponseCode.NO_MESSAGE  # the earlier delivery's handle is stale
        m = again
    broker.clock.advance(INVISIBLE)
    assert broker.revive() == 1
    assert broker.pop().code == ResponseCode.POLLING_TIMEOUT
    [dead] = broker.store.get_message("%DLQ%CG", 0, 0)
    assert dead.body == b"a" and dead.reconsume_times == 3 and dead.properties["RETRY_TOPIC"] == "T"
    assert "POP_CK" not in dead.properties


def test_an_ack_of_a_retried_message_names_the_original_topic(broker: PopBroker) -> None:
    broker.send(b"a")
    popped(broker.pop())
    broker.clock.advance(INVISIBLE)
    broker.revive()
    [again] = popped(broker.pop())
    changed = broker.change(again, 1000)  # at once: the new pop time still differs from the old
    new_time = (changed.ext_fields or {})["popTime"]
    info = decode_extra_info(again["props"]["POP_CK"])
    assert changed.code == ResponseCode.SUCCESS and int(new_time) != info.pop_time
    handle = again["props"]["POP_CK"].replace(f" {info.pop_time} {INVISIBLE} ", f" {new_time} 1000 ")
    assert broker.ack(again, handle=handle).code == ResponseCode.SUCCESS
    broker.clock.advance(INVISIBLE)
    assert broker.revive() == 0


def test_batch_ack_acks_what_is_in_flight(broker: PopBroker) -> None:
    for i in range(3):
        broker.send(f"m{i}".encode())
    msgs = popped(broker.pop(queue_id=0))
    pop_time = decode_extra_info(msgs[0]["props"]["POP_CK"]).pop_time
    entry = {"c": "CG", "t": "T", "r": "0", "so": 0, "q": 0, "rq": 0, "pt": pop_time, "it": INVISIBLE,
             "b": encode_bit_set([0, 2])}
    answer = broker.call(Code.BATCH_ACK_MESSAGE, None, json.dumps({"brokerName": "broker-a", "acks": [entry]}).encode())
    assert answer.code == ResponseCode.SUCCESS and answer.remark is None and not answer.body
    assert [k[3] for k in broker.processor.pop_state.index.entries] == [1]
    bad = broker.call(Code.BATCH_ACK_MESSAGE, None, json.dumps({"acks": [entry | {"b": "%%%"}]}).encode())
    assert bad.code == ResponseCode.SYSTEM_ERROR and [k[3] for k in broker.processor.pop_state.index.entries] == [1]
    partly = broker.call(Code.BATCH_ACK_MESSAGE, None,
                         json.dumps({"acks": [entry | {"b": encode_bit_set([0, 1])}]}).encode())
    assert partly.code == ResponseCode.SUCCESS and partly.remark == "1 of 2 not in flight under their handles"
    assert len(broker.processor.pop_state.index) == 0
    # which one, and what ACK_MESSAGE would have said of it: the body names the BatchAck and offset
    [missed] = BatchAckAnswerBody.model_validate_json(partly.body or b"").not_in_flight
    assert (missed.ack, missed.offset) == (0, 0)
    assert missed.remark == broker.ack(msgs[0]).remark and "no message in flight" in missed.remark


def test_a_restart_loses_nothing_in_flight_and_delivers_nothing_acked_again(broker: PopBroker) -> None:
    for i in range(4):
        broker.send(f"m{i}".encode())
    msgs = popped(broker.pop(queue_id=0))
    assert broker.ack(msgs[0]).code == ResponseCode.SUCCESS
    assert broker.change(msgs[1], 60_000).code == ResponseCode.SUCCESS
    broker.offsets.table.clear()  # the offsets file was behind: the journal has the pop offsets
    broker.restart()
    assert broker.offsets.query_offset("CG", "T", 0) == 4
    assert sorted(k[3] for k in broker.processor.pop_state.index.entries) == [1, 2, 3]
    broker.clock.advance(INVISIBLE)
    assert broker.revive() == 2  # 2 and 3; 1 was changed to a minute
    assert sorted(m["body"] for m in popped(broker.pop())) == [b"m2", b"m3"]
    (broker.root / "pop.journal").open("ab").write(b'{"op":"ack","k":["CG"')  # a torn last append
    broker.restart()
    assert len(broker.processor.pop_state.index) == 3


def test_orderly_pop_holds_the_queue_until_its_batch_is_acked(broker: PopBroker) -> None:
    broker.topics.update_topic_config(TopicConfig(topic_name="T", read_queue_nums=1, write_queue_nums=1))
    for i in range(3):
        broker.send(f"m{i}".encode())
    first = broker.pop(nums=2, order="true")
    msgs = popped(first)
    assert [m["body"] for m in msgs] == [b"m0", b"m1"] and (first.ext_fields or {})["reviveQid"] == "999"
    assert parse_offset_info((first.ext_fields or {})["orderCountInfo"]) == {"0@0": "0,0"}
    assert broker.pop(order="true").code == ResponseCode.POLLING_TIMEOUT  # the queue is held
    broker.clock.advance(INVISIBLE)
    assert broker.revive() == 2  # lapsed: the same messages again, in order, from the queue
    answer = broker.pop(nums=2, order="true")
    again = popped(answer)
    assert [m["body"] for m in again] == [b"m0", b"m1"] and broker.store.max_offset("%RETRY%CG_T", 0) == 0
    assert parse_offset_info((answer.ext_fields or {})["orderCountInfo"]) == {"0@0": "1,1"}, "each's 2nd delivery"
    assert broker.ack(again[0]).code == ResponseCode.SUCCESS
    assert broker.offsets.query_offset("CG", "T", 0) == 1
    assert broker.ack(again[1]).code == ResponseCode.SUCCESS
    assert [m["body"] for m in popped(broker.pop(order="true"))] == [b"m2"]


def test_a_revive_the_store_refuses_waits_and_does_not_stop_the_others(broker: PopBroker) -> None:
    broker.send(b"a")
    assert len(popped(broker.pop(group="CG"))) == 1 and len(popped(broker.pop(group="CG2"))) == 1
    broker.clock.advance(INVISIBLE)
    original = broker.processor.revive.send
    calls: list[str] = []

    async def first_refused(messages: Any, topic: str, queues: int) -> Any:
        calls.append(topic)
        if len(calls) == 1:
            raise OSError("disk says no")
        return await original(messages, topic, queues)

    broker.processor.revive.send = first_refused
    assert broker.revive() == 2 and broker.processor.revive.failures == 1
    retried = {t: broker.store.max_offset(t, 0) for t in ("%RETRY%CG_T", "%RETRY%CG2_T")}
    assert sorted(retried.values()) == [0, 1] and len(broker.processor.pop_state.index) == 1
    assert broker.revive() == 0  # not again at once: no hot loop on a failing store
    broker.clock.advance(1000)
    assert broker.revive() == 1 and len(calls) == 3
    assert [broker.store.max_offset(t, 0) for t in retried] == [1, 1]


def test_a_held_orderly_pop_waits_for_the_ack_not_for_new_messages(broker: PopBroker) -> None:
    broker.topics.update_topic_config(TopicConfig(topic_name="T", read_queue_nums=1, write_queue_nums=1))
    broker.send(b"m0")
    [m] = popped(broker.pop(order="true"))
    broker.send(b"m1")  # the queue has more, but the group's batch holds it

    async def held_then_acked() -> tuple[Any, int]:
        loop = asyncio.get_running_loop()
        ext = {"consumerGroup": "CG", "topic": "T", "queueId": -1, "maxMsgNums": 1, "invisibleTime": INVISIBLE,
               "pollTime": 30_000, "bornTime": 0, "initMode": 0, "order": "true"}
        pending = broker.processor.process(RemotingRequest(Code.POP_MESSAGE, {k: str(v) for k, v in ext.items()}),
                                           RequestContext())
        task = asyncio.ensure_future(pending)  # type: ignore[arg-type]
        passes = 0
        original = broker.processor.popper.pop

        async def counted(*args: Any) -> Any:
            nonlocal passes
            passes += 1
            return await original(*args)

        broker.processor.popper.pop = counted  # type: ignore[method-assign]
        for _ in range(50):  # the hold stays put: no pass after pass while the queue is held
            await asyncio.sleep(0)
        assert not task.done()
        started = loop.time()
        ack = {"consumerGroup": "CG", "topic": "T", "queueId": 0, "offset": 0, "extraInfo": m["props"]["POP_CK"]}
        answer = broker.processor.process(RemotingRequest(Code.ACK_MESSAGE, {k: str(v) for k, v in ack.items()}),
                                          RequestContext())
        if not isinstance(answer, RemotingResponse):
            await answer
        result = await asyncio.wait_for(task, 5)
        assert loop.time() - started < 5
        return result, passes

    result, passes = asyncio.run(held_then_acked())
    assert result.code == ResponseCode.SUCCESS and [m.body for m in result.payload.messages] == [b"m1"]
    assert passes <= 2


FIELDS = ["consumerGroup", "topic", "queueId", "offset", "extraInfo", "invisibleTime", "maxMsgNums", "pollTime",
          "bornTime", "initMode", "order", "expType", "exp"]
VALUES = st.one_of(st.sampled_from(["CG", "T", "0", "1", "-1", "33", "", "true", "TAG", "*", "a > 1",
                                    "0 1 2 0 0 broker-a 0 0", "0 1 2 0 1 broker-a 0 0", "99999999999999999999"]),
                   st.text(max_size=12))


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.sampled_from([Code.POP_MESSAGE, Code.ACK_MESSAGE, Code.CHANGE_MESSAGE_INVISIBLETIME,
                        Code.BATCH_ACK_MESSAGE]),
       st.dictionaries(st.sampled_from(FIELDS), VALUES, max_size=8), st.binary(max_size=64))
def test_any_pop_request_gets_an_answer_and_a_refused_one_changes_nothing(broker: PopBroker, code: int,
                                                                          ext: dict[str, str], body: bytes) -> None:
    if not broker.processor.pop_state.index.entries:
        broker.send(b"kept")
        assert popped(broker.pop(invisible=600_000_000))
    index = broker.processor.pop_state.index
    before = (dict(index.entries), broker.state())
    answer = broker.call(code, ext, body)  # a bug would raise out of the processor
    if answer.code != ResponseCode.SUCCESS:
        assert (dict(index.entries), broker.state()) == before


def test_a_slave_refuses_pops_and_acks(tmp_path: Path) -> None:
    slave = PopBroker(tmp_path, broker_role="SLAVE")
    assert not slave.processor.role.writable
    assert slave.pop().code == ResponseCode.SERVICE_NOT_AVAILABLE
    m = {"queue_id": 0, "queue_offset": 0, "props": {"POP_CK": "0 1 2 0 0 broker-a 0 0"}}
    assert slave.ack(m).code == ResponseCode.SERVICE_NOT_AVAILABLE
    assert slave.change(m, 5).code == ResponseCode.SERVICE_NOT_AVAILABLE


def test_a_replica_has_what_its_master_holds_in_flight_and_revives_it_once_promoted(tmp_path: Path) -> None:
    """Issue 35: pop state survives a failover. The master's pops, acks and invisible-time changes
    are records of its replicated log; a replica that copied the log holds the same messages in
    flight (and keeps them across its own restart), and once promoted revives the un-acked ones."""
    master = PopBroker(tmp_path / "m")
    replica = PopBroker(tmp_path / "r", broker_role="SLAVE")

    def copy() -> None:
        t = master.store.read_raw(replica.store.size_bytes(), 1 << 20)
        if t.data:
            replica.store.append_raw(t.offset, t.data)
        replica.processor.context.metadata.apply_new()

    for i in range(4):
        master.send(f"m{i}".encode())
    msgs = popped(master.pop(queue_id=0))
    assert master.ack(msgs[0]).code == ResponseCode.SUCCESS
    assert master.change(msgs[1], 60_000).code == ResponseCode.SUCCESS
    copy()
    held = {k: (e.pop_time, e.invisible_time) for k, e in master.processor.pop_state.index.entries.items()}
    assert len(held) == 3
    assert {k: (e.pop_time, e.invisible_time) for k, e in replica.processor.pop_state.index.entries.items()} == held
    assert replica.offsets.query_offset("CG", "T", 0) == 4, "the pop offset came with the pops"
    assert replica.call(Code.POP_MESSAGE, {"consumerGroup": "CG", "topic": "T", "queueId": 0, "maxMsgNums": 1,
                                           "invisibleTime": INVISIBLE, "pollTime": 0, "bornTime": 0,
                                           "initMode": 0}).code != ResponseCode.SUCCESS, "a slave pops nothing"
    assert master.store.max_offset("T", 0) == replica.store.max_offset("T", 0) == 4
    replica.restart()
    assert set(replica.processor.pop_state.index.entries) == set(held), "kept across the replica's restart"

    replica.processor.context.guard.change_role(BrokerRole.ASYNC_MASTER, 1)  # the master is gone
    replica.clock.advance(master.clock() - replica.clock() + INVISIBLE)
    assert replica.revive() == 2, "m2 and m3 lapsed; m1's invisible time was changed to a minute"
    assert sorted(m["body"] for m in popped(replica.pop())) == [b"m2", b"m3"]
