"""A push consumer's answer to CONSUME_MESSAGE_DIRECTLY (309): its listener run once on the message a
broker hands it (RocketMQ's ConsumeMessageConcurrentlyService / ConsumeMessageOrderlyService
.consumeMessageDirectly). Nothing else happens: no offset is committed, nothing is sent back, the
queue's cache and lock are not touched; the listener's answer, what it threw and the time it took are
the result.

Concurrent: CONSUME_SUCCESS is CR_SUCCESS, RECONSUME_LATER CR_LATER. Orderly (`order` true): SUCCESS
is CR_SUCCESS, SUSPEND_CURRENT_QUEUE_A_MOMENT CR_LATER. Either way None is CR_RETURN_NULL and an
exception CR_THROW_EXCEPTION with its one-line description as the remark. The listener sees the
message under its real topic (a retried message's RETRY_TOPIC), as in a pull.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from namesrv.client.consumer.listener import ConsumeConcurrentlyStatus, ConsumeContext, ConsumeOrderlyStatus
from namesrv.protocol.constants import RETRY_GROUP_TOPIC_PREFIX
from namesrv.protocol.consume_directly import CMResult, ConsumeMessageDirectlyResult
from namesrv.protocol.message.decoder import MessageExt
from namesrv.protocol.message.properties import RETRY_TOPIC
from namesrv.protocol.models import MessageQueue

log = logging.getLogger(__name__)

"""MessageConst.PROPERTY_RETRY_TOPIC."""
_RESULTS: dict[Any, CMResult] = {
    ConsumeConcurrentlyStatus.CONSUME_SUCCESS: CMResult.CR_SUCCESS,
    ConsumeConcurrentlyStatus.RECONSUME_LATER: CMResult.CR_LATER,
    ConsumeOrderlyStatus.SUCCESS: CMResult.CR_SUCCESS,
    ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT: CMResult.CR_LATER,
}


def consume_directly(listener: Any, orderly: bool, msg: MessageExt, broker_name: str) -> ConsumeMessageDirectlyResult:
    """Run `listener` once on `msg` (from `broker_name`) and say what it did."""
    mq = MessageQueue(msg.topic, broker_name, msg.queue_id)
    if msg.topic.startswith(RETRY_GROUP_TOPIC_PREFIX) and RETRY_TOPIC in msg.properties:
        msg.topic = msg.properties[RETRY_TOPIC]  # resetRetryAndNamespace
    ctx = ConsumeContext(mq)
    remark: str | None = None
    started = time.monotonic()
    try:
        status = listener([msg], ctx)
        result = CMResult.CR_RETURN_NULL if status is None else _RESULTS.get(status)
    except Exception as e:
        log.warning("consumeMessageDirectly: the listener failed on %s of %s: %r", msg.msg_id, mq, e)
        result, remark = CMResult.CR_THROW_EXCEPTION, f"{type(e).__name__}: {e}"[:1024]
    spent = int((time.monotonic() - started) * 1000)
    return ConsumeMessageDirectlyResult(order=orderly, auto_commit=True, consume_result=result, remark=remark,
                                        spent_time_mills=spent)
