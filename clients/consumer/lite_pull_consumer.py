"""LitePullConsumer (RocketMQ's DefaultLitePullConsumer): the application polls.

Two ways to choose queues, not mixed: `subscribe(topic, expression)` (the group allocates the queues,
rebalancing as members come and go, as the push consumer) or `assign(queues)` (exactly these, no
allocation). Either way the queues are pulled in the background (long polling, flow control per
queue) into a cache that `poll(timeout_s)` takes from. Offsets: `auto_commit` (default) advances the
group's offset as poll returns messages and commits it every `persist_consumer_offset_interval_ms`
(RocketMQ's autoCommitIntervalMillis, 5 s); without it `commit_sync()` commits what poll has returned.
`seek(queue, offset)` moves a held queue. It shares ConsumerCore and PullMessageService with the push
consumer (composed, not inherited). It has no listener to hand a message to: CONSUME_MESSAGE_DIRECTLY
(309) is answered SYSTEM_ERROR "The Consumer Group <group> not exist in this consumer", as RocketMQ's
MQClientInstance answers for any consumer that is not a push consumer.

    consumer = LitePullConsumer("my_group", namespace="namesrv")
    consumer.subscribe("TopicTest", "*")
    consumer.start()
    for msg in consumer.poll(timeout_s=5):
        ...
    consumer.shutdown()
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from functools import partial
from typing import Any

from clients.consumer.core import ConsumerCore
from clients.consumer.pull_service import PullMessageService, PullRequest
from clients.consumer.push_consumer import consumer_config
from clients.consumer.running_info import running_info
from namesrv.client.consumer.config import ConsumerConfig
from namesrv.client.consumer.process_queue import ProcessQueue
from namesrv.client.consumer.subscription import MessageSelector, Subscription
from namesrv.client.errors import MQClientError
from namesrv.client.message import check_topic
from namesrv.protocol.message.decoder import MessageExt
from namesrv.protocol.models import MessageQueue

log = logging.getLogger(__name__)

LITE_DEFAULTS: dict[str, Any] = {"pull_batch_size": 10, "broker_suspend_max_time_ms": 20_000}
"""DefaultLitePullConsumer's own defaults where they differ from the push consumer's."""


class LitePullConsumer:
    """`config` (or keyword options, the fields of `ConsumerConfig`) holds every setting."""

    def __init__(self, group: str, namesrv: list[str] | None = None, namespace: str = "namesrv",
                 instance_name: str | None = None, auto_commit: bool = True, config: ConsumerConfig | None = None,
                 **options: Any) -> None:
        self.config = consumer_config(config, (LITE_DEFAULTS if config is None else {}) | options)
        self.core = ConsumerCore(group, self.config, "CONSUME_ACTIVELY", namesrv, namespace, instance_name)
        started_ms = int(time.time() * 1000)
        self.core.processor.running_info = lambda: running_info(self.core, started_ms)
        self.auto_commit = auto_commit
        self._ready: queue.Queue[tuple[PullRequest, list[MessageExt]]] = queue.Queue()
        self._pulls = PullMessageService(self.core, lambda req, msgs: self._ready.put((req, msgs)),
                                         correct_offsets=False)
        self._lock = threading.Lock()
        self._polled: dict[MessageQueue, int] = {}
        """The offset after what poll returned, per queue (what commit_sync commits)."""
        self._started = False

    @property
    def group(self) -> str:
        return self.core.group

    def subscribe(self, topic: str, expression: str | MessageSelector | None = "*") -> None:
        if self.core.assigned is not None:
            raise MQClientError("Subscribe and assign are mutually exclusive.")
        check_topic(topic)
        self.core.subscribe(topic, expression if isinstance(expression, MessageSelector)
                            else MessageSelector.by_tag(expression))

    def assign(self, queues: list[MessageQueue]) -> None:
        """Consume exactly these queues (no allocation, no rebalance by the group)."""
        if self.core.subscriptions and self.core.assigned is None:
            raise MQClientError("Subscribe and assign are mutually exclusive.")
        if not queues:
            raise MQClientError("Message queues can not be null or empty.")
        self.core.assigned = set(queues)
        for topic in {mq.topic for mq in queues}:
            self.core.subscriptions.setdefault(topic, Subscription.of(topic, MessageSelector.by_tag("*")))
        if self._started:
            self.core.rebalance()

    def start(self) -> LitePullConsumer:
        self._pulls.start()
        try:
            self.core.start(self)
        except BaseException:
            self._pulls.shutdown()
            raise
        self._started = True
        return self

    def shutdown(self) -> None:
        """Stop pulling, commit (auto commit: what poll returned), leave the group."""
        if not self._started:
            return
        self._started = False
        self._pulls.shutdown()
        if self.auto_commit:
            self._advance()
        self.core.shutdown()

    def __enter__(self) -> LitePullConsumer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    # ------------------------------------------------------------------ QueueOwner
    def queue_added(self, mq: MessageQueue, pq: ProcessQueue, offset: int) -> None:
        self._pulls.execute_later(PullRequest(mq, pq, offset), 0)

    def queue_removed(self, mq: MessageQueue, pq: ProcessQueue) -> None:
        with self._lock:
            self._polled.pop(mq, None)

    # ------------------------------------------------------------------ polling
    def poll(self, timeout_s: float = 5.0) -> list[MessageExt]:
        """The next batch of pulled messages of one queue, in queue order ([] when none came within
        `timeout_s`)."""
        if not self._started:
            raise MQClientError("The consumer is not running: start() it first")
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                req, msgs = self._ready.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                return []
            if req.pq.dropped:
                continue  # the queue left this member, or was sought elsewhere
            offset = req.pq.remove(msgs)
            with self._lock:
                self._polled[req.mq] = max(offset, self._polled.get(req.mq, -1))
            if self.auto_commit:
                req.pq.if_live(partial(self.core.offset_store.update_offset, req.mq, offset, increase_only=True))
            return msgs

    def _advance(self) -> None:
        with self._lock:
            polled = dict(self._polled)
        for mq, offset in polled.items():
            self.core.offset_store.update_offset(mq, offset)

    def commit_sync(self) -> None:
        """Commit on the brokers the offsets after what poll has returned."""
        self._advance()
        self.core.offset_store.persist_all(self.core.assignment())

    def seek(self, mq: MessageQueue, offset: int) -> None:
        """Poll `mq` from `offset` next (RocketMQ's seek: the queue must be held)."""
        self.core.seek(mq, offset)
        with self._lock:
            self._polled.pop(mq, None)

    def assignment(self) -> set[MessageQueue]:
        return self.core.assignment()

    def stats(self) -> dict[str, int]:
        return {"pulls": self._pulls.pulls, "flow_controlled": self._pulls.flow_controlled,
                "rebalances": self.core.rebalances, "queues": len(self.core.assignment())}

    def fetch_message_queues(self, topic: str) -> list[MessageQueue]:
        """The topic's readable queues (for assign; before or after start)."""
        routes = self.core.routes or self.core.make_routes()
        routes.refresh(topic)
        return routes.queues(topic)
