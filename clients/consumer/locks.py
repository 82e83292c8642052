"""Orderly consumption's broker locks (RocketMQ's RebalanceImpl.lock / lockAll / unlock): a member
consumes a queue in order only while it holds the queue's lock on the queue's master (LOCK_BATCH_MQ;
the broker lets a lock lapse after 60 s), renews them all every `lock_interval_ms` (20 s) and
releases a queue with UNLOCK_BATCH_MQ when it leaves (or the member shuts down)."""

from __future__ import annotations

import logging
import time

from clients.consumer.broker_api import ConsumerBrokerApi
from clients.consumer.routes import ConsumerRoutes
from namesrv.client.consumer.process_queue import ProcessQueue
from namesrv.protocol.models import MessageQueue

log = logging.getLogger(__name__)


def _by_broker(mqs: list[MessageQueue]) -> dict[str, list[MessageQueue]]:
    out: dict[str, list[MessageQueue]] = {}
    for mq in mqs:
        out.setdefault(mq.broker_name, []).append(mq)
    return out


class QueueLocks:
    def __init__(self, group: str, api: ConsumerBrokerApi, routes: ConsumerRoutes) -> None:
        self.group = group
        self.api = api
        self.routes = routes

    def lock(self, mq: MessageQueue, pq: ProcessQueue) -> bool:
        """Take `mq`'s lock for this member (False: another member holds it, or no answer)."""
        addr = self.routes.broker_addr(mq.broker_name, master_only=True)
        if addr is None:
            return False
        try:
            locked = mq in self.api.lock_batch(addr, self.group, [mq])
        except Exception as e:
            log.info("locking %s failed: %s", mq, e)
            return False
        pq.locked = locked
        pq.last_lock_s = time.monotonic()
        return locked

    def lock_all(self, held: dict[MessageQueue, ProcessQueue]) -> None:
        """Renew the locks of every held queue; a queue whose lock is refused stops being consumed."""
        for name, mqs in _by_broker(list(held)).items():
            addr = self.routes.broker_addr(name, master_only=True)
            if addr is None:
                continue
            try:
                ok = self.api.lock_batch(addr, self.group, mqs)
            except Exception as e:
                log.info("renewing locks on %s failed: %s", name, e)
                continue
            now = time.monotonic()
            for mq in mqs:
                held[mq].locked = mq in ok
                if mq in ok:
                    held[mq].last_lock_s = now

    def unlock(self, mqs: list[MessageQueue]) -> None:
        for name, batch in _by_broker(mqs).items():
            addr = self.routes.broker_addr(name, master_only=True)
            if addr is None:
                continue
            try:
                self.api.unlock_batch(addr, self.group, batch)
            except Exception as e:
                log.info("unlocking %s on %s failed: %s", batch, name, e)
