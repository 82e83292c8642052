"""Consumers as Ray actors: `ConsumerGroup.start(n, ...)` runs n PushConsumers of one group, one per
actor, anywhere in the cluster; `scale(n)` adds or stops members (the group rebalances at once on
the broker's notice); `stats()` reads what each member consumed.

    from clients.consumer.actor import ConsumerGroup
    from clients.consumer.push_consumer import ConsumeConcurrentlyStatus

    group = ConsumerGroup.start(3, "my_group", {"TopicTest": "*"},
                                lambda msgs, ctx: ConsumeConcurrentlyStatus.CONSUME_SUCCESS, namespace="namesrv")
    group.scale(5)
    group.wait_consumed(100)
    group.shutdown()

The listener travels to each actor pickled (Ray's cloudpickle: a lambda or a function will do) and
runs there on the member's consume threads. Threaded actors (`max_concurrency`), so `stats` answers
while the listener runs.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import ray

from clients.consumer.push_consumer import (
    ConsumeConcurrentlyStatus,
    ConsumeOrderlyStatus,
    PushConsumer,
    consumer_config,
)
from namesrv.client.consumer.listener import ConsumeContext
from namesrv.client.errors import MQClientError
from namesrv.client.message import check_group, check_topic
from namesrv.protocol.broker_headers import DEFAULT_CONSUMER_GROUP
from namesrv.protocol.message.decoder import MessageExt

log = logging.getLogger(__name__)

SUCCESS = (ConsumeConcurrentlyStatus.CONSUME_SUCCESS, ConsumeOrderlyStatus.SUCCESS)
KEYS_KEPT = 100_000
"""Unique keys of consumed messages kept per member (oldest dropped first), for checks like the
producer actor's records."""


class ConsumerActor:
    """One member: a PushConsumer started in the actor, counting what its listener consumed."""

    def __init__(self, group: str, subscriptions: dict[str, str], listener: Callable[..., Any], namespace: str,
                 namesrv: list[str] | None = None, orderly: bool = False, **options: Any) -> None:
        self._lock = threading.Lock()
        self.consumed = 0
        self.failed = 0
        self.listener = listener
        self.keys: collections.deque[str] = collections.deque(maxlen=KEYS_KEPT)
        self.consumer = PushConsumer(group, namesrv=namesrv, namespace=namespace, **options)
        for topic, expression in subscriptions.items():
            self.consumer.subscribe(topic, expression)
        if orderly:
            self.consumer.register_message_listener_orderly(self._on)
        else:
            self.consumer.register_message_listener(self._on)
        self.consumer.start()

    def _on(self, msgs: list[MessageExt], ctx: ConsumeContext) -> Any:
        status = self.listener(msgs, ctx)
        with self._lock:
            if status in SUCCESS:
                self.consumed += len(msgs)
                self.keys.extend(m.unique_key for m in msgs)
            else:
                self.failed += len(msgs)
        return status

    def client_id(self) -> str:
        return self.consumer.client_id

    def stats(self) -> dict[str, Any]:
        with self._lock:
            counts = {"consumed": self.consumed, "failed": self.failed}
        queues = sorted((mq.topic, mq.broker_name, mq.queue_id) for mq in self.consumer.assignment())
        return self.consumer.stats() | counts | {"client_id": self.consumer.client_id, "queues": queues}

    def consumed_keys(self) -> list[str]:
        """The unique keys (UNIQ_KEY) of the messages consumed, in order (the last KEYS_KEPT)."""
        with self._lock:
            return list(self.keys)

    def shutdown(self) -> None:
        self.consumer.shutdown()


def check_settings(group: str, subscriptions: dict[str, str], options: dict[str, Any]) -> None:
    """What a member would refuse at start, checked in the caller (MQClientError)."""
    consumer_config(None, options)
    check_group(group)
    if group == DEFAULT_CONSUMER_GROUP:
        raise MQClientError(f"consumerGroup can not equal {DEFAULT_CONSUMER_GROUP}, please specify another one")
    if not subscriptions:
        raise MQClientError("no subscription: name at least one topic")
    for topic in subscriptions:
        check_topic(topic)


class ConsumerGroup:
    """N ConsumerActors of one group (the handles in `actors`, oldest first)."""

    def __init__(self, group: str, subscriptions: dict[str, str], listener: Callable[..., Any], namespace: str,
                 namesrv: list[str] | None, orderly: bool, actor_options: dict[str, Any],
                 options: dict[str, Any]) -> None:
        self.group = group
        self.subscriptions = subscriptions
        self.listener = listener
        self.namespace = namespace
        self.namesrv = namesrv
        self.orderly = orderly
        self.actor_options = {"num_cpus": 0, "max_concurrency": 4} | actor_options
        self.options = options
        self.actors: list[Any] = []

    @classmethod
    def start(cls, n: int, group: str, subscriptions: dict[str, str] | str, listener: Callable[..., Any],
              namespace: str = "namesrv", namesrv: list[str] | None = None, orderly: bool = False,
              actor_options: dict[str, Any] | None = None, **options: Any) -> ConsumerGroup:
        """Start `n` members subscribed to `subscriptions` ({topic: expression}, or one topic with
        every tag); returns once each has started (joined the group and taken its first queues).
        `options`: the settings of `ConsumerConfig`; `actor_options`: Ray's (num_cpus, resources...)."""
        subs = {subscriptions: "*"} if isinstance(subscriptions, str) else dict(subscriptions)
        check_settings(group, subs, options)  # refused here, clearly, before any actor starts
        self = cls(group, subs, listener, namespace, namesrv, orderly, actor_options or {}, options)
        self.scale(n)
        return self

    def scale(self, n: int) -> None:
        """Grow to `n` members (new ones started and waited for) or shrink to it (the newest shut
        down gracefully: their offsets committed, their queues handed on)."""
        if n < 0:
            raise MQClientError(f"a consumer group cannot have {n} members")
        if n < len(self.actors):
            leaving, self.actors = self.actors[n:], self.actors[:n]
            ray.get([a.shutdown.remote() for a in leaving])
            for a in leaving:
                ray.kill(a)
            return
        cls: Any = ray.remote(ConsumerActor).options(namespace=self.namespace, **self.actor_options)
        fresh: list[Any] = [cls.remote(self.group, self.subscriptions, self.listener, self.namespace, self.namesrv,
                            self.orderly, **self.options) for _ in range(n - len(self.actors))]
        try:
            ray.get([a.client_id.remote() for a in fresh])  # raises here if a member could not start
        except Exception:
            for a in fresh:
                ray.kill(a)
            raise
        self.actors.extend(fresh)

    def stats(self) -> list[dict[str, Any]]:
        """Each member's client id, queues held and counts (consumed, failed, sent back, pulls...)."""
        return list(ray.get([a.stats.remote() for a in self.actors]))

    def consumed(self) -> int:
        """Messages the members' listeners consumed (returned success for), all members together."""
        return sum(s["consumed"] for s in self.stats())

    def wait_consumed(self, n: int, timeout_s: float = 30.0) -> int:
        """Wait until the members consumed at least `n` messages (asking them every 50 ms); the
        count, or MQClientError once `timeout_s` passed without."""
        deadline = time.monotonic() + timeout_s
        while (count := self.consumed()) < n:
            if time.monotonic() > deadline:
                raise MQClientError(f"{self.group} consumed {count} of {n} messages in {timeout_s} s")
            time.sleep(0.05)
        return count

    def shutdown(self) -> None:
        self.scale(0)

    def __enter__(self) -> ConsumerGroup:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
