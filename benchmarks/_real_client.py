"""The real RocketMQ client (PyPI `rocketmq` 0.4.4, rocketmq-client-cpp) as the benchmarks' baseline:
sync sends and PushConsumer consumption in a process of its own (clients/interop/real_client.py),
and the figures taken from its per-message lines. Shared by bench_clients, bench_consumer and
bench_proxy."""

from __future__ import annotations

import subprocess
import time
import uuid
from typing import Any

from _common import pct_ms

from clients.interop.real_client import command, parse_lines


def run_real(*args: str, timeout_s: float) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    out = subprocess.run(command(*args), capture_output=True, text=True, timeout=timeout_s)
    records, done = parse_lines(out.stdout)
    if done is None:
        raise RuntimeError(f"real client {args[0]} failed (exit {out.returncode}): {out.stderr[-1000:]}")
    return records, done


def send_figures(t_end: list[float], latencies_s: list[float], warmup: int) -> dict[str, Any]:
    """sends/s over the measured sends (after `warmup`): their count over the time from the end of
    the last warm-up send to the end of the last one; their latencies; `acked`, every acknowledged
    send counted (warm-up included: what a consumer of the topic will find)."""
    lat = latencies_s[warmup:]
    wall = t_end[-1] - t_end[warmup - 1] if warmup else t_end[-1] - t_end[0] + latencies_s[0]
    return {"per_s": len(lat) / wall, "p50_ms": pct_ms(lat, 0.5), "p99_ms": pct_ms(lat, 0.99), "lat": lat,
            "wall_s": wall, "acked": len(latencies_s)}


def median_index(values: list[float]) -> int:
    """The index of the median value (the lower one of an even count)."""
    order = sorted(range(len(values)), key=values.__getitem__)
    return order[(len(order) - 1) // 2]


def bench_real_sends(addr: str, topic: str, count: int, warmup: int, body_size: int) -> dict[str, Any]:
    records, _ = run_real("produce", addr, topic, str(count + warmup), "--body-size", str(body_size),
                          "--group", f"PID_bench_{uuid.uuid4().hex[:6]}", "--prefix", "real",
                          timeout_s=600)
    failed = [r for r in records[warmup:] if "error" in r]
    if failed:
        raise RuntimeError(f"{len(failed)} real-client sends failed, e.g. {failed[0]['error']}")
    warm_failed = [r for r in records[:warmup] if "error" in r]
    if warm_failed:  # the C++ client's first route fetch can race its start: what the warm-up is for
        print(f"  ({len(warm_failed)} of the real client's {warmup} warm-up sends failed, e.g. "
              f"{warm_failed[0]['error']})")
    ok = [r for r in records if "error" not in r]
    return send_figures([r["t"] for r in ok], [r["latency_ms"] / 1000 for r in ok], warmup - len(warm_failed))


def bench_real_consume(addr: str, topic: str, total: int) -> dict[str, Any]:
    t0 = time.monotonic()
    records, done = run_real("consume", addr, f"CID_bench_{uuid.uuid4().hex[:6]}", topic, str(total),
                             "--timeout", "300", timeout_s=400)
    if done["distinct"] < total:
        raise RuntimeError(f"the real consumer got {done['distinct']} of {total} messages")
    first: dict[str, float] = {}
    for r in records:  # the first delivery of each message (a redelivery is not progress)
        first.setdefault(r["msg_id"], r["t"])
    times = sorted(first.values())
    return {"per_s": (len(times) - 1) / (times[-1] - times[0]), "first_delivery_s": times[0] - t0,
            "deliveries": done["deliveries"], "distinct": done["distinct"]}
