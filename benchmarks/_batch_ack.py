"""bench_proxy's AckMessage case: one AckMessage of a whole received batch (32 entries) through a
proxy acking one by one (`batch_ack` off: an ACK_MESSAGE per entry, one after the other) and one
batching (a BATCH_ACK per broker, brokers at once), alternately, each on its own topic and group
of the same brokers. Raw gRPC calls from this process (the official Python client acks one message
per call); the proxies' own counts of their broker requests (`broker_requests` in their status)."""

from __future__ import annotations

import statistics
import time
import uuid
from typing import Any

import grpc
import ray

from namesrv.proxy.descriptors import SERVICE, Protocol, load

BATCH = 32


class AckPath:
    """One proxy, a topic and group of its own: send, receive a batch, ack it in one call."""

    def __init__(self, p: Protocol, endpoint: str, proxy: Any, topic: str) -> None:
        self.p, self.proxy, self.topic, self.group = p, proxy, topic, f"GID_ack_{uuid.uuid4().hex[:6]}"
        channel = grpc.insecure_channel(endpoint)
        self._calls = {name: (getattr(channel, "unary_stream" if name == "ReceiveMessage" else "unary_unary")(
            f"/{SERVICE}/{name}", request_serializer=req.SerializeToString, response_deserializer=resp.FromString))
            for name, (req, resp, _, _) in p.methods().items() if name in ("SendMessage", "ReceiveMessage",
                                                                            "AckMessage")}
        self.ack_ms: list[float] = []
        self.requests: list[int] = []

    def send(self, n: int) -> None:
        for i in range(n):
            msg = self.p.new("Message", topic={"name": self.topic}, body=f"ack-bench-{i}".encode(),
                             system_properties={"message_id": uuid.uuid4().hex, "message_type": "NORMAL"})
            answer = self._calls["SendMessage"](self.p.new("SendMessageRequest", messages=[msg]), timeout=10)
            if self.p.enum_name("Code", answer.status.code) != "OK":
                raise RuntimeError(f"send: {answer.status.message}")

    def receive(self, n: int, timeout_s: float = 60) -> list[Any]:
        got: list[Any] = []
        deadline = time.monotonic() + timeout_s
        while len(got) < n:
            if time.monotonic() > deadline:
                raise RuntimeError(f"received {len(got)} of {n}")
            req = self.p.new("ReceiveMessageRequest", group={"name": self.group},
                             message_queue={"topic": {"name": self.topic}}, batch_size=n - len(got),
                             invisible_duration={"seconds": 60}, long_polling_timeout={"seconds": 1})
            got += [r.message for r in self._calls["ReceiveMessage"](req, timeout=15) if r.HasField("message")]
        return got

    def ack_all(self, msgs: list[Any]) -> None:
        entries = [{"message_id": m.system_properties.message_id, "receipt_handle": m.system_properties.receipt_handle}
                   for m in msgs]
        before = _requests(self.proxy)
        t0 = time.perf_counter()
        answer = self._calls["AckMessage"](self.p.new("AckMessageRequest", group={"name": self.group},
                                                      topic={"name": self.topic}, entries=entries), timeout=30)
        self.ack_ms.append((time.perf_counter() - t0) * 1000)
        self.requests.append(_requests(self.proxy) - before)
        if self.p.enum_name("Code", answer.status.code) != "OK":
            raise RuntimeError(f"ack: {answer.status.message}")


def _requests(proxy: Any) -> int:
    counts = ray.get(proxy.get_status.remote())["broker_requests"]
    return int(counts.get("ACK_MESSAGE", 0) + counts.get("BATCH_ACK_MESSAGE", 0))


def bench_batch_ack(paths: dict[str, tuple[str, Any, str]], rounds: int) -> dict[str, dict[str, float]]:
    """`paths`: label -> (endpoint, proxy actor, topic). Each round sends BATCH messages to each
    path's topic, receives them, and times the AckMessage of all of them, the paths' order swapped
    every round. Per path: median and p90 ms of an AckMessage, broker requests per AckMessage."""
    p = load()
    runs = {label: AckPath(p, endpoint, proxy, topic) for label, (endpoint, proxy, topic) in paths.items()}
    for r in range(rounds):
        order = list(runs.values()) if r % 2 == 0 else list(reversed(runs.values()))
        for path in order:
            path.send(BATCH)
            path.ack_all(path.receive(BATCH))
    return {label: {"p50_ms": statistics.median(run.ack_ms),
                    "p90_ms": sorted(run.ack_ms)[min(len(run.ack_ms) - 1, int(len(run.ack_ms) * 0.9))],
                    "requests": statistics.mean(run.requests)} for label, run in runs.items()}
