"""Drives the real RocketMQ client library (PyPI `rocketmq`, rocketmq-client-cpp inside) in its own
process, so its threads and global state never share a process with pytest or Ray:

    python -m clients.interop.real_client produce NAMESRV_ADDR TOPIC COUNT [--rate R] [--group G] [--tag T]
    python -m clients.interop.real_client consume NAMESRV_ADDR GROUP TOPIC COUNT [--timeout S] [--expression E]

Each prints one JSON object per line as it happens: what was sent (with the broker's answer) or
each delivery received, then a final {"done": ...} line. A send that fails is reported with its
error, not raised. Every record carries `t`, the process's monotonic clock when it happened, so a
reader can time a stretch of the run (the benchmark leaves out start-up this way). The tests, the
demo (`namesrv demo --real-client`) and benchmarks/bench_clients.py all run this one script.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from typing import Any


def command(*args: str) -> list[str]:
    """The argv that runs this script with `args` in a process of its own, under this Python."""
    return [sys.executable, "-m", "clients.interop.real_client", *args]


def parse_lines(stdout: str) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """The records a run printed, and its final {"done": ...} line (None when it never got there)."""
    lines = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    if lines and "done" in lines[-1]:
        return lines[:-1], lines[-1]
    return lines, None


def produce(args: argparse.Namespace) -> None:
    from rocketmq.client import Message, Producer

    producer = Producer(args.group, timeout=args.send_timeout_ms)
    producer.set_namesrv_addr(args.namesrv)
    producer.start()
    sent = failed = 0
    start = time.monotonic()
    for i in range(args.count):
        msg = Message(args.topic)
        msg.set_keys(f"key-{i}")
        msg.set_tags(args.tag)
        msg.set_property("seq", str(i))
        msg.set_property("origin", "real-client")
        body = f"{args.prefix}-{i}"
        body += "x" * (args.body_size - len(body))  # padded to --body-size bytes (none by default)
        msg.set_body(body)
        if args.delay_level:
            msg.set_delay_time_level(args.delay_level)
        t0 = time.monotonic()
        try:
            r = producer.send_sync(msg)
            t1 = time.monotonic()
            record = {"seq": i, "body": body, "status": int(r.status), "msg_id": r.msg_id, "offset": r.offset,
                      "latency_ms": (t1 - t0) * 1000, "t": t1}
            sent += 1
        except Exception as e:  # the client raises on a send it gave up on
            t1 = time.monotonic()
            record = {"seq": i, "body": body, "error": f"{type(e).__name__}: {e}"[:300],
                      "latency_ms": (t1 - t0) * 1000, "t": t1}
            failed += 1
        print(json.dumps(record), flush=True)
        if i == 0:  # pacing starts once the first send (route lookup, connections) is done
            start = time.monotonic() - (1 / args.rate if args.rate else 0.0)
        if args.rate:
            delay = start + (i + 1) / args.rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
    print(json.dumps({"done": "produce", "sent": sent, "failed": failed,
                      "seconds": time.monotonic() - start}), flush=True)
    producer.shutdown()


def consume(args: argparse.Namespace) -> None:
    from rocketmq.client import PushConsumer

    seen: dict[str, dict[str, object]] = {}
    deliveries = 0
    lock = threading.Lock()

    def on_message(msg: object) -> None:
        nonlocal deliveries
        record = {"msg_id": msg.id.decode() if isinstance(msg.id, bytes) else msg.id,  # type: ignore[attr-defined]
                  "body": msg.body.decode(), "tags": msg.tags.decode(), "keys": msg.keys.decode(),  # type: ignore[attr-defined]
                  "seq": msg.get_property("seq").decode(), "origin": msg.get_property("origin").decode(),  # type: ignore[attr-defined]
                  "queue_id": msg.queue_id, "queue_offset": msg.queue_offset,  # type: ignore[attr-defined]
                  "reconsume_times": msg.reconsume_times,  # type: ignore[attr-defined]
                  "t": time.monotonic()}
        line = json.dumps(record)
        with lock:  # the client calls back from several threads
            deliveries += 1
            seen[str(record["msg_id"])] = record
            print(line, flush=True)  # as it arrives: a test may kill this process mid-stream
        if args.fail:  # the client answers RECONSUME_LATER and sends the message back to the broker
            raise RuntimeError("failing on purpose (--fail)")

    consumer = PushConsumer(args.group)
    consumer.set_namesrv_addr(args.namesrv)
    consumer.subscribe(args.topic, on_message, args.expression)
    consumer.start()
    deadline = time.monotonic() + args.timeout
    while (deliveries if args.fail else len(seen)) < args.count and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(args.linger)
    print(json.dumps({"done": "consume", "distinct": len(seen), "deliveries": deliveries}), flush=True)
    consumer.shutdown()


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="verb", required=True)
    p = sub.add_parser("produce")
    p.add_argument("namesrv")
    p.add_argument("topic")
    p.add_argument("count", type=int)
    p.add_argument("--rate", type=float, default=0.0)
    p.add_argument("--group", default="PID_real_client")
    p.add_argument("--tag", default="TagA")
    p.add_argument("--prefix", default="real")
    p.add_argument("--send-timeout-ms", type=int, default=3000)
    p.add_argument("--body-size", type=int, default=0, help="pad each body to this many bytes")
    p.add_argument("--delay-level", type=int, default=0, help="RocketMQ delay level of every message (0: none)")
    p.set_defaults(func=produce)
    c = sub.add_parser("consume")
    c.add_argument("namesrv")
    c.add_argument("group")
    c.add_argument("topic")
    c.add_argument("count", type=int)
    c.add_argument("--timeout", type=float, default=60.0)
    c.add_argument("--expression", default="*")
    c.add_argument("--linger", type=float, default=0.0, help="keep consuming this long after COUNT arrived")
    c.add_argument("--fail", action="store_true",
                   help="fail every delivery (RECONSUME_LATER: back-off, retries); COUNT then counts deliveries")
    c.set_defaults(func=consume)
    args = parser.parse_args(argv)
    args.func(args)


if __name__ == "__main__":
    main(sys.argv[1:])
