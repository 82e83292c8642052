"""bench_registration's probes: what watches the NameServer while brokers register.

`query_loop` is the route-query process (spawned: GET_ROUTEINFO_BY_TOPIC back to back over its own
connection, every answer timestamped on CLOCK_MONOTONIC); `QueryLog` turns its timestamps into a
window's figures (rate, p50/p99/max, the longest gap between answers); `RssSampler` samples the
NameServer process's RSS and CPU.
"""

from __future__ import annotations

import bisect
import itertools
import threading
import time
from array import array
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

import psutil
from _common import pct_ms

from namesrv.protocol.codes import RequestCode, ResponseCode
from namesrv.remoting.client import RemotingClient


def query_loop(host: str, port: int, topics: list[str], stop: Any, out: Connection) -> None:
    """Route queries back to back until `stop` is set; then send (answer times, latencies, codes)."""
    client = RemotingClient(host, port, timeout_s=600)
    times, lats, codes = array("d"), array("d"), array("i")
    invoke, code, i = client.invoke, RequestCode.GET_ROUTEINFO_BY_TOPIC, 0
    while not stop.is_set():
        t0 = time.monotonic()
        answer = invoke(code, {"topic": topics[i % len(topics)]})
        t1 = time.monotonic()
        times.append(t1)
        lats.append(t1 - t0)
        codes.append(answer.code)
        if i == 0:
            out.send("ready")
        i += 1
    client.close()
    out.send((times.tobytes(), lats.tobytes(), codes.tobytes()))


@dataclass
class QueryLog:
    times: array[float]
    lats: array[float]
    codes: array[int]

    def window(self, start: float, end: float) -> dict[str, Any]:
        """Route-query figures of the answers that arrived in [start, end]."""
        i0, i1 = bisect.bisect_left(self.times, start), bisect.bisect_right(self.times, end)
        lats = self.lats[i0:i1]
        # gaps between consecutive answers, counting the one that straddles the window's start
        stamps = [start if i0 == 0 else max(start, self.times[i0 - 1]), *self.times[i0:i1]]
        gaps = [b - a for a, b in itertools.pairwise(stamps)]
        worst = max(range(len(gaps)), key=gaps.__getitem__) if gaps else None
        seconds = end - start
        return {
            "answers": len(lats),
            "qps": len(lats) / seconds if seconds > 0 else float("nan"),
            "not_found": sum(1 for c in self.codes[i0:i1] if c == ResponseCode.TOPIC_NOT_EXIST),
            "errors": sum(1 for c in self.codes[i0:i1] if c not in (ResponseCode.SUCCESS,
                                                                    ResponseCode.TOPIC_NOT_EXIST)),
            "p50_ms": pct_ms(lats, 0.5),
            "p99_ms": pct_ms(lats, 0.99),
            "max_ms": max(lats) * 1000 if lats else float("nan"),
            "gap_ms": gaps[worst] * 1000 if worst is not None else float("nan"),
            "gap_at_s": stamps[worst] - start if worst is not None else float("nan"),
        }


class RssSampler:
    """The NameServer process's RSS, sampled every `every_s` in a thread; `peak` since `reset`."""

    def __init__(self, pid: int, every_s: float = 0.1) -> None:
        self.proc = psutil.Process(pid)
        self.every_s = every_s
        self.peak = self.now()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def now(self) -> int:
        return int(self.proc.memory_info().rss)

    def cpu_s(self) -> float:
        t = self.proc.cpu_times()
        return float(t.user + t.system)

    def reset(self) -> None:
        self.peak = self.now()

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            try:
                self.peak = max(self.peak, self.now())
            except psutil.Error:
                return

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def loop_stalls(probe: dict[str, Any], start: float, end: float, worst: int = 3) -> list[str]:
    """Lines on the NameServer's own loop stalls (namesrv.common.loop_probe) between start and end: how many,
    and the worst ones split by cause (the loop computing, other threads of its process, GC, and
    the rest: the process not run at all)."""
    stalls = [s for s in probe.get("stalls", []) if start <= s["at"] <= end + 0.05]
    lines = [f"NameServer loop stalls over 5 ms: {len(stalls)}; GC so far {probe.get('gc_count', 0)} collections, "
             f"longest {probe.get('gc_max_ms', 0.0):.1f} ms"]
    for s in stalls[:worst]:
        rest = max(0.0, s["wall_ms"] - s["loop_cpu_ms"] - s["other_cpu_ms"])
        lines.append(f"  stall {s['wall_ms']:6.1f} ms at +{s['at'] - start:6.2f} s: loop thread CPU "
                     f"{s['loop_cpu_ms']:5.1f} (GC {s['gc_ms']:4.1f}), other threads CPU {s['other_cpu_ms']:5.1f}, "
                     f"not run {rest:5.1f}")
    return lines
