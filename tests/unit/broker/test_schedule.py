"""Delay levels, timers and retry back-off (issue 22, point 3) in the pure core, with a real store
and a manual clock: what a send becomes, when a parked message reaches its real queue, and that
its progress survives a restart without losing or re-sending what was already moved."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from namesrv.broker.schedule.delivery import (
    REAL_QID,
    REAL_TOPIC,
    TIMER_OUT_MS,
    TIMER_TOPIC,
    ScheduleError,
    parse_delay_levels,
    retry_delay_level,
    transform,
)
from namesrv.broker.schedule.service import ScheduleService
from namesrv.broker.stats import BrokerStats, TimerFigures
from namesrv.broker.transaction.service import PREPARED_TYPE
from namesrv.common.clock import ManualClock
from namesrv.protocol.constants import SCHEDULE_TOPIC
from namesrv.protocol.message.types import MessageInner
from namesrv.store.message_store import MessageStore

NOW = 1_700_000_000_000
LEVELS = parse_delay_levels()


def test_delay_levels_are_rocketmqs() -> None:
    assert LEVELS[:4] == [1_000, 5_000, 10_000, 30_000] and LEVELS[-1] == 7_200_000 and len(LEVELS) == 18
    with pytest.raises(ValueError):
        parse_delay_levels("1s 5x")


def test_what_a_send_becomes() -> None:
    plain = MessageInner("T", 3, b"x", {"k": "v"})
    assert transform(plain, 18, NOW) is plain
    delayed = transform(MessageInner("T", 3, b"x", {"DELAY": "2"}), 18, NOW)
    assert (delayed.topic, delayed.queue_id) == (SCHEDULE_TOPIC, 1)
    assert delayed.properties[REAL_TOPIC] == "T" and delayed.properties[REAL_QID] == "3"
    assert transform(MessageInner("T", 0, b"x", {"DELAY": "99"}), 18, NOW).queue_id == 17, "clamped to the last"
    timer = transform(MessageInner("T", 1, b"x", {"TIMER_DELAY_SEC": "5"}), 18, NOW)
    assert (timer.topic, timer.queue_id) == (TIMER_TOPIC, 0)
    assert timer.properties[TIMER_OUT_MS] == str(NOW + 4_000), "a whole second rounds down one step, as RocketMQ"
    at = transform(MessageInner("T", 1, b"x", {"TIMER_DELIVER_MS": str(NOW + 2_500)}), 18, NOW)
    assert at.properties[TIMER_OUT_MS] == str(NOW + 2_000)
    past = MessageInner("T", 1, b"x", {"TIMER_DELIVER_MS": str(NOW - 1)})
    assert transform(past, 18, NOW) is past, "due already: stored as it is"
    prepared = MessageInner("T", 1, b"x", {"DELAY": "3"}, sys_flag=PREPARED_TYPE)
    assert transform(prepared, 18, NOW) is prepared
    for bad in ({"TIMER_DELAY_SEC": "soon"}, {"TIMER_DELAY_SEC": str(4 * 86_400)}, {"DELAY": "x"}):
        with pytest.raises(ScheduleError):
            transform(MessageInner("T", 0, b"x", bad), 18, NOW)


def test_retry_back_off_follows_reconsume_times() -> None:
    assert [retry_delay_level(n, 0) for n in range(3)] == [3, 4, 5]
    assert retry_delay_level(5, 2) == 2


class Scheduled:
    def __init__(self, root: Path, fail: set[bytes] | None = None) -> None:
        self.clock = ManualClock(NOW)
        self.store = MessageStore(root / "store", clock=self.clock)
        self.fail = fail if fail is not None else set()
        self.service = ScheduleService(self.store, root / "delayOffset.json", self.clock, LEVELS, self.deliver)

    async def deliver(self, msg: MessageInner) -> None:
        if msg.body in self.fail:
            raise OSError("disk full")
        await self.store.put(msg)

    async def park(self, body: bytes, **props: str) -> None:
        await self.store.put(transform(MessageInner("T", 0, body, dict(props)), 18, self.clock()))

    def real(self) -> list[bytes]:
        return [m.body for m in self.store.get_message("T", 0, 0, 100)]


def test_parked_messages_reach_their_queue_when_due_and_not_before(tmp_path: Path) -> None:
    s = Scheduled(tmp_path)

    async def scenario() -> None:
        await s.park(b"level 2 (5 s)", DELAY="2")
        await s.park(b"level 1 (1 s)", DELAY="1")
        await s.park(b"timer 2 s", TIMER_DELAY_MS="2500")
        assert await s.service.pass_once() == 0 and s.real() == []
        s.clock.advance(999)
        assert await s.service.pass_once() == 0, "not a millisecond early"
        s.clock.advance(1)
        assert await s.service.pass_once() == 1 and s.real() == [b"level 1 (1 s)"]
        s.clock.advance(1_000)
        assert await s.service.pass_once() == 1 and s.real()[-1] == b"timer 2 s"
        s.clock.advance(3_000)
        assert await s.service.pass_once() == 1 and s.real()[-1] == b"level 2 (5 s)"
        [first] = s.store.get_message("T", 0, 0, 1)
        assert "DELAY" not in first.properties and first.properties[REAL_TOPIC] == "T"
        await s.service.persist(force=True)

    asyncio.run(scenario())
    assert s.service.lateness_ms == [0, 0, 0]
    s.store.close()


def test_progress_survives_a_restart_without_losing_or_resending(tmp_path: Path) -> None:
    s = Scheduled(tmp_path)

    async def before_restart() -> None:
        for i in range(3):
            await s.park(f"t{i}".encode(), TIMER_DELAY_MS=str(1_500 * (3 - i)))  # due in reverse order
        await s.park(b"late", DELAY="3")
        s.clock.advance(3_000)
        assert await s.service.pass_once() == 2  # t1 and t2: due out of arrival order
        await s.service.persist(force=True)

    asyncio.run(before_restart())
    s.store.close()
    again = Scheduled(tmp_path)
    again.clock.now_ms = s.clock.now_ms

    async def after_restart() -> None:
        assert again.real() == [b"t2", b"t1"]
        assert await again.service.pass_once() == 0, "nothing delivered twice"
        again.clock.advance(1_500)
        assert await again.service.pass_once() == 1 and again.real()[-1] == b"t0"
        again.clock.advance(10_000)
        assert await again.service.pass_once() == 1 and again.real()[-1] == b"late"

    asyncio.run(after_restart())
    again.store.close()


def test_a_failed_delivery_is_retried_never_skipped(tmp_path: Path) -> None:
    s = Scheduled(tmp_path, fail={b"first"})

    async def scenario() -> None:
        await s.park(b"first", DELAY="1")
        await s.park(b"second", DELAY="1")
        await s.park(b"timer", TIMER_DELAY_MS="500")
        s.clock.advance(1_000)
        await s.service.pass_once()
        assert b"first" not in s.real() and b"timer" in s.real()
        s.fail.clear()
        await s.service.pass_once()
        assert s.real().count(b"first") == 1

    asyncio.run(scenario())
    assert s.service.level_offsets[1] == 2
    s.store.close()


def test_a_promoted_slave_delivers_from_where_its_master_was(tmp_path: Path) -> None:
    """The slave copies the master's log and its delay-offset table (SlaveSynchronize); once it
    delivers itself it moves only what the master had not, and its copy of the table survives its
    restart. A table that does not parse is refused and changes nothing."""
    master = Scheduled(tmp_path / "m")
    slave = Scheduled(tmp_path / "s")

    async def scenario() -> None:
        await master.park(b"level 1 (1 s)", DELAY="1")
        await master.park(b"timer 2 s", TIMER_DELAY_MS="2500")
        await master.park(b"level 2 (5 s)", DELAY="2")
        master.clock.advance(2_000)
        assert await master.service.pass_once() == 2
        copy = master.store.read_raw(0, 1 << 20)
        slave.store.append_raw(copy.offset, copy.data)
        await slave.service.sync_from_master(b"{not json")
        assert slave.service.level_offsets == {}, "a damaged table changes nothing"
        await slave.service.sync_from_master(master.service.encode())
        assert slave.service.encode() == master.service.encode()

    asyncio.run(scenario())
    restarted = ScheduleService(slave.store, tmp_path / "s" / "delayOffset.json", slave.clock, LEVELS, slave.deliver)
    assert restarted.encode() == master.service.encode()
    slave.service = restarted

    async def promoted() -> None:
        slave.clock.advance(5_000)
        assert await slave.service.pass_once() == 1, "only what the master had not delivered"

    asyncio.run(promoted())
    assert slave.real() == [b"level 1 (1 s)", b"timer 2 s", b"level 2 (5 s)"]
    master.store.close()
    slave.store.close()


def test_timer_figures_are_what_the_runtime_info_reports(tmp_path: Path) -> None:
    """GET_BROKER_RUNTIME_INFO's timer fields from the timers themselves: parked and not read
    (timerOffsetBehind), read and waiting (timerCongestNum), seconds behind the earliest due one
    (timerReadBehind), and timers parked and delivered a second (timerEnqueueTps / DequeueTps)."""
    s = Scheduled(tmp_path)
    stats = BrokerStats(s.clock, lambda: (0, 0), s.service.timer_figures)

    async def scenario() -> None:
        for i in range(3):
            await s.park(f"t{i}".encode(), TIMER_DELAY_MS="2000")
        assert s.service.timer_figures() == TimerFigures(0, 3, 0, 3, 0), "parked, not read yet"
        assert await s.service.pass_once() == 0
        assert s.service.timer_figures() == TimerFigures(0, 0, 3, 3, 0), "read, waiting for their time"
        s.clock.advance(1_000)
        stats.sample()
        s.clock.advance(5_000)  # due at +1 s (a whole second rounds down a step): 5 s late, not run meanwhile
        assert s.service.timer_figures().read_behind_s == 5
        assert await s.service.pass_once() == 3
        stats.sample()

    asyncio.run(scenario())
    table = stats.runtime_info(broker_active=True, store_dir=tmp_path, commit_log_max_offset=0,
                               earliest_message_ms=-1, sends_waiting=0, pulls_held=0)
    assert (table["timerReadBehind"], table["timerOffsetBehind"], table["timerCongestNum"]) == ("0", "0", "0")
    assert float(table["timerEnqueueTps"]) == float(table["timerDequeueTps"]) == 3 / 6, "3 each over the 6 s sampled"
    s.store.close()
