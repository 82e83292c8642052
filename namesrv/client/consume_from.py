"""Where a consumer starts in a queue its group has no offset for (RocketMQ's ConsumeFromWhere and
RebalancePushImpl.computePullFromWhere). Pure: the queue's offsets come from a `QueueOffsets`."""

from __future__ import annotations

import enum
from typing import Protocol

from namesrv.client.offsets import NO_OFFSET, OffsetStore, ReadOffsetType
from namesrv.protocol.constants import RETRY_GROUP_TOPIC_PREFIX
from namesrv.protocol.models import MessageQueue


class ConsumeFromWhere(enum.Enum):
    CONSUME_FROM_LAST_OFFSET = "CONSUME_FROM_LAST_OFFSET"
    CONSUME_FROM_FIRST_OFFSET = "CONSUME_FROM_FIRST_OFFSET"
    CONSUME_FROM_TIMESTAMP = "CONSUME_FROM_TIMESTAMP"


class QueueOffsets(Protocol):
    def max_offset(self, mq: MessageQueue) -> int: ...

    def min_offset(self, mq: MessageQueue) -> int: ...

    def search_offset(self, mq: MessageQueue, timestamp_ms: int) -> int: ...


def compute_pull_from_where(mq: MessageQueue, store: OffsetStore, where: ConsumeFromWhere, timestamp_ms: int,
                            queues: QueueOffsets) -> int:
    """The first offset to pull `mq` from: the group's stored offset when there is one; with none
    (QUERY_NOT_FOUND), the rule of `where` (a retry topic starts at 0 from last, at its max offset
    from a timestamp); a negative answer when the broker could not be asked (the queue is then
    left for the next rebalance)."""
    last = store.read_offset(mq, ReadOffsetType.READ_FROM_STORE)
    if last >= 0:
        return last
    if last != NO_OFFSET:
        return last
    retry = mq.topic.startswith(RETRY_GROUP_TOPIC_PREFIX)
    if where is ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET:
        return 0 if retry else queues.min_offset(mq)
    if where is ConsumeFromWhere.CONSUME_FROM_TIMESTAMP:
        return queues.max_offset(mq) if retry else queues.search_offset(mq, timestamp_ms)
    return 0 if retry else queues.max_offset(mq)
