"""The controller's state machine: brokerId assignment, elections, SyncStateSet changes, fencing."""

from __future__ import annotations

import pytest

from namesrv.common.clock import ManualClock
from namesrv.controller import elect_policy
from namesrv.controller.codes import ControllerResponseCode as Code
from namesrv.controller.config import ControllerConfig
from namesrv.controller.core import ControllerCore
from namesrv.controller.event_log import EventLog, MemoryKV
from namesrv.controller.heartbeat import BrokerLiveInfo
from tests.support.controller import BROKER, CLUSTER, addr, beat, join, three_replicas


def make_core(clock: ManualClock | None = None, **config: object) -> ControllerCore:
    return ControllerCore(ControllerConfig.model_validate(config), clock or ManualClock(),
                          EventLog(MemoryKV(), "test/controller"))








# ---------------------------------------------------------------------------- brokerId assignment
def test_broker_ids_are_assigned_from_one_and_a_restarted_replica_keeps_its_own() -> None:
    core = make_core()
    assert core.get_next_broker_id(CLUSTER, BROKER).header["nextBrokerId"] == 1
    assert join(core, "t1") == 1
    assert join(core, "t2") == 2
    # the same replica (same check code) applying again is granted and changes nothing
    again = core.apply_broker_id(CLUSTER, BROKER, 1, f"{addr(1)};t1")
    assert again.ok and again.events == []
    # another replica may not take an id that is someone else's
    stolen = core.apply_broker_id(CLUSTER, BROKER, 2, f"{addr(9)};other")
    assert stolen.code == Code.CONTROLLER_BROKER_ID_INVALID
    assert core.get_next_broker_id(CLUSTER, BROKER).header["nextBrokerId"] == 3


def test_first_apply_must_be_broker_id_one_and_bad_input_changes_nothing() -> None:
    core = make_core()
    assert core.apply_broker_id(CLUSTER, BROKER, 2, f"{addr(2)};x").code == Code.CONTROLLER_BROKER_ID_INVALID
    assert core.apply_broker_id(CLUSTER, BROKER, 0, f"{addr(0)};x").code == Code.CONTROLLER_INVALID_REQUEST
    assert core.apply_broker_id(CLUSTER, "", 1, f"{addr(1)};x").code == Code.CONTROLLER_INVALID_REQUEST
    assert core.apply_broker_id(CLUSTER, BROKER, 1, "").code == Code.CONTROLLER_INVALID_REQUEST
    assert core.manager.snapshot()["replicaInfoTable"] == {}
    assert core.event_log is not None and core.event_log.last_index == 0


def test_register_unknown_replica_is_refused_and_a_moved_replica_updates_its_address() -> None:
    core = make_core()
    assert core.register_broker(CLUSTER, BROKER, 1, addr(1)).code == Code.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED
    join(core)
    assert core.register_broker(CLUSTER, BROKER, 7, addr(7)).code == Code.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED
    moved = core.register_broker(CLUSTER, BROKER, 1, "10.0.0.5:10911")
    assert moved.ok and core.manager.replica_info[BROKER].address_of(1) == "10.0.0.5:10911"


def test_register_tells_a_replica_the_live_master_only() -> None:
    clock = ManualClock()
    core = make_core(clock)
    three_replicas(core)
    reg = core.register_broker(CLUSTER, BROKER, 2, addr(2))
    assert reg.header["masterBrokerId"] == 1 and reg.header["masterAddress"] == addr(1)
    assert reg.header["masterEpoch"] == 1 and reg.body == {"syncStateSet": [1, 2, 3], "syncStateSetEpoch": 2}
    clock.advance(10_001)  # nobody heartbeats: the master is not alive any more
    assert "masterBrokerId" not in core.register_broker(CLUSTER, BROKER, 2, addr(2)).header


# ---------------------------------------------------------------------------- election policy
def live(broker_id: int, epoch: int, offset: int, priority: int = 2**31 - 1) -> BrokerLiveInfo:
    return BrokerLiveInfo(CLUSTER, BROKER, addr(broker_id), broker_id, 0, 10_000, epoch, offset, -1, priority)


@pytest.mark.parametrize(
    ("infos", "expected"),
    [
        ({2: live(2, 3, 10), 3: live(3, 4, 5)}, 3),  # higher epoch wins over a higher offset
        ({2: live(2, 4, 10), 3: live(3, 4, 50)}, 3),  # same epoch: higher max offset
        ({2: live(2, 4, 50, 5), 3: live(3, 4, 50, 1)}, 3),  # same epoch and offset: smaller priority number
        ({2: live(2, 4, 50, 1), 3: live(3, 4, 50, 1)}, 2),  # full tie: smallest brokerId
    ],
)
def test_policy_orders_by_epoch_then_offset_then_priority(infos: dict[int, BrokerLiveInfo], expected: int) -> None:
    chosen = elect_policy.elect({1, 2, 3}, None, 1, None, lambda b: b in infos, infos.get)
    assert chosen == expected


