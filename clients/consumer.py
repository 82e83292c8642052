"""A pull consumer (RocketMQ's DefaultLitePullConsumer, reduced to what verification needs): reads
every queue of a topic, on every broker of its route, from stored offsets."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import ray

from actors.broker_actor import broker_actor_name
from clients.namesrv_client import NameServerClient
from namesrv.client.message import MessageQueue
from namesrv.persist import atomic_write
from namesrv.protocol.constants import is_readable

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ConsumedMessage:
    topic: str
    broker_name: str
    queue_id: int
    queue_offset: int
    msg_id: str
    body: bytes
    properties: dict[str, str]


def _queue_key(item: tuple[MessageQueue, int]) -> tuple[str, str, int]:
    return item[0].topic, item[0].broker_name, item[0].queue_id


class OffsetStore:
    """Next offset to read per queue; persisted atomically when a path is given."""

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = Path(path) if path is not None else None
        self.offsets: dict[MessageQueue, int] = {}
        if self.path is not None and self.path.exists():
            for row in json.loads(self.path.read_text()):
                self.offsets[MessageQueue(row["topic"], row["broker"], row["queue"])] = row["offset"]

    def read(self, mq: MessageQueue) -> int:
        return self.offsets.get(mq, 0)

    def update(self, mq: MessageQueue, offset: int) -> None:
        self.offsets[mq] = offset

    def persist(self) -> None:
        if self.path is None:
            return
        rows = [{"topic": m.topic, "broker": m.broker_name, "queue": m.queue_id, "offset": o}
                for m, o in sorted(self.offsets.items(), key=_queue_key)]
        atomic_write(self.path, json.dumps(rows).encode())


class PullConsumer:
    def __init__(self, namespace: str, namesrv: list[str], offset_store: OffsetStore | None = None,
                 timeout_s: float = 10.0) -> None:
        self.namespace = namespace
        self.namesrv = NameServerClient(namesrv, namespace, call_timeout_ms=int(timeout_s * 1000))
        self.offsets = offset_store or OffsetStore()
        self.timeout_s = timeout_s

    def fetch_subscribe_message_queues(self, topic: str) -> list[tuple[MessageQueue, str]]:
        """Readable queues with the broker actor to read each from (the master, else the lowest slave)."""
        route, _ = self.namesrv.get_topic_route(topic)
        readers = {bd.broker_name: bd.select_broker_id() for bd in route.broker_datas}
        out: list[tuple[MessageQueue, str]] = []
        for qd in sorted(route.queue_datas, key=lambda q: q.broker_name):
            broker_id = readers.get(qd.broker_name)
            if not is_readable(qd.perm) or broker_id is None:
                continue
            actor = broker_actor_name(qd.broker_name, broker_id)
            out.extend((MessageQueue(topic, qd.broker_name, i), actor) for i in range(qd.read_queue_nums))
        return out

    def pull(self, mq: MessageQueue, actor: str, max_nums: int = 256) -> list[ConsumedMessage]:
        offset = self.offsets.read(mq)
        broker = ray.get_actor(actor, namespace=self.namespace)
        result = cast(dict[str, Any], ray.get(broker.pull_message.remote(mq.topic, mq.queue_id, offset, max_nums),
                                               timeout=self.timeout_s))
        self.offsets.update(mq, result["next_begin_offset"])
        return [
            ConsumedMessage(mq.topic, mq.broker_name, mq.queue_id, m["queue_offset"], m["msg_id"], m["body"],
                            m["properties"])
            for m in result["messages"]
        ]

    def consume_all(self, topic: str, batch: int = 256) -> list[ConsumedMessage]:
        """Everything not yet read on every queue of `topic`; offsets advance and are persisted."""
        consumed: list[ConsumedMessage] = []
        for mq, actor in self.fetch_subscribe_message_queues(topic):
            while True:
                got = self.pull(mq, actor, batch)
                consumed.extend(got)
                if not got:  # a pull may answer fewer than asked (the broker's transfer caps): go on
                    break
        self.offsets.persist()
        return consumed
