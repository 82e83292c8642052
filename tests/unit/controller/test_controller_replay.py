"""The controller's durability and liveness: event replay, snapshots, a stale writer fenced,
persistence failures never acknowledged, heartbeat expiry and the restart grace, with a manual clock."""

from __future__ import annotations

import pytest

from namesrv.common.clock import ManualClock
from namesrv.controller.codes import ControllerResponseCode as Code
from namesrv.controller.event_log import EventLog, LogCorruptedError, MemoryKV, StaleWriterError
from namesrv.controller.events import (
    AlterSyncStateSetEvent,
    ApplyBrokerIdEvent,
    CleanBrokerDataEvent,
    ElectMasterEvent,
    EventDecodeError,
    UpdateBrokerAddressEvent,
    decode_event,
    encode_event,
)
from namesrv.controller.heartbeat import BrokerIdentity
from tests.support.controller import BROKER, CLUSTER, PREFIX, FailingKV, addr, beat, core_on, join, three_replicas


def test_every_event_type_round_trips_and_garbage_is_refused() -> None:
    events = [
        ApplyBrokerIdEvent(CLUSTER, BROKER, addr(1), 1, f"{addr(1)};7"),
        ElectMasterEvent(BROKER, 1), ElectMasterEvent(BROKER, None),
        AlterSyncStateSetEvent(BROKER, (1, 2)),
        UpdateBrokerAddressEvent(CLUSTER, BROKER, addr(5), 1),
        CleanBrokerDataEvent(BROKER, (2,)),
    ]
    for event in events:
        assert decode_event(encode_event(event)) == event
    for bad in (b"not json", b"[]", b'{"type":"NOPE"}', b'{"type":"ELECT_MASTER_EVENT","x":1}'):
        with pytest.raises(EventDecodeError):
            decode_event(bad)


def test_a_restarted_controller_replays_its_events_to_the_same_state() -> None:
    kv, clock = MemoryKV(), ManualClock()
    core = core_on(kv, clock)
    three_replicas(core)
    clock.advance(10_001)
    beat(core, 3, max_offset=50)
    assert core.elect_master(BROKER).header["masterBrokerId"] == 3
    state = core.manager.snapshot()
    again = core_on(kv)
    assert again.manager.snapshot() == state
    assert again.applied_events == core.applied_events == 6  # 3 applies, 2 elections, 1 alter
    # and it continues the log where the first left off
    beat(again, 3)
    beat(again, 1)
    assert again.alter_sync_state_set(BROKER, 3, 2, {1, 3}, 3).ok
    assert core_on(kv).manager.snapshot() == again.manager.snapshot()


def test_snapshots_compact_the_log_and_replay_starts_after_them() -> None:
    kv = MemoryKV()
    core = core_on(kv, snapshot_every_events=2)
    join(core), join(core)
    assert core.maybe_compact()
    assert core.event_log is not None and core.event_log.snapshot_index == 2
    assert kv.keys(f"{PREFIX}/event/") == []
    beat(core, 1), beat(core, 2)
    assert core.elect_master(BROKER, 1).ok  # event 3, after the snapshot
    restored = core_on(kv)
    assert restored.manager.snapshot() == core.manager.snapshot()
    assert restored.event_log is not None and restored.event_log.last_index == 3


def test_crash_between_snapshot_and_delete_replays_nothing_twice() -> None:
    kv = MemoryKV()
    core = core_on(kv, snapshot_every_events=1)
    join(core)
    events_before = {k: kv.data[k] for k in kv.keys(f"{PREFIX}/event/")}
    core.maybe_compact()
    kv.data.update(events_before)  # as if the deletes never happened
    restored = core_on(kv)
    assert restored.manager.replica_info[BROKER].broker_id_table() == {1: addr(1)}
    assert restored.event_log is not None and restored.event_log.last_index == 1


def test_a_stale_controller_cannot_write_and_its_election_is_never_acknowledged() -> None:
    kv, clock = MemoryKV(), ManualClock()
    old = core_on(kv, clock)
    three_replicas(old)
    new = core_on(kv, clock)  # Ray started another copy while the old one still runs
    clock.advance(10_001)
    beat(new, 2, max_offset=10)  # the new one hears broker 2 ...
    beat(old, 3, max_offset=10)  # ... the stale one broker 3
    assert new.elect_master(BROKER).header["masterBrokerId"] == 2
    stale = old.elect_master(BROKER)
    assert stale.code == Code.SYSTEM_ERROR and "another controller" in (stale.remark or "")
    assert old.manager.sync_state_info[BROKER].master_epoch == 1  # nothing applied
    restored = core_on(kv).manager.sync_state_info[BROKER]
    assert (restored.master_epoch, restored.master_broker_id) == (2, 2)


