"""Metrics in Prometheus format through Ray (`ray.util.metrics`): they appear on every node's
metrics endpoint (and in Ray's dashboard) as `ray_namesrv_*`, `ray_broker_*` and `ray_producer_*`.

Recording a Ray metric costs 5-8 µs, a tenth of a route query over TCP, so the hot path only bumps
local counters; a control-loop step hands the totals to Ray every second. Latencies are sampled
into the histogram (at most SAMPLES_PER_FLUSH per flush, uniformly), so its buckets give the
distribution while `..._requests_total` gives the exact count.
"""

from __future__ import annotations

import collections
import random
from collections.abc import Sequence
from typing import Any

from ray.util.metrics import Counter, Gauge, Histogram

from namesrv.protocol.codes import ResponseCode
from namesrv.remoting.command import RemotingRequest, RemotingResponse
from namesrv.remoting.pipeline import RAY_REMOTE, RequestContext, RPCHook

MetricKey = tuple[str, tuple[tuple[str, str], ...]]
"""A metric's name and its sorted (tag, value) pairs."""

FLUSH_INTERVAL_S = 1.0
SAMPLES_PER_FLUSH = 100
LATENCY_BOUNDARIES_MS = [0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5, 10, 25, 50, 100, 250, 1000]
DELAY_BOUNDARIES_MS = [10.0, 50, 100, 500, 1000, 5000, 10_000, 30_000, 60_000, 120_000, 300_000]


class Reservoir:
    """A metric's latency samples since the last flush: every observation has the same chance to be
    kept (at most SAMPLES_PER_FLUSH, in a uniform slot)."""

    __slots__ = ("rng", "samples", "seen")

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.seen = 0
        self.samples: list[float] = []

    def add(self, value: float) -> None:
        seen = self.seen = self.seen + 1
        samples = self.samples
        if len(samples) < SAMPLES_PER_FLUSH:
            samples.append(value)
        else:  # kept with chance SAMPLES_PER_FLUSH / seen (one random() draw, cheaper than randrange)
            j = self.rng.random() * seen
            if j < SAMPLES_PER_FLUSH:
                samples[int(j)] = value


class Tally:
    """A counter bumped in place on a hot path (`count += 1`, no lookup), added to its metric at
    the next flush; with the reservoir of the latency that goes with it."""

    __slots__ = ("count", "reservoir")

    def __init__(self, reservoir: Reservoir) -> None:
        self.count = 0
        self.reservoir = reservoir


class Metrics:
    """Local aggregation in front of Ray's metrics: `inc`, `observe` and `set` are cheap; `flush`
    (from a control-loop step) records them."""

    def __init__(self, prefix: str, owner: str) -> None:
        self.prefix = prefix
        self.owner = owner
        self._counters: dict[str, Counter] = {}
        self._histograms: dict[str, Histogram] = {}
        self._gauges: dict[str, Gauge] = {}
        self._counts: dict[MetricKey, float] = collections.defaultdict(float)
        self._reservoirs: dict[MetricKey, Reservoir] = {}
        self._tallies: dict[MetricKey, Tally] = {}
        self._values: dict[MetricKey, float] = {}
        self._rng = random.Random()

    def counter(self, name: str, description: str, tag_keys: Sequence[str] = ()) -> None:
        self._counters[name] = Counter(f"{self.prefix}_{name}", description=description,
                                       tag_keys=("owner", *tag_keys))

    def histogram(self, name: str, description: str, boundaries: list[float], tag_keys: Sequence[str] = ()) -> None:
        self._histograms[name] = Histogram(f"{self.prefix}_{name}", description=description, boundaries=boundaries,
                                           tag_keys=("owner", *tag_keys))

    def gauge(self, name: str, description: str, tag_keys: Sequence[str] = ()) -> None:
        self._gauges[name] = Gauge(f"{self.prefix}_{name}", description=description, tag_keys=("owner", *tag_keys))

    # ------------------------------------------------------------------ the cheap part
    def inc(self, name: str, value: float = 1, **tags: Any) -> None:
        if value <= 0:  # a Ray counter only goes up
            return
        self._counts[(name, tuple(sorted((k, str(v)) for k, v in tags.items())))] += value

    def observe(self, name: str, value: float, **tags: Any) -> None:
        """Reservoir sampling: every observation has the same chance to reach the histogram."""
        self.observe_key(self.key(name, **tags), value)

    @staticmethod
    def key(name: str, **tags: Any) -> MetricKey:
        """A metric and its tags, as `inc_key` and `observe_key` take them: a hot path builds it once."""
        return (name, tuple(sorted((k, str(v)) for k, v in tags.items())))

    def inc_key(self, key: MetricKey, value: float = 1) -> None:
        """`inc` of a prebuilt key."""
        if value > 0:
            self._counts[key] += value

    def observe_key(self, key: MetricKey, value: float) -> None:
        """`observe` of a prebuilt key."""
        self.reservoir(key).add(value)

    def reservoir(self, key: MetricKey) -> Reservoir:
        """The samples of histogram `key` since the last flush (kept across flushes: a hot path may
        hold it)."""
        reservoir = self._reservoirs.get(key)
        if reservoir is None:
            reservoir = self._reservoirs[key] = Reservoir(self._rng)
        return reservoir

    def tally(self, counter: MetricKey, latency: MetricKey) -> Tally:
        """A counter `counter` to bump in place, with the latency histogram `latency` beside it;
        both reach Ray at the next flush, as `inc_key` and `observe_key` would."""
        tally = self._tallies.get(counter)
        if tally is None:
            tally = self._tallies[counter] = Tally(self.reservoir(latency))
        return tally

    def set(self, name: str, value: float, **tags: Any) -> None:
        self._values[(name, tuple(sorted((k, str(v)) for k, v in tags.items())))] = value

    # ------------------------------------------------------------------ the Ray part
    def flush(self) -> None:
        counts, self._counts = self._counts, collections.defaultdict(float)
        for key, tally in self._tallies.items():
            if tally.count:
                counts[key] += tally.count
                tally.count = 0
        samples: dict[MetricKey, list[float]] = {}
        for key, reservoir in self._reservoirs.items():
            if reservoir.samples:
                samples[key], reservoir.samples = reservoir.samples, []
            reservoir.seen = 0
        for (name, tags), value in counts.items():
            self._counters[name].inc(value, tags={"owner": self.owner, **dict(tags)})
        for (name, tags), values in samples.items():
            for v in values:
                self._histograms[name].observe(v, tags={"owner": self.owner, **dict(tags)})
        for (name, tags), value in self._values.items():
            self._gauges[name].set(value, tags={"owner": self.owner, **dict(tags)})


