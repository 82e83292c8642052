"""The chaos run's consumer group: push consumers of one group (given every NameServer, as the
project's clients are by default: the union of the NameServers' views) consuming the run's topics
while faults happen, and a sampler recording which member holds each queue, so invariant 7
(clients.chaos.ownership) can tell a queue nobody or two members owned, and for how long.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from typing import Any

from clients.chaos.ownership import OwnershipSample, Queue
from clients.chaos.plan import client_namesrvs
from clients.consumer import members
from clients.consumer.push_consumer import ConsumeConcurrentlyStatus, PushConsumer
from clients.impl import route_views
from namesrv.common.clock import system_clock as now_ms
from namesrv.common.waiting import WaitTimeout, wait_until

log = logging.getLogger(__name__)

GROUP = "chaos_group"
SAMPLE_S = 0.1


class GroupLane:
    def __init__(self, namespace: str, namesrvs: list[str], topics: list[str], queues: set[Queue], *,
                 members: int = 2, rebalance_interval_ms: int = 1_000, group: str = GROUP,
                 route_union: bool = True) -> None:
        """`queues`: every queue of the run's topics (what the group should own). The members read
        routes at every rebalance and heartbeat the brokers as often (a restarted broker knows a
        group's members only from their heartbeats; RocketMQ's 30 s would leave it wrong that long).
        Without `route_union`, member i is given NameServer i alone (a RocketMQ client sticks to the
        one NameServer it picked)."""
        self.queues = set(queues)
        self.topics = list(topics)
        self.rebalance_interval_ms = rebalance_interval_ms
        self.samples: list[OwnershipSample] = []
        self.consumed = 0
        self._lock = threading.Lock()
        self.members = [PushConsumer(group, namesrv=client_namesrvs(namesrvs, i, route_union),
                                     namespace=namespace, instance_name=f"chaos-member-{i}",
                                     rebalance_interval_ms=rebalance_interval_ms, route_union=route_union,
                                     heartbeat_broker_interval_ms=rebalance_interval_ms) for i in range(members)]
        for m in self.members:
            for topic in topics:
                m.subscribe(topic, "*")
            m.register_message_listener(self._consume)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample_loop, name="chaos-group-sampler", daemon=True)

    def bound_ms(self, margin_ms: int) -> int:
        """How long a queue may go without one owner (invariant 7): the member that drops it and the
        one that takes it rebalance on their own timers, up to one interval apart, and a pass may
        wait its graces out (the members' query `members.GRACE_S` once, the route query
        `route_views.LATE_GRACE_S` per topic, the retry topic too) while a broker or NameServer
        does not answer; plus the margin."""
        topics = len(self.topics) + 1
        pass_ms = round((members.GRACE_S + route_views.LATE_GRACE_S * topics) * 1000)
        return self.rebalance_interval_ms + pass_ms + margin_ms

    def _consume(self, msgs: list[Any], ctx: Any) -> ConsumeConcurrentlyStatus:
        with self._lock:
            self.consumed += len(msgs)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    def start(self) -> GroupLane:
        for m in self.members:
            m.start()
        self._thread.start()
        return self

    def owners(self) -> dict[Queue, int]:
        counts = Counter((mq.topic, mq.broker_name, mq.queue_id) for m in self.members for mq in m.assignment())
        return {q: counts.get(q, 0) for q in self.queues}

    def settled(self) -> bool:
        """Every queue owned by exactly one member."""
        return all(n == 1 for n in self.owners().values())

    def wait_settled(self, timeout_s: float) -> bool:
        """Wait until the group owns every queue once (False after `timeout_s`)."""
        try:
            wait_until(self.settled, timeout_s, "every queue owned once", 0.1)
        except WaitTimeout:
            return False
        return True

    def _sample_loop(self) -> None:
        while not self._stop.wait(SAMPLE_S):
            try:
                self.samples.append(OwnershipSample(now_ms(), self.owners()))
            except Exception:  # a member mid-rebalance: next sample
                log.debug("ownership sample failed", exc_info=True)

    def stop_sampling(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(10)

    def stop(self) -> bool:
        """Stop sampling and shut the members down; True when the sampler thread ended."""
        self.stop_sampling()
        for m in self.members:
            try:
                m.shutdown()
            except Exception:
                log.exception("group member shutdown failed")
        return not self._thread.is_alive()

    def figures(self) -> dict[str, Any]:
        return {"members": len(self.members), "consumed": self.consumed, "samples": len(self.samples),
                "rebalance_interval_ms": self.rebalance_interval_ms,
                "rebalances": [m.stats()["rebalances"] for m in self.members]}
