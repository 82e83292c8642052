"""Moves parked messages to their real queues when they are due (RocketMQ's ScheduleMessageService
for delay levels, and the dequeue side of its 5.x timer wheel for timers).

Delay levels: one queue of SCHEDULE_TOPIC_XXXX per level; every message of a level waits the same
time, so each queue is due in order and only its head is looked at. Timers: rmq_sys_wheel_timer
queue 0 holds them in arrival order, each with its own deliver time; they are read into a heap by
deliver time and popped when due. A recall marker (namesrv.broker.processor.recall) parked in a
timer's slot cancels that timer: markers are noted as they are read, before anything due is popped,
and a due timer one names is passed over instead of delivered.

Progress survives a restart: the next offset of each level, and for timers the offset below which
every timer was delivered plus those delivered above it, written atomically (`delayOffset.json`,
RocketMQ's file name) at most once a second. What was delivered after the last write is delivered
again after a crash: at least once, as RocketMQ. A delivery that fails is retried, never skipped.
"""

from __future__ import annotations

import asyncio
import heapq
import json
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from namesrv.broker.schedule.delivery import TIMER_OUT_MS, TIMER_TOPIC, time_up
from namesrv.broker.stats import TimerFigures
from namesrv.common.clock import Clock
from namesrv.common.persist import atomic_write
from namesrv.protocol.constants import SCHEDULE_TOPIC
from namesrv.protocol.message.properties import REAL_TOPIC, UNIQ_KEY
from namesrv.protocol.message.recall import TIMER_DEL_UNIQKEY, delete_key
from namesrv.protocol.message.types import MessageInner, StoredMessage
from namesrv.store.message_store import MessageStore

log = logging.getLogger(__name__)

BATCH = 128
"""Messages moved per pass: a pass's store reads run off the loop, its puts are awaited together."""
IDLE_WAIT_S = 0.1
"""Longest sleep between passes (a parked message notifies at once; this bounds a missed wake-up)."""
PERSIST_EVERY_MS = 1_000


