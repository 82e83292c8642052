"""The controller actor's one writer (actors.controller.scheduler) without Ray: a change is answered
only once its events are in the log; a failed write changes nothing; a stale writer refuses and
adopts the log's history; long-polls wake on every applied change; failpoints hold a change."""

from __future__ import annotations

import asyncio

import pytest

from actors.controller.scheduler import EventScheduler
from namesrv.common.clock import ManualClock
from namesrv.controller.codes import ControllerResponseCode as Code
from namesrv.controller.core import ControllerCore
from namesrv.controller.event_log import MemoryKV
from namesrv.remoting.command import MQServerError
from tests.support.controller import BROKER, CLUSTER, PREFIX, FailingKV, addr, beat, core_on, join


def two_replicas(core: ControllerCore) -> None:
    for _ in range(2):
        join(core)
    for b in (1, 2):
        beat(core, b)


def test_a_change_is_applied_after_its_write_and_wakes_the_long_polls() -> None:
    async def run() -> None:
        kv = MemoryKV()
        core = core_on(kv)
        two_replicas(core)
        scheduler = EventScheduler("c", core)
        woken = asyncio.ensure_future(scheduler.wait_change(5.0))
        await asyncio.sleep(0)
        result = await scheduler.mutate(lambda: core.check_elect_master(BROKER, 1))
        assert result.ok and result.header["masterBrokerId"] == 1
        assert await woken is True
        assert core_on(kv).manager.sync_state_info[BROKER].master_broker_id == 1  # in the log
        refused = await scheduler.mutate(lambda: core.check_elect_master("no-such-set", 1))
        assert not refused.ok and not refused.events
        assert await scheduler.wait_change(0.01) is False  # a refusal changes nothing, wakes nobody

    asyncio.run(run())


def test_a_failed_write_is_neither_applied_nor_acknowledged() -> None:
    async def run() -> None:
        kv = FailingKV()
        core = core_on(kv)
        two_replicas(core)
        scheduler = EventScheduler("c", core)
        kv.failing = True
        result = await scheduler.mutate(lambda: core.check_elect_master(BROKER, 1))
        assert result.code == Code.SYSTEM_ERROR and "not persisted" in (result.remark or "")
        assert core.manager.sync_state_info[BROKER].master_broker_id is None
        kv.failing = False
        assert (await scheduler.mutate(lambda: core.check_elect_master(BROKER, 1))).ok

    asyncio.run(run())


def test_a_stale_writer_refuses_and_adopts_the_history_the_other_wrote() -> None:
    async def run() -> None:
        kv, clock = MemoryKV(), ManualClock()
        old = core_on(kv, clock)
        two_replicas(old)
        new = core_on(kv, clock)  # Ray started another copy while the old one still runs
        for b in (1, 2):
            beat(new, b)
        assert new.elect_master(BROKER, 2).ok
        scheduler = EventScheduler("c", old)
        result = await scheduler.mutate(lambda: old.check_elect_master(BROKER, 1))
        assert result.code == Code.CONTROLLER_NOT_LEADER and "reloaded" in (result.remark or "")
        assert scheduler.stale_reloads == 1
        assert old.manager.snapshot() == new.manager.snapshot()  # the other's master, not its own
        assert old.manager.sync_state_info[BROKER].master_broker_id == 2

    asyncio.run(run())


def test_the_log_is_compacted_every_n_events() -> None:
    async def run() -> None:
        kv = MemoryKV()
        core = core_on(kv, snapshot_every_events=3)
        scheduler = EventScheduler("c", core)
        for broker_id in (1, 2):
            result = await scheduler.mutate(lambda b=broker_id: core.check_apply_broker_id(  # type: ignore[misc]
                CLUSTER, BROKER, b, f"{addr(b)};1"))
            assert result.ok
        assert kv.get(f"{PREFIX}/snapshot") is None  # 2 events: not yet
        beat(core, 1)
        assert (await scheduler.mutate(lambda: core.check_elect_master(BROKER, 1))).ok  # the third event
        assert kv.get(f"{PREFIX}/snapshot") is not None
        assert kv.keys(f"{PREFIX}/event/") == []
        assert core_on(kv).manager.snapshot() == core.manager.snapshot()

    asyncio.run(run())


def test_a_failpoint_holds_the_change_before_its_write() -> None:
    async def run() -> None:
        kv = MemoryKV()
        core = core_on(kv)
        two_replicas(core)
        scheduler = EventScheduler("c", core)
        with pytest.raises(MQServerError, match="unknown failpoint"):
            scheduler.set_failpoint("nowhere")
        with pytest.raises(MQServerError, match="is not set"):
            await scheduler.wait_failpoint("before-persist", 0.1)
        scheduler.set_failpoint("before-persist")
        held = asyncio.ensure_future(scheduler.mutate(lambda: core.check_elect_master(BROKER, 1)))
        assert await scheduler.wait_failpoint("before-persist", 5.0) is True
        assert not held.done()
        assert core_on(kv).manager.sync_state_info[BROKER].master_broker_id is None  # nothing written
        held.cancel()

    asyncio.run(run())
