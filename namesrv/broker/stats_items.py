"""Per-topic and per-group message counts over the last minute, hour and day (RocketMQ's
BrokerStatsManager with its StatsItemSets TOPIC_PUT_NUMS and GROUP_GET_NUMS), what
VIEW_BROKER_STATS_DATA (315) answers and mqadmin statsAll prints as InTPS/OutTPS and 24-hour totals.

Each item keeps a running value (messages) and times (calls) and snapshots of them: one every 10 s
(the last 7: a minute), every 10 min (the last 7: an hour) and every hour (the last 25: a day), as
RocketMQ's StatsItem does. Differences from RocketMQ 5.3: a window's sum runs from its oldest
snapshot to the live value (RocketMQ's stops at the newest snapshot, so its figures lag up to one
sampling period), an item starts with a snapshot of zero when it is created, and a window's TPS is
over at least one second. Time comes from the injected clock.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field
from typing import Any

from namesrv.common.clock import Clock

TOPIC_PUT_NUMS = "TOPIC_PUT_NUMS"
GROUP_GET_NUMS = "GROUP_GET_NUMS"
STATS_NAMES = (TOPIC_PUT_NUMS, GROUP_GET_NUMS)
MAX_ITEMS = 100_000
"""Keys kept per stats name at most (a broker with more topics or groups stops adding new ones)."""

WINDOWS = (("statsMinute", 10_000, 7), ("statsHour", 600_000, 7), ("statsDay", 3_600_000, 25))
"""(name, sampling period ms, snapshots kept) of each window."""

Snapshot = tuple[int, int, int]
"""(time ms, value, times)."""


@dataclass(slots=True)
class StatsItem:
    value: int = 0
    times: int = 0
    windows: list[collections.deque[Snapshot]] = field(default_factory=list)

    def window(self, i: int, now: int) -> dict[str, Any]:
        """BrokerStatsItem of window `i`: {sum, tps, avgpt} (avgpt: messages per call)."""
        t0, v0, n0 = self.windows[i][0]
        total, calls = self.value - v0, self.times - n0
        return {"sum": total, "tps": total * 1000 / max(now - t0, 1000), "avgpt": total / calls if calls else 0.0}


class StatsItemSet:
    def __init__(self, name: str, clock: Clock) -> None:
        self.name = name
        self.clock = clock
        self.items: dict[str, StatsItem] = {}
        self._last_sample = [clock()] * len(WINDOWS)

    def add(self, key: str, value: int, times: int = 1) -> None:
        item = self.items.get(key)
        if item is None:
            if len(self.items) >= MAX_ITEMS:
                return
            now = self.clock()
            item = self.items[key] = StatsItem(windows=[collections.deque([(now, 0, 0)], maxlen=keep)
                                                        for _, _, keep in WINDOWS])
        item.value += value
        item.times += times

    def sample(self) -> None:
        """Snapshot every item into each window whose period has passed (call about once a second)."""
        now = self.clock()
        for i, (_, period, _) in enumerate(WINDOWS):
            if now - self._last_sample[i] >= period:
                self._last_sample[i] = now
                for item in self.items.values():
                    item.windows[i].append((now, item.value, item.times))

    def data(self, key: str) -> dict[str, Any] | None:
        """BrokerStatsData of `key`: {statsMinute, statsHour, statsDay}, None for a key never counted."""
        item = self.items.get(key)
        if item is None:
            return None
        now = self.clock()
        return {name: item.window(i, now) for i, (name, _, _) in enumerate(WINDOWS)}


class BrokerStatsManager:
    def __init__(self, clock: Clock) -> None:
        self.sets = {name: StatsItemSet(name, clock) for name in STATS_NAMES}

    def inc_topic_put_nums(self, topic: str, num: int = 1, times: int = 1) -> None:
        self.sets[TOPIC_PUT_NUMS].add(topic, num, times)

    def inc_group_get_nums(self, group: str, topic: str, num: int) -> None:
        """Messages handed to `group` from `topic` (key `topic@group`, as RocketMQ builds it)."""
        if num > 0:
            self.sets[GROUP_GET_NUMS].add(f"{topic}@{group}", num)

    def sample(self) -> None:
        for s in self.sets.values():
            s.sample()

    def data(self, name: str, key: str) -> dict[str, Any] | None:
        stats = self.sets.get(name)
        return stats.data(key) if stats is not None else None
