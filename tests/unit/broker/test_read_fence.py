"""Reads never pass what the SyncStateSet holds (issue 33, point 1): on a SYNC_MASTER, and on any
master in controller mode, a message is shown to readers (held pulls, pulls, GET_MAX_OFFSET, the
index, consume stats) only once every member holds it; an ASYNC_MASTER keeps RocketMQ 4's promise.
The slave's acknowledgement is made by hand, so the window between the master's write and its
slave's copy is held open as long as the test needs: no timing luck."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

import pytest

from namesrv.broker.config import BrokerConfig
from namesrv.protocol.codes import BrokerRequestCode as Code
from namesrv.protocol.codes import ResponseCode
from namesrv.protocol.message.types import MessageInner
from namesrv.remoting.command import MQServerError, RemotingResponse, to_request
from namesrv.remoting.wire_command import RemotingCommand
from namesrv.store.queue.consume_queue import CQ_UNIT, LOST
from namesrv.store.types import BrokerRole
from tests.support.broker import CLIENT, WIRE, Admin, Broker, decode_messages

SLAVE = 1
ANSWER_BOUND_S = 30


def sync_master(tmp_path: Path, **config: Any) -> Broker:
    """A SYNC_MASTER whose slave is in its SyncStateSet, holding nothing yet."""
    broker = Broker(tmp_path, broker_role=BrokerRole.SYNC_MASTER, slave_timeout_ms=60_000, **config)
    broker.processor.role.on_slave_request(SLAVE, 0, 0)
    assert broker.processor.role.sync.members == {0, SLAVE}
    return broker


def request(broker: Broker, code: int, ext: dict[str, Any]) -> Awaitable[RemotingCommand] | RemotingCommand:
    cmd = RemotingCommand(code, 1, 0, ext_fields={k: str(v) for k, v in ext.items()})
    answer = broker.processor.process(to_request(cmd), CLIENT)
    if isinstance(answer, RemotingResponse):
        return WIRE.encode(cmd, answer)

    async def on_the_wire() -> RemotingCommand:
        return WIRE.encode(cmd, await answer)
    return on_the_wire()


async def answered(broker: Broker, code: int, ext: dict[str, Any]) -> RemotingCommand:
    answer = request(broker, code, ext)
    return answer if isinstance(answer, RemotingCommand) else await answer


def pull_ext(offset: int, held: bool) -> dict[str, Any]:
    return {"consumerGroup": "CG", "topic": "T", "queueId": 0, "queueOffset": offset, "maxMsgNums": 32,
            "sysFlag": 2 if held else 0, "commitOffset": 0, "suspendTimeoutMillis": 120_000 if held else 0,
            "subVersion": 0}


async def max_offset(broker: Broker) -> int:
    answer = await answered(broker, Code.GET_MAX_OFFSET, {"topic": "T", "queueId": 0})
    return int((answer.ext_fields or {})["offset"])


async def written(broker: Broker, count: int) -> None:
    """Until the store wrote `count` messages of T/0 (the writer's thread) and their sends went on
    past the store (to the fence and the wait for the replicas), however long it takes."""
    while broker.store.max_offset("T", 0) < count or broker.processor.context.sends_waiting:
        await asyncio.sleep(0.001)


def test_a_held_pull_gets_a_message_only_once_the_slave_holds_it(tmp_path: Path) -> None:
    broker = sync_master(tmp_path)
    role = broker.processor.role

    async def scenario() -> None:
        pull = asyncio.ensure_future(answered(broker, Code.PULL_MESSAGE, pull_ext(0, held=True)))
        while broker.processor.hold.held == 0:
            await asyncio.sleep(0)
        send = asyncio.ensure_future(broker.processor.send([MessageInner("T", 0, b"first")], "TBW102", 4))
        await written(broker, 1)
        end = broker.store.size_bytes()
        for _ in range(100):
            await asyncio.sleep(0)
        # written on the master, held by nobody else: not readable, not acknowledged
        assert not pull.done() and not send.done()
        assert broker.processor.context.fence.waiting == 1
        assert await max_offset(broker) == 0
        plain = await answered(broker, Code.PULL_MESSAGE, pull_ext(0, held=False))
        assert plain.code == ResponseCode.PULL_NOT_FOUND and (plain.ext_fields or {})["maxOffset"] == "0"

        role.on_slave_request(SLAVE, end, end)  # the slave asks from the end: it holds the message
        answer = await asyncio.wait_for(pull, ANSWER_BOUND_S)
        assert answer.code == ResponseCode.SUCCESS
        assert [m["body"] for m in decode_messages(answer.body or b"")] == [b"first"]
        assert (await asyncio.wait_for(send, ANSWER_BOUND_S)).code == ResponseCode.SUCCESS
        assert await max_offset(broker) == 1 and broker.processor.context.fence.waiting == 0

    asyncio.run(scenario())


def test_a_pull_stops_at_the_last_message_every_member_holds(tmp_path: Path) -> None:
    broker = sync_master(tmp_path)
    role = broker.processor.role

    async def scenario() -> None:
        sends = [asyncio.ensure_future(broker.processor.send([MessageInner("T", 0, b"one")], "TBW102", 4))]
        await written(broker, 1)
        after_first = broker.store.size_bytes()
        sends.append(asyncio.ensure_future(broker.processor.send([MessageInner("T", 0, b"two")], "TBW102", 4)))
        await written(broker, 2)
        role.on_slave_request(SLAVE, after_first, broker.store.size_bytes())  # the slave holds the first only
        answer = await answered(broker, Code.PULL_MESSAGE, pull_ext(0, held=False))
        assert [m["body"] for m in decode_messages(answer.body or b"")] == [b"one"]
        assert (answer.ext_fields or {})["maxOffset"] == "1" and await max_offset(broker) == 1
        assert (await asyncio.wait_for(sends[0], ANSWER_BOUND_S)).code == ResponseCode.SUCCESS
        assert not sends[1].done()
        end = broker.store.size_bytes()
        role.on_slave_request(SLAVE, end, end)
        assert (await asyncio.wait_for(sends[1], ANSWER_BOUND_S)).code == ResponseCode.SUCCESS
        assert await max_offset(broker) == 2

    asyncio.run(scenario())


def test_the_index_shows_a_message_by_key_only_once_it_is_held_by_every_member(tmp_path: Path) -> None:
    broker = sync_master(tmp_path)
    admin = Admin(broker, BrokerConfig())

    async def written_not_replicated() -> None:
        send = asyncio.ensure_future(broker.processor.send([MessageInner("T", 0, b"keyed", {"KEYS": "K1"})],
                                                           "TBW102", 4))
        await written(broker, 1)
        assert not send.done()  # it waits for the slave: left unanswered (cancelled with the loop)

    def by_key() -> RemotingCommand:
        return admin.call(Code.QUERY_MESSAGE, topic="T", key="K1", maxNum="32", beginTimestamp="0",
                          endTimestamp=str(2**62))

    asyncio.run(written_not_replicated())
    assert by_key().code == ResponseCode.QUERY_NOT_FOUND
    end = broker.store.size_bytes()
    broker.processor.role.on_slave_request(SLAVE, end, end)
    found = by_key()
    assert found.code == ResponseCode.SUCCESS and [m["body"] for m in decode_messages(found.body or b"")] == [b"keyed"]


def test_a_message_is_viewed_by_its_id_only_once_it_is_held_by_every_member(tmp_path: Path) -> None:
    """VIEW_MESSAGE_BY_ID (mqadmin queryMsgById, the console's message view) reads one record at
    an offset: the same fence as a pull and the index, or a message a failover may take back
    would be shown."""
    broker = sync_master(tmp_path)
    admin = Admin(broker, BrokerConfig())

    async def written_not_replicated() -> int:
        send = asyncio.ensure_future(broker.processor.send([MessageInner("T", 0, b"by id")], "TBW102", 4))
        await written(broker, 1)
        assert not send.done()
        [stored] = broker.store.get_message("T", 0, 0)
        return stored.commit_log_offset

    offset = asyncio.run(written_not_replicated())
    hidden = admin.call(Code.VIEW_MESSAGE_BY_ID, offset=str(offset))
    assert hidden.code == ResponseCode.SYSTEM_ERROR and "can not find message" in (hidden.remark or "")
    end = broker.store.size_bytes()
    broker.processor.role.on_slave_request(SLAVE, end, end)
    shown = admin.call(Code.VIEW_MESSAGE_BY_ID, offset=str(offset))
    assert shown.code == ResponseCode.SUCCESS and [m["body"] for m in decode_messages(shown.body or b"")] == [b"by id"]


def test_a_slave_leaving_the_set_makes_what_the_master_holds_readable(tmp_path: Path) -> None:
    """A SyncStateSet of the master alone confirms everything it holds (RocketMQ: the confirm
    offset is computed over the set, whatever its size)."""
    broker = sync_master(tmp_path, ha_max_time_slave_not_catchup_ms=1_000)
    role = broker.processor.role

    async def scenario() -> None:
        pull = asyncio.ensure_future(answered(broker, Code.PULL_MESSAGE, pull_ext(0, held=True)))
        while broker.processor.hold.held == 0:
            await asyncio.sleep(0)
        send = asyncio.ensure_future(broker.processor.send([MessageInner("T", 0, b"alone")], "TBW102", 4))
        await written(broker, 1)
        assert await max_offset(broker) == 0
        broker.clock.advance(2_000)
        assert role.shrink() == {SLAVE}
        answer = await asyncio.wait_for(pull, ANSWER_BOUND_S)
        assert [m["body"] for m in decode_messages(answer.body or b"")] == [b"alone"]
        await asyncio.wait_for(send, ANSWER_BOUND_S)

    asyncio.run(scenario())


def test_a_deposed_master_releases_what_it_held_back(tmp_path: Path) -> None:
    broker = sync_master(tmp_path)
    role = broker.processor.role

    async def scenario() -> None:
        send = asyncio.ensure_future(broker.processor.send([MessageInner("T", 0, b"cut")], "TBW102", 4))
        await written(broker, 1)
        assert broker.processor.context.fence.waiting == 1
        role.change_role(BrokerRole.SLAVE, 2)
        assert broker.processor.context.fence.waiting == 0
        with pytest.raises(MQServerError) as refused:  # and its send is not acknowledged (the fence)
            await asyncio.wait_for(send, ANSWER_BOUND_S)
        assert refused.value.code == ResponseCode.SERVICE_NOT_AVAILABLE

    asyncio.run(scenario())


def test_an_async_master_shows_what_it_wrote_at_once(tmp_path: Path) -> None:
    """Outside controller mode an ASYNC_MASTER keeps RocketMQ 4's weaker promise (docs/ha.md)."""
    broker = Broker(tmp_path, broker_role=BrokerRole.ASYNC_MASTER)
    broker.processor.role.on_slave_request(SLAVE, 0, 0)

    async def scenario() -> None:
        await broker.processor.send([MessageInner("T", 0, b"fast")], "TBW102", 4)
        assert await max_offset(broker) == 1

    asyncio.run(scenario())


def test_a_controlled_async_master_gates_reads_as_a_sync_master(tmp_path: Path) -> None:
    broker = Broker(tmp_path, broker_role=BrokerRole.ASYNC_MASTER)
    role = broker.processor.role
    role.controlled = True
    role.on_slave_request(SLAVE, 0, 0)

    async def scenario() -> None:
        await broker.processor.send([MessageInner("T", 0, b"acked by the master")], "TBW102", 4)
        assert await max_offset(broker) == 0  # acknowledged (async), not readable before the slave holds it
        end = broker.store.size_bytes()
        role.on_slave_request(SLAVE, end, end)
        assert await max_offset(broker) == 1

    asyncio.run(scenario())


def test_offset_within_scans_back_past_lost_entries_and_chunks(tmp_path: Path) -> None:
    """The consume queue's bound (the read fence's and a replica truncation's): entries lost to a
    corrupt stretch never count as inside, and a long unconfirmed tail is read a chunk at a time."""
    broker = Broker(tmp_path)
    for i in range(40):
        broker.store.append(MessageInner("T", 0, b"m%d" % i))
    cq = broker.store.consume_queues.get("T", 0)
    assert cq is not None
    ends = [pos + size for pos, size, _ in cq.entries(0, 40)]
    assert cq.offset_within(broker.store.size_bytes()) == 40
    assert cq.offset_within(ends[9], chunk=4) == 10
    assert cq.offset_within(ends[9] - 1, chunk=4) == 9
    assert cq.offset_within(0, chunk=3) == 0
    cq.files.write(40 * CQ_UNIT.size, LOST * 2)  # two entries lost past the end
    cq.max_offset = 42
    assert cq.offset_within(broker.store.size_bytes(), chunk=4) == 40


def test_what_was_readable_stays_readable_when_a_members_ack_stops_counting(tmp_path: Path) -> None:
    """A member found ahead of its master (issue 33, point 3) acknowledges nothing from then on;
    what every member held before stays readable (the confirm offset never moves back in a term)."""
    broker = sync_master(tmp_path)
    role = broker.processor.role

    async def scenario() -> None:
        send = asyncio.ensure_future(broker.processor.send([MessageInner("T", 0, b"held")], "TBW102", 4))
        await written(broker, 1)
        end = broker.store.size_bytes()
        role.on_slave_request(SLAVE, end, end)
        await asyncio.wait_for(send, ANSWER_BOUND_S)
        role.on_slave_request(SLAVE, end + 100, end)  # ahead: its acknowledgement no longer counts
        assert role.sync.slave_acks() == {}
        assert await max_offset(broker) == 1

    asyncio.run(scenario())


def test_a_controlled_slave_serves_only_what_its_master_said_its_set_holds(tmp_path: Path) -> None:
    """RocketMQ 5's slave gate: a slave in controller mode shows readers its log up to the confirm
    offset its master last told it (0 after its start), never a tail the next master may lack (an
    old master back as a slave before its truncation). A held pull waits for the master's word; a
    truncation lowers what was told."""
    master = Broker(tmp_path / "m", broker_role=BrokerRole.ASYNC_MASTER)

    async def scenario() -> None:
        for body in (b"one", b"two"):
            await master.processor.send([MessageInner("T", 0, body)], "TBW102", 4)
        first_end = master.store.get_message("T", 0, 1, 1)[0].commit_log_offset
        slave = Broker(tmp_path / "s", broker_role=BrokerRole.SLAVE, slave_read_enable=True)
        role = slave.processor.role
        role.controlled = True
        slave.store.append_raw(0, master.store.read_raw(0, master.store.size_bytes()).data, True)
        slave.processor.context.fence.written(slave.store.size_bytes(), "T", 0)  # as the HA client does
        assert slave.store.max_offset("T", 0) == 2 and await max_offset(slave) == 0
        held = asyncio.ensure_future(answered(slave, Code.PULL_MESSAGE, pull_ext(0, held=True)))
        await asyncio.sleep(0)
        assert not held.done(), held.result()
        role.master_confirmed(first_end)  # the set holds the first message only
        got = await asyncio.wait_for(held, ANSWER_BOUND_S)
        assert [m["body"] for m in decode_messages(got.body)] == [b"one"]
        assert await max_offset(slave) == 1
        role.master_confirmed(slave.store.size_bytes())
        assert await max_offset(slave) == 2
        role.log_cut(first_end)
        assert role.confirm_offset(slave.store.size_bytes()) == first_end

    asyncio.run(scenario())
