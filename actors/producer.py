"""Producer over Ray (RocketMQ's DefaultMQProducer). Public API re-exported by `clients.producer`.

It lives below `clients` because the Producer actor wraps it too, and imports only go
clients -> actors -> namesrv.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import ray

from actors.client_instance import (
    MQClientInstance,
    NoNameServerAvailable,
    build_client_id,
    get_or_create_instance,
    release_instance,
)
from namesrv.client.fault import FAULT_TABLES
from namesrv.client.message import DEFAULT_PRODUCER_GROUP, Message, MQClientError, check_group, check_message
from namesrv.client.publish_info import TopicPublishInfo
from namesrv.client.send_engine import MessageQueueSelector, SendEngine, SendPolicy, SendResult
from namesrv.constants import DEFAULT_TOPIC_QUEUE_NUMS

log = logging.getLogger(__name__)

NAMESRV_PREFIX = "namesrv-"


def discover_namesrvs(namespace: str) -> list[str]:
    """NameServer actor names in a Ray namespace (namesrv-0, namesrv-1, ...)."""
    return sorted(
        a["name"]
        for a in ray.util.list_named_actors(all_namespaces=True)
        if a["namespace"] == namespace and a["name"].startswith(NAMESRV_PREFIX)
    )


class Producer:
    def __init__(
        self,
        group: str,
        namesrv: list[str] | None = None,
        namespace: str = "namesrv",
        instance_name: str | None = None,
        send_msg_timeout_ms: int = 3000,
        retry_times_when_send_failed: int = 2,
        send_latency_fault_enable: bool = True,
        fault_table: str = "5.x",
        poll_name_server_interval_ms: int = 30_000,
        route_push: bool = True,
        auto_create_topic: bool = True,
        default_topic_queue_nums: int = DEFAULT_TOPIC_QUEUE_NUMS,
        max_message_size: int = 4 * 1024 * 1024,
        async_send_threads: int = 4,
    ) -> None:
        if fault_table not in FAULT_TABLES:
            raise MQClientError(f"fault_table must be one of {sorted(FAULT_TABLES)}, got {fault_table!r}")
        self.group = group
        self.namesrv = namesrv
        self.namespace = namespace
        self.instance_name = instance_name
        self.policy = SendPolicy(
            send_msg_timeout_ms, retry_times_when_send_failed, send_latency_fault_enable,
            FAULT_TABLES[fault_table], max_message_size,
        )
        self.poll_name_server_interval_ms = poll_name_server_interval_ms
        self.route_push = route_push
        self.auto_create_topic = auto_create_topic
        self.default_topic_queue_nums = default_topic_queue_nums
        self.async_send_threads = async_send_threads
        self.instance: MQClientInstance | None = None
        self.engine: SendEngine | None = None
        self._executor: ThreadPoolExecutor | None = None

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
            client_id, namesrv_names=names, namespace=self.namespace,
            poll_name_server_interval_ms=self.poll_name_server_interval_ms, route_push=self.route_push,
        )
        if self.group in instance.producer_groups:
            raise MQClientError(
                f"The producer group[{self.group}] has been created before, specify another name please."
            )
        instance.producer_groups.add(self.group)
        instance.start()
        self.instance = instance
        self.engine = SendEngine(instance.transport, self.policy)
        self._executor = ThreadPoolExecutor(self.async_send_threads, thread_name_prefix=f"{self.group}-async")
        log.info("producer %s started on client %s, name servers %s", self.group, client_id, names)
        return self

    def shutdown(self) -> None:
        if self.instance is None:
            return
        if self._executor is not None:
            self._executor.shutdown(wait=True)
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
        check_message(msg, self.policy.max_message_size)  # before any network call
        return instance.find_publish_info(msg.topic, self.auto_create_topic, self.default_topic_queue_nums)

    # ------------------------------------------------------------------ send modes
    def send(self, msg: Message, timeout_ms: int | None = None) -> SendResult:
        """Sync send with retries on other brokers; raises SendFailedError naming every broker tried."""
        info, default_topic = self._publish_info(msg)
        return self._ready()[1].send(msg, info, timeout_ms, default_topic)

    def send_async(
        self, msg: Message, callback: Callable[[SendResult | None, BaseException | None], None] | None = None,
        timeout_ms: int | None = None,
    ) -> Future[SendResult]:
        """One attempt (RocketMQ's async sends do not retry on another broker); the future holds the
        result or the error, and `callback(result, error)` runs when it completes."""
        _, engine = self._ready()
        check_message(msg, self.policy.max_message_size)
        assert self._executor is not None

        def task() -> SendResult:
            info, default_topic = self._publish_info(msg)
            return engine.send(msg, info, timeout_ms, default_topic, times_total=1)

        fut = self._executor.submit(task)
        if callback is not None:
            fut.add_done_callback(lambda f: callback(None if f.exception() else f.result(), f.exception()))
        return fut

    def send_oneway(self, msg: Message) -> None:
        info, default_topic = self._publish_info(msg)
        self._ready()[1].send_oneway(msg, info, default_topic)

    def send_orderly(self, msg: Message, selector: MessageQueueSelector, arg: Any,
                     timeout_ms: int | None = None) -> SendResult:
        info, _ = self._publish_info(msg)
        return self._ready()[1].send_orderly(msg, info, selector, arg, timeout_ms)

    def publish_info(self, topic: str) -> TopicPublishInfo | None:
        return self._ready()[0].publish_info(topic)
