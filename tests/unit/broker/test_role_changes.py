"""Controller mode's pure parts: a RoleGuard whose role changes at runtime (role log, the fence on
a deposed master's waiting sends, a fresh SyncStateSet per term, a shrink that waits for the
controller) and the broker metadata file."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from namesrv.broker.config import BrokerConfig
from namesrv.broker.metadata import BrokerMetadata, BrokerMetadataError, load_metadata, save_metadata
from namesrv.broker.role import RoleGuard
from namesrv.common.clock import ManualClock
from namesrv.protocol.codes import ResponseCode
from namesrv.remoting.command import MQServerError
from namesrv.store.types import BrokerRole


def guard(clock: ManualClock, role: BrokerRole = BrokerRole.SLAVE) -> RoleGuard:
    g = RoleGuard(BrokerConfig(broker_role=role, slave_timeout_ms=60_000, ha_max_time_slave_not_catchup_ms=1_000),
                  2, clock)
    g.controlled = True
    return g


def test_role_changes_are_logged_with_their_epoch_and_time() -> None:
    clock = ManualClock()
    g = guard(clock)
    start = clock()
    with pytest.raises(MQServerError) as refused:
        g.check_send()
    assert refused.value.code == ResponseCode.SERVICE_NOT_AVAILABLE
    clock.advance(100)
    g.change_role(BrokerRole.SYNC_MASTER, 3, broker_id=2)
    g.check_send()  # a master now
    clock.advance(50)
    g.change_role(BrokerRole.SLAVE, 4)
    assert g.role_log == [{"atMs": start, "role": "SLAVE", "epoch": 0},
                          {"atMs": start + 100, "role": "SYNC_MASTER", "epoch": 3},
                          {"atMs": start + 150, "role": "SLAVE", "epoch": 4}]
    assert g.master_epoch == 4 and not g.writable


def test_a_deposed_master_answers_its_waiting_sends_as_not_acknowledged() -> None:
    clock = ManualClock()
    g = guard(clock, BrokerRole.SYNC_MASTER)
    g.change_role(BrokerRole.SYNC_MASTER, 1, broker_id=2)
    g.on_slave_request(3, 0, 0)  # a slave caught up joins: sends now wait for it
    assert g.sync.members == {2, 3}

    async def scenario() -> tuple[int, int]:
        waiting = asyncio.ensure_future(g.replicated(100))
        await asyncio.sleep(0)
        assert not waiting.done()
        g.change_role(BrokerRole.SLAVE, 2)  # deposed: the fence answers it at once
        first = await asyncio.wait_for(waiting, 1)
        return first, await g.replicated(200)  # stored after the fence: not acknowledged either

    assert scenario_result(scenario()) == (ResponseCode.SERVICE_NOT_AVAILABLE, ResponseCode.SERVICE_NOT_AVAILABLE)
    assert g.fenced_sends == 2


def scenario_result(coro: object) -> object:
    return asyncio.run(coro)  # type: ignore[arg-type]


def test_controlled_shrink_waits_for_the_controller_and_a_new_term_starts_alone() -> None:
    clock = ManualClock()
    g = guard(clock, BrokerRole.SYNC_MASTER)
    g.change_role(BrokerRole.SYNC_MASTER, 1, broker_id=2)
    g.on_slave_request(3, 0, 0)
    clock.advance(2_000)
    assert g.sync.stale() == {3}
    assert g.shrink() == set() and g.sync.members == {2, 3}  # not before the controller agreed
    g.remove_members({3})
    assert g.sync.members == {2}
    g.on_slave_request(3, 0, 0)
    g.change_role(BrokerRole.SLAVE, 2)
    g.change_role(BrokerRole.SYNC_MASTER, 3)
    assert g.sync.members == {2} and g.sync.acks == {}  # a new term: its own SyncStateSet


def test_broker_metadata_is_kept_durably_and_refused_for_another_set(tmp_path: Path) -> None:
    path = tmp_path / "config" / "brokerMetadata.json"
    assert load_metadata(path, "C", "broker-a") is None
    meta = BrokerMetadata("C", "broker-a", 2, "broker-a-1;1700000000000")
    save_metadata(path, meta)
    assert load_metadata(path, "C", "broker-a") == meta
    with pytest.raises(BrokerMetadataError, match="belongs to C/broker-a"):
        load_metadata(path, "C", "broker-b")
    path.write_text("{not json")
    with pytest.raises(BrokerMetadataError, match="unreadable"):
        load_metadata(path, "C", "broker-a")


def test_a_dead_slave_leaves_at_once_and_rejoins_once_caught_up() -> None:
    clock = ManualClock()
    uncontrolled = RoleGuard(BrokerConfig(broker_role=BrokerRole.SYNC_MASTER, ha_max_time_slave_not_catchup_ms=60_000),
                             0, clock)
    uncontrolled.on_slave_request(1, 0, 0)
    assert uncontrolled.sync.members == {0, 1} and not uncontrolled.sync.acked(10)
    uncontrolled.slave_gone(1)  # its actor died: no waiting out the minute
    assert uncontrolled.sync.members == {0} and uncontrolled.sync.acked(10)
    uncontrolled.on_slave_request(1, 10, 10)  # restarted and caught up: back in
    assert uncontrolled.sync.members == {0, 1}

    controlled = guard(clock, BrokerRole.SYNC_MASTER)
    controlled.change_role(BrokerRole.SYNC_MASTER, 1, broker_id=2)
    controlled.on_slave_request(3, 0, 0)
    controlled.slave_gone(3)
    assert controlled.sync.members == {2, 3} and controlled.sync.stale() == {3}  # until the controller agrees
