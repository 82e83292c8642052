"""The producer's send logic (RocketMQ's DefaultMQProducerImpl.sendDefaultImpl), transport-free.

The transport (how a message reaches a broker) and the route source are injected, so the retry,
broker-avoidance and fault-tolerance rules run the same over Ray actors and in unit tests on a
manual clock.
"""

from __future__ import annotations

import itertools
import logging
import os
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from namesrv.client.fault import FAULT_TABLE_5_X, FaultTable, LatencyFaultTolerance
from namesrv.client.message import Message, MessageQueue, MQClientError, check_message
from namesrv.client.publish_info import TopicPublishInfo, master_addr
from namesrv.clock import Clock, system_clock
from namesrv.constants import ResponseCode

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


class MQBrokerError(Exception):
    """The broker answered, with an error code."""

    def __init__(self, code: int, remark: str | None, broker_name: str) -> None:
        super().__init__(f"broker {broker_name} answered code {code}: {remark}")
        self.code = code
        self.remark = remark
        self.broker_name = broker_name


class RemotingError(Exception):
    """The broker did not answer: it died, timed out, or cannot be found."""


class SendFailedError(MQClientError):
    """Every attempt failed; `failures` lists (broker name, error) per attempt, in order."""

    def __init__(self, topic: str, failures: list[tuple[str, str]], cost_ms: int, timed_out: bool = False) -> None:
        brokers = [b for b, _ in failures]
        reason = "send timeout" if timed_out else "still failed"
        detail = "; ".join(f"{b}: {e}" for b, e in failures)
        super().__init__(
            f"Send [{len(failures)}] times, {reason}, cost [{cost_ms}]ms, Topic: {topic}, "
            f"BrokersSent: {brokers}: {detail}"
        )
        self.topic = topic
        self.failures = failures
        self.brokers_tried = brokers
        self.timed_out = timed_out


@dataclass(slots=True)
class SendResult:
    send_status: str
    msg_id: str
    offset_msg_id: str
    message_queue: MessageQueue
    queue_offset: int
    attempts: int = 1
    brokers_tried: list[str] = field(default_factory=list)


class Transport(Protocol):
    def send(
        self, broker_addr: str, mq: MessageQueue, msg: Message, msg_id: str, timeout_ms: int,
        default_topic: str | None,
    ) -> SendResult:
        """Raise MQBrokerError for an error answer, RemotingError for no answer."""
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


@dataclass
class SendPolicy:
    send_msg_timeout_ms: int = 3000
    retry_times_when_send_failed: int = 2
    send_latency_fault_enable: bool = True
    fault_table: FaultTable = FAULT_TABLE_5_X
    max_message_size: int = 4 * 1024 * 1024


class SendEngine:
    def __init__(
        self,
        transport: Transport,
        policy: SendPolicy | None = None,
        clock: Clock = system_clock,
    ) -> None:
        self.transport = transport
        self.policy = policy or SendPolicy()
        self.clock = clock
        self.fault = LatencyFaultTolerance(self.policy.fault_table, clock)
        self.ids = UniqIdGenerator()

    # ------------------------------------------------------------------ queue selection
    def select_one_message_queue(self, info: TopicPublishInfo, last_broker_name: str | None) -> MessageQueue | None:
        mqs = info.message_queues
        if not mqs:
            return None
        if not self.policy.send_latency_fault_enable:
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
    ) -> SendResult:
        """Sync send: up to 1 + retry_times attempts, each on a broker other than the one that just
        failed, all within one timeout budget."""
        check_message(msg, self.policy.max_message_size)
        timeout = self.policy.send_msg_timeout_ms if timeout_ms is None else timeout_ms
        total = 1 + self.policy.retry_times_when_send_failed if times_total is None else times_total
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
                raise SendFailedError(msg.topic, failures or [(mq.broker_name, "no time left")], cost, timed_out=True)
            started = self.clock()
            addr = master_addr(info.route, mq.broker_name) if info.route is not None else None
            try:
                if addr is None:
                    raise RemotingError(f"broker {mq.broker_name} has no master in the route")
                result = self.transport.send(addr, mq, msg, msg_id, timeout - cost, default_topic)
            except (RemotingError, MQBrokerError) as e:
                self.fault.update_fault_item(mq.broker_name, self.clock() - started, True)
                failures.append((mq.broker_name, str(e)))
                last_broker = mq.broker_name
                log.info("send %s to %s failed (attempt %d/%d): %s", msg.topic, mq.broker_name, attempt + 1, total, e)
                if isinstance(e, MQBrokerError) and e.code not in RETRY_RESPONSE_CODES:
                    raise SendFailedError(msg.topic, failures, self.clock() - begin) from e
                continue
            self.fault.update_fault_item(mq.broker_name, self.clock() - started, False)
            result.attempts = attempt + 1
            result.brokers_tried = [b for b, _ in failures] + [mq.broker_name]
            return result
        raise SendFailedError(msg.topic, failures, self.clock() - begin)

    def send_orderly(
        self, msg: Message, info: TopicPublishInfo, selector: MessageQueueSelector, arg: object,
        timeout_ms: int | None = None,
    ) -> SendResult:
        """One attempt on the selected queue: an ordered message never moves to another queue
        silently; the caller sees the failure and decides."""
        check_message(msg, self.policy.max_message_size)
        if not info.message_queues:
            raise MQClientError(f"no writable queue for topic {msg.topic}")
        mq = selector(list(info.message_queues), msg, arg)
        if mq not in info.message_queues:
            raise MQClientError(f"selector returned {mq}, which is not a queue of {msg.topic}")
        timeout = self.policy.send_msg_timeout_ms if timeout_ms is None else timeout_ms
        addr = master_addr(info.route, mq.broker_name) if info.route is not None else None
        started = self.clock()
        try:
            if addr is None:
                raise RemotingError(f"broker {mq.broker_name} has no master in the route")
            result = self.transport.send(addr, mq, msg, self.ids.next(), timeout, None)
        except (RemotingError, MQBrokerError) as e:
            self.fault.update_fault_item(mq.broker_name, self.clock() - started, True)
            raise SendFailedError(msg.topic, [(mq.broker_name, str(e))], self.clock() - started) from e
        self.fault.update_fault_item(mq.broker_name, self.clock() - started, False)
        result.brokers_tried = [mq.broker_name]
        return result

    def send_oneway(self, msg: Message, info: TopicPublishInfo, default_topic: str | None = None) -> MessageQueue:
        check_message(msg, self.policy.max_message_size)
        mq = self.select_one_message_queue(info, None)
        if mq is None:
            raise MQClientError(f"no writable queue for topic {msg.topic}")
        addr = master_addr(info.route, mq.broker_name) if info.route is not None else None
        if addr is None:
            raise MQClientError(f"broker {mq.broker_name} has no master in the route")
        self.transport.send_oneway(addr, mq, msg, self.ids.next())
        return mq
