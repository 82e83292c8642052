"""The request metrics hook's local aggregation: counts bumped in place reach the flush exactly,
latencies are sampled at most SAMPLES_PER_FLUSH per flush, nothing is carried into the next one."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from actors.runtime.metrics import SAMPLES_PER_FLUSH, Metrics, RequestMetricsHook
from namesrv.remoting.command import RemotingRequest, RemotingResponse
from namesrv.remoting.pipeline import RequestContext


class Recorder:
    def __init__(self) -> None:
        self.values: dict[tuple[Any, ...], list[float]] = defaultdict(list)

    def inc(self, value: float, tags: dict[str, str]) -> None:
        self.values[tuple(sorted(tags.items()))].append(value)

    observe = inc


def metrics() -> tuple[Metrics, Recorder, Recorder]:
    m = Metrics("namesrv", "t")
    counts, latencies = Recorder(), Recorder()
    m._counters = {"requests": counts}  # type: ignore[dict-item]
    m._histograms = {"request_latency_ms": latencies}  # type: ignore[dict-item]
    return m, counts, latencies


def test_counts_and_samples_per_code_result_and_transport_reach_each_flush_once() -> None:
    m, counts, latencies = metrics()
    hook = RequestMetricsHook(m)
    tcp, ray = RequestContext("tcp:1", "127.0.0.1:5"), RequestContext()
    for i in range(250):
        hook.after(RemotingRequest(105), tcp, RemotingResponse(), float(i))
    for _ in range(3):
        hook.after(RemotingRequest(105), tcp, RemotingResponse(code=17), 1.0)
        hook.after(RemotingRequest(105), ray, RemotingResponse(), 2.0)
    m.inc_key(Metrics.key("requests", code=105, result="SUCCESS", transport="tcp"), 2)  # beside a tally
    m.flush()
    tag = (("code", "105"), ("owner", "t"))
    assert counts.values[(*tag, ("result", "SUCCESS"), ("transport", "tcp"))] == [252]
    assert counts.values[(*tag, ("result", "TOPIC_NOT_EXIST"), ("transport", "tcp"))] == [3]
    assert counts.values[(*tag, ("result", "SUCCESS"), ("transport", "ray"))] == [3]
    samples = latencies.values[(("code", "105"), ("owner", "t"))]
    assert len(samples) == SAMPLES_PER_FLUSH, "one reservoir per code, whatever the result"
    assert set(samples) <= {float(i) for i in range(250)} | {1.0, 2.0}

    counts.values.clear()
    latencies.values.clear()
    m.flush()
    assert not counts.values and not latencies.values, "nothing counted twice"
    hook.after(RemotingRequest(105), tcp, RemotingResponse(), 7.0)
    m.flush()
    assert counts.values[(*tag, ("result", "SUCCESS"), ("transport", "tcp"))] == [1]
    assert latencies.values[(("code", "105"), ("owner", "t"))] == [7.0]


def test_a_made_up_code_is_counted_without_keeping_a_tally() -> None:
    m, counts, _ = metrics()
    hook = RequestMetricsHook(m)
    hook.after(RemotingRequest("x"), RequestContext(), RemotingResponse(code=1), 1.0)  # type: ignore[arg-type]
    m.flush()
    assert sum(v[0] for v in counts.values.values()) == 1
    assert not hook._tallies


def test_every_count_the_broker_processors_keep_is_a_declared_broker_counter() -> None:
    """The processors count into `ctx.stats[(kind, result)]` and the broker's flush hands each kind to
    the counter of that name: a kind with no declared counter failed every flush (KeyError 'pops').
    Every kind the broker's code counts must be declared, with a result tag unless it is untagged."""
    import re
    from pathlib import Path

    from actors.runtime.metrics import BROKER_UNTAGGED, broker_metrics

    root = Path(__file__).resolve().parents[3] / "namesrv" / "broker"
    counted = {m.group(1) for f in root.rglob("*.py")
               for m in re.finditer(r'stats\[\("(\w+)",', f.read_text())}
    assert {"sends", "pulls", "pops", "pop_acks"} <= counted
    declared = broker_metrics("t")
    assert counted <= set(declared._counters), f"counted but not declared: {counted - set(declared._counters)}"
    assert BROKER_UNTAGGED <= counted
