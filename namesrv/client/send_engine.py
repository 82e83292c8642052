"""The producer's send logic (RocketMQ's DefaultMQProducerImpl.sendDefaultImpl), transport-free.

The transport (how a message reaches a broker) and the route source are injected, so the retry,
broker-avoidance and fault-tolerance rules run the same over Ray actors and in unit tests on a
manual clock.
"""

from __future__ import annotations

import collections
import itertools
import logging
import os
import threading
import uuid
from collections.abc import Callable
from typing import Protocol

from namesrv.client.config import ProducerConfig
from namesrv.client.errors import MQBrokerError, MQClientError, RemotingError, SendFailedError, classify_failure
from namesrv.client.fault import LatencyFaultTolerance
from namesrv.client.message import Message, check_message
from namesrv.client.publish_info import TopicPublishInfo, master_addr
from namesrv.client.send_async import AnswerCallback, AsyncSend, Submit
from namesrv.client.send_result import SendResult as SendResult
from namesrv.common.clock import Clock, system_clock
from namesrv.protocol.codes import ResponseCode
from namesrv.protocol.models import MessageQueue

log = logging.getLogger(__name__)

RETRY_RESPONSE_CODES = frozenset(
    {
        ResponseCode.TOPIC_NOT_EXIST,
        ResponseCode.SERVICE_NOT_AVAILABLE,
        ResponseCode.SYSTEM_ERROR,
        ResponseCode.SYSTEM_BUSY,
        ResponseCode.NO_PERMISSION,
    }
)


FAILED_ATTEMPT_KINDS = ("broker_error", "no_answer", "unexpected")
"""How a send attempt failed: the broker answered an error (or raised one), no answer came (dead,
timed out, unreachable), or the transport raised something else. Every kind is a failed attempt
the engine records and, within the retry budget, retries on another broker."""


class Transport(Protocol):
    def send(
        self, broker_addr: str, mq: MessageQueue, msg: Message, msg_id: str, timeout_ms: int,
        default_topic: str | None,
    ) -> SendResult:
        """Raise MQBrokerError for an error answer, RemotingError for no answer. Anything else it
        raises still counts as a failed attempt (kind "unexpected"), never escapes a send."""
        ...

    def send_oneway(self, broker_addr: str, mq: MessageQueue, msg: Message, msg_id: str) -> None: ...


MessageQueueSelector = Callable[[list[MessageQueue], Message, object], MessageQueue]


def select_by_hash(mqs: list[MessageQueue], msg: Message, arg: object) -> MessageQueue:
    """RocketMQ's SelectMessageQueueByHash: a stable queue per sharding key (order per key)."""
    import zlib

    key = str(arg).encode()
    return mqs[zlib.crc32(key) % len(mqs)]


class UniqIdGenerator:
    """Message ids unique across processes: a random per-instance prefix and a counter."""

    def __init__(self) -> None:
        self.prefix = f"{os.getpid():08X}{uuid.uuid4().hex[:12].upper()}"
        self._counter = itertools.count()

    def next(self) -> str:
        return f"{self.prefix}{next(self._counter):012X}"


