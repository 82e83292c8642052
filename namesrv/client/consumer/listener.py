"""What a listener answers (RocketMQ's ConsumeConcurrentlyStatus / ConsumeOrderlyStatus) and the
shapes of the two listeners: a callable taking the messages (one unless consumeMessageBatchMaxSize is
raised) and a context."""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass

from namesrv.protocol.message.decoder import MessageExt
from namesrv.protocol.models import MessageQueue


class ConsumeConcurrentlyStatus(enum.Enum):
    CONSUME_SUCCESS = "CONSUME_SUCCESS"
    RECONSUME_LATER = "RECONSUME_LATER"


class ConsumeOrderlyStatus(enum.Enum):
    SUCCESS = "SUCCESS"
    SUSPEND_CURRENT_QUEUE_A_MOMENT = "SUSPEND_CURRENT_QUEUE_A_MOMENT"


@dataclass
class ConsumeContext:
    """The queue the messages came from; `delay_level_when_next_consume` (concurrent, 0: the
    broker's 3 + reconsume times) and `suspend_current_queue_time_ms` (orderly) may be set by the
    listener."""

    message_queue: MessageQueue
    delay_level_when_next_consume: int = 0
    suspend_current_queue_time_ms: int = -1


MessageListenerConcurrently = Callable[[list[MessageExt], ConsumeContext], ConsumeConcurrentlyStatus]
MessageListenerOrderly = Callable[[list[MessageExt], ConsumeContext], ConsumeOrderlyStatus]
