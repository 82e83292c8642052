"""The producing and consuming API users import.

    from clients.producer import Producer, Message
    with Producer("my_group", namespace="namesrv") as p:
        result = p.send(Message("TopicTest", b"hello"))
"""

from actors.client_instance import NoNameServerAvailable
from actors.consumer import ConsumedMessage, OffsetStore, PullConsumer
from actors.producer import Producer, discover_namesrvs
from namesrv.client.message import Message, MessageQueue, MQClientError
from namesrv.client.send_engine import MQBrokerError, SendFailedError, SendResult, select_by_hash

__all__ = [
    "ConsumedMessage",
    "MQBrokerError",
    "MQClientError",
    "Message",
    "MessageQueue",
    "NoNameServerAvailable",
    "OffsetStore",
    "Producer",
    "PullConsumer",
    "SendFailedError",
    "SendResult",
    "discover_namesrvs",
    "select_by_hash",
]
