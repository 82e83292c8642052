"""A Producer as a Ray actor: runs a send loop and keeps a record of every acknowledged message.

Threaded (not async): the producer library blocks in `ray.get`, and `max_concurrency` lets
`get_report`/`stop` run while `run_send_loop` is busy.
"""

from __future__ import annotations

import collections
import logging
import random
import threading
import time
from dataclasses import asdict, dataclass
from typing import Any

from actors.runtime.metrics import FLUSH_INTERVAL_S, producer_metrics
from clients.producer.producer import Producer
from namesrv.client.errors import MQClientError
from namesrv.client.message import Message
from namesrv.client.send_engine import FAILED_ATTEMPT_KINDS
from namesrv.common.stats import percentile

log = logging.getLogger(__name__)

RECORDS_KEPT = 500_000
"""Send records kept per producer actor (oldest dropped first, counted in `summary()`): a chaos
soak at 50 sends/s keeps under 3 hours of them, a few hundred bytes each."""


@dataclass(slots=True)
class SendRecord:
    t_ms: int
    topic: str
    ok: bool
    broker_name: str | None
    queue_id: int | None
    queue_offset: int | None
    msg_id: str | None
    latency_ms: float
    attempts: int
    brokers_tried: str
    error: str | None


class ProducerActor:
    def __init__(self, group: str, namespace: str, namesrv: list[str] | None = None, *,
                 records_kept: int = RECORDS_KEPT, **producer_kwargs: Any) -> None:
        self.producer = Producer(group, namesrv=namesrv, namespace=namespace, instance_name=group,
                                 **producer_kwargs).start()
        self.records: collections.deque[SendRecord] = collections.deque(maxlen=records_kept)
        self.records_dropped = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.metrics = producer_metrics(group)
        self._flushed = time.monotonic()
        self._flushed_failures: dict[str, int] = {}

    def run_send_loop(
        self, topics: list[str], rate_per_s: float = 50.0, duration_s: float = 10.0, body_size: int = 128,
        seed: int = 0, max_messages: int | None = None,
    ) -> dict[str, Any]:
        """Send at about `rate_per_s` for `duration_s` (or `max_messages`); returns the summary."""
        rng = random.Random(seed)
        self._stop.clear()
        interval = 1.0 / rate_per_s if rate_per_s > 0 else 0.0
        start = time.monotonic()
        n = 0
        while not self._stop.is_set() and time.monotonic() - start < duration_s:
            if max_messages is not None and n >= max_messages:
                break
            topic = topics[n % len(topics)]
            body = f"{self.producer.group}:{n}:".encode() + rng.randbytes(max(0, body_size - 24))
            self.send_one(topic, body)
            n += 1
            next_at = start + n * interval
            delay = next_at - time.monotonic()
            if delay > 0:
                self._stop.wait(delay)
        with self._lock:
            self.flush_metrics()
        return self.summary()

    def _record_metrics(self, rec: SendRecord) -> None:
        self.metrics.observe("send_latency_ms", rec.latency_ms)
        self.metrics.inc("sends", result="ok" if rec.ok else "failed")
        if rec.attempts > 1:
            self.metrics.inc("retries", rec.attempts - 1)
        if time.monotonic() - self._flushed >= FLUSH_INTERVAL_S:
            self.flush_metrics()

    def flush_metrics(self) -> None:
        """Hand the counts to Ray (every second while sending, and when a send loop ends)."""
        self._flushed = time.monotonic()
        engine = self.producer.engine
        self.metrics.set("isolated_brokers", engine.fault.isolated_count() if engine else 0)
        stats = engine.stats_snapshot() if engine else {}
        for kind in FAILED_ATTEMPT_KINDS:
            total = stats.get(f"failed_attempts.{kind}", 0)
            self.metrics.inc("failed_attempts", total - self._flushed_failures.get(kind, 0), kind=kind)
            self._flushed_failures[kind] = total
        self.metrics.flush()

    def send_one(self, topic: str, body: bytes) -> SendRecord:
        t0 = time.perf_counter()
        t_ms = time.time_ns() // 1_000_000
        try:
            r = self.producer.send(Message(topic, body))
            rec = SendRecord(t_ms, topic, True, r.message_queue.broker_name, r.message_queue.queue_id,
                             r.queue_offset, r.msg_id, (time.perf_counter() - t0) * 1000, r.attempts,
                             ",".join(r.brokers_tried), None)
        except Exception as e:  # recorded, never the end of the send loop
            if not isinstance(e, MQClientError):
                log.exception("send to %s failed unexpectedly", topic)
            tried = getattr(e, "brokers_tried", [])
            rec = SendRecord(t_ms, topic, False, None, None, None, None, (time.perf_counter() - t0) * 1000,
                             len(tried), ",".join(tried), f"{type(e).__name__}: {e}"[:500])
        with self._lock:
            if len(self.records) == self.records.maxlen:
                self.records_dropped += 1
            self.records.append(rec)
            self._record_metrics(rec)
        return rec

    def stop(self) -> None:
        self._stop.set()

    def summary(self) -> dict[str, Any]:
        with self._lock:
            recs = list(self.records)
            dropped = self.records_dropped
        ok = [r for r in recs if r.ok]
        lat = [r.latency_ms for r in ok]

        return {
            "group": self.producer.group,
            "attempted": len(recs),
            "acknowledged": len(ok),
            "failed": len(recs) - len(ok),
            "retried": sum(1 for r in ok if r.attempts > 1),
            "p50_ms": percentile(lat, 0.50),
            "p99_ms": percentile(lat, 0.99),
            "records_dropped": dropped,
            "engine": self.stats(),
        }

    def stats(self) -> dict[str, int]:
        """The send engine's counts: attempts, retries, failed attempts by kind (`failed_attempts.<kind>`)."""
        engine = self.producer.engine
        return engine.stats_snapshot() if engine is not None else {}

    def get_records(self) -> list[dict[str, Any]]:
        with self._lock:
            return [asdict(r) for r in self.records]

    def route_updates(self) -> list[tuple[str, int, str]]:
        assert self.producer.instance is not None
        return list(self.producer.instance.route_updates)

    def route_log(self) -> list[tuple[str, int, str, tuple[str, ...]]]:
        """(topic, epoch ms, source, broker names written to) per route change this producer applied."""
        assert self.producer.instance is not None
        return list(self.producer.instance.route_log)

    def shutdown(self) -> None:
        self.producer.shutdown()
