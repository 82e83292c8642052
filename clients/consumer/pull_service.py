"""Long-polling pulls, one outstanding per held queue (RocketMQ's PullMessageService with
DefaultMQPushConsumerImpl.pullMessage and PullAPIWrapper.processPullResult).

One scheduler thread sends each queue's next PULL_MESSAGE (batch `pull_batch_size`, held by the
broker up to `broker_suspend_max_time_ms` when there is nothing new) without waiting; the answer is
handled on the connection's reader: messages decoded (bodies inflated), filtered by tag, cached in
the queue's ProcessQueue and handed to the consume service, and the next pull scheduled at once.
Flow control: a queue with more than `pull_threshold_for_queue` messages or
`pull_threshold_size_for_queue` MiB cached is pulled again only after
`pull_time_delay_ms_when_flow_control`; a failed pull after `pull_time_delay_ms_when_exception`.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from clients.consumer.broker_api import FLAG_COMMIT_OFFSET, FLAG_SUBSCRIPTION, FLAG_SUSPEND
from clients.consumer.core import ConsumerCore
from namesrv.client.consumer.config import MIB
from namesrv.client.consumer.process_queue import ProcessQueue
from namesrv.client.offsets import ReadOffsetType
from namesrv.protocol.codes import ResponseCode
from namesrv.protocol.constants import RETRY_GROUP_TOPIC_PREFIX
from namesrv.protocol.message.decoder import MessageExt, decode_messages  # bodies come inflated
from namesrv.protocol.message.properties import RETRY_TOPIC
from namesrv.protocol.models import MessageQueue
from namesrv.remoting.wire_command import RemotingCommand

log = logging.getLogger(__name__)

"""The property a retried message carries its original topic in."""


@dataclass
class PullRequest:
    mq: MessageQueue
    pq: ProcessQueue
    next_offset: int


Deliver = Callable[[PullRequest, list[MessageExt]], None]


class PullMessageService:
    def __init__(self, core: ConsumerCore, deliver: Deliver, correct_offsets: bool = True) -> None:
        """`correct_offsets`: move a drained queue's offset past messages the filter skipped
        (the push consumer's correctTagsOffset); the lite consumer's offsets move only with poll."""
        self.core = core
        self.deliver = deliver
        self.correct_offsets = correct_offsets
        self._heap: list[tuple[float, int, PullRequest]] = []
        self._seq = itertools.count()
        self._cv = threading.Condition()
        self._stop = False
        self._thread: threading.Thread | None = None
        self.pulls = 0
        self.flow_controlled = 0

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=f"{self.core.group}-pull", daemon=True)
        self._thread.start()

    def shutdown(self) -> None:
        with self._cv:
            self._stop = True
            self._cv.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def execute_later(self, req: PullRequest, delay_ms: float) -> None:
        with self._cv:
            heapq.heappush(self._heap, (time.monotonic() + delay_ms / 1000, next(self._seq), req))
            self._cv.notify()

    def _run(self) -> None:
        while True:
            with self._cv:
                while not self._stop and (not self._heap or self._heap[0][0] > time.monotonic()):
                    self._cv.wait(self._heap[0][0] - time.monotonic() if self._heap else None)
                if self._stop:
                    return
                _, _, req = heapq.heappop(self._heap)
            try:
                self._pull(req)
            except Exception:
                log.exception("pull of %s failed", req.mq)
                self.execute_later(req, self.core.config.pull_time_delay_ms_when_exception)

    def _pull(self, req: PullRequest) -> None:
        core, cfg, pq = self.core, self.core.config, req.pq
        if pq.dropped or not core.running:
            return
        pq.last_pull_s = time.monotonic()
        if pq.cached_count > cfg.pull_threshold_for_queue or pq.cached_bytes > cfg.pull_threshold_size_for_queue * MIB:
            self.flow_controlled += 1
            self.execute_later(req, cfg.pull_time_delay_ms_when_flow_control)
            return
        if core.orderly and core.clustering and not pq.locked:
            self.execute_later(req, cfg.pull_time_delay_ms_when_exception)
            return
        sub = core.subscriptions.get(req.mq.topic)
        assert core.routes is not None and core.api is not None
        addr = core.routes.broker_addr(req.mq.broker_name)
        if sub is None or addr is None:
            self.execute_later(req, cfg.pull_time_delay_ms_when_exception)
            return
        commit = core.offset_store.read_offset(req.mq, ReadOffsetType.READ_FROM_MEMORY) if core.clustering else -1
        sys_flag = FLAG_SUSPEND | FLAG_SUBSCRIPTION | (FLAG_COMMIT_OFFSET if commit > 0 else 0)
        header = {"consumerGroup": core.group, "topic": req.mq.topic, "queueId": req.mq.queue_id,
                  "queueOffset": req.next_offset, "maxMsgNums": cfg.pull_batch_size, "sysFlag": sys_flag,
                  "commitOffset": max(commit, 0), "suspendTimeoutMillis": cfg.broker_suspend_max_time_ms,
                  "subscription": sub.selector.expression, "subVersion": sub.sub_version,
                  "expressionType": sub.selector.expression_type}
        self.pulls += 1
        core.api.pull_async(addr, header, cfg.consumer_timeout_ms_when_suspend / 1000,
                            lambda answer, error: self._answered(req, answer, error))

    def _answered(self, req: PullRequest, answer: RemotingCommand | None, error: BaseException | None) -> None:
        """On the connection's reader: cache and hand on what came, schedule the next pull."""
        cfg = self.core.config
        if answer is None:
            if not req.pq.dropped:
                log.info("pull of %s failed: %s", req.mq, error)
            self.execute_later(req, cfg.pull_time_delay_ms_when_exception)
            return
        ext = answer.ext_fields or {}
        if answer.code not in (ResponseCode.SUCCESS, ResponseCode.PULL_NOT_FOUND, ResponseCode.PULL_RETRY_IMMEDIATELY,
                               ResponseCode.PULL_OFFSET_MOVED) or "nextBeginOffset" not in ext:
            log.warning("pull of %s refused: code %d %s", req.mq, answer.code, answer.remark)
            self.execute_later(req, cfg.pull_time_delay_ms_when_exception)
            return
        next_offset = int(ext["nextBeginOffset"])
        if answer.code == ResponseCode.PULL_OFFSET_MOVED:
            log.warning("%s: offset %d of %s moved to %d", self.core.group, req.next_offset, req.mq, next_offset)
            self.core.offset_store.update_offset(req.mq, next_offset)
        msgs = self._messages(req.mq, answer.body) if answer.code == ResponseCode.SUCCESS and answer.body else []
        req.next_offset = next_offset
        if msgs and not req.pq.dropped:
            req.pq.put(msgs)
            self.deliver(req, msgs)
        elif self.correct_offsets and req.pq.is_empty() and self.core.clustering:  # correctTagsOffset
            req.pq.if_live(partial(self.core.offset_store.update_offset, req.mq, next_offset, increase_only=True))
        if not req.pq.dropped:
            self.execute_later(req, cfg.pull_interval_ms)

    def _messages(self, mq: MessageQueue, body: bytes) -> list[MessageExt]:
        sub = self.core.subscriptions.get(mq.topic)
        out = []
        for m in decode_messages(body):
            if sub is not None and not sub.accepts(m.properties.get("TAGS")):
                continue
            if m.topic.startswith(RETRY_GROUP_TOPIC_PREFIX) and RETRY_TOPIC in m.properties:
                m.topic = m.properties[RETRY_TOPIC]  # resetRetryAndNamespace: the listener sees the real topic
            out.append(m)
        return out
