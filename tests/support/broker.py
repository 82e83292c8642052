"""The broker's request processing wired for a test, pure: a real store in a temp directory, a
manual clock, requests encoded and decoded as on the wire (`Broker`), the admin codes (`Admin`),
RocketMQ's stored-message layout decoded by a reference reader, and a HEART_BEAT body."""

from __future__ import annotations

import asyncio
import json
import struct
from pathlib import Path
from typing import Any

from namesrv.broker.client.consumer_offsets import ConsumerOffsetManager
from namesrv.broker.config import BrokerConfig
from namesrv.broker.processor.admin_queries import AdminQueries
from namesrv.broker.processor.dispatcher import BrokerProcessor
from namesrv.broker.processor.types import BrokerIdentity
from namesrv.broker.processor.wire import BrokerWireEncoder
from namesrv.broker.topic_config_manager import TopicConfigManager
from namesrv.common.clock import ManualClock
from namesrv.protocol.codes import BrokerRequestCode as Code
from namesrv.protocol.message.properties import properties_to_string, string_to_properties
from namesrv.protocol.models import TopicConfig
from namesrv.remoting.codec import encode_command
from namesrv.remoting.command import RemotingResponse, to_request
from namesrv.remoting.frame_decoder import FrameDecoder
from namesrv.remoting.pipeline import RequestContext, RequestPipeline
from namesrv.remoting.wire_command import RemotingCommand, SerializeType
from namesrv.store.message_store import MessageStore

ADDR = "127.0.0.1:10911"
CLIENT = RequestContext("tcp:127.0.0.1:5555#1", "127.0.0.1:5555")
WIRE = BrokerWireEncoder(ADDR)





class Broker:
    def __init__(self, root: Path, **config: Any) -> None:
        self.clock = ManualClock()
        self.topics = TopicConfigManager(root / "topics.json", self.clock)
        self.store = MessageStore(root / "store", clock=self.clock)
        self.offsets = ConsumerOffsetManager(root / "offsets.json")
        self.created: list[str] = []
        self.notified: list[tuple[str, list[str]]] = []
        self.processor = BrokerProcessor(
            BrokerIdentity("DefaultCluster", "broker-a", 0, ADDR), BrokerConfig(**config), self.topics, self.store,
            self.offsets, self.clock, self.created.append, lambda g, c: self.notified.append((g, c)))
        self.topics.update_topic_config(TopicConfig(topic_name="T", read_queue_nums=2, write_queue_nums=2))

    def call(self, code: int, ext: dict[str, Any] | None = None, body: bytes | None = None,
             client: RequestContext = CLIENT, kind: SerializeType = SerializeType.JSON) -> RemotingCommand:
        request = RemotingCommand(code, 7, 0, 1, 63, None, {k: str(v) for k, v in (ext or {}).items()} or None,
                                  body, kind)
        [decoded] = FrameDecoder().feed(encode_command(request))
        answer = self.processor.process(to_request(decoded), client)
        if not isinstance(answer, RemotingResponse):
            answer = asyncio.run(_await(answer))
        [wire] = FrameDecoder().feed(encode_command(WIRE.encode(decoded, answer)))
        assert wire.opaque == 7 and wire.is_response and wire.serialize_type is kind
        return wire

    def send(self, body: bytes = b"hello", queue_id: int = 0, topic: str = "T", **props: str) -> RemotingCommand:
        ext = {"producerGroup": "PG", "topic": topic, "defaultTopic": "TBW102", "defaultTopicQueueNums": 4,
               "queueId": queue_id, "sysFlag": 0, "bornTimestamp": 1, "flag": 0,
               "properties": properties_to_string({"UNIQ_KEY": f"U{len(body)}{queue_id}", **props})}
        return self.call(Code.SEND_MESSAGE, ext, body)

    def pull(self, offset: int, queue_id: int = 0, topic: str = "T", **extra: Any) -> RemotingCommand:
        ext = {"consumerGroup": "CG", "topic": topic, "queueId": queue_id, "queueOffset": offset, "maxMsgNums": 32,
               "sysFlag": 0, "commitOffset": 0, "suspendTimeoutMillis": 0, "subVersion": 0} | extra
        return self.call(Code.PULL_MESSAGE, ext)

    def state(self) -> tuple[Any, ...]:
        return (self.store.queues(), dict(self.topics.topic_config_table), json.dumps(self.offsets.table))

