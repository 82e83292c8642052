"""A Producer as a Ray actor: runs a send loop and keeps a record of every acknowledged message.

Threaded (not async): the producer library blocks in `ray.get`, and `max_concurrency` lets
`get_report`/`stop` run while `run_send_loop` is busy.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from dataclasses import asdict, dataclass
from typing import Any

from actors.producer import Producer
from namesrv.client.message import Message, MQClientError

log = logging.getLogger(__name__)


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
    def __init__(self, group: str, namespace: str, namesrv: list[str] | None = None, **producer_kwargs: Any) -> None:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        self.producer = Producer(group, namesrv=namesrv, namespace=namespace, instance_name=group,
                                 **producer_kwargs).start()
        self.records: list[SendRecord] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()

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
        return self.summary()

    def send_one(self, topic: str, body: bytes) -> SendRecord:
        t0 = time.perf_counter()
        t_ms = time.time_ns() // 1_000_000
        try:
            r = self.producer.send(Message(topic, body))
            rec = SendRecord(t_ms, topic, True, r.message_queue.broker_name, r.message_queue.queue_id,
                             r.queue_offset, r.msg_id, (time.perf_counter() - t0) * 1000, r.attempts,
                             ",".join(r.brokers_tried), None)
        except MQClientError as e:
            tried = getattr(e, "brokers_tried", [])
            rec = SendRecord(t_ms, topic, False, None, None, None, None, (time.perf_counter() - t0) * 1000,
                             len(tried), ",".join(tried), str(e)[:500])
        with self._lock:
            self.records.append(rec)
        return rec

    def stop(self) -> None:
        self._stop.set()

    def summary(self) -> dict[str, Any]:
        with self._lock:
            recs = list(self.records)
        ok = [r for r in recs if r.ok]
        lat = sorted(r.latency_ms for r in ok)

        def pct(p: float) -> float | None:
            return lat[min(len(lat) - 1, int(p * len(lat)))] if lat else None

        return {
            "group": self.producer.group,
            "attempted": len(recs),
            "acknowledged": len(ok),
            "failed": len(recs) - len(ok),
            "retried": sum(1 for r in ok if r.attempts > 1),
            "p50_ms": pct(0.50),
            "p99_ms": pct(0.99),
        }

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
