"""PushConsumer (RocketMQ's DefaultMQPushConsumer): subscribe, register a listener, start; the
consumer pulls, rebalances with its group and commits offsets on its own.

    from clients.consumer.push_consumer import PushConsumer, ConsumeConcurrentlyStatus

    consumer = PushConsumer("my_group", namespace="namesrv")
    consumer.subscribe("TopicTest", "TagA || TagB")
    consumer.register_message_listener(lambda msgs, ctx: ConsumeConcurrentlyStatus.CONSUME_SUCCESS)
    consumer.start()
    ...
    consumer.shutdown()

Routes come from the NameServer actors of `namespace` (or the `namesrv` actor names given); every
broker call goes over this consumer's own remoting connection to the broker, so the broker knows it
as a member of the group, can tell it to rebalance (NOTIFY_CONSUMER_IDS_CHANGED) or to jump to new
offsets (RESET_CONSUMER_CLIENT_OFFSET) or hand it one message to run its listener on once
(CONSUME_MESSAGE_DIRECTLY, `consume_directly`), and a group may mix it with RocketMQ's own clients.
The parts: `core` (subscriptions, heartbeats, rebalance, offsets), `pull_service` (long-polling
pulls with flow control), `consume_service` (the listener on a thread pool, retries).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from pydantic import ValidationError

from clients.consumer.consume_directly import consume_directly
from clients.consumer.consume_service import ConcurrentConsumeService, ConsumeService, OrderlyConsumeService
from clients.consumer.core import ConsumerCore
from clients.consumer.pull_service import PullMessageService, PullRequest
from clients.consumer.running_info import running_info
from namesrv.client.consume_from import ConsumeFromWhere
from namesrv.client.consumer.config import ConsumerConfig, MessageModel
from namesrv.client.consumer.listener import (
    ConsumeConcurrentlyStatus,
    ConsumeContext,
    ConsumeOrderlyStatus,
    MessageListenerConcurrently,
    MessageListenerOrderly,
)
from namesrv.client.consumer.process_queue import ProcessQueue
from namesrv.client.consumer.subscription import MessageSelector
from namesrv.client.errors import MQClientError
from namesrv.client.message import check_topic
from namesrv.protocol.message.decoder import MessageExt
from namesrv.protocol.models import MessageQueue
from namesrv.protocol.types import describe_errors

log = logging.getLogger(__name__)

__all__ = ["ConsumeConcurrentlyStatus", "ConsumeContext", "ConsumeFromWhere", "ConsumeOrderlyStatus",
           "ConsumerConfig", "MessageExt", "MessageModel", "MessageSelector", "PushConsumer"]


def consumer_config(config: ConsumerConfig | None, options: dict[str, Any]) -> ConsumerConfig:
    """The settings, refused with every bad one named (MQClientError)."""
    try:
        return ConsumerConfig.model_validate(dict(config or ConsumerConfig()) | options)
    except ValidationError as e:
        raise MQClientError(f"invalid consumer config: {describe_errors(e)}") from None


class PushConsumer:
    """`config` (or keyword options, the fields of `ConsumerConfig`) holds every setting."""

    def __init__(self, group: str, namesrv: list[str] | None = None, namespace: str = "namesrv",
                 instance_name: str | None = None, config: ConsumerConfig | None = None, **options: Any) -> None:
        self.config = consumer_config(config, options)
        self.core = ConsumerCore(group, self.config, "CONSUME_PASSIVELY", namesrv, namespace, instance_name)
        started_ms = int(time.time() * 1000)
        self.core.processor.running_info = lambda: running_info(self.core, started_ms)
        self._listener: Any = None
        self._service: ConsumeService | None = None
        self._pulls: PullMessageService | None = None

    @property
    def group(self) -> str:
        return self.core.group

    @property
    def client_id(self) -> str:
        return self.core.client_id

    def subscribe(self, topic: str, expression: str | MessageSelector | None = "*") -> None:
        """`expression`: a tag expression ("TagA || TagB", "*") or a MessageSelector (by_sql for SQL92)."""
        check_topic(topic)
        selector = expression if isinstance(expression, MessageSelector) else MessageSelector.by_tag(expression)
        self.core.subscribe(topic, selector)

    def register_message_listener(self, listener: MessageListenerConcurrently) -> None:
        """A concurrent listener: (msgs, context) -> CONSUME_SUCCESS or RECONSUME_LATER."""
        self._listener = listener
        self.core.orderly = False

    def register_message_listener_orderly(self, listener: MessageListenerOrderly) -> None:
        """An orderly listener: (msgs, context) -> SUCCESS or SUSPEND_CURRENT_QUEUE_A_MOMENT."""
        self._listener = listener
        self.core.orderly = True

    def start(self) -> PushConsumer:
        if self._listener is None:
            raise MQClientError("messageListener is null: register a listener before start()")
        self._service = (OrderlyConsumeService if self.core.orderly else ConcurrentConsumeService)(
            self.core, self._listener)
        listener, orderly = self._listener, self.core.orderly
        self.core.processor.consume_directly = lambda msg, broker_name: consume_directly(listener, orderly, msg,
                                                                                        broker_name)
        self._pulls = PullMessageService(self.core, self._service.submit)
        self._pulls.start()
        try:
            self.core.start(self)
        except BaseException:
            self._pulls.shutdown()
            self._service.shutdown()
            raise
        log.info("push consumer %s of %s started", self.client_id, self.group)
        return self

    def shutdown(self) -> None:
        """Stop pulling, let running listeners finish, commit offsets, release (orderly: unlock) the
        queues and leave the group."""
        if self._pulls is None or self._service is None:
            return
        self._pulls.shutdown()
        self._service.shutdown()
        self.core.shutdown()

    def __enter__(self) -> PushConsumer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    # ------------------------------------------------------------------ QueueOwner
    def queue_added(self, mq: MessageQueue, pq: ProcessQueue, offset: int) -> None:
        assert self._pulls is not None
        self._pulls.execute_later(PullRequest(mq, pq, offset), 0)

    def queue_removed(self, mq: MessageQueue, pq: ProcessQueue) -> None:
        """Nothing to do: the queue's pull request sees it dropped and ends."""

    # ------------------------------------------------------------------ inspection
    def assignment(self) -> set[MessageQueue]:
        """The queues this member holds now."""
        return self.core.assignment()

    def stats(self) -> dict[str, int]:
        out = dict(self._service.stats.snapshot()) if self._service is not None else {}
        if self._pulls is not None:
            out |= {"pulls": self._pulls.pulls, "flow_controlled": self._pulls.flow_controlled}
        return out | {"rebalances": self.core.rebalances, "queues": len(self.core.assignment())}
