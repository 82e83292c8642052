"""The chaos run's live reader: a consumer reading every queue of the run's topics while faults
happen, so the history checker (clients.chaos.history) sees what a consumer was given before a
failover, not only what the brokers hold at the end.

It is a real pull consumer of its own group (`PullConsumer`, through each broker actor's
PULL_MESSAGE, read fence and all): each round it asks the NameServers for the topics' queues (a
failover moves a queue to the new master, its offsets going on from where the reader was) and
pulls each from the offset it reached. A pull refused or lost to a fault is tried again next round.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from clients.chaos.history import Received
from clients.consumer.pull_consumer import PullConsumer
from namesrv.common.clock import system_clock as now_ms

log = logging.getLogger(__name__)

READER_GROUP = "chaos_live_reader"
ROUND_S = 0.5
"""Pause between two rounds over every queue (a round costs one pull per queue)."""


class LiveReader:
    def __init__(self, namespace: str, namesrvs: list[str], topics: list[str], name: str = READER_GROUP,
                 round_s: float = ROUND_S) -> None:
        self.consumer = PullConsumer(namespace, namesrvs, timeout_s=10, consumer_group=name)
        self.topics, self.name, self.round_s = topics, name, round_s
        self.received: list[Received] = []
        self.failed_pulls = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="chaos-live-reader", daemon=True)

    def start(self) -> LiveReader:
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.read_round()
            self._stop.wait(self.round_s)

    def read_round(self) -> None:
        """One pull of every readable queue of the topics (errors counted, never raised)."""
        for topic in self.topics:
            try:
                queues = self.consumer.fetch_subscribe_message_queues(topic)
            except Exception as e:  # a NameServer down or the route not there yet: next round
                log.debug("live reader: no route for %s: %s", topic, e)
                self.failed_pulls += 1
                continue
            for mq, actor in queues:
                if self._stop.is_set():
                    return
                try:
                    got = self.consumer.pull(mq, actor, max_nums=64)
                except Exception as e:  # a broker killed, paused or refusing: next round
                    log.debug("live reader: pull of %s failed: %s", mq, e)
                    self.failed_pulls += 1
                    continue
                at = now_ms()
                self.received.extend(Received(self.name, (m.topic, m.broker_name, m.queue_id), m.queue_offset,
                                              m.msg_id, at, actor) for m in got)

    def stop(self, timeout_s: float = 30.0) -> bool:
        """Stop reading; True when its thread ended."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s)
        return not self._thread.is_alive()

    def figures(self) -> dict[str, Any]:
        return {"given": len(self.received), "failed_pulls": self.failed_pulls}