class ScheduleService:
    def __init__(self, store: MessageStore, progress_path: Path | None, clock: Clock, levels_ms: list[int],
                 deliver: Callable[[MessageInner], Awaitable[Any]]) -> None:
        """`deliver(msg)` stores a due message in its real queue (and wakes its held pulls)."""
        self.store = store
        self.path = progress_path
        self.clock = clock
        self.levels_ms = levels_ms
        self.deliver = deliver
        self.level_offsets: dict[int, int] = {}
        self.timer_floor = 0
        """Every timer below this queue offset is delivered."""
        self.timer_done: set[int] = set()
        """Timers at or above the floor delivered already (out of order: each has its own time)."""
        self.timer_scanned = 0
        self.timer_heap: list[tuple[int, int]] = []
        """(deliver ms, queue offset) of timers read and not delivered yet."""
        self.delivered = 0
        self.timers_delivered = 0
        """Timers delivered since this service started (the runtime info's timerDequeueTps)."""
        self.recalled: set[str] = set()
        """Delete keys of the recall markers read (namesrv.broker.processor.recall): the timers they
        name are skipped when due. Rebuilt on start, as every timer from the floor up is read again."""
        self.timers_recalled = 0
        self.lateness_ms: list[int] = []
        """How late each delivery was (deliver time -> stored in its real queue), last 10,000."""
        self._dirty = False
        self._persisted_at = 0
        self._wake = asyncio.Event()
        self.listeners: list[Callable[[], None]] = []
        """Called when the progress moved (a pass delivered): the metadata log records it."""
        self._load()

    # ------------------------------------------------------------------ progress
    def _load(self) -> None:
        if self.path is None or not self.path.exists():
            return
        try:
            self._apply(self.path.read_bytes())
        except (ValueError, TypeError, AttributeError) as e:
            log.error("%s unreadable (%s): parked messages are delivered from the start again", self.path, e)
            self.level_offsets, self.timer_floor, self.timer_done = {}, 0, set()
            self.timer_scanned = 0

    def _apply(self, raw: bytes) -> None:
        """Take progress as `encode` wrote it; raises ValueError/TypeError/AttributeError (unchanged)."""
        data = json.loads(raw.decode("utf-8"))
        levels = {int(k): int(v) for k, v in data.get("offsetTable", {}).items()}
        floor, done = int(data.get("timerFloor", 0)), {int(o) for o in data.get("timerDelivered", [])}
        self.level_offsets, self.timer_floor, self.timer_done = levels, floor, done
        self.timer_scanned, self.timer_heap = floor, []

    async def sync_from_master(self, raw: bytes) -> None:
        """A slave takes its master's progress (RocketMQ's SlaveSynchronize.syncDelayOffset) and
        persists it, so once promoted it delivers from where the master was, not from the start.
        Only while this broker does not deliver itself (its `run` is not going); a table that does
        not parse is refused with a log line and changes nothing."""
        if self.take_progress(raw):
            await self.persist(force=True)

    def take_progress(self, raw: bytes) -> bool:
        """Take a master's progress (`encode`d) as this broker's own, to persist with the next
        `persist`; False when it is this broker's already or does not parse (then it changes
        nothing, with a log line)."""
        if not raw or raw == self.encode():
            return False
        try:
            self._apply(raw)
        except (ValueError, TypeError, AttributeError) as e:
            log.error("master's delay offsets refused (%s): kept this broker's own", e)
            return False
        self._dirty = True
        return True

    def encode(self) -> bytes:
        return json.dumps({"offsetTable": {str(k): v for k, v in sorted(self.level_offsets.items())},
                           "timerFloor": self.timer_floor, "timerDelivered": sorted(self.timer_done)}).encode()

    async def persist(self, force: bool = False) -> None:
        now = self.clock()
        if self.path is None or not self._dirty or (not force and now - self._persisted_at < PERSIST_EVERY_MS):
            return
        self._dirty, self._persisted_at = False, now
        await asyncio.to_thread(atomic_write, self.path, self.encode())

    # ------------------------------------------------------------------ passes
    def notify(self) -> None:
        """A message was parked: look again now (its time may be near)."""
        self._wake.set()

    def _due(self, now: int) -> list[tuple[int, StoredMessage]]:
        """Up to BATCH parked messages due at `now`: (level, message), level 0 for a timer. Blocking
        store reads: run off the event loop."""
        due: list[tuple[int, StoredMessage]] = []
        for level, delay in enumerate(self.levels_ms, 1):
            offset, end = self.level_offsets.get(level, 0), self.store.max_offset(SCHEDULE_TOPIC, level - 1)
            while offset < end and len(due) < BATCH:
                page = self.store.get_message(SCHEDULE_TOPIC, level - 1, offset, 32)
                if not page:
                    break
                ready = [m for m in page if m.store_timestamp + delay <= now]
                due += [(level, m) for m in ready]
                if len(ready) < len(page):
                    break
                offset = page[-1].queue_offset + 1
        end = self.store.max_offset(TIMER_TOPIC, 0)
        while self.timer_scanned < end:
            page = self.store.get_message(TIMER_TOPIC, 0, self.timer_scanned, 256)
            if not page:
                break
            for m in page:
                if m.queue_offset not in self.timer_done:
                    if TIMER_DEL_UNIQKEY in m.properties:
                        self.recalled.add(m.properties[TIMER_DEL_UNIQKEY])
                    heapq.heappush(self.timer_heap, (int(m.properties.get(TIMER_OUT_MS, "0") or 0), m.queue_offset))
            self.timer_scanned = page[-1].queue_offset + 1
        while self.timer_heap and self.timer_heap[0][0] <= now and len(due) < BATCH:
            _, offset = heapq.heappop(self.timer_heap)
            found = self.store.get_message(TIMER_TOPIC, 0, offset, 1)
            if found:
                due.append((0, found[0]))
        return due

    def next_due_ms(self) -> int | None:
        """When the earliest parked message known falls due (None: nothing parked is known)."""
        return self.timer_heap[0][0] if self.timer_heap else None

    async def pass_once(self) -> int:
        """Deliver what is due now; returns how many were delivered."""
        now = self.clock()
        due = await asyncio.to_thread(self._due, now)
        if not due:
            return 0
        parked = len(due)
        due = [(level, m) for level, m in due if level != 0 or not self._skip_recalled(m)]
        recalled = parked - len(due)
        results = await asyncio.gather(*(self.deliver(time_up(m)) for _, m in due), return_exceptions=True)
        delivered = 0
        blocked: set[int] = set()
        for (level, m), result in zip(due, results, strict=True):
            if isinstance(result, BaseException):
                log.warning("parked message %s not delivered yet: %s", m.msg_id, result)
                if level == 0:
                    heapq.heappush(self.timer_heap, (int(m.properties.get(TIMER_OUT_MS, "0") or 0), m.queue_offset))
                blocked.add(level)
                continue
            delivered += 1
            if level == 0:
                self._timer_delivered(m.queue_offset)
            elif level not in blocked:  # a level moves on only past what was delivered in order
                self.level_offsets[level] = m.queue_offset + 1
            deliver_ms = int(m.properties.get(TIMER_OUT_MS, "0") or 0) if level == 0 else (
                m.store_timestamp + self.levels_ms[level - 1])
            self.lateness_ms.append(max(0, self.clock() - deliver_ms))
        del self.lateness_ms[:-10_000]
        self.delivered += delivered
        if delivered or recalled:
            self._dirty = True
            for listener in self.listeners:
                listener()
        await self.persist()
        return delivered

    def timer_figures(self) -> TimerFigures:
        """Where the timers stand, for GET_BROKER_RUNTIME_INFO (namesrv.broker.stats.TimerFigures)."""
        now = self.clock()
        parked = self.store.max_offset(TIMER_TOPIC, 0)
        behind_ms = now - self.timer_heap[0][0] if self.timer_heap else 0
        return TimerFigures(read_behind_s=max(0, behind_ms) // 1000, offset_behind=max(0, parked - self.timer_scanned),
                            congest_num=len(self.timer_heap), enqueued=parked, dequeued=self.timers_delivered)

    def _skip_recalled(self, m: StoredMessage) -> bool:
        """A due timer that is a recall marker, or that one names: done without a delivery."""
        if TIMER_DEL_UNIQKEY in m.properties:
            # the marker falls due after the timer it names (the same slot or 1 ms later, stored
            # later): a key still held now names a timer that never was, and is let go
            self.recalled.discard(m.properties[TIMER_DEL_UNIQKEY])
            self._timer_delivered(m.queue_offset, delivered=False)
            return True
        key = delete_key(m.properties.get(REAL_TOPIC, m.topic), m.properties.get(UNIQ_KEY) or m.msg_id)
        if key not in self.recalled:
            return False
        self.recalled.discard(key)
        self.timers_recalled += 1
        self._timer_delivered(m.queue_offset, delivered=False)
        log.info("timer %s recalled: not delivered", m.msg_id)
        return True

    def _timer_delivered(self, offset: int, delivered: bool = True) -> None:
        self.timers_delivered += delivered
        self.timer_done.add(offset)
        while self.timer_floor in self.timer_done:
            self.timer_done.discard(self.timer_floor)
            self.timer_floor += 1

    async def run(self, closed: Callable[[], bool]) -> None:
        """Passes until `closed()`: at once after a parked message, when the next timer is due, and at
        least every IDLE_WAIT_S."""
        while not closed():
            if await self.pass_once() >= BATCH:
                continue  # more is due: no sleep
            wait = IDLE_WAIT_S
            upcoming = self.next_due_ms()
            if upcoming is not None:
                wait = min(wait, max(0.0, (upcoming - self.clock()) / 1000))
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), wait)
            except TimeoutError:
                pass
        await self.persist(force=True)
