"""Drives the official RocketMQ 5 Python client (PyPI rocketmq-python-client) against a proxy endpoint.

Runs in the client's own venv (.venv-rmq5, made by `bash run.sh test`: its package `rocketmq` collides
with the 4.x client's in the main venv), as `python rmq5_client.py SPEC.json`; prints one JSON line
per action. The spec: {"endpoint": "127.0.0.1:8081", "topic": "T", "actions": [...]}, each action
  {"op": "send", "body": "b", "tag": "t", "keys": ["k"], "group": "g", "delay_s": 2, "properties": {},
   "sleep_ms": 10}: sleep_ms paces a stream of sends (slept before the send)
  {"op": "tx", "body": "b", "resolution": "commit" | "rollback"}
  {"op": "orphan", "body": "b", "wait_s": 60}: a half left open, resolved (COMMIT) by the checker when
      the proxy relays the broker's check-back over Telemetry
  {"op": "push", "group": "G", "fail": ["x"], "until": {"x": 2, "ok": 1}, "timeout_s": 60,
   "slow": {"y": 8}, "linger_s": 3}: a PushConsumer of the topic whose listener fails the named bodies
      (RECONSUME_LATER), takes `slow` seconds over some, and consumes the rest, until each body was
      delivered the given number of times and no listener runs, then `linger_s` more; reports every
      delivery (body, attempt)
With "credentials": {"access_key": "ak", "secret_key": "sk"} the clients sign their calls with them.
With "hold": true the producer stays up after the last action until a line (or EOF) on stdin.
With "consumer": {"group": "G", "tag": "TagA", "await_s": 1} a SimpleConsumer of the topic runs too:
  {"op": "receive_until", "bodies": ["a"], "invisible_s": 2, "timeout_s": 30, "ack": ["a"]}: receives
      until every named body came (each message's attempt and receipt handle reported), then acks some
  {"op": "change", "body": "a", "invisible_s": 1}: ChangeInvisibleDuration of the last receipt of `a`
  {"op": "ack", "body": "a"}: acks the last receipt of `a`
  {"op": "drain", "for_s": 3, "invisible_s": 2}: receives for that long, reporting every body seen
"""

from __future__ import annotations

import json
import sys
import threading
import time

from rocketmq import (
    ClientConfiguration,
    ConsumeResult,
    Credentials,
    FilterExpression,
    Message,
    MessageListener,
    Producer,
    PushConsumer,
    SimpleConsumer,
    TransactionChecker,
    TransactionResolution,
)


class Checker(TransactionChecker):
    def __init__(self) -> None:
        self.checked: list[str] = []
        self.event = threading.Event()

    def check(self, message: Message) -> TransactionResolution:
        self.checked.append(message.body.decode())
        self.event.set()
        return TransactionResolution.COMMIT


class Listener(MessageListener):
    """Fails the bodies it is told to, consumes the rest; records every delivery."""

    def __init__(self, fail: set[str], until: dict[str, int], slow: dict[str, float]) -> None:
        self.fail, self.until, self.slow = fail, until, slow
        self.deliveries: list[dict] = []
        self.running = 0
        self.lock = threading.Lock()
        self.done = threading.Event()

    def consume(self, message: Message) -> ConsumeResult:
        body = message.body.decode()
        with self.lock:
            self.deliveries.append({"body": body, "attempt": message.delivery_attempt})
            self.running += 1
        try:
            time.sleep(float(self.slow.get(body, 0)))
            return ConsumeResult.FAILURE if body in self.fail else ConsumeResult.SUCCESS
        finally:
            with self.lock:
                self.running -= 1
                seen = [d["body"] for d in self.deliveries]
                if not self.running and all(seen.count(b) >= n for b, n in self.until.items()):
                    self.done.set()


def push(config: ClientConfiguration, topic: str, a: dict, out: dict) -> None:
    listener = Listener(set(a.get("fail", [])), dict(a["until"]), dict(a.get("slow", {})))
    consumer = PushConsumer(config, a["group"], listener, {topic: FilterExpression("*")})
    consumer.startup()
    try:
        done = listener.done.wait(float(a.get("timeout_s", 60)))
        time.sleep(float(a.get("linger_s", 0)))  # a redelivery would come meanwhile
    finally:
        consumer.shutdown()
    with listener.lock:
        out.update(ok=done, deliveries=list(listener.deliveries))


