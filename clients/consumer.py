"""A pull consumer (RocketMQ's DefaultLitePullConsumer, reduced to what verification needs): reads
every queue of a topic, on every broker of its route, from stored offsets."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import ray

from actors.handles import ActorHandles
from clients.namesrv_client import NameServerClient
from namesrv.acl.plain_acl import SessionCredentials, signature
from namesrv.client.message import MessageQueue
from namesrv.persist import atomic_write
from namesrv.protocol.broker_headers import DEFAULT_CONSUMER_GROUP, pull_message_ext
from namesrv.protocol.codes import ResponseCode
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


class PullError(RuntimeError):
    """A broker refused a pull (no permission, no such topic, ...): code and remark as it answered."""

    def __init__(self, code: int, remark: str | None) -> None:
        super().__init__(f"pull refused: code {code} {remark}")
        self.code = code
        self.remark = remark


PULL_ANSWERS = frozenset({ResponseCode.SUCCESS, ResponseCode.PULL_NOT_FOUND, ResponseCode.PULL_RETRY_IMMEDIATELY,
                          ResponseCode.PULL_OFFSET_MOVED})
"""The answers of a pull that went through (messages, none yet, none matched, offset moved)."""


class PullConsumer:
    def __init__(self, namespace: str, namesrv: list[str], offset_store: OffsetStore | None = None,
                 timeout_s: float = 10.0, consumer_group: str = DEFAULT_CONSUMER_GROUP,
                 credentials: SessionCredentials | None = None) -> None:
        """`credentials`: an account with SUB on the topics and the group, for brokers with ACL on."""
        self.namespace = namespace
        self.namesrv = NameServerClient(namesrv, namespace, call_timeout_ms=int(timeout_s * 1000),
                                        credentials=credentials)
        self.offsets = offset_store or OffsetStore()
        self.timeout_s = timeout_s
        self.consumer_group = consumer_group
        self.credentials = credentials
        self._handles = ActorHandles(namespace)

    def fetch_subscribe_message_queues(self, topic: str) -> list[tuple[MessageQueue, str]]:
        """Readable queues with the broker actor to read each from (the master, else the lowest slave)."""
        route, _ = self.namesrv.get_topic_route(topic)
        readers = {bd.broker_name: bd.select_broker_addr() for bd in route.broker_datas}
        out: list[tuple[MessageQueue, str]] = []
        for qd in sorted(route.queue_datas, key=lambda q: q.broker_name):
            addr = readers.get(qd.broker_name)
            if not is_readable(qd.perm) or addr is None:
                continue
            actor = self._handles.broker_actor(qd.broker_name, addr)  # the replica at that address
            out.extend((MessageQueue(topic, qd.broker_name, i), actor) for i in range(qd.read_queue_nums))
        return out

    def pull(self, mq: MessageQueue, actor: str, max_nums: int = 256) -> list[ConsumedMessage]:
        """One pull from the queue's stored offset (the broker caps how many it answers); the offset
        advances to where the next pull starts. Raises PullError when the broker refuses."""
        return self._pull(mq, actor, max_nums)[0]

    def _pull(self, mq: MessageQueue, actor: str, max_nums: int) -> tuple[list[ConsumedMessage], bool]:
        """The messages, and whether the queue has more after them."""
        offset = self.offsets.read(mq)
        broker = ray.get_actor(actor, namespace=self.namespace)
        auth = signature(pull_message_ext(mq.topic, mq.queue_id, offset, max_nums, self.consumer_group), None,
                         self.credentials)
        result = cast(dict[str, Any], ray.get(broker.pull_message.remote(
            mq.topic, mq.queue_id, offset, max_nums, self.consumer_group, auth), timeout=self.timeout_s))
        if result["code"] not in PULL_ANSWERS:
            raise PullError(result["code"], result["remark"])
        next_offset = result["next_begin_offset"]
        self.offsets.update(mq, next_offset)
        got = [
            ConsumedMessage(mq.topic, mq.broker_name, mq.queue_id, m["queue_offset"], m["msg_id"], m["body"],
                            m["properties"])
            for m in result["messages"]
        ]
        return got, next_offset != offset and next_offset < result["max_offset"]

    def consume_all(self, topic: str, batch: int = 256) -> list[ConsumedMessage]:
        """Everything not yet read on every queue of `topic`; offsets advance and are persisted."""
        consumed: list[ConsumedMessage] = []
        for mq, actor in self.fetch_subscribe_message_queues(topic):
            more = True
            while more:
                got, more = self._pull(mq, actor, batch)
                consumed.extend(got)
        self.offsets.persist()
        return consumed