class SendEngine:
    def __init__(
        self,
        transport: Transport,
        config: ProducerConfig | None = None,
        clock: Clock = system_clock,
    ) -> None:
        self.transport = transport
        self.config = config or ProducerConfig()
        self.clock = clock
        self.fault = LatencyFaultTolerance(self.config.latency_table, clock)
        self.ids = UniqIdGenerator()
        self.stats: collections.Counter[str] = collections.Counter()
        """Counts since start: attempts, retries, sends ok/failed, and failed attempts by kind
        (`failed_attempts.<kind>`, kinds in FAILED_ATTEMPT_KINDS). Read with `stats_snapshot`."""
        self._stats_lock = threading.Lock()

    def _count(self, *keys: str) -> None:
        with self._stats_lock:
            for key in keys:
                self.stats[key] += 1

    def next_msg_id(self) -> str:
        """A new unique message id (the client's UNIQ_KEY)."""
        return self.ids.next()

    def stats_snapshot(self) -> dict[str, int]:
        with self._stats_lock:
            return dict(self.stats)

    def _update_fault_item(self, broker_name: str, latency_ms: int, isolation: bool) -> None:
        """Record a send's outcome for fault tolerance; nothing at all when it is off (RocketMQ's
        MQFaultStrategy.updateFaultItem)."""
        if self.config.send_latency_fault_enable:
            self.fault.update_fault_item(broker_name, latency_ms, isolation)

    # ------------------------------------------------------------------ queue selection
    def select_one_message_queue(self, info: TopicPublishInfo, last_broker_name: str | None) -> MessageQueue | None:
        mqs = info.message_queues
        if not mqs:
            return None
        if not self.config.send_latency_fault_enable:
            return info.select_one_message_queue(last_broker_name)
        names = info.broker_names()
        avoid = last_broker_name if len(names) > 1 else None
        start = info.next_index()
        for i in range(len(mqs)):
            mq = mqs[(start + i) % len(mqs)]
            if mq.broker_name != avoid and self.fault.is_available(mq.broker_name):
                return mq
        not_best = self.fault.pick_one_at_least([n for n in names if n != avoid])
        if not_best is not None:
            nums = info.queue_count_of(not_best)
            if nums > 0:
                return MessageQueue(info.topic, not_best, start % nums)
        return info.select_one_message_queue(last_broker_name)

    # ------------------------------------------------------------------ send modes
    def send(
        self,
        msg: Message,
        info: TopicPublishInfo,
        timeout_ms: int | None = None,
        default_topic: str | None = None,
        times_total: int | None = None,
        retry_broker_errors: bool = True,
    ) -> SendResult:
        """Sync send: up to 1 + retry_times attempts, each on a broker other than the one that just
        failed, all within one timeout budget. `retry_broker_errors` False retries only attempts
        that got no answer (an async send, as RocketMQ 4.9's onExceptionImpl does)."""
        check_message(msg, self.config.max_message_size)
        timeout = self.config.send_msg_timeout_ms if timeout_ms is None else timeout_ms
        total = 1 + self.config.retry_times_when_send_failed if times_total is None else times_total
        msg_id = self.ids.next()
        begin = self.clock()
        failures: list[tuple[str, str]] = []
        last_broker: str | None = None
        for attempt in range(total):
            mq = self.select_one_message_queue(info, last_broker)
            if mq is None:
                raise MQClientError(f"no writable queue for topic {msg.topic}")
            cost = self.clock() - begin
            if cost >= timeout:
                self._count("sends_failed")
                raise SendFailedError(msg.topic, failures or [(mq.broker_name, "no time left")], cost, timed_out=True)
            started = self.clock()
            addr = master_addr(info.route, mq.broker_name) if info.route is not None else None
            self._count("attempts", *(("retries",) if attempt else ()))
            try:
                if addr is None:
                    raise RemotingError(f"broker {mq.broker_name} has no master in the route")
                result = self.transport.send(addr, mq, msg, msg_id, timeout - cost, default_topic)
            except Exception as e:  # every failed attempt: counted, and retried within the budget
                kind, error = classify_failure(e)
                self._count("failed_attempts", f"failed_attempts.{kind}")
                self._update_fault_item(mq.broker_name, self.clock() - started, True)
                failures.append((mq.broker_name, error))
                last_broker = mq.broker_name
                log.log(logging.WARNING if kind == "unexpected" else logging.INFO,
                        "send %s to %s failed (attempt %d/%d, %s): %s", msg.topic, mq.broker_name, attempt + 1,
                        total, kind, error)
                if isinstance(e, MQBrokerError) and (not retry_broker_errors or e.code not in RETRY_RESPONSE_CODES):
                    self._count("sends_failed")
                    raise SendFailedError(msg.topic, failures, self.clock() - begin) from e
                continue
            self._update_fault_item(mq.broker_name, self.clock() - started, False)
            self._count("sends_ok")
            result.attempts = attempt + 1
            result.brokers_tried = [b for b, _ in failures] + [mq.broker_name]
            return result
        self._count("sends_failed")
        raise SendFailedError(msg.topic, failures, self.clock() - begin)

    def send_async(
        self, msg: Message, info: TopicPublishInfo, submit: Submit, done: AnswerCallback,
        timeout_ms: int | None = None, default_topic: str | None = None, times_total: int | None = None,
    ) -> None:
        """Async send (`send_async.AsyncSend`): returns once the first attempt is written; `done`
        runs once on a thread of `submit` with the result or the SendFailedError. Attempts and
        retries as `send` with `retry_broker_errors` False (only attempts that got no answer are
        retried, as RocketMQ 4.9's async send), `times_total` 1 + retry_times_when_send_async_failed
        unless given."""
        check_message(msg, self.config.max_message_size)
        timeout = self.config.send_msg_timeout_ms if timeout_ms is None else timeout_ms
        total = 1 + self.config.retry_times_when_send_async_failed if times_total is None else times_total
        AsyncSend(self, msg, info, timeout, default_topic, total, submit, done).start()

    def send_orderly(
        self, msg: Message, info: TopicPublishInfo, selector: MessageQueueSelector, arg: object,
        timeout_ms: int | None = None,
    ) -> SendResult:
        """One attempt on the selected queue: an ordered message never moves to another queue
        silently; the caller sees the failure and decides."""
        check_message(msg, self.config.max_message_size)
        if not info.message_queues:
            raise MQClientError(f"no writable queue for topic {msg.topic}")
        mq = selector(list(info.message_queues), msg, arg)
        if mq not in info.message_queues:
            raise MQClientError(f"selector returned {mq}, which is not a queue of {msg.topic}")
        timeout = self.config.send_msg_timeout_ms if timeout_ms is None else timeout_ms
        addr = master_addr(info.route, mq.broker_name) if info.route is not None else None
        started = self.clock()
        self._count("attempts")
        try:
            if addr is None:
                raise RemotingError(f"broker {mq.broker_name} has no master in the route")
            result = self.transport.send(addr, mq, msg, self.ids.next(), timeout, None)
        except Exception as e:  # whatever failed, the caller gets a SendFailedError saying what
            kind, error = classify_failure(e)
            self._count("failed_attempts", f"failed_attempts.{kind}", "sends_failed")
            self._update_fault_item(mq.broker_name, self.clock() - started, True)
            raise SendFailedError(msg.topic, [(mq.broker_name, error)], self.clock() - started) from e
        self._update_fault_item(mq.broker_name, self.clock() - started, False)
        self._count("sends_ok")
        result.brokers_tried = [mq.broker_name]
        return result

    def send_oneway(self, msg: Message, info: TopicPublishInfo, default_topic: str | None = None) -> MessageQueue:
        check_message(msg, self.config.max_message_size)
        mq = self.select_one_message_queue(info, None)
        if mq is None:
            raise MQClientError(f"no writable queue for topic {msg.topic}")
        addr = master_addr(info.route, mq.broker_name) if info.route is not None else None
        if addr is None:
            raise MQClientError(f"broker {mq.broker_name} has no master in the route")
        self.transport.send_oneway(addr, mq, msg, self.ids.next())
        return mq

