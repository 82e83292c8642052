"""The ACL authorises exactly what the processor acts on (issue 25, point 1): random broker request
headers that spell their fields several ways at once (camelCase, snake_case, SEND_MESSAGE_V2's
letters next to their long names), each spelling with its own value, go through the real codec,
the ACL's resource extraction and the real processor over a real store; whatever the processor did
(the topic a message landed in, the group and topic an offset was written for, the topic a pull
read) must be a resource the ACL checked, with the permission it needs."""

from __future__ import annotations

import asyncio
import struct
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from namesrv.acl.broker_resources import wire_resources
from namesrv.acl.plain_acl import PUB, SUB
from namesrv.broker.client.consumer_offsets import ConsumerOffsetManager
from namesrv.broker.config import BrokerConfig
from namesrv.broker.processor.dispatcher import BrokerProcessor
from namesrv.broker.processor.types import BrokerIdentity
from namesrv.broker.processor.wire import BrokerWireEncoder
from namesrv.broker.topic_config_manager import TopicConfigManager
from namesrv.common.clock import ManualClock
from namesrv.protocol.codes import BrokerRequestCode as Code
from namesrv.protocol.codes import ResponseCode
from namesrv.protocol.constants import RETRY_GROUP_TOPIC_PREFIX as RETRY
from namesrv.protocol.message.types import MessageInner
from namesrv.protocol.models import TopicConfig
from namesrv.remoting.codec import encode_command
from namesrv.remoting.command import RemotingRequest, RemotingResponse, to_request
from namesrv.remoting.frame_decoder import FrameDecoder
from namesrv.remoting.pipeline import RequestContext
from namesrv.remoting.wire_command import RemotingCommand, SerializeType
from namesrv.store.message_store import MessageStore

TOPICS = ["Allowed", "Denied", "%RETRY%G1"]
GROUPS = ["G1", "G2"]
CLIENT = RequestContext("tcp:127.0.0.1:5555#1", "127.0.0.1:5555")
WIRE = BrokerWireEncoder("127.0.0.1:10911")

# field -> its spellings on the wire: RocketMQ's name, the Python name, V2's letter
SPELLINGS = {
    "topic": ["topic", "b"], "producerGroup": ["producerGroup", "producer_group", "a"],
    "queueId": ["queueId", "queue_id", "e"], "consumerGroup": ["consumerGroup", "consumer_group"],
    "commitOffset": ["commitOffset", "commit_offset"], "queueOffset": ["queueOffset", "queue_offset"],
    "maxMsgNums": ["maxMsgNums", "max_msg_nums"],
}
FIELDS = {
    Code.SEND_MESSAGE: ["topic", "producerGroup", "queueId"],
    Code.SEND_MESSAGE_V2: ["topic", "producerGroup", "queueId"],
    Code.UPDATE_CONSUMER_OFFSET: ["topic", "consumerGroup", "queueId", "commitOffset"],
    Code.PULL_MESSAGE: ["topic", "consumerGroup", "queueId", "queueOffset", "maxMsgNums"],
}
VALUES: dict[str, st.SearchStrategy[str]] = {
    "topic": st.sampled_from(TOPICS), "producerGroup": st.sampled_from(GROUPS),
    "consumerGroup": st.sampled_from(GROUPS), "queueId": st.sampled_from(["0", "0", "1"]),
    "commitOffset": st.sampled_from(["5", "7"]), "queueOffset": st.just("0"), "maxMsgNums": st.just("8"),
}


