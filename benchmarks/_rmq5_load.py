"""Load from the official RocketMQ 5 Python client (PyPI rocketmq-python-client) for bench_proxy. Runs
in the client's own venv (.venv-rmq5: its package `rocketmq` collides with the 4.x client's):

    python benchmarks/_rmq5_load.py produce ENDPOINT TOPIC COUNT BODY_SIZE
    python benchmarks/_rmq5_load.py consume ENDPOINT TOPIC GROUP TOTAL TIMEOUT_S
    python benchmarks/_rmq5_load.py raw ENDPOINT TOPIC COUNT BODY_SIZE

`produce` sends COUNT sync messages back to back and prints one JSON line per send ({"t": its end on
the monotonic clock, "latency_ms"} or {"t", "error"}); `consume` receives (32 at a time, 30 s
invisible) and acks each, one by one, until TOTAL distinct messages came, one line per first receipt
({"t", "id"}), then {"t", "acked"}; `raw` calls the proxy through the wheel's generated stub alone (no
client library): COUNT Heartbeats, then COUNT SendMessages, back to back, one line per call
({"rpc", "latency_ms"}). All end with {"done": ...}. Nothing here imports the project."""

from __future__ import annotations

import json
import sys
import time
import uuid

import grpc
from rocketmq import ClientConfiguration, Credentials, FilterExpression, Message, Producer, SimpleConsumer
from rocketmq.grpc_protocol import definition_pb2, service_pb2, service_pb2_grpc


def padded(text: str, size: int) -> bytes:
    """`text` padded with "x" to `size` bytes (a message body of the benchmark's size)."""
    body = text.encode()
    return body + b"x" * max(0, size - len(body))


def produce(endpoint: str, topic: str, count: int, body_size: int) -> None:
    producer = Producer(ClientConfiguration(endpoint, Credentials()), (topic,))
    producer.startup()
    ok = 0
    try:
        for i in range(count):
            m = Message()
            m.topic = topic
            m.body = padded(f"rmq5-{i}", body_size)
            t0 = time.monotonic()
            try:
                producer.send(m)
                ok += 1
                print(json.dumps({"t": time.monotonic(), "latency_ms": (time.monotonic() - t0) * 1000}))
            except Exception as e:  # reported, the run goes on: the caller counts failures
                print(json.dumps({"t": time.monotonic(), "error": f"{type(e).__name__}: {e}"}))
    finally:
        producer.shutdown()
    print(json.dumps({"done": {"sent": ok}}), flush=True)


def consume(endpoint: str, topic: str, group: str, total: int, timeout_s: float) -> None:
    consumer = SimpleConsumer(ClientConfiguration(endpoint, Credentials()), group,
                              {topic: FilterExpression("*")}, await_duration=1)
    consumer.startup()
    seen: set[str] = set()
    deliveries = 0
    deadline = time.monotonic() + timeout_s
    try:
        while len(seen) < total and time.monotonic() < deadline:
            for m in consumer.receive(32, 30):
                deliveries += 1
                consumer.ack(m)  # one by one: 5.1.2's ack_async returns no future (its callback executor is None)
                if m.message_id not in seen:
                    seen.add(m.message_id)
                    print(json.dumps({"t": time.monotonic(), "id": m.message_id}))
        print(json.dumps({"t": time.monotonic(), "acked": deliveries}))
    finally:
        consumer.shutdown()
    print(json.dumps({"done": {"distinct": len(seen), "deliveries": deliveries}}), flush=True)


def raw(endpoint: str, topic: str, count: int, body_size: int) -> None:
    """The bare gRPC calls under a send: a Heartbeat (the call alone) and a SendMessage (the call, the
    proxy's work and its send to a broker), each timed from the stub's call to its answer."""
    stub = service_pb2_grpc.MessagingServiceStub(grpc.insecure_channel(endpoint))
    metadata = [("x-mq-client-id", f"raw-{uuid.uuid4().hex[:8]}"), ("x-mq-language", "PYTHON"),
                ("x-mq-protocol", "v2")]
    heartbeat = service_pb2.HeartbeatRequest(client_type=definition_pb2.PRODUCER)
    for _ in range(count):
        t0 = time.monotonic()
        stub.Heartbeat(heartbeat, metadata=metadata)
        print(json.dumps({"rpc": "Heartbeat", "latency_ms": (time.monotonic() - t0) * 1000}))
    for i in range(count):
        m = definition_pb2.Message()
        m.topic.name = topic
        m.body = padded(f"raw-{i}", body_size)
        m.system_properties.message_id = uuid.uuid4().hex.upper()
        m.system_properties.message_type = definition_pb2.NORMAL
        m.system_properties.body_encoding = definition_pb2.IDENTITY
        t0 = time.monotonic()
        answer = stub.SendMessage(service_pb2.SendMessageRequest(messages=[m]), metadata=metadata)
        if answer.status.code != definition_pb2.OK:
            raise SystemExit(f"SendMessage answered {answer.status}")
        print(json.dumps({"rpc": "SendMessage", "latency_ms": (time.monotonic() - t0) * 1000}))
    print(json.dumps({"done": {"calls": 2 * count}}), flush=True)


if __name__ == "__main__":
    mode, args = sys.argv[1], sys.argv[2:]
    if mode == "produce":
        produce(args[0], args[1], int(args[2]), int(args[3]))
    elif mode == "consume":
        consume(args[0], args[1], args[2], int(args[3]), float(args[4]))
    elif mode == "raw":
        raw(args[0], args[1], int(args[2]), int(args[3]))
    else:
        raise SystemExit(f"unknown mode {mode!r}: produce, consume or raw")
