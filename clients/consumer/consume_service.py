"""Running the Python listener (RocketMQ's ConsumeMessageConcurrentlyService and
ConsumeMessageOrderlyService) on a bounded pool of `consume_thread_max` threads.

Concurrent: messages of a queue are consumed in parallel, `consume_message_batch_max_size` at a
time. CONSUME_SUCCESS commits them; RECONSUME_LATER (or an exception) sends each back with
CONSUMER_SEND_MSG_BACK (clustering): the broker stores it in %RETRY%group at delay level
3 + reconsumeTimes, or in %DLQ%group past `max_reconsume_times` (16). A message the broker could not
take back is consumed again here after 5 s. Broadcasting drops a failed message (logged), as RocketMQ.
The offset committed is the smallest message still cached in the queue.

Orderly: one listener at a time per queue, in queue order, while this member holds the queue's
broker lock; a queue leaving the member is unlocked only after its running listener's result is
committed, so its next holder neither goes back nor skips (RocketMQ drops that result: a duplicate).
SUSPEND_CURRENT_QUEUE_A_MOMENT puts the messages back and tries them again after
`suspend_current_queue_time_ms`; past `max_reconsume_times` (when set) the message goes to the DLQ.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

from clients.consumer.core import ConsumerCore
from clients.consumer.pull_service import PullRequest
from namesrv.client.consumer.listener import ConsumeConcurrentlyStatus, ConsumeContext, ConsumeOrderlyStatus
from namesrv.client.consumer.process_queue import ProcessQueue
from namesrv.protocol.message.decoder import MessageExt
from namesrv.protocol.models import MessageQueue

log = logging.getLogger(__name__)

SEND_BACK_FAILED_RETRY_S = 5.0
DLQ_DELAY_LEVEL = -1
"""A delay level below 0 sends a message back straight into the DLQ."""


class _Stats:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.ok = 0
        self.failed = 0
        self.sent_back = 0

    def add(self, ok: int = 0, failed: int = 0, sent_back: int = 0) -> None:
        with self.lock:
            self.ok += ok
            self.failed += failed
            self.sent_back += sent_back

    def snapshot(self) -> dict[str, int]:
        with self.lock:
            return {"consume_ok": self.ok, "consume_failed": self.failed, "sent_back": self.sent_back}


class ConsumeService:
    def __init__(self, core: ConsumerCore, listener: Any) -> None:
        self.core = core
        self.listener = listener
        cfg = core.config
        self.pool = ThreadPoolExecutor(max_workers=cfg.consume_thread_max, thread_name_prefix=f"{core.group}-consume")
        self.stats = _Stats()
        self._timers: set[threading.Timer] = set()
        self._closed = False

    def shutdown(self) -> None:
        self._closed = True
        for t in list(self._timers):
            t.cancel()
        self.pool.shutdown(wait=True, cancel_futures=True)

    def submit(self, req: PullRequest, msgs: list[MessageExt]) -> None:
        """Messages just pulled into `req`'s process queue, to consume."""
        raise NotImplementedError

    def _later(self, delay_s: float, fn: Any, *args: Any) -> None:
        def run() -> None:
            self._timers.discard(timer)
            if not self._closed:
                self.pool.submit(fn, *args)
        timer = threading.Timer(delay_s, run)
        timer.daemon = True
        self._timers.add(timer)
        timer.start()

    def _send_back(self, msg: MessageExt, mq: MessageQueue, delay_level: int, max_times: int) -> bool:
        core = self.core
        assert core.api is not None and core.routes is not None
        addr = core.routes.broker_addr(mq.broker_name)
        if addr is None:
            return False
        try:
            core.api.send_back(addr, core.group, msg.commit_log_offset, delay_level,
                               msg.properties.get("ORIGIN_MESSAGE_ID", msg.unique_key or msg.msg_id), msg.topic,
                               max_times)
        except Exception as e:
            log.warning("sending %s back failed: %s", msg.msg_id, e)
            return False
        self.stats.add(sent_back=1)
        return True

    def _commit(self, mq: MessageQueue, pq: ProcessQueue, offset: int) -> None:
        if offset >= 0:
            pq.if_live(partial(self.core.offset_store.update_offset, mq, offset, increase_only=True))