def test_policy_keeps_a_live_old_master_and_honours_a_designated_candidate_only() -> None:
    infos = {1: live(1, 1, 0), 2: live(2, 1, 99)}
    assert elect_policy.elect({1, 2}, None, 1, None, lambda b: b in infos, infos.get) == 1
    assert elect_policy.elect({1, 2}, None, 1, 2, lambda b: b in infos, infos.get) == 2
    assert elect_policy.elect({1, 2}, None, 1, 3, lambda b: b in infos, infos.get) is None  # 3 is no candidate


def test_unclean_election_only_when_enabled() -> None:
    infos = {3: live(3, 1, 0)}  # only a replica outside the SyncStateSet is alive
    assert elect_policy.elect({1, 2}, None, 1, None, lambda b: b in infos, infos.get) is None
    assert elect_policy.elect({1, 2}, {1, 2, 3}, 1, None, lambda b: b in infos, infos.get) == 3


# ---------------------------------------------------------------------------- elections through the state machine
def test_first_master_is_the_first_broker_to_ask_and_a_live_master_stays() -> None:
    core = make_core()
    join(core), join(core)
    beat(core, 1), beat(core, 2)
    first = core.elect_master(BROKER, 2)
    assert first.ok and first.header["masterBrokerId"] == 2
    assert (first.header["masterEpoch"], first.header["syncStateSetEpoch"]) == (1, 1)
    assert first.body["syncStateSet"] == [2]
    again = core.elect_master(BROKER, 1)
    assert again.code == Code.CONTROLLER_MASTER_STILL_EXIST and again.header["masterBrokerId"] == 2
    assert core.manager.sync_state_info[BROKER].master_epoch == 1


def test_dead_master_is_replaced_by_the_best_live_sync_state_set_member_and_epochs_bump() -> None:
    clock = ManualClock()
    core = make_core(clock)
    three_replicas(core)
    clock.advance(6_000)
    beat(core, 2, epoch=1, max_offset=100)
    beat(core, 3, epoch=1, max_offset=200)
    clock.advance(5_000)  # master 1 silent for 11 s: dead; 2 and 3 heard 5 s ago: alive
    assert core.broker_sets_to_reelect() == [BROKER]
    result = core.elect_master(BROKER)
    assert result.ok and result.header["masterBrokerId"] == 3 and result.header["masterAddress"] == addr(3)
    sync = core.manager.sync_state_info[BROKER]
    assert (sync.master_broker_id, sync.master_epoch, sync.sync_state_set, sync.sync_state_set_epoch) == (3, 2, {3}, 3)
    assert core.broker_sets_to_reelect() == []


def test_no_live_member_records_no_master_once_and_elects_when_a_member_returns() -> None:
    clock = ManualClock()
    core = make_core(clock)
    three_replicas(core)
    clock.advance(10_001)  # every replica silent
    assert core.broker_sets_to_reelect() == []  # nobody alive: nothing to elect
    join(core)  # broker 4, outside the SyncStateSet
    beat(core, 4)
    assert core.broker_sets_to_reelect() == [BROKER]  # a replica is alive: try (RocketMQ's scan)
    failed = core.elect_master(BROKER)
    assert failed.code == Code.CONTROLLER_MASTER_NOT_AVAILABLE
    sync = core.manager.sync_state_info[BROKER]
    assert sync.master_broker_id is None and sync.master_epoch == 2 and sync.sync_state_set == {1, 2, 3}
    assert core.elect_master(BROKER).events == []  # "no master" is recorded only once
    assert sync.master_epoch == 2
    assert core.broker_sets_to_reelect() == []  # no master and no live member: unclean is off
    beat(core, 2)
    assert core.broker_sets_to_reelect() == [BROKER]
    back = core.elect_master(BROKER)
    assert back.ok and back.header["masterBrokerId"] == 2 and back.header["masterEpoch"] == 3


def test_unclean_master_elected_from_outside_the_set_when_enabled() -> None:
    clock = ManualClock()
    core = make_core(clock, enable_elect_unclean_master=True)
    three_replicas(core)
    join(core)
    clock.advance(10_001)
    beat(core, 4)
    assert core.broker_sets_to_reelect() == [BROKER]
    result = core.elect_master(BROKER)
    assert result.ok and result.header["masterBrokerId"] == 4