def _message(topic: str, a: dict) -> Message:
    m = Message()
    m.topic = topic
    m.body = a["body"].encode()
    if a.get("tag"):
        m.tag = a["tag"]
    if a.get("keys"):
        m.keys = a["keys"][0]  # the setter takes one key per assignment
    if a.get("group"):
        m.message_group = a["group"]
    if a.get("delay_s"):  # 5.1.2 puts this value into Timestamp.seconds: seconds since the epoch, not ms
        m.delivery_timestamp = int(time.time()) + int(a["delay_s"])
    for k, v in (a.get("properties") or {}).items():
        m.add_property(k, v)
    return m


def _receipt(m: Message) -> dict:
    return {"body": m.body.decode(), "attempt": m.delivery_attempt, "handle": m.receipt_handle,
            "message_id": m.message_id, "tag": m.tag}


def consume(consumer: SimpleConsumer, got: dict, a: dict, out: dict) -> None:
    """The consumer's ops (module docstring); `got` keeps each body's last received message."""
    if a["op"] == "receive_until":
        want, seen, deadline = set(a["bodies"]), [], time.monotonic() + float(a.get("timeout_s", 30))
        while want - {r["body"] for r in seen} and time.monotonic() < deadline:
            for m in consumer.receive(32, int(a["invisible_s"])):
                got[m.body.decode()] = m
                seen.append(_receipt(m))
        for body in a.get("ack", []):
            consumer.ack(got[body])
        out.update(ok=not want - {r["body"] for r in seen}, received=seen)
    elif a["op"] == "change":
        m = got[a["body"]]
        old = m.receipt_handle
        consumer.change_invisible_duration(m, int(a["invisible_s"]))
        out.update(ok=True, old_handle=old, new_handle=m.receipt_handle)
    elif a["op"] == "ack":
        consumer.ack(got[a["body"]])
        out.update(ok=True)
    elif a["op"] == "drain":
        seen, deadline = [], time.monotonic() + float(a["for_s"])
        while time.monotonic() < deadline:
            seen.extend(_receipt(m) for m in consumer.receive(32, int(a["invisible_s"])))
        out.update(ok=True, received=seen)
    else:
        raise ValueError(f"unknown op {a['op']}")


def main() -> None:
    with open(sys.argv[1]) as f:
        spec = json.load(f)
    topic = spec["topic"]
    checker = Checker()
    creds = spec.get("credentials") or {}
    credentials = Credentials(creds.get("access_key", ""), creds.get("secret_key", ""))
    producer = Producer(ClientConfiguration(spec["endpoint"], credentials), (topic,), checker)
    producer.startup()
    consumer, got = None, {}
    if spec.get("consumer"):
        c = spec["consumer"]
        consumer = SimpleConsumer(ClientConfiguration(spec["endpoint"], credentials), c["group"],
                                  {topic: FilterExpression(c.get("tag", "*"))}, await_duration=int(c.get("await_s", 1)))
        consumer.startup()
    try:
        for a in spec["actions"]:
            out: dict = {"op": a["op"], "body": a.get("body")}
            try:
                if a["op"] == "send":
                    time.sleep(float(a.get("sleep_ms", 0)) / 1000)
                    r = producer.send(_message(topic, a))
                    out.update(ok=True, message_id=r.message_id, offset=r.offset)
                elif a["op"] in ("tx", "orphan"):
                    tx = producer.begin_transaction()
                    r = producer.send(_message(topic, a), tx)
                    out.update(ok=True, message_id=r.message_id, transaction_id=r.transaction_id)
                    if a["op"] == "tx":
                        (tx.commit if a["resolution"] == "commit" else tx.rollback)()
                    else:
                        out["checked"] = checker.event.wait(float(a.get("wait_s", 60)))
                        out["checked_bodies"] = list(checker.checked)
                elif a["op"] == "push":
                    push(ClientConfiguration(spec["endpoint"], credentials), topic, a, out)
                elif consumer is not None:
                    consume(consumer, got, a, out)
                else:
                    raise ValueError(f"unknown op {a['op']}")
            except Exception as e:
                out.update(ok=False, error=f"{type(e).__name__}: {e}")
            print(json.dumps(out), flush=True)
        if spec.get("hold"):  # stay connected (the checker's EndTransaction in flight) until the test says so
            sys.stdin.readline()
    finally:
        if consumer is not None:
            consumer.shutdown()
        producer.shutdown()


if __name__ == "__main__":
    main()
