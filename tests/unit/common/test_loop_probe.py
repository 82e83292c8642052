"""The loop-lag probe (namesrv.common.loop_probe) records a held loop as a stall and splits it by cause:
the loop's own CPU, GC, and time the loop thread did not compute (here: it slept)."""

from __future__ import annotations

import asyncio
import gc
import time

from namesrv.common.loop_probe import LoopProbe


async def _held(probe: LoopProbe, hold: str) -> None:
    probe.start()
    try:
        await asyncio.sleep(0.01)  # a few ticks on time
        started = time.monotonic()
        if hold == "sleep":
            time.sleep(0.04)  # the loop held, its thread not computing
        else:
            while time.monotonic() - started < 0.04:  # the loop computing
                pass
            gc.collect()
        await asyncio.sleep(0.01)  # the late tick runs, then more on time
    finally:
        probe.stop()


def test_a_loop_held_by_a_sleep_is_one_stall_with_little_loop_cpu() -> None:
    probe = LoopProbe(interval_s=0.002, threshold_s=0.005)
    asyncio.run(_held(probe, "sleep"))
    report = probe.report()
    assert report["ticks"] >= 3
    worst = report["stalls"][0]
    assert worst["wall_ms"] >= 35
    assert worst["loop_cpu_ms"] < worst["wall_ms"] / 2, "a sleeping thread computes nothing"
    assert probe.report(since=time.monotonic() + 1)["stalls"] == [], "`since` leaves earlier stalls out"


def test_a_loop_held_by_computing_and_a_collection_shows_them_in_its_stall() -> None:
    probe = LoopProbe(interval_s=0.002, threshold_s=0.005)
    asyncio.run(_held(probe, "compute"))
    worst = probe.report()["stalls"][0]
    assert worst["wall_ms"] >= 35
    assert worst["loop_cpu_ms"] > 0 and worst["gc_ms"] > 0
    assert probe.gc_count >= 1 and gc.callbacks.count(probe._on_gc) == 0, "stop() removed its GC callback"