class _NoMetrics(Metrics):
    """Records nothing (a controller built outside Ray, e.g. in a unit test)."""

    def __init__(self) -> None:
        super().__init__("none", "")

    def inc(self, name: str, value: float = 1, **tags: Any) -> None:
        pass

    def observe(self, name: str, value: float, **tags: Any) -> None:
        pass

    def set(self, name: str, value: float, **tags: Any) -> None:
        pass

    def inc_key(self, key: MetricKey, value: float = 1) -> None:
        pass

    def observe_key(self, key: MetricKey, value: float) -> None:
        pass

    def flush(self) -> None:
        pass


NO_METRICS = _NoMetrics()


def namesrv_metrics(owner: str) -> Metrics:
    m = Metrics("namesrv", owner)
    m.counter("requests", "NameServer requests by request code, answer code and transport",
              ("code", "result", "transport"))
    m.histogram("request_latency_ms", "NameServer request handling time (sampled)", LATENCY_BOUNDARIES_MS, ("code",))
    m.gauge("live_brokers", "Broker addresses in the live table")
    m.gauge("topics", "Topics with a route")
    m.counter("broker_removals", "Broker addresses removed, by cause (channel, expired, unregister, refused)",
              ("cause",))
    m.histogram("broker_removal_delay_ms", "Time from a removed broker's last heartbeat to its removal",
                DELAY_BOUNDARIES_MS, ("cause",))
    m.gauge("long_poll_waiters", "Route long-polls waiting")
    m.counter("long_poll_pushes", "Route long-polls answered because a route changed")
    m.counter("registration_bytes", "REGISTER_BROKER body bytes received")
    m.counter("acl_rejections", "Requests refused by the ACL, by reason", ("reason",))
    return m


def broker_metrics(owner: str) -> Metrics:
    m = Metrics("broker", owner)
    m.counter("sends", "Messages offered to the broker, by answer code", ("result",))
    m.counter("pulls", "PULL_MESSAGE answers, by answer code", ("result",))
    m.counter("pulled_messages", "Messages handed out by pulls")
    m.counter("pops", "POP_MESSAGE answers, by whether they found messages", ("result",))
    m.counter("pop_acks", "Popped messages acknowledged (ACK_MESSAGE and BATCH_ACK entries)")
    m.counter("pop_changes", "CHANGE_MESSAGE_INVISIBLETIME requests applied")
    m.gauge("store_size_bytes", "Commit log bytes kept (max offset minus min: what retention deleted left out)")
    m.gauge("messages", "Messages in the store")
    m.counter("acl_rejections", "Requests refused by the ACL, by reason", ("reason",))
    return m


BROKER_UNTAGGED = frozenset({"pulled_messages", "pop_acks", "pop_changes"})
"""The broker's counters that carry no result tag (the processor counts them under result "")."""


def producer_metrics(owner: str) -> Metrics:
    m = Metrics("producer", owner)
    m.histogram("send_latency_ms", "Sync send latency, every attempt included (sampled)", LATENCY_BOUNDARIES_MS)
    m.counter("sends", "Sync sends by outcome", ("result",))
    m.counter("retries", "Send attempts beyond the first")
    m.counter("failed_attempts", "Send attempts that failed, by kind (broker_error, no_answer, unexpected)",
              ("kind",))
    m.gauge("isolated_brokers", "Brokers the latency fault tolerance currently avoids")
    return m


def _result_name(code: int) -> str:
    try:
        return ResponseCode(code).name
    except ValueError:
        return str(code)


class RequestMetricsHook(RPCHook):
    """Counts every answered request by code, result and transport, and samples its latency. The
    tag keys are built once per (code, result, transport), and each such key's count is a `Tally`
    bumped in place, added up at the flush."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics
        self._tallies: dict[tuple[int, int, bool], Tally] = {}

    def after(self, request: RemotingRequest, ctx: RequestContext, response: RemotingResponse,
              elapsed_ms: float) -> None:
        code = request.code
        which = (code, response.code, ctx.remote == RAY_REMOTE)
        tally = self._tallies.get(which) if type(code) is int else None  # a malformed code may not hash
        if tally is None:
            counter = Metrics.key("requests", code=code, result=_result_name(response.code), transport=ctx.transport)
            latency = Metrics.key("request_latency_ms", code=code)
            if type(code) is not int or len(self._tallies) >= 10_000:  # bounded: a caller may make codes up
                self.metrics.inc_key(counter)
                self.metrics.observe_key(latency, elapsed_ms)
                return
            tally = self._tallies[which] = self.metrics.tally(counter, latency)
        tally.count += 1
        tally.reservoir.add(elapsed_ms)