class ConcurrentConsumeService(ConsumeService):
    def submit(self, req: PullRequest, msgs: list[MessageExt]) -> None:
        if self._closed:
            return
        size = self.core.config.consume_message_batch_max_size
        for i in range(0, len(msgs), size):
            self.pool.submit(self._consume, req.mq, req.pq, msgs[i:i + size])

    def _consume(self, mq: MessageQueue, pq: ProcessQueue, msgs: list[MessageExt]) -> None:
        if pq.dropped:
            return
        ctx = ConsumeContext(mq)
        try:
            status = self.listener(msgs, ctx)
        except Exception:
            log.exception("the listener of %s failed on %d messages of %s", self.core.group, len(msgs), mq)
            status = ConsumeConcurrentlyStatus.RECONSUME_LATER
        if status is None:
            status = ConsumeConcurrentlyStatus.RECONSUME_LATER
        if pq.dropped:
            return  # the queue left this member: its new owner consumes these again
        if status is ConsumeConcurrentlyStatus.CONSUME_SUCCESS:
            self.stats.add(ok=len(msgs))
        else:
            self.stats.add(failed=len(msgs))
            if not self.core.clustering:
                log.warning("broadcasting: %d failed messages of %s dropped", len(msgs), mq)
            else:
                again = [m for m in msgs
                         if not self._send_back(m, mq, ctx.delay_level_when_next_consume,
                                                self.core.config.concurrent_max_reconsume_times)]
                if again:
                    for m in again:
                        m.reconsume_times += 1
                    retried = {id(m) for m in again}
                    done = [m for m in msgs if id(m) not in retried]
                    self._commit(mq, pq, pq.remove(done))
                    self._later(SEND_BACK_FAILED_RETRY_S, self._consume, mq, pq, again)
                    return
        self._commit(mq, pq, pq.remove(msgs))


class OrderlyConsumeService(ConsumeService):
    def submit(self, req: PullRequest, msgs: list[MessageExt]) -> None:
        if not self._closed:
            self.pool.submit(self._consume, req.mq, req.pq)

    def _consume(self, mq: MessageQueue, pq: ProcessQueue) -> None:
        """Drain the queue's cache in order, one batch at a time, while its lock is held."""
        cfg = self.core.config
        with pq.consume_lock:
            while not pq.dropped and not self._closed:
                if self.core.clustering and (not pq.locked or pq.lock_expired()):
                    self._later(0.1, self._consume, mq, pq)  # lock renewed by the timer (or the queue leaves)
                    return
                msgs = pq.take(cfg.consume_message_batch_max_size)
                if not msgs:
                    return
                ctx = ConsumeContext(mq)
                try:
                    status = self.listener(msgs, ctx)
                except Exception:
                    log.exception("the orderly listener of %s failed on %s", self.core.group, mq)
                    status = ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
                if status is ConsumeOrderlyStatus.SUCCESS:
                    # committed even when the queue is leaving: its broker lock is let go only after
                    # this listener returns (ConsumerCore._release), so the next holder starts after it
                    self.stats.add(ok=len(msgs))
                    offset = pq.commit()
                    if offset >= 0:
                        self.core.offset_store.update_offset(mq, offset, increase_only=True)
                    continue
                if pq.dropped:
                    return
                self.stats.add(failed=len(msgs))
                limit = cfg.max_reconsume_times
                if limit >= 0 and all(m.reconsume_times >= limit for m in msgs) and all(
                        self._send_back(m, mq, DLQ_DELAY_LEVEL, limit) for m in msgs):
                    self._commit(mq, pq, pq.commit())
                    continue
                pq.consume_again(msgs)
                wait_ms = ctx.suspend_current_queue_time_ms if ctx.suspend_current_queue_time_ms > 0 else \
                    cfg.suspend_current_queue_time_ms
                self._later(wait_ms / 1000, self._consume, mq, pq)
                return
