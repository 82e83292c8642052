"""TopicPublishInfo: the queues a producer may write to, built from a route (RocketMQ's
topicRouteData2TopicPublishInfo), and round-robin selection that avoids the broker that just failed."""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass, field

from namesrv.protocol.constants import MASTER_ID, is_writeable
from namesrv.protocol.models import MessageQueue, TopicRouteData


@dataclass
class TopicPublishInfo:
    topic: str
    message_queues: list[MessageQueue]
    route: TopicRouteData | None = None
    order_topic: bool = False
    route_version: int = -1
    _counter: itertools.count[int] = field(
        default_factory=lambda: itertools.count(random.randrange(1 << 30)), repr=False
    )
    """Round-robin position; starts at random (RocketMQ's ThreadLocalIndex), so producers, and every
    fresh route, do not all send their first messages to the first queue of the first broker."""

    @property
    def ok(self) -> bool:
        return bool(self.message_queues)

    def broker_names(self) -> list[str]:
        return sorted({mq.broker_name for mq in self.message_queues})

    def queue_count_of(self, broker_name: str) -> int:
        return sum(1 for mq in self.message_queues if mq.broker_name == broker_name)

    def next_index(self) -> int:
        return next(self._counter)

    def select_one_message_queue(self, last_broker_name: str | None = None) -> MessageQueue | None:
        mqs = self.message_queues
        if not mqs:
            return None
        if last_broker_name is not None:
            for _ in range(len(mqs)):
                mq = mqs[self.next_index() % len(mqs)]
                if mq.broker_name != last_broker_name:
                    return mq
        return mqs[self.next_index() % len(mqs)]


def parse_order_topic_conf(conf: str) -> list[tuple[str, int]]:
    """'brokerA:4;brokerB:4' -> [("brokerA", 4), ("brokerB", 4)]."""
    out = []
    for part in conf.split(";"):
        if not part.strip():
            continue
        name, _, nums = part.partition(":")
        out.append((name.strip(), int(nums)))
    return out


def topic_route_data_to_publish_info(
    topic: str, route: TopicRouteData, route_version: int = -1, queue_limit: int | None = None
) -> TopicPublishInfo:
    """Writable queues of brokers that have a master, sorted by broker name; or the order conf.

    `queue_limit` caps queues per broker (the TBW102 fallback uses min(4, readQueueNums))."""
    if route.order_topic_conf:
        mqs = [
            MessageQueue(topic, name, i)
            for name, nums in parse_order_topic_conf(route.order_topic_conf)
            for i in range(nums)
        ]
        return TopicPublishInfo(topic, mqs, route, True, route_version)
    masters = {bd.broker_name for bd in route.broker_datas if MASTER_ID in bd.broker_addrs}
    mqs = []
    for qd in sorted(route.queue_datas, key=lambda q: q.broker_name):
        if not is_writeable(qd.perm) or qd.broker_name not in masters:
            continue
        nums = qd.write_queue_nums
        if queue_limit is not None:
            nums = min(queue_limit, qd.read_queue_nums)
        mqs.extend(MessageQueue(topic, qd.broker_name, i) for i in range(nums))
    return TopicPublishInfo(topic, mqs, route, False, route_version)


def master_addr(route: TopicRouteData, broker_name: str) -> str | None:
    for bd in route.broker_datas:
        if bd.broker_name == broker_name:
            return bd.broker_addrs.get(MASTER_ID)
    return None
