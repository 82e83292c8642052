"""What a send returns (RocketMQ's SendResult), beside the engine that makes it and the async
send's attempts, which both fill it."""

from __future__ import annotations

from dataclasses import dataclass, field

from namesrv.protocol.models import MessageQueue


@dataclass(slots=True)
class SendResult:
    send_status: str
    msg_id: str
    offset_msg_id: str
    message_queue: MessageQueue
    queue_offset: int
    attempts: int = 1
    brokers_tried: list[str] = field(default_factory=list)