def test_manual_election_of_a_given_broker() -> None:
    core = make_core()
    three_replicas(core)
    manual = core.elect_master(BROKER, 3, designate_elect=True)
    assert manual.ok and manual.header["masterBrokerId"] == 3 and manual.header["masterEpoch"] == 2
    assert core.elect_master(BROKER, 1, designate_elect=True).code == Code.CONTROLLER_ELECT_MASTER_FAILED  # not in set
    assert core.elect_master(BROKER, 9, designate_elect=True).code == Code.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED
    assert core.elect_master("nope", 1).code == Code.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED
    assert core.manager.sync_state_info[BROKER].master_broker_id == 3


# ---------------------------------------------------------------------------- SyncStateSet changes and fencing
def test_master_shrinks_and_grows_its_sync_state_set() -> None:
    core = make_core()
    three_replicas(core)
    shrunk = core.alter_sync_state_set(BROKER, 1, 1, {1, 2}, 2)
    assert shrunk.ok and shrunk.header["newSyncStateSetEpoch"] == 3
    assert shrunk.body == {"syncStateSet": [1, 2], "syncStateSetEpoch": 3}
    grown = core.alter_sync_state_set(BROKER, 1, 1, {1, 2, 3}, 3)
    assert grown.ok and core.manager.sync_state_info[BROKER].sync_state_set == {1, 2, 3}


@pytest.mark.parametrize(
    ("master", "master_epoch", "new_set", "set_epoch", "code"),
    [
        (2, 1, {1, 2}, 2, Code.CONTROLLER_INVALID_MASTER),  # not the master
        (1, 0, {1, 2}, 2, Code.CONTROLLER_FENCED_MASTER_EPOCH),  # stale master epoch
        (1, 1, {1, 2}, 1, Code.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH),  # stale SyncStateSet epoch
        (1, 1, {1, 2, 9}, 2, Code.CONTROLLER_INVALID_REPLICAS),  # 9 is no replica
        (1, 1, {2, 3}, 2, Code.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED),  # drops the master
        (1, 1, {1, 2, 3}, 2, Code.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED),  # no change
    ],
)
def test_alter_sync_state_set_refusals_change_nothing(master: int, master_epoch: int, new_set: set[int],
                                                       set_epoch: int, code: int) -> None:
    core = make_core()
    three_replicas(core)
    before = core.manager.snapshot()
    result = core.alter_sync_state_set(BROKER, master, master_epoch, new_set, set_epoch)
    assert result.code == code and not result.ok
    assert core.manager.snapshot() == before


def test_deposed_master_is_fenced_and_a_dead_replica_cannot_join() -> None:
    clock = ManualClock()
    core = make_core(clock)
    three_replicas(core)
    clock.advance(10_001)
    beat(core, 2, max_offset=10)
    assert core.elect_master(BROKER).header["masterBrokerId"] == 2
    # the old master comes back believing it is master in epoch 1
    beat(core, 1)
    fenced = core.alter_sync_state_set(BROKER, 1, 1, {1, 2}, 3)
    assert fenced.code == Code.CONTROLLER_INVALID_MASTER
    # the new master may add only live replicas (3 is silent)
    assert core.alter_sync_state_set(BROKER, 2, 2, {2, 3}, 3).code == Code.CONTROLLER_BROKER_NOT_ALIVE
    assert core.alter_sync_state_set(BROKER, 2, 2, {1, 2}, 3).ok
    # its heartbeat tells the old master who the master is now
    hb = core.heartbeat(CLUSTER, BROKER, addr(1), 1)
    assert (hb.header["masterBrokerId"], hb.header["masterEpoch"]) == (2, 2)


def test_sync_state_data_lists_members_in_and_out_of_sync_with_liveness() -> None:
    clock = ManualClock()
    core = make_core(clock)
    three_replicas(core)
    core.alter_sync_state_set(BROKER, 1, 1, {1, 2}, 2)
    core.report_broker_dead(BROKER, 3)
    table = core.get_sync_state_data().body["replicasInfoTable"][BROKER]
    assert table["masterBrokerId"] == 1 and table["masterEpoch"] == 1 and table["syncStateSetEpoch"] == 3
    assert [(r["brokerId"], r["alive"]) for r in table["inSyncReplicas"]] == [(1, True), (2, True)]
    assert [(r["brokerId"], r["alive"]) for r in table["notInSyncReplicas"]] == [(3, False)]
    assert core.get_replica_info("nope").code == Code.CONTROLLER_BROKER_METADATA_NOT_EXIST