class Broker:
    """A broker's processor over a real store, with one message already in each topic's queue 0."""

    def __init__(self, root: Path) -> None:
        clock = ManualClock()
        self.topics = TopicConfigManager(root / "topics.json", clock)
        self.store = MessageStore(root / "store", clock=clock)
        self.offsets = ConsumerOffsetManager(root / "offsets.json")
        self.processor = BrokerProcessor(BrokerIdentity("C", "b", 0, "127.0.0.1:10911"), BrokerConfig(), self.topics,
                                         self.store, self.offsets, clock)
        for topic in TOPICS:
            self.topics.update_topic_config(TopicConfig(topic_name=topic, read_queue_nums=2, write_queue_nums=2))
            asyncio.run(self.store.put(MessageInner(topic, 0, topic.encode(), {})))

    def queues(self) -> dict[Any, int]:
        return dict(self.store.queues())

    def handle(self, cmd: RemotingCommand, request: RemotingRequest) -> RemotingCommand:
        """The processor's answer to `request` (decoded from `cmd`), as it goes on the wire."""
        answer = self.processor.process(request, CLIENT)
        if isinstance(answer, RemotingResponse):
            return WIRE.encode(cmd, answer)

        async def wait() -> RemotingResponse:
            return await answer

        return WIRE.encode(cmd, asyncio.run(wait()))


@st.composite
def requests(draw: st.DrawFn) -> tuple[int, list[tuple[str, str]]]:
    code = draw(st.sampled_from(sorted(FIELDS)))
    pairs: list[tuple[str, str]] = []
    for name in FIELDS[code]:
        spellings = [s for s in SPELLINGS.get(name, [name]) if code == Code.SEND_MESSAGE_V2 or len(s) > 1]
        chosen = draw(st.lists(st.sampled_from(spellings), min_size=1, max_size=len(spellings), unique=True))
        pairs += [(key, draw(VALUES[name])) for key in chosen]
    return code, draw(st.permutations(pairs))


def topics_of_pulled(body: bytes) -> list[str]:
    """The topic of each message in a pull answer (RocketMQ's stored-message layout)."""
    out, pos = [], 0
    while pos < len(body):
        (size,) = struct.unpack_from(">i", body, pos)
        p = pos + 48 + 24 + 12
        (body_len,) = struct.unpack_from(">i", body, p)
        p += 4 + body_len
        out.append(body[p + 1 : p + 1 + body[p]].decode())
        pos += size
    return out


@given(request=requests(), kind=st.sampled_from(list(SerializeType)))
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_the_authorised_resource_is_the_one_acted_on(tmp_path_factory: Any, request: tuple[int, list[tuple[str, str]]],
                                                     kind: SerializeType) -> None:
    code, pairs = request
    broker = Broker(tmp_path_factory.mktemp("broker"))
    [cmd] = FrameDecoder().feed(encode_command(RemotingCommand(code, 1, ext_fields=dict(pairs), body=b"x",
                                                               serialize_type=kind)))
    request = to_request(cmd)
    try:
        resources = wire_resources(request)
    except ValueError:
        resources = None  # the ACL refuses a header it cannot read: the processor must not act on it either
    queues, offsets = broker.queues(), {k: dict(v) for k, v in broker.offsets.table.items()}
    answer = broker.handle(cmd, request)

    if resources is None:
        assert answer.code != ResponseCode.SUCCESS
        assert broker.queues() == queues and broker.offsets.table == offsets, "nothing changed"
        return
    if answer.code != ResponseCode.SUCCESS:
        return
    if code in (Code.SEND_MESSAGE, Code.SEND_MESSAGE_V2):
        [(topic, _queue)] = [q for q, n in broker.queues().items() if n != queues.get(q)]
        assert resources == {topic: SUB if topic.startswith(RETRY) else PUB}, (pairs, resources)
    elif code == Code.UPDATE_CONSUMER_OFFSET:
        [written] = [k for k, v in broker.offsets.table.items() if offsets.get(k) != v]
        topic, _, group = written.partition("@")
        assert resources == {topic: SUB, RETRY + group: SUB}, (pairs, resources)
    else:
        assert answer.body is not None
        [topic] = set(topics_of_pulled(answer.body))
        assert topic in resources and resources[topic] == SUB, (pairs, resources)
        assert any(r.startswith(RETRY) for r in resources), "the pull's group is checked too"
    assert request.header is not None, "the processor acted on the header the ACL read"
