"""Roles, pure: the SyncStateSet's joins and departures by the clock, SYNC_MASTER acknowledging a send
only once the set holds it (else FLUSH_SLAVE_TIMEOUT), a slave refusing sends and pointing
consumers back to a reachable master."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from namesrv.broker.config import BrokerConfig
from namesrv.broker.role import RoleGuard
from namesrv.common.clock import ManualClock
from namesrv.protocol.codes import BrokerRequestCode as Code
from namesrv.protocol.codes import ResponseCode
from namesrv.remoting.codec import encode_command
from namesrv.remoting.command import MQServerError, RemotingResponse, to_request
from namesrv.remoting.frame_decoder import FrameDecoder
from namesrv.remoting.wire_command import RemotingCommand
from namesrv.store.ha.sync_state import SyncStateSet
from namesrv.store.types import BrokerRole
from tests.support.broker import CLIENT, Broker

LIMIT = 15_000


def test_slave_joins_when_caught_up_and_leaves_after_the_limit() -> None:
    clock = ManualClock()
    s = SyncStateSet(0, clock, LIMIT)
    assert s.members == {0} and s.acked(10**9)  # the master alone holds everything it wrote
    assert not s.on_request(1, 0, 500)  # behind: not caught up
    assert s.members == {0}
    clock.advance(10)
    assert s.on_request(1, 500, 800)  # holds what the master had at its previous request: caught up
    assert s.members == {0, 1} and s.epoch == 1
    assert s.acked(500) and not s.acked(501)
    clock.advance(LIMIT - 10)  # caught up as of its previous request, 15 s ago exactly: still in
    assert s.shrink() == set()
    clock.advance(1)
    assert s.shrink() == {1} and s.members == {0} and s.acked(10**9)
    assert not s.on_request(1, 700, 900)  # still behind what it was sent last time
    assert s.on_request(1, 900, 900)  # caught up again: rejoins
    assert s.members == {0, 1} and s.epoch == 3


def test_a_slave_joins_only_holding_what_readers_were_served() -> None:
    """RocketMQ 5's expansion rule: caught up with what it was sent is not enough while readers were
    served further (the confirm offset): elected later, it would lack what they read."""
    clock = ManualClock()
    g = RoleGuard(BrokerConfig(broker_role=BrokerRole.SYNC_MASTER, ha_max_time_slave_not_catchup_ms=LIMIT), 0, clock)
    g.on_slave_request(1, 0, 0)  # nothing written yet: slave 1 joins
    g.on_slave_request(1, 200, 200)  # it holds all 200 bytes: readers may be served up to 200
    assert g.sync.members == {0, 1} and g.confirm_offset(200) == 200
    g.on_slave_request(2, 0, 100)  # slave 2 is sent the first 100 bytes
    g.on_slave_request(2, 100, 200)  # holds what it was sent (caught up by the clock), not what was read
    assert g.sync.members == {0, 1} and g.confirm_offset(200) == 200
    g.on_slave_request(2, 200, 200)
    assert g.sync.members == {0, 1, 2} and g.confirm_offset(200) == 200
    s = SyncStateSet(0, clock, LIMIT)  # the set alone: the rule is the `confirm_offset` it is given
    s.on_request(3, 0, 100)
    assert not s.on_request(3, 100, 200, confirm_offset=150)  # caught up with the 100 bytes it was sent
    assert s.on_request(3, 200, 300, confirm_offset=150) and s.members == {0, 3}


def test_stale_catch_up_does_not_rejoin() -> None:
    """A slave whose last caught-up moment is older than the limit does not come back on it."""
    clock = ManualClock()
    s = SyncStateSet(0, clock, LIMIT)
    s.on_request(1, 0, 100)
    clock.advance(LIMIT + 5)
    assert not s.on_request(1, 100, 200)  # caught up as of the previous request, 15 s ago
    assert s.members == {0}


def test_a_slave_ahead_of_its_master_acknowledges_nothing() -> None:
    """Issue 33, point 3: a slave asking from past the master's end holds bytes this master never
    wrote; it neither joins nor holds anything, and as a member it stops acknowledging until it
    asks again from inside the master's log."""
    clock = ManualClock()
    s = SyncStateSet(0, clock, LIMIT)
    assert not s.on_request(1, 900, 500)
    assert s.members == {0} and s.slave_acks() == {} and s.caught_up_ms == {}
    assert s.on_request(1, 500, 500)  # truncated to the master's end: caught up, joins
    assert s.acked(500)
    assert not s.on_request(1, 700, 600)  # ahead again (the master was replaced under it)
    assert not s.acked(1) and s.slave_acks() == {}  # counts for nothing: a send waits
    clock.advance(LIMIT + 1)
    assert s.shrink() == {1}


def run(coro_factory):  # type: ignore[no-untyped-def]
    return asyncio.run(coro_factory())


def test_sync_master_waits_for_the_set_then_times_out() -> None:
    clock = ManualClock()
    guard = RoleGuard(BrokerConfig(broker_role=BrokerRole.SYNC_MASTER, slave_timeout_ms=200), 0, clock)
    guard.on_slave_request(1, 0, 0)  # caught up at an empty log: in the set
    assert guard.sync.members == {0, 1}

    async def scenario() -> tuple[int, int, bool]:
        waiting = asyncio.ensure_future(guard.replicated(100))
        await asyncio.sleep(0)
        pending_before = not waiting.done()
        guard.on_slave_request(1, 100, 100)  # the slave now holds 100 bytes: the send is acknowledged
        ok = await waiting
        timed_out = await guard.replicated(200)  # nobody acknowledges 200
        return ok, timed_out, pending_before

    ok, timed_out, pending_before = run(scenario)
    assert pending_before and ok == ResponseCode.SUCCESS
    assert timed_out == ResponseCode.FLUSH_SLAVE_TIMEOUT and guard.timeouts == 1