async def _await(x: Any) -> Any:
    return await x

def decode_messages(body: bytes) -> list[dict[str, Any]]:
    """A reference decoder of RocketMQ's stored-message layout, written from the spec in the module
    docstring of message_codec (what MessageDecoder.decodes does on the client)."""
    out = []
    pos = 0
    while pos < len(body):
        (size, magic, crc, queue_id, flag, queue_offset, phys, sys_flag, born_ts) = struct.unpack_from(
            ">iiiiiqqiq", body, pos)
        p = pos + 48
        born_host = body[p : p + 8]
        (store_ts,) = struct.unpack_from(">q", body, p + 8)
        store_host = body[p + 16 : p + 24]
        reconsume, prepared, body_len = struct.unpack_from(">iqi", body, p + 24)
        p += 40
        msg_body = body[p : p + body_len]
        p += body_len
        topic_len = body[p]
        topic = body[p + 1 : p + 1 + topic_len].decode()
        p += 1 + topic_len
        (props_len,) = struct.unpack_from(">h", body, p)
        props = string_to_properties(body[p + 2 : p + 2 + props_len].decode())
        assert p + 2 + props_len - pos == size, "totalSize covers the whole record"
        out.append(dict(magic=magic, crc=crc, queue_id=queue_id, flag=flag, queue_offset=queue_offset, phys=phys,
                        sys_flag=sys_flag, born_ts=born_ts, born_host=born_host, store_ts=store_ts,
                        store_host=store_host, reconsume=reconsume, prepared=prepared, body=msg_body, topic=topic,
                        props=props))
        pos += size
    return out

def heartbeat(client_id: str, group: str = "CG", topic: str = "T") -> bytes:
    """HEART_BEAT's body: producer group PG, and consumer `group` subscribed to all of `topic`."""
    return json.dumps({"clientID": client_id, "producerDataSet": [{"groupName": "PG"}], "consumerDataSet": [{
        "groupName": group, "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
        "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET", "unitMode": False,
        "subscriptionDataSet": [{"topic": topic, "subString": "*", "tagsSet": [], "codeSet": [], "subVersion": 1,
                                 "classFilterMode": False, "expressionType": "TAG"}]}]}).encode()


class Admin:
    def __init__(self, broker: Broker, config: BrokerConfig) -> None:
        self.queries = AdminQueries(broker.processor.context.identity, config, broker.topics, broker.store,
                                    broker.processor.context.fence, broker.offsets,
                                    lambda: broker.processor.consumers, "/data/broker-a",
                                    producers=lambda: broker.processor.context.producers)
        self.pipeline = RequestPipeline("broker-a", BrokerWireEncoder(ADDR).encode)
        self.pipeline.register(self.queries.handlers)

    def call(self, code: int, **ext: str) -> RemotingCommand:
        return through_pipeline(self.pipeline, RemotingCommand(code, 3, ext_fields=ext or None))


def through_pipeline(pipeline: RequestPipeline, request: RemotingCommand,
                     client: RequestContext = CLIENT) -> RemotingCommand:
    """`request` as the wire carries it, through `pipeline` (awaited on a loop of its own when its
    handler answers later), and the answer as the wire carries it back."""
    [decoded] = FrameDecoder().feed(encode_command(request))

    async def run() -> RemotingCommand:
        answer = pipeline.handle_command(decoded, client)
        return answer if isinstance(answer, RemotingCommand) else await answer
    [wire] = FrameDecoder().feed(encode_command(asyncio.run(run())))
    return wire
