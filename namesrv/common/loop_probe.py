"""A loop-lag probe: how late the event loop runs a callback due every few milliseconds, and why.

A callback is scheduled `interval_s` ahead; when it runs, its lateness is how long the loop was held
(one long turn) or not run at all. For each late run (a stall above `threshold_s`) the probe keeps
what happened in the meantime, so a stall can be told apart by cause:

- `loop_cpu_ms`: CPU of the loop's own thread (`time.thread_time`): ~ the stall means the loop
  itself computed (a long turn: a read, a decode, a slice);
- `other_cpu_ms`: CPU of the process's other threads (Ray's core worker, gRPC, a zlib/JSON thread):
  they held the GIL or a core while the loop waited;
- `gc_ms`: garbage collections inside the stall (timed through `gc.callbacks`);
- whatever is left (wall minus all of these) is time the process was not run at all: the machine's
  other processes had the cores.

Stalls are kept with their CLOCK_MONOTONIC time (shared by every process on the machine), so a
benchmark can line them up with its own windows. The probe costs one callback per interval.
"""

from __future__ import annotations

import asyncio
import collections
import gc
import time
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Stall:
    at: float
    """time.monotonic() when the late callback ran (the stall's end)."""
    wall_ms: float
    loop_cpu_ms: float
    other_cpu_ms: float
    gc_ms: float


class LoopProbe:
    def __init__(self, interval_s: float = 0.002, threshold_s: float = 0.005, keep: int = 4096) -> None:
        self.interval_s = interval_s
        self.threshold_s = threshold_s
        self.stalls: collections.deque[Stall] = collections.deque(maxlen=keep)
        self.ticks = 0
        self.gc_count = 0
        self.gc_max_ms = 0.0
        self._gc_total_s = 0.0
        self._gc_started = 0.0
        self._handle: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._due = self._thread_cpu = self._process_cpu = self._gc_at = 0.0

    def start(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self._loop = loop or asyncio.get_event_loop()
        gc.callbacks.append(self._on_gc)
        self._schedule()

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        if self._on_gc in gc.callbacks:
            gc.callbacks.remove(self._on_gc)

    def _on_gc(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._gc_started = time.perf_counter()
            return
        took = time.perf_counter() - self._gc_started
        self.gc_count += 1
        self._gc_total_s += took
        self.gc_max_ms = max(self.gc_max_ms, took * 1000)

    def _schedule(self) -> None:
        assert self._loop is not None
        self._due = time.monotonic() + self.interval_s
        self._thread_cpu, self._process_cpu = time.thread_time(), time.process_time()
        self._gc_at = self._gc_total_s
        self._handle = self._loop.call_later(self.interval_s, self._tick)

    def _tick(self) -> None:
        now = time.monotonic()
        self.ticks += 1
        late = now - self._due
        if late > self.threshold_s:
            loop_cpu = time.thread_time() - self._thread_cpu
            other_cpu = max(0.0, time.process_time() - self._process_cpu - loop_cpu)
            self.stalls.append(Stall(now, (late + self.interval_s) * 1000, loop_cpu * 1000, other_cpu * 1000,
                                     (self._gc_total_s - self._gc_at) * 1000))
        self._schedule()

    def report(self, since: float = 0.0) -> dict[str, Any]:
        """The stalls that ended after `since` (monotonic seconds), worst first, and the GC totals."""
        stalls = sorted((s for s in self.stalls if s.at >= since), key=lambda s: -s.wall_ms)
        return {"ticks": self.ticks, "gc_count": self.gc_count, "gc_max_ms": self.gc_max_ms,
                "gc_total_ms": self._gc_total_s * 1000, "stalls": [asdict(s) for s in stalls]}
