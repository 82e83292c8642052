"""An async send's attempts (RocketMQ's sendDefaultImpl in ASYNC mode with 4.9's onExceptionImpl
retry), driven by callbacks instead of a thread blocked per message.

Each attempt hands the message to the transport's `send_async` (a request written on the broker
connection, its answer delivered later by whichever thread reads that connection); a transport that
has none, or a broker it cannot reach that way (an actor-call address), is sent to by its blocking
`send` on the caller's executor. What follows an answer never runs long on the thread that
delivered it: a retry and the completion are handed to `submit` (the producer's executor), so a
connection's reader only parses answers.

The rules are the sync send's (`SendEngine.send`): up to `times_total` attempts within one timeout
budget, each on a broker other than the one that just failed, an error answer ends the send (async
retries only attempts that got no answer), every attempt counted and fed to the fault table.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Protocol

from namesrv.client.errors import MQBrokerError, MQClientError, RemotingError, SendFailedError, classify_failure
from namesrv.client.message import Message
from namesrv.client.publish_info import TopicPublishInfo, master_addr
from namesrv.client.send_result import SendResult
from namesrv.common.clock import Clock
from namesrv.protocol.models import MessageQueue


class SendEngineParts(Protocol):
    """What an async send uses of its `send_engine.SendEngine` (which imports this module)."""

    transport: Any
    clock: Clock

    def next_msg_id(self) -> str: ...

    def select_one_message_queue(self, info: TopicPublishInfo, last_broker_name: str | None) -> MessageQueue | None:
        ...

    def _count(self, *keys: str) -> None: ...

    def _update_fault_item(self, broker_name: str, latency_ms: int, isolation: bool) -> None: ...

log = logging.getLogger(__name__)

AnswerCallback = Callable[[SendResult | None, BaseException | None], None]
"""(result, None) for an acknowledged attempt, (None, error) for a failed one."""
Submit = Callable[[Callable[[], None]], Any]
"""Runs a function soon on another thread (`ThreadPoolExecutor.submit`)."""


class AsyncTransport(Protocol):
    def send_async(self, broker_addr: str, mq: MessageQueue, msg: Message, msg_id: str, timeout_ms: int,
                   default_topic: str | None, callback: AnswerCallback) -> bool:
        """Write the request and return True (the callback runs once, when the answer, an error
        or the timeout comes, on whichever thread reads the connection), or return False when
        this broker is not reached that way (the engine then sends it blocking). Raises
        RemotingError when the request could not be written (nothing was sent)."""
        ...


class AsyncSend:
    """One message's async send: `start()` makes the first attempt; `done(result, error)` is called
    exactly once (on a thread of `submit`)."""

    def __init__(self, engine: SendEngineParts, msg: Message, info: TopicPublishInfo, timeout_ms: int,
                 default_topic: str | None, times_total: int, submit: Submit,
                 done: Callable[[SendResult | None, BaseException | None], None]) -> None:
        self.engine = engine
        self.msg = msg
        self.info = info
        self.timeout = timeout_ms
        self.default_topic = default_topic
        self.total = times_total
        self.submit = submit
        self._done = done
        self.msg_id = engine.next_msg_id()
        self.begin = engine.clock()
        self.attempt = 0
        self.failures: list[tuple[str, str]] = []
        self.last_broker: str | None = None

    def start(self) -> None:
        self._attempt()

    def _finish(self, result: SendResult | None, error: BaseException | None) -> None:
        self.submit(lambda: self._done(result, error))

    def _attempt(self) -> None:
        engine = self.engine
        try:
            mq = engine.select_one_message_queue(self.info, self.last_broker)
        except Exception as e:  # a failed selection ends the send with its error
            self._finish(None, e)
            return
        if mq is None:
            self._finish(None, MQClientError(f"no writable queue for topic {self.msg.topic}"))
            return
        cost = engine.clock() - self.begin
        if cost >= self.timeout:
            engine._count("sends_failed")
            self._finish(None, SendFailedError(self.msg.topic, self.failures or [(mq.broker_name, "no time left")],
                                               cost, timed_out=True))
            return
        started = engine.clock()
        addr = master_addr(self.info.route, mq.broker_name) if self.info.route is not None else None
        engine._count("attempts", *(("retries",) if self.attempt else ()))
        self.attempt += 1

        def answered(result: SendResult | None, error: BaseException | None) -> None:
            self._answered(mq, started, result, error)

        try:
            if addr is None:
                raise RemotingError(f"broker {mq.broker_name} has no master in the route")
            send_async = getattr(engine.transport, "send_async", None)
            if send_async is not None and send_async(addr, mq, self.msg, self.msg_id, self.timeout - cost,
                                                     self.default_topic, answered):
                return
        except Exception as e:  # not written: a failed attempt like any other
            self._failed(mq, started, e)
            return
        self.submit(lambda: self._blocking(addr, mq, self.timeout - cost, answered))

    def _blocking(self, addr: str, mq: MessageQueue, timeout_ms: int, answered: AnswerCallback) -> None:
        try:
            result = self.engine.transport.send(addr, mq, self.msg, self.msg_id, timeout_ms, self.default_topic)
        except Exception as e:  # every failure is the attempt's outcome
            answered(None, e)
            return
        answered(result, None)

    def _answered(self, mq: MessageQueue, started: int, result: SendResult | None,
                  error: BaseException | None) -> None:
        engine = self.engine
        if error is not None or result is None:
            self._failed(mq, started, error if isinstance(error, Exception) else RemotingError(str(error)))
            return
        engine._update_fault_item(mq.broker_name, engine.clock() - started, False)
        engine._count("sends_ok")
        result.attempts = self.attempt
        result.brokers_tried = [b for b, _ in self.failures] + [mq.broker_name]
        self._finish(result, None)

    def _failed(self, mq: MessageQueue, started: int, e: Exception) -> None:
        engine = self.engine
        kind, error = classify_failure(e)
        engine._count("failed_attempts", f"failed_attempts.{kind}")
        engine._update_fault_item(mq.broker_name, engine.clock() - started, True)
        self.failures.append((mq.broker_name, error))
        self.last_broker = mq.broker_name
        log.log(logging.WARNING if kind == "unexpected" else logging.INFO,
                "async send %s to %s failed (attempt %d/%d, %s): %s", self.msg.topic, mq.broker_name, self.attempt,
                self.total, kind, error)
        if isinstance(e, MQBrokerError) or self.attempt >= self.total:  # async retries only no answer
            engine._count("sends_failed")
            failed = SendFailedError(self.msg.topic, self.failures, engine.clock() - self.begin)
            failed.__cause__ = e
            self._finish(None, failed)
            return
        self.submit(self._attempt)  # the next attempt, off the thread that read this answer
