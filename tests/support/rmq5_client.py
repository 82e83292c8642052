"""Drives the official RocketMQ 5 Python client (PyPI rocketmq-python-client) against a proxy endpoint.

Runs in the client's own venv (.venv-rmq5, made by `bash run.sh test`: its package `rocketmq` collides
with the 4.x client's in the main venv), as `python rmq5_client.py SPEC.json`; prints one JSON line
per action. The spec: {"endpoint": "127.0.0.1:8081", "topic": "T", "actions": [...]}, each action
  {"op": "send", "body": "b", "tag": "t", "keys": ["k"], "group": "g", "delay_s": 2, "properties": {}}
  {"op": "tx", "body": "b", "resolution": "commit" | "rollback"}
  {"op": "orphan", "body": "b", "wait_s": 60}: a half left open, resolved (COMMIT) by the checker when
      the proxy relays the broker's check-back over Telemetry
With "hold": true the producer stays up after the last action until a line (or EOF) on stdin.
"""

from __future__ import annotations

import json
import sys
import threading
import time

from rocketmq import ClientConfiguration, Credentials, Message, Producer, TransactionChecker, TransactionResolution


class Checker(TransactionChecker):
    def __init__(self) -> None:
        self.checked: list[str] = []
        self.event = threading.Event()

    def check(self, message: Message) -> TransactionResolution:
        self.checked.append(message.body.decode())
        self.event.set()
        return TransactionResolution.COMMIT


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


def main() -> None:
    with open(sys.argv[1]) as f:
        spec = json.load(f)
    topic = spec["topic"]
    checker = Checker()
    producer = Producer(ClientConfiguration(spec["endpoint"], Credentials()), (topic,), checker)
    producer.startup()
    try:
        for a in spec["actions"]:
            out: dict = {"op": a["op"], "body": a["body"]}
            try:
                if a["op"] == "send":
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
                else:
                    raise ValueError(f"unknown op {a['op']}")
            except Exception as e:
                out.update(ok=False, error=f"{type(e).__name__}: {e}")
            print(json.dumps(out), flush=True)
        if spec.get("hold"):  # stay connected (the checker's EndTransaction in flight) until the test says so
            sys.stdin.readline()
    finally:
        producer.shutdown()


if __name__ == "__main__":
    main()
