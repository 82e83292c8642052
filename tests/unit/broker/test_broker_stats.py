"""BrokerStats: the day marks, TPS windows and formats behind GET_BROKER_RUNTIME_INFO (injected clock)."""

from __future__ import annotations

import datetime

from namesrv.broker.stats import BrokerStats, format_runtime, human_readable_bytes
from namesrv.common.clock import ManualClock


def local_ms(*args: int) -> int:
    return int(datetime.datetime(*args).timestamp() * 1000)  # local time: the broker's day is local, as RocketMQ's


def test_day_marks_move_at_the_first_sample_of_a_new_day() -> None:
    totals = [0, 0]
    clock = ManualClock(local_ms(2026, 11, 23, 23, 59, 58))
    stats = BrokerStats(clock, lambda: (totals[0], totals[1]))
    totals[:] = [10, 4]
    clock.advance(1_000)
    stats.sample()
    assert stats.today_morning == stats.yesterday_morning == (0, 0), "still the boot day"
    clock.advance(2_000)  # 00:00:01 on the 24th
    stats.sample()
    assert stats.today_morning == (10, 4) and stats.yesterday_morning == (0, 0)
    totals[:] = [25, 9]
    clock.advance(86_400_000)
    stats.sample()
    assert stats.today_morning == (25, 9) and stats.yesterday_morning == (10, 4)


def test_tps_over_each_window_once_it_has_enough_samples() -> None:
    totals = [0, 0]
    clock = ManualClock(1_000_000)
    stats = BrokerStats(clock, lambda: (totals[0], totals[1]))
    for second in range(1, 601):
        clock.advance(1_000)
        totals[0] += 2 if second > 540 else 1  # 2/s in the last minute, 1/s before
        stats.sample()
    ten_s, one_min, ten_min = stats.tps(1).split(" ")
    assert (float(ten_s), float(one_min), float(ten_min)) == (2.0, 2.0, 660 / 600)
    assert stats.tps(2) == "0.0 0.0 0.0"


def test_formats_are_rocketmqs() -> None:
    assert human_readable_bytes(512) == "512 B"
    assert human_readable_bytes(1536) == "1.5 KiB"
    assert human_readable_bytes(252 * 2**30) == "252.0 GiB"
    two_days_and_change = ((2 * 24 + 3) * 3600 + 4 * 60 + 5) * 1000 + 999
    assert format_runtime(two_days_and_change) == "[ 2 days, 3 hours, 4 minutes, 5 seconds ]"
