"""The producer's send engine without a broker: routes and publish info made by hand, a fake
transport that records calls, fails and answers on an injected clock."""

from __future__ import annotations

import itertools
from collections import defaultdict
from dataclasses import dataclass

from namesrv.client.config import ProducerConfig
from namesrv.client.errors import MQBrokerError, RemotingError
from namesrv.client.fault import FaultTable
from namesrv.client.message import Message
from namesrv.client.publish_info import TopicPublishInfo, topic_route_data_to_publish_info
from namesrv.client.send_engine import SendEngine
from namesrv.client.send_result import SendResult
from namesrv.common.clock import ManualClock
from namesrv.protocol.constants import Perm
from namesrv.protocol.models import BrokerData, MessageQueue, QueueData, TopicRouteData

RW = int(Perm.READ | Perm.WRITE)
BROKERS = ("broker-a", "broker-b", "broker-c")
TOPIC = "TopicTest"



def publish_info(queues: dict[str, int] | None = None, topic: str = TOPIC) -> TopicPublishInfo:
    """Publish info with its round-robin position pinned to 0 (it starts at random), so the first
    queue chosen is broker-a's queue 0 and every test is deterministic."""
    info = topic_route_data_to_publish_info(topic, make_route(queues or dict.fromkeys(BROKERS, 2)))
    info._counter = itertools.count()
    return info

@dataclass
class Call:
    kind: str  # "send" or "oneway"
    addr: str
    mq: MessageQueue
    msg_id: str
    timeout_ms: int | None
    default_topic: str | None
    at_ms: int

class FakeTransport:
    """In-memory brokers. `fail[name]` makes a broker fail: "dead" (no answer) or a response code;
    `latency[name]` is how many ms each call to that broker takes on the manual clock."""

    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock
        self.calls: list[Call] = []
        self.fail: dict[str, str | int] = {}
        self.latency: dict[str, int] = {}
        self.queues: dict[MessageQueue, list[bytes]] = defaultdict(list)

    @property
    def brokers_called(self) -> list[str]:
        return [c.mq.broker_name for c in self.calls]

    def send(self, broker_addr, mq, msg, msg_id, timeout_ms, default_topic) -> SendResult:
        self.calls.append(Call("send", broker_addr, mq, msg_id, timeout_ms, default_topic, self.clock()))
        assert broker_addr == addr_of(mq.broker_name), "the engine must send to the broker's master address"
        self.clock.advance(self.latency.get(mq.broker_name, 0))
        failure = self.fail.get(mq.broker_name)
        if failure == "dead":
            raise RemotingError(f"broker {broker_addr} is unavailable")
        if failure is not None:
            raise MQBrokerError(int(failure), f"code {failure}", mq.broker_name)
        stored = self.queues[mq]
        stored.append(bytes(msg.body))
        return SendResult("SEND_OK", msg_id, f"{mq.broker_name}@{len(stored) - 1}", mq, len(stored) - 1)

    def send_oneway(self, broker_addr, mq, msg, msg_id) -> None:
        self.calls.append(Call("oneway", broker_addr, mq, msg_id, None, None, self.clock()))
        self.queues[mq].append(bytes(msg.body))

def make_engine(transport: FakeTransport, clock: ManualClock, **options) -> SendEngine:
    if isinstance(options.get("fault_table"), FaultTable):
        options["fault_table"] = options["fault_table"].name
    return SendEngine(transport, ProducerConfig(**options), clock)

def msg(body: bytes = b"hello", topic: str = TOPIC, **kw) -> Message:
    return Message(topic, body, **kw)





def addr_of(broker_name: str) -> str:
    return f"{broker_name}-0"

def make_route(
    queues: dict[str, int], perm: int = RW, read_queues: dict[str, int] | None = None,
    no_master: tuple[str, ...] = (), perms: dict[str, int] | None = None, order_conf: str | None = None,
) -> TopicRouteData:
    """A route with `queues[name]` write queues per broker (listed in the given order, unsorted)."""
    qds = [
        QueueData(name, (read_queues or {}).get(name, n), n, (perms or {}).get(name, perm))
        for name, n in queues.items()
    ]
    bds = [
        BrokerData("DefaultCluster", name, {1: f"{name}-1"} if name in no_master else {0: addr_of(name)})
        for name in queues
    ]
    return TopicRouteData(qds, bds, {}, order_conf)
