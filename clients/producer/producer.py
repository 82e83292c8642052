"""Producer over Ray (RocketMQ's DefaultMQProducer): sync, async, oneway, orderly and batch sends,
and request-reply.

    from clients.producer.producer import Producer, Message
    with Producer("my_group", namespace="namesrv") as p:
        result = p.send(Message("TopicTest", b"hello"))
        batch = p.send_batch([Message("TopicTest", b"a"), Message("TopicTest", b"b")])

`namespace` is the Ray namespace the NameServer actors are in; RocketMQ's namespace (topics and the
group as `ns%name` on the wire) is the `rocketmq_namespace` option. Over TCP, bodies of at least
`compress_msg_body_over_howmuch` bytes (4 KiB) are sent zlib-deflated, as RocketMQ's producers.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from pydantic import ValidationError

from clients.impl.broker_tcp import REQUESTS, DirectBrokerTransport
from clients.impl.client_instance import MQClientInstance, build_client_id, get_or_create_instance, release_instance
from clients.impl.namesrv_client import NameServerClient, discover_namesrvs
from namesrv.client.batch import batch_of
from namesrv.client.config import ProducerConfig
from namesrv.client.errors import (
    MQBrokerError,
    MQClientError,
    NoNameServerAvailable,
    SendFailedError,
    TopicNotFound,
)
from namesrv.client.message import Message, check_group, check_message
from namesrv.client.namespace import without_namespace, wrap_namespace
from namesrv.client.publish_info import TopicPublishInfo
from namesrv.client.reply import RequestTimeoutError, request_properties
from namesrv.client.route_source import RouteSource
from namesrv.client.send_engine import MessageQueueSelector, SendEngine, Transport, select_by_hash
from namesrv.client.send_result import SendResult
from namesrv.protocol.broker_headers import DEFAULT_PRODUCER_GROUP
from namesrv.protocol.models import MessageQueue
from namesrv.protocol.types import describe_errors

log = logging.getLogger(__name__)

__all__ = [
    "MQBrokerError",
    "MQClientError",
    "Message",
    "MessageQueue",
    "NoNameServerAvailable",
    "Producer",
    "ProducerConfig",
    "SendFailedError",
    "SendResult",
    "TopicNotFound",
    "select_by_hash",
]


class Producer:
    """`config` (or keyword options, the fields of `ProducerConfig`) holds every setting;
    `namesrv` names the NameServer actors (default: every one in `namespace`)."""

    def __init__(
        self,
        group: str,
        namesrv: list[str] | None = None,
        namespace: str = "namesrv",
        instance_name: str | None = None,
        config: ProducerConfig | None = None,
        route_source: RouteSource | None = None,
        **options: Any,
    ) -> None:
        try:
            self.config = ProducerConfig.model_validate((config or ProducerConfig()).model_dump() | options)
        except ValidationError as e:
            raise MQClientError(f"invalid producer config: {describe_errors(e)}") from None
        self.group = group
        self.namesrv = namesrv
        self.namespace = namespace
        self.instance_name = instance_name
        self.route_source = route_source
        self.instance: MQClientInstance | None = None
        self.engine: SendEngine | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._direct: DirectBrokerTransport | None = None
        self._in_flight = 0
        """Async sends not completed yet (`shutdown` waits for them)."""
        self._idle = threading.Condition()

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> Producer:
        check_group(self.group)
        if self.group == DEFAULT_PRODUCER_GROUP:
            raise MQClientError(f"producerGroup can not equal {DEFAULT_PRODUCER_GROUP}, please specify another one")
        if self.instance is not None:
            raise MQClientError("The producer service state not OK, maybe started once")
        names = self.namesrv if self.namesrv is not None else discover_namesrvs(self.namespace)
        if not names:
            raise NoNameServerAvailable(f"no NameServer actor in Ray namespace {self.namespace!r}")
        client_id = build_client_id(self.instance_name)
        instance = get_or_create_instance(
            client_id, NameServerClient(names, self.namespace, credentials=self.config.credentials),
            poll_name_server_interval_ms=self.config.poll_name_server_interval_ms,
            route_push=self.config.route_push, route_source=self.route_source, route_union=self.config.route_union,
        )
        if self.group in instance.producer_groups:
            raise MQClientError(
                f"The producer group[{self.group}] has been created before, specify another name please."
            )
        wire_group = wrap_namespace(self.config.rocketmq_namespace, self.group)
        instance.producer_groups.add(self.group)
        instance.start()
        self.instance = instance
        transport: Transport = instance.transport
        if self.config.broker_transport == "tcp":
            self._direct = DirectBrokerTransport(instance.transport, wire_group, client_id,
                                                 self.config.compress_msg_body_over_howmuch,
                                                 self.config.heartbeat_broker_interval_ms / 1000)
            self._direct.start_heartbeats()
            transport = self._direct
        self.engine = SendEngine(transport, self.config)
        self._executor = ThreadPoolExecutor(self.config.async_send_threads, thread_name_prefix=f"{self.group}-async")
        log.info("producer %s started on client %s, name servers %s", self.group, client_id, names)
        return self

    def shutdown(self) -> None:
        if self.instance is None:
            return
        with self._idle:  # every async send ends within its timeout (its retries share the budget)
            self._idle.wait_for(lambda: self._in_flight == 0, self.config.send_msg_timeout_ms / 1000 + 5)
        if self._executor is not None:
            self._executor.shutdown(wait=True)
        if self._direct is not None:
            self._direct.close()
            self._direct = None
        self.instance.producer_groups.discard(self.group)
        release_instance(self.instance)
        self.instance = None
        self.engine = None

    def __enter__(self) -> Producer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def _ready(self) -> tuple[MQClientInstance, SendEngine]:
        if self.instance is None or self.engine is None:
            raise MQClientError("The producer service state not OK, call start() first")
        return self.instance, self.engine

    def _publish_info(self, msg: Message) -> tuple[TopicPublishInfo, str | None]:
        instance, _ = self._ready()
        check_message(msg, self.config.max_message_size)  # before any network call
        cfg = self.config
        return instance.find_publish_info(msg.topic, cfg.auto_create_topic, cfg.default_topic_queue_nums)

    # ------------------------------------------------------------------ RocketMQ namespace
    def _outgoing(self, msg: Message) -> Message:
        """The message as it travels: its topic in the producer's RocketMQ namespace, if any."""
        ns = self.config.rocketmq_namespace
        if not ns or not isinstance(msg, Message):
            return msg
        return dataclasses.replace(msg, topic=wrap_namespace(ns, msg.topic))

    def _incoming(self, result: SendResult) -> SendResult:
        """A result as the user sees it: its queue's topic without the namespace."""
        ns = self.config.rocketmq_namespace
        if ns:
            mq = result.message_queue
            result.message_queue = MessageQueue(without_namespace(ns, mq.topic), mq.broker_name, mq.queue_id)
        return result

    # ------------------------------------------------------------------ send modes
    def send(self, msg: Message, timeout_ms: int | None = None) -> SendResult:
        """Sync send with retries on other brokers; raises SendFailedError naming every broker tried."""
        msg = self._outgoing(msg)
        info, default_topic = self._publish_info(msg)
        return self._incoming(self._ready()[1].send(msg, info, timeout_ms, default_topic))

    def send_batch(self, messages: list[Message], timeout_ms: int | None = None) -> SendResult:
        """Messages of one topic as ONE SEND_BATCH_MESSAGE, into one queue (RocketMQ's
        send(Collection<Message>)), with the sync send's retries; the result's msg_id joins the
        messages' ids with ','. RocketMQ's limits are checked before anything is sent
        (namesrv.client.batch: one topic, no delay, no retry topic, at most max_message_size in
        all): MQClientError. Needs broker_transport "tcp" (the actor-call transport has no batch)."""
        instance, engine = self._ready()
        if self._direct is None:
            raise MQClientError("send_batch needs broker_transport='tcp' (the actor-call transport has no batch)")
        outgoing = [self._outgoing(m) for m in messages] if isinstance(messages, list) else messages
        if not isinstance(outgoing, list):
            raise MQClientError(f"send_batch takes a list of messages, got {type(messages).__name__}")
        batch = batch_of(outgoing, engine.next_msg_id, self.config.max_message_size)
        cfg = self.config
        info, default_topic = instance.find_publish_info(batch.topic, cfg.auto_create_topic,
                                                         cfg.default_topic_queue_nums)
        result = engine.send(batch, info, timeout_ms, default_topic)
        result.msg_id = ",".join(batch.unique_ids)
        return self._incoming(result)

    def request(self, msg: Message, timeout_ms: int = 3000) -> Message:
        """Request-reply (DefaultMQProducer.request): send `msg` with a correlation id, this
        client's id and the timeout as properties, then wait for the reply a responder sends back
        (`namesrv.client.reply.create_reply_message`), which the broker pushes down this producer's
        connection; the reply as a Message of the reply topic. RequestTimeoutError when none comes
        within `timeout_ms` (the send itself counts against it). Needs broker_transport "tcp" (a
        Ray driver has no connection for the broker to push on)."""
        instance, _ = self._ready()
        direct = self._direct
        if direct is None:
            raise MQClientError("request needs broker_transport='tcp' (the broker pushes the reply down a connection)")
        if not isinstance(msg, Message):
            raise MQClientError(f"expected a Message, got {type(msg).__name__}")
        correlation_id = uuid.uuid4().hex
        request = dataclasses.replace(msg, properties=dict(msg.properties) | request_properties(
            correlation_id, instance.client_id, timeout_ms))
        future = REQUESTS.expect(correlation_id)
        deadline = time.monotonic() + timeout_ms / 1000
        try:
            self.send(request, timeout_ms)
            release = REQUESTS.keep_reading(max(0.001, deadline - time.monotonic()))
            try:
                reply = future.result(timeout=max(0.0, deadline - time.monotonic()))
            except FutureTimeout:
                raise RequestTimeoutError(f"send request message to <{msg.topic}> OK, but wait reply message "
                                          f"timeout, {timeout_ms} ms.") from None
            finally:
                release()
        finally:
            REQUESTS.forget(correlation_id)
        return dataclasses.replace(reply, topic=without_namespace(self.config.rocketmq_namespace, reply.topic))

    def send_async(
        self, msg: Message, callback: Callable[[SendResult | None, BaseException | None], None] | None = None,
        timeout_ms: int | None = None,
    ) -> Future[SendResult]:
        """Up to 1 + retry_times_when_send_async_failed attempts, a retry on another broker when an
        attempt got no answer (RocketMQ 4.9's async retry); the future holds the result or the
        error, and `callback(result, error)` runs when it completes, on a thread of the producer's
        executor (`async_send_threads`). Over TCP no thread waits for the answer: the request is
        written (from the calling thread when the topic's route is known, else from the executor
        after fetching it; a first send to a broker also connects) and its answer handled when it
        comes (`send_async.AsyncSend`), so sends in flight are not bounded by the executor's
        threads; to brokers reached by actor call, an executor thread makes the (blocking) call."""
        instance, engine = self._ready()
        msg = self._outgoing(msg)
        check_message(msg, self.config.max_message_size)
        assert self._executor is not None
        executor = self._executor
        future: Future[SendResult] = Future()
        with self._idle:
            self._in_flight += 1

        def complete(result: SendResult | None, error: BaseException | None) -> None:
            try:
                if error is not None:
                    future.set_exception(error)
                else:
                    future.set_result(self._incoming(result))  # type: ignore[arg-type]
            finally:
                with self._idle:
                    self._in_flight -= 1
                    self._idle.notify_all()

        def first() -> None:
            try:
                info, default_topic = self._publish_info(msg)
                engine.send_async(msg, info, executor.submit, complete, timeout_ms, default_topic)
            except Exception as e:  # no route, no queue: the future holds why
                complete(None, e)

        if callback is not None:
            future.add_done_callback(lambda f: callback(None if f.exception() else f.result(), f.exception()))
        cached = instance.publish_info(msg.topic)
        if cached is not None and cached.ok:  # nothing to wait for: written from this thread
            first()
        else:  # the route is fetched (a blocking call) on the executor
            executor.submit(first)
        return future

    def send_oneway(self, msg: Message) -> None:
        msg = self._outgoing(msg)
        info, default_topic = self._publish_info(msg)
        self._ready()[1].send_oneway(msg, info, default_topic)

    def send_orderly(self, msg: Message, selector: MessageQueueSelector, arg: Any,
                     timeout_ms: int | None = None) -> SendResult:
        msg = self._outgoing(msg)
        info, _ = self._publish_info(msg)
        return self._incoming(self._ready()[1].send_orderly(msg, info, selector, arg, timeout_ms))

    def stats(self) -> dict[str, int]:
        """The send engine's counts: attempts, retries, sends ok/failed, failed attempts by kind."""
        return self._ready()[1].stats_snapshot()

    def publish_info(self, topic: str) -> TopicPublishInfo | None:
        return self._ready()[0].publish_info(topic)
