"""Delayed and timed delivery, as RocketMQ's broker takes them (HookUtils.handleScheduleMessage):
what a send with a delay level or a 5.x timer property becomes before it is stored.

- Delay level (`DELAY` property, 1..18 of `messageDelayLevel`): the message is stored in
  SCHEDULE_TOPIC_XXXX, queue level-1, with its real topic and queue in REAL_TOPIC / REAL_QID; the
  schedule service moves it to its real queue when its level's delay has passed since it was stored.
- Timer (`TIMER_DELIVER_MS`, `TIMER_DELAY_SEC` or `TIMER_DELAY_MS`): stored in rmq_sys_wheel_timer
  with the deliver time in TIMER_OUT_MS (rounded down to `timerPrecisionMs`, as RocketMQ does); one
  due already is stored as it is. A timer beyond `timerMaxDelaySec` or unreadable is refused.

Prepared transactional halves are left alone (their delay applies when committed).
"""

from __future__ import annotations

from dataclasses import replace

from namesrv.broker.transaction.service import PREPARED_TYPE, TRANSACTION_MASK
from namesrv.protocol.constants import SCHEDULE_TOPIC
from namesrv.protocol.message.properties import REAL_QID, REAL_TOPIC
from namesrv.protocol.message.types import MessageInner, StoredMessage

MESSAGE_DELAY_LEVEL = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
"""RocketMQ's messageDelayLevel."""
TIMER_TOPIC = "rmq_sys_wheel_timer"
DELAY = "DELAY"
TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
TIMER_DELAY_SEC = "TIMER_DELAY_SEC"
TIMER_DELAY_MS = "TIMER_DELAY_MS"
TIMER_OUT_MS = "TIMER_OUT_MS"
TIMER_PROPERTIES = (TIMER_DELIVER_MS, TIMER_DELAY_SEC, TIMER_DELAY_MS)
SCHEDULE_PROPERTIES = (DELAY, *TIMER_PROPERTIES)
"""Cleared from a message when it reaches its real queue."""

_UNITS_MS = {"s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


class ScheduleError(ValueError):
    """A timer the broker refuses (RocketMQ's WHEEL_TIMER_MSG_ILLEGAL): answered MESSAGE_ILLEGAL."""


def parse_delay_levels(text: str = MESSAGE_DELAY_LEVEL) -> list[int]:
    """'1s 5s ... 2h' -> [1000, 5000, ..., 7200000]: level n waits levels[n-1] ms."""
    levels = []
    for item in text.split():
        unit = _UNITS_MS.get(item[-1:])
        if unit is None or not item[:-1].isdigit():
            raise ValueError(f"bad messageDelayLevel entry {item!r} (e.g. 10s, 5m, 2h, 1d)")
        levels.append(int(item[:-1]) * unit)
    if not levels:
        raise ValueError("messageDelayLevel is empty")
    return levels


def _int_property(msg: MessageInner, name: str) -> int:
    try:
        return int(msg.properties[name])
    except ValueError:
        raise ScheduleError(f"message property {name}={msg.properties[name]!r} is not an integer") from None


def transform(msg: MessageInner, max_level: int, now_ms: int, timer_precision_ms: int = 1000,
              timer_max_delay_s: int = 3 * 86_400) -> MessageInner:
    """The message as it is to be stored: unchanged, or parked in the schedule or timer topic."""
    if msg.sys_flag & TRANSACTION_MASK == PREPARED_TYPE:
        return msg
    props = msg.properties
    if TIMER_DELAY_SEC in props or TIMER_DELAY_MS in props or TIMER_DELIVER_MS in props:
        if TIMER_DELAY_SEC in props:
            deliver_ms = now_ms + _int_property(msg, TIMER_DELAY_SEC) * 1000
        elif TIMER_DELAY_MS in props:
            deliver_ms = now_ms + _int_property(msg, TIMER_DELAY_MS)
        else:
            deliver_ms = _int_property(msg, TIMER_DELIVER_MS)
        if deliver_ms > now_ms:
            if deliver_ms - now_ms > timer_max_delay_s * 1000:
                raise ScheduleError(f"timer of {(deliver_ms - now_ms) // 1000} s is longer than the broker's "
                                    f"timerMaxDelaySec {timer_max_delay_s}")
            rounded = deliver_ms - timer_precision_ms if deliver_ms % timer_precision_ms == 0 else (
                deliver_ms // timer_precision_ms * timer_precision_ms)
            parked = props | {TIMER_OUT_MS: str(rounded), REAL_TOPIC: msg.topic, REAL_QID: str(msg.queue_id)}
            return replace(msg, topic=TIMER_TOPIC, queue_id=0, properties=parked)
        return msg
    level = _int_property(msg, DELAY) if DELAY in props else 0
    if level <= 0:
        return msg
    level = min(level, max_level)
    parked = props | {DELAY: str(level), REAL_TOPIC: msg.topic, REAL_QID: str(msg.queue_id)}
    return replace(msg, topic=SCHEDULE_TOPIC, queue_id=level - 1, properties=parked)


def time_up(stored: StoredMessage) -> MessageInner:
    """A parked message as it goes to its real queue (ScheduleMessageService.messageTimeUp)."""
    props = {k: v for k, v in stored.properties.items() if k not in SCHEDULE_PROPERTIES}
    return MessageInner(props.get(REAL_TOPIC, stored.topic), int(props.get(REAL_QID, "0")), stored.body, props,
                        stored.msg_id, stored.flag, stored.sys_flag, stored.born_timestamp, stored.born_host,
                        stored.reconsume_times)


def retry_delay_level(reconsume_times: int, requested: int) -> int:
    """The delay level of a message a consumer sends back (SendMessageProcessor.consumerSendMsgBack):
    the one it asked for, else 3 + how often it was consumed already."""
    return requested if requested > 0 else 3 + reconsume_times