def test_a_stale_controller_making_the_very_same_change_forks_nothing() -> None:
    kv, clock = MemoryKV(), ManualClock()
    old = core_on(kv, clock)
    three_replicas(old)
    new = core_on(kv, clock)
    clock.advance(10_001)
    for c in (old, new):
        beat(c, 2, max_offset=10)
    assert new.elect_master(BROKER).header["masterEpoch"] == 2
    same = old.elect_master(BROKER)  # the same event at the same index: the same history
    assert same.ok and (same.header["masterEpoch"], same.header["masterBrokerId"]) == (2, 2)
    assert old.manager.snapshot() == new.manager.snapshot() == core_on(kv).manager.snapshot()


def test_a_stale_writer_is_caught_even_after_the_new_one_compacted_its_index_away() -> None:
    kv = MemoryKV()
    stale = EventLog(kv, PREFIX)
    stale.load()
    fresh = EventLog(kv, PREFIX)
    fresh.load()
    fresh.append(ElectMasterEvent(BROKER, 1))
    fresh.compact({"format": 1, "replicaInfoTable": {}, "syncStateSetInfoTable": {}})  # event 1 deleted
    with pytest.raises(StaleWriterError):
        stale.append(ElectMasterEvent(BROKER, 2))
    assert kv.keys(f"{PREFIX}/event/") == []  # its write was taken back


class RetryingKV(MemoryKV):
    """A store whose client retried a put whose reply was lost: the first try wrote, the retry
    reports the key as taken."""

    def put_if_absent(self, key: str, value: bytes) -> bool:
        super().put_if_absent(key, value)
        return False


def test_a_retried_write_of_our_own_event_is_not_mistaken_for_another_writer() -> None:
    kv = RetryingKV()
    core = core_on(kv)
    join(core)
    assert core.event_log is not None and core.event_log.last_index == 1
    assert core_on(kv).manager.replica_info[BROKER].broker_id_table() == {1: addr(1)}


def test_a_failed_write_is_never_acknowledged_and_changes_nothing() -> None:
    kv = FailingKV()
    core = core_on(kv)
    join(core)
    beat(core, 1)
    kv.failing = True
    before = core.manager.snapshot()
    result = core.elect_master(BROKER, 1)
    assert result.code == Code.SYSTEM_ERROR and "not persisted" in (result.remark or "")
    assert core.manager.snapshot() == before
    kv.failing = False
    assert core.elect_master(BROKER, 1).header["masterEpoch"] == 1  # the retry gets the same epoch


def test_a_gap_in_the_log_is_reported_not_skipped() -> None:
    kv = MemoryKV()
    core = core_on(kv)
    join(core), join(core), join(core)
    kv.delete(f"{PREFIX}/event/{2:012d}")
    with pytest.raises(LogCorruptedError, match="event 2 is missing"):
        core_on(kv)


# ---------------------------------------------------------------------------- heartbeats
def test_heartbeat_expiry_uses_the_broker_timeout_and_the_scan_drops_expired_brokers() -> None:
    clock = ManualClock()
    core = core_on(MemoryKV(), clock, broker_heartbeat_timeout_ms=3_000)
    beat(core, 1)
    assert core.heartbeat(CLUSTER, BROKER, addr(2), 2, heartbeat_timeout_ms=10_000).ok
    clock.advance(3_000)
    assert core.is_alive(BROKER, 1)  # exactly at the timeout: still alive (RocketMQ's >)
    clock.advance(1)
    assert not core.is_alive(BROKER, 1) and core.is_alive(BROKER, 2)
    assert core.scan_not_active_brokers() == [BrokerIdentity(BROKER, 1)]
    assert core.scan_not_active_brokers() == []
    assert core.heartbeat(CLUSTER, BROKER, addr(3), -1).code == Code.CONTROLLER_INVALID_REQUEST
    assert core.heartbeat(CLUSTER, BROKER, addr(3), 3, heartbeat_timeout_ms=0).code == Code.CONTROLLER_INVALID_REQUEST


def test_a_reported_death_is_dead_at_once_until_the_broker_heartbeats_again() -> None:
    core = core_on(MemoryKV())
    three_replicas(core)
    assert core.report_broker_dead(BROKER, 1) is True  # it was the master
    assert not core.is_alive(BROKER, 1)
    assert core.broker_sets_to_reelect() == [BROKER]
    assert core.report_broker_dead(BROKER, 2) is False
    beat(core, 1)
    assert core.is_alive(BROKER, 1)


def test_after_a_restart_missing_heartbeats_elect_only_after_the_grace_but_deaths_at_once() -> None:
    kv, clock = MemoryKV(), ManualClock()
    three_replicas(core_on(kv, clock))
    restarted = core_on(kv, clock)  # its heartbeat table is empty
    beat(restarted, 2)  # a slave is heard first; the master has not heartbeated yet
    assert restarted.in_grace() and restarted.broker_sets_to_reelect() == []
    beat(restarted, 1)
    clock.advance(10_001)
    beat(restarted, 2)
    assert not restarted.in_grace() and restarted.broker_sets_to_reelect() == [BROKER]

    again = core_on(kv, clock)
    beat(again, 3)
    again.report_broker_dead(BROKER, 1)
    assert again.in_grace() and again.broker_sets_to_reelect() == [BROKER]
