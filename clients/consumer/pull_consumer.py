"""A pull consumer reduced to what verification needs (the demo, the chaos harness, the tests that
check nothing acknowledged was lost): reads every queue of a topic, on every broker of its route,
through the broker actors, from offsets of its own (a `LocalFileOffsetStore`, in memory unless it is
given a path). It is no member of a group: no rebalance, no offsets on the broker. A group's consumer
is `PushConsumer` or `LitePullConsumer`.

`heartbeat(topics)` makes it a member of its group on those topics' brokers (a Ray call, so the
broker knows it as channel `ray:<client_id>`; RocketMQ's pull consumer heartbeats on a timer, this
one when called). Having no connection the broker could ask it over, it attaches its running info
(GET_CONSUMER_RUNNING_INFO's body) to each heartbeat, and mqadmin consumerStatus shows the latest:
its properties (consume type, start time, NameServers), its subscriptions and, per queue it holds
an offset for, that offset (commitOffset) and when it last pulled there (lastPullTimestamp). It
keeps no process queue, thread pool or rates, so those fields are left out rather than made up.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from typing import Any, cast

import ray

from actors.runtime.handles import ActorHandles
from clients.impl.client_instance import build_client_id
from clients.impl.namesrv_client import NameServerClient
from namesrv.acl.plain_acl import SessionCredentials, signature
from namesrv.client.offsets import LocalFileOffsetStore, ReadOffsetType
from namesrv.protocol import fastjson
from namesrv.protocol.broker_headers import DEFAULT_CONSUMER_GROUP, pull_message_ext
from namesrv.protocol.codes import ResponseCode
from namesrv.protocol.constants import is_readable
from namesrv.protocol.models import MessageQueue
from namesrv.remoting.command import RemotingResponse
from namesrv.remoting.wire_command import CURRENT_VERSION, CURRENT_VERSION_DESC

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
    def __init__(self, namespace: str, namesrv: list[str], offset_store: LocalFileOffsetStore | None = None,
                 timeout_s: float = 10.0, consumer_group: str = DEFAULT_CONSUMER_GROUP,
                 credentials: SessionCredentials | None = None) -> None:
        """`credentials`: an account with SUB on the topics and the group, for brokers with ACL on."""
        self.namespace = namespace
        self.namesrv = NameServerClient(namesrv, namespace, call_timeout_ms=int(timeout_s * 1000),
                                        credentials=credentials)
        self.offsets = offset_store or LocalFileOffsetStore()
        self.timeout_s = timeout_s
        self.consumer_group = consumer_group
        self.credentials = credentials
        self._handles = ActorHandles(namespace)
        self.namesrv_names = list(namesrv)
        self.client_id = build_client_id()
        self.start_ms = int(time.time() * 1000)
        self._last_pull: dict[MessageQueue, int] = {}

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
        offset = max(self.offsets.read_offset(mq, ReadOffsetType.READ_FROM_MEMORY), 0)
        self._last_pull[mq] = int(time.time() * 1000)
        broker = ray.get_actor(actor, namespace=self.namespace)
        auth = signature(pull_message_ext(mq.topic, mq.queue_id, offset, max_nums, self.consumer_group), None,
                         self.credentials)
        result = cast(dict[str, Any], ray.get(broker.pull_message.remote(
            mq.topic, mq.queue_id, offset, max_nums, self.consumer_group, auth), timeout=self.timeout_s))
        if result["code"] not in PULL_ANSWERS:
            raise PullError(result["code"], result["remark"])
        next_offset = result["next_begin_offset"]
        self.offsets.update_offset(mq, next_offset)
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
        self.offsets.persist_all()
        return consumed

    def running_info(self, topics: list[str]) -> dict[str, Any]:
        """ConsumerRunningInfo's fields this consumer really has (see the module's docstring)."""
        mq_table = {mq: {"commitOffset": offset} | ({"lastPullTimestamp": self._last_pull[mq]}
                                                    if mq in self._last_pull else {})
                    for mq, offset in self.offsets.clone_offset_table().items() if mq.topic in topics}
        return {"properties": {"PROP_CONSUME_TYPE": "CONSUME_ACTIVELY", "PROP_CURRENT_VERSION": CURRENT_VERSION_DESC,
                               "PROP_CONSUMER_START_TIMESTAMP": str(self.start_ms),
                               "PROP_NAMESERVER_ADDR": ";".join(self.namesrv_names)},
                "subscriptionSet": [_subscription(t) for t in sorted(topics)],
                "mqTable": mq_table, "mqPopTable": {}, "statusTable": {}, "userConsumerInfo": {}}

    def heartbeat(self, topics: list[str]) -> None:
        """HEART_BEAT to every broker of `topics`' routes, as a member of its group subscribing to
        them, with its running info. Raises PullError when a broker refuses."""
        consumer = {"groupName": self.consumer_group, "consumeType": "CONSUME_ACTIVELY", "messageModel": "CLUSTERING",
                    "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET", "unitMode": False,
                    "subscriptionDataSet": [_subscription(t) for t in sorted(topics)],
                    "runningInfo": fastjson.dumps(self.running_info(topics)).decode()}
        body = json.dumps({"clientID": self.client_id, "producerDataSet": [], "consumerDataSet": [consumer]}).encode()
        actors = sorted({actor for t in topics for _, actor in self.fetch_subscribe_message_queues(t)})
        auth = signature({}, body, self.credentials)
        for actor in actors:
            broker = ray.get_actor(actor, namespace=self.namespace)
            answer = cast(RemotingResponse, ray.get(broker.heart_beat.remote(self.client_id, body, CURRENT_VERSION,
                                                                             auth), timeout=self.timeout_s))
            if answer.code != ResponseCode.SUCCESS:
                raise PullError(answer.code, answer.remark)


def _subscription(topic: str) -> dict[str, Any]:
    return {"topic": topic, "subString": "*", "tagsSet": [], "codeSet": [], "subVersion": 0,
            "classFilterMode": False, "expressionType": "TAG"}