def test_shrinking_set_releases_waiting_sends() -> None:
    clock = ManualClock()
    guard = RoleGuard(BrokerConfig(broker_role=BrokerRole.SYNC_MASTER, slave_timeout_ms=60_000), 0, clock)
    guard.on_slave_request(1, 0, 0)

    async def scenario() -> int:
        waiting = asyncio.ensure_future(guard.replicated(100))
        await asyncio.sleep(0)
        clock.advance(LIMIT + 1)
        assert guard.shrink() == {1}
        return await waiting

    assert run(scenario) == ResponseCode.SUCCESS


def test_async_master_does_not_wait_and_min_in_sync_replicas_refuses() -> None:
    clock = ManualClock()
    guard = RoleGuard(BrokerConfig(broker_role=BrokerRole.ASYNC_MASTER), 0, clock)
    guard.on_slave_request(1, 0, 0)
    assert run(lambda: guard.replicated(10**9)) == ResponseCode.SUCCESS
    strict = RoleGuard(BrokerConfig(broker_role=BrokerRole.SYNC_MASTER, min_in_sync_replicas=2), 0, clock)
    with pytest.raises(MQServerError) as e:
        strict.check_send()
    assert e.value.code == ResponseCode.SYSTEM_ERROR and "in-sync replicas not enough" in e.value.remark
    strict.on_slave_request(1, 0, 0)
    strict.check_send()


def test_slave_refuses_sends_and_pulls_without_slave_read() -> None:
    guard = RoleGuard(BrokerConfig(broker_role=BrokerRole.SLAVE), 1, ManualClock())
    with pytest.raises(MQServerError) as e:
        guard.check_send()
    assert e.value.code == ResponseCode.SERVICE_NOT_AVAILABLE
    with pytest.raises(MQServerError) as e:
        guard.check_pull()
    assert e.value.code == ResponseCode.SYSTEM_BUSY


def test_pull_advice() -> None:
    slave = RoleGuard(BrokerConfig(broker_role=BrokerRole.SLAVE, slave_read_enable=True), 1, ManualClock())
    slave.check_pull()
    assert slave.pull_advice(ResponseCode.PULL_NOT_FOUND, False, 0, 100) == (ResponseCode.PULL_NOT_FOUND, 0)
    slave.master_reachable = lambda: True  # master up: go back to it, at once when nothing was found
    assert slave.pull_advice(ResponseCode.PULL_NOT_FOUND, False, 0, 100) == (ResponseCode.PULL_RETRY_IMMEDIATELY, 0)
    assert slave.pull_advice(ResponseCode.SUCCESS, True, 0, 100) == (ResponseCode.SUCCESS, 0)
    master = RoleGuard(BrokerConfig(slave_read_enable=True), 0, ManualClock())
    assert master.pull_advice(ResponseCode.SUCCESS, True, 101, 100) == (ResponseCode.SUCCESS, 1)  # lagging
    assert master.pull_advice(ResponseCode.SUCCESS, True, 99, 100) == (ResponseCode.SUCCESS, 0)
    plain = RoleGuard(BrokerConfig(), 0, ManualClock())
    assert plain.pull_advice(ResponseCode.SUCCESS, True, 10**12, 100) == (ResponseCode.SUCCESS, 0)


def test_processor_sync_master_answers_flush_slave_timeout_with_the_stored_offsets(tmp_path: Path) -> None:
    broker = Broker(tmp_path, broker_role=BrokerRole.SYNC_MASTER, slave_timeout_ms=100)
    broker.processor.role.on_slave_request(1, 0, 0)  # a slave in the set that never acknowledges again
    reply = broker.send(b"x")
    assert reply.code == ResponseCode.FLUSH_SLAVE_TIMEOUT
    assert reply.ext_fields is not None and reply.ext_fields["queueOffset"] == "0"
    assert broker.store.max_offset("T", 0) == 1  # stored on the master all the same


def test_processor_sync_master_acknowledges_once_the_slave_holds_it(tmp_path: Path) -> None:
    broker = Broker(tmp_path, broker_role=BrokerRole.SYNC_MASTER, slave_timeout_ms=60_000)
    role = broker.processor.role
    role.on_slave_request(1, 0, 0)

    async def scenario() -> RemotingResponse:
        request = RemotingCommand(Code.SEND_MESSAGE, 7, 0, 1, 63, None,
                                  {"producerGroup": "g", "topic": "T", "defaultTopic": "TBW102",
                                   "defaultTopicQueueNums": "4", "queueId": "0", "sysFlag": "0",
                                   "bornTimestamp": "1", "flag": "0"}, b"hello")
        [decoded] = FrameDecoder().feed(encode_command(request))
        answer = broker.processor.process(to_request(decoded), CLIENT)
        assert not isinstance(answer, RemotingResponse)
        task = asyncio.ensure_future(answer)
        while broker.store.size_bytes() == 0:  # stored locally, waiting for the slave
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)
        assert not task.done()
        role.on_slave_request(1, broker.store.size_bytes(), broker.store.size_bytes())
        return await task

    assert asyncio.run(scenario()).code == ResponseCode.SUCCESS


def test_processor_slave_refuses_send(tmp_path: Path) -> None:
    broker = Broker(tmp_path, broker_role=BrokerRole.SLAVE)
    reply = broker.send(b"x")
    assert reply.code == ResponseCode.SERVICE_NOT_AVAILABLE
    assert broker.store.size_bytes() == 0
