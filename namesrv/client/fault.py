"""Latency fault tolerance (RocketMQ's MQFaultStrategy + LatencyFaultToleranceImpl).

After every send the broker is isolated for a while that grows with the latency it showed; a failed
send counts as a very slow one. The 4.9 and 5.x tables differ a lot (4.9 isolates a failed broker
for 10 minutes, 5.x for 10 s), so both are here and selectable.
"""

from __future__ import annotations

from dataclasses import dataclass

from namesrv.common.clock import Clock, system_clock


@dataclass(frozen=True)
class FaultTable:
    name: str
    latency_max: tuple[int, ...]
    not_available_duration: tuple[int, ...]
    failure_latency: int
    """The latency a failed send is treated as."""


FAULT_TABLE_4_9 = FaultTable(
    "4.9",
    (50, 100, 550, 1000, 2000, 3000, 15000),
    (0, 0, 30000, 60000, 120000, 180000, 600000),
    30000,
)
FAULT_TABLE_5_X = FaultTable(
    "5.x",
    (50, 100, 550, 1800, 3000, 5000, 15000),
    (0, 0, 2000, 5000, 6000, 10000, 30000),
    10000,
)
FAULT_TABLES = {t.name: t for t in (FAULT_TABLE_4_9, FAULT_TABLE_5_X)}


@dataclass(slots=True)
class FaultItem:
    name: str
    current_latency: int
    start_timestamp: int
    """The broker is available again from this time on (ms)."""

    def is_available(self, now: int) -> bool:
        return now >= self.start_timestamp


class LatencyFaultTolerance:
    def __init__(self, table: FaultTable = FAULT_TABLE_5_X, clock: Clock = system_clock) -> None:
        self.table = table
        self.clock = clock
        self.fault_items: dict[str, FaultItem] = {}
        self._which_item_worst = 0

    def compute_not_available_duration(self, current_latency: int) -> int:
        for latency_max, duration in zip(
            reversed(self.table.latency_max), reversed(self.table.not_available_duration), strict=True
        ):
            if current_latency >= latency_max:
                return duration
        return 0

    def update_fault_item(self, broker_name: str, current_latency: int, isolation: bool) -> int:
        """Record one send's outcome; returns how long (ms) the broker is now avoided."""
        latency = self.table.failure_latency if isolation else current_latency
        duration = self.compute_not_available_duration(latency)
        now = self.clock()
        item = self.fault_items.get(broker_name)
        if item is None:
            self.fault_items[broker_name] = FaultItem(broker_name, latency, now + duration)
        else:
            item.current_latency = latency
            item.start_timestamp = now + duration
        return duration

    def is_available(self, broker_name: str) -> bool:
        item = self.fault_items.get(broker_name)
        return item is None or item.is_available(self.clock())

    def isolated_count(self) -> int:
        """Brokers avoided right now."""
        now = self.clock()
        return sum(1 for i in self.fault_items.values() if not i.is_available(now))

    def remove(self, broker_name: str) -> None:
        self.fault_items.pop(broker_name, None)

    def pick_one_at_least(self, candidates: list[str] | None = None) -> str | None:
        """The least bad broker when none is available: among the better half (available first, then
        lower latency, then sooner back), rotating so one broker does not take every retry."""
        now = self.clock()
        items = [i for i in self.fault_items.values() if candidates is None or i.name in candidates]
        if not items:
            return None
        items.sort(key=lambda i: (not i.is_available(now), i.current_latency, i.start_timestamp))
        half = max(1, len(items) // 2)
        self._which_item_worst += 1
        return items[self._which_item_worst % half].name
