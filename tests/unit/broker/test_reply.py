"""Request-reply on the broker (ReplyMessageProcessor): a reply is pushed to the requester's
connection, found by its client id among the broker's producers, and stored in its reply topic;
RocketMQ's refusals when the requester is unknown, unnamed or answers an error. Pure: real store
files, a manual clock, the push recorded where the broker would write it to the requester."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from namesrv.broker.processor.reply import ReplyMessageProcessor
from namesrv.protocol.codes import BrokerRequestCode as Code
from namesrv.protocol.codes import ResponseCode
from namesrv.protocol.message.properties import properties_to_string, string_to_properties
from namesrv.remoting.codec import encode_command
from namesrv.remoting.frame_decoder import FrameDecoder
from namesrv.remoting.invoke import ClientCallTimeout
from namesrv.remoting.pipeline import RequestPipeline
from namesrv.remoting.wire_command import RemotingCommand
from tests.support.broker import CLIENT, WIRE, Broker, heartbeat, through_pipeline

REPLY_TOPIC = "DefaultCluster_REPLY_TOPIC"


class Replies:
    def __init__(self, broker: Broker, answer: int | None = ResponseCode.SUCCESS) -> None:
        self.broker = broker
        self.answer = answer
        self.pushed: list[tuple[str, RemotingCommand]] = []
        self.pipeline = RequestPipeline("broker-a", WIRE.encode)
        self.pipeline.register(ReplyMessageProcessor(broker.processor.context, self._call).handlers)

    async def _call(self, token: str, request: RemotingCommand, timeout_s: float) -> RemotingCommand:
        self.pushed.append((token, request))
        if self.answer is None:
            raise ClientCallTimeout("no answer")
        return request.response(self.answer, None)

    def reply(self, body: bytes, code: int = Code.SEND_REPLY_MESSAGE, **props: str) -> RemotingCommand:
        ext = {"producerGroup": "Responder", "topic": REPLY_TOPIC, "defaultTopic": "TBW102",
               "defaultTopicQueueNums": "4", "queueId": "0", "sysFlag": "0", "bornTimestamp": "5", "flag": "0",
               "properties": properties_to_string({"MSG_TYPE": "reply", "CORRELATION_ID": "corr-1", **props})}
        return through_pipeline(self.pipeline, RemotingCommand(code, 3, ext_fields=ext, body=body))


@pytest.fixture
def broker(tmp_path: Path) -> Broker:
    b = Broker(tmp_path)
    b.call(Code.HEART_BEAT, body=heartbeat("requester-1"))  # a producer (group PG) on CLIENT's connection
    return b


def test_a_reply_is_pushed_to_its_requester_and_stored(broker: Broker) -> None:
    replies = Replies(broker)
    answer = replies.reply(b"the answer", REPLY_TO_CLIENT="requester-1", TTL="3000")
    assert answer.code == ResponseCode.SUCCESS and (answer.ext_fields or {})["msgId"] == "0"
    [(token, push)] = replies.pushed
    assert token == CLIENT.channel and push.code == Code.PUSH_REPLY_MESSAGE_TO_CLIENT and push.body == b"the answer"
    ext = push.ext_fields or {}
    props = string_to_properties(ext["properties"])
    assert (props["CORRELATION_ID"], props["REPLY_TO_CLIENT"], props["CLUSTER"]) == (
        "corr-1", "requester-1", "DefaultCluster")
    assert ext["topic"] == REPLY_TOPIC and ext["storeHost"] == broker.processor.context.identity.broker_addr
    assert int(props["PUSH_REPLY_TIME"]) == broker.clock()
    [stored] = broker.store.get_message(REPLY_TOPIC, 0, 0)
    assert stored.body == b"the answer" and stored.properties["CORRELATION_ID"] == "corr-1"


def test_the_v2_header_is_read_by_its_letters(broker: Broker) -> None:
    replies = Replies(broker)
    props = properties_to_string({"CORRELATION_ID": "c2", "REPLY_TO_CLIENT": "requester-1"})
    ext = {"a": "Responder", "b": REPLY_TOPIC, "c": "TBW102", "d": "4", "e": "0", "f": "0", "g": "5", "h": "0",
           "i": props, "j": "0", "k": "false", "m": "false"}
    [decoded] = FrameDecoder().feed(encode_command(RemotingCommand(Code.SEND_REPLY_MESSAGE_V2, 3, ext_fields=ext,
                                                                   body=b"v2")))

    async def run() -> object:
        answer = replies.pipeline.handle_command(decoded, CLIENT)
        return answer if isinstance(answer, RemotingCommand) else await answer
    answer = asyncio.run(run())
    assert isinstance(answer, RemotingCommand) and answer.code == ResponseCode.SUCCESS
    assert [p.body for _, p in replies.pushed] == [b"v2"]


@pytest.mark.parametrize(("props", "answer", "remark"), [
    ({"REPLY_TO_CLIENT": "nobody"}, ResponseCode.SUCCESS, "push reply message fail, channel of <nobody> not found."),
    ({}, ResponseCode.SUCCESS, "reply message properties[REPLY_TO_CLIENT] is null"),
    ({"REPLY_TO_CLIENT": "requester-1"}, ResponseCode.SYSTEM_ERROR, "push reply message to requester-1fail."),
    ({"REPLY_TO_CLIENT": "requester-1"}, None, "push reply message to requester-1fail."),
])
def test_a_reply_that_cannot_be_pushed_is_refused_with_rocketmqs_remark(broker: Broker, props: dict[str, str],
                                                                         answer: int | None, remark: str) -> None:
    refused = Replies(broker, answer).reply(b"lost", **props)
    assert (refused.code, refused.remark) == (ResponseCode.SYSTEM_ERROR, remark)
