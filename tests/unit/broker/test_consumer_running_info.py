"""GET_CONSUMER_RUNNING_INFO (307, mqadmin consumerStatus): the body as fastjson writes it, and the
broker handing the request on to a client over the client's own TCP connection (a real server and
socket) or answering for a Ray-native consumer from its latest heartbeat."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from namesrv.broker.processor import consumer_calls
from namesrv.broker.processor.consumer_calls import ConsumerCalls
from namesrv.protocol import fastjson
from namesrv.protocol.codes import BrokerRequestCode as Code
from namesrv.protocol.codes import ResponseCode
from namesrv.protocol.keyed_json import loads_keyed
from namesrv.protocol.models import MessageQueue
from namesrv.protocol.running_info import ConsumerRunningInfo, running_info_problem
from namesrv.remoting.codec import encode_command
from namesrv.remoting.command import RemotingResponse, to_request
from namesrv.remoting.frame_decoder import FrameDecoder
from namesrv.remoting.pipeline import RequestContext
from namesrv.remoting.wire_command import RemotingCommand
from tests.support.broker import Broker, heartbeat
from tests.support.client_channel import Answerer, Client, answering, ask_through_client

MQ = MessageQueue("T", "broker-a", 0)
INFO = ConsumerRunningInfo(
    {"PROP_CONSUME_TYPE": "CONSUME_PASSIVELY", "PROP_CONSUMER_START_TIMESTAMP": "1700000000000"},
    [{"topic": "T", "subString": "*", "classFilterMode": False}],
    {MQ: {"commitOffset": 5, "cachedMsgCount": 0, "droped": False}},
    status_table={"T": {"pullRT": 1.5, "pullTPS": 2.0, "consumeRT": 0.5, "consumeOKTPS": 2.0,
                        "consumeFailedTPS": 0.0, "consumeFailedMsgs": 0}})


def _ask(answer: Answerer, broker: Broker, **ext: str) -> tuple[RemotingCommand, Client]:
    """GET_CONSUMER_RUNNING_INFO asked of the client "c1" of group CG over its own connection."""
    return asyncio.run(ask_through_client(Code.GET_CONSUMER_RUNNING_INFO, answer, broker, **ext))


def test_the_body_is_written_as_fastjson_writes_it_and_read_back() -> None:
    text = fastjson.dumps(INFO.to_wire())
    assert text.startswith(b'{"mqPopTable":{},"mqTable":{{"brokerName":"broker-a","queueId":0,"topic":"T"}:'
                           b'{"cachedMsgCount":0,"commitOffset":5,"droped":false}},"properties":{')
    assert b"jstack" not in text, "a null jstack is left out, as fastjson does"
    assert ConsumerRunningInfo.from_wire(loads_keyed(text)) == INFO
    assert json.loads(fastjson.dumps(ConsumerRunningInfo(jstack="x").to_wire()))["jstack"] == "x"
    shown = INFO.format_string()
    for section in ("#Consumer Properties#", "#Consumer Subscription#", "#Consumer Offset#", "#Consumer MQ Detail#",
                    "#Consumer RT&TPS#", "#User Consume Info#"):
        assert section in shown
    assert "001 Topic: T" in shown and "commitOffset=5" in shown


@pytest.mark.parametrize("body, problem", [
    (b"", "no body"), (b"[1]", "JSON object"), (b"{not json", "not JSON"),
    (b'{"mqTable":{"T":{}}}', "not a MessageQueue"), (b'{"subscriptionSet":3}', "subscriptionSet")])
def test_what_is_not_a_running_info_says_why(body: bytes, problem: str) -> None:
    assert problem in (running_info_problem(body) or "")


ASK = {"consumerGroup": "CG", "clientId": "c1", "jstackEnable": "false"}


def test_the_broker_asks_the_client_over_its_connection_and_answers_with_its_answer(tmp_path: Path) -> None:
    body = fastjson.dumps(INFO.to_wire())
    answer, client = _ask(answering(0, body), Broker(tmp_path), **ASK)
    assert (answer.code, answer.body) == (ResponseCode.SUCCESS, body)
    [asked] = [c for c in client.asked if not c.is_response]
    assert asked.code == Code.GET_CONSUMER_RUNNING_INFO and asked.ext_fields == ASK, "the same request, handed on"
    refused, _ = _ask(answering(ResponseCode.SYSTEM_ERROR, None, "busy"), Broker(tmp_path), **ASK)
    assert (refused.code, refused.remark) == (ResponseCode.SYSTEM_ERROR, "busy"), "the client's refusal, handed on"


def test_a_client_answering_garbage_gets_a_clear_error_and_changes_nothing(tmp_path: Path) -> None:
    broker = Broker(tmp_path)
    answer, _ = _ask(answering(0, b"{not json"), broker, **ASK)
    assert answer.code == ResponseCode.SYSTEM_ERROR
    assert (answer.remark or "").startswith("invoke consumer <CG> <c1> Exception: its answer is not a "
                                            "ConsumerRunningInfo: body is not JSON")
    assert broker.processor.consumers.consumer_ids("CG") == ["c1"], "the member stays"


def test_a_silent_client_times_out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(consumer_calls, "CALL_CLIENT_TIMEOUT_S", 0.2)
    answer, _ = _ask(lambda cmd: None, Broker(tmp_path), **ASK)
    assert answer.code == ResponseCode.CONSUME_MSG_TIMEOUT
    assert (answer.remark or "").startswith("consumer <CG> <c1> Timeout: wait response on the channel")


def test_an_unknown_client_or_group_is_not_online(tmp_path: Path) -> None:
    answer, client = _ask(answering(0, b"{}"), Broker(tmp_path), **(ASK | {"clientId": "nobody"}))
    assert (answer.code, answer.remark) == (ResponseCode.SYSTEM_ERROR, "The Consumer <CG> <nobody> not online")
    assert client.asked == [], "nobody was asked"
    answer, _ = _ask(answering(0, b"{}"), Broker(tmp_path), **(ASK | {"consumerGroup": "Nope"}))
    assert answer.remark == "The Consumer <Nope> <c1> not online"
    missing, _ = _ask(answering(0, b"{}"), Broker(tmp_path), consumerGroup="CG")
    assert missing.code == ResponseCode.SYSTEM_ERROR and "clientId" in (missing.remark or "")


def test_a_client_too_old_to_answer_is_refused_without_asking(tmp_path: Path) -> None:
    broker = Broker(tmp_path)
    assert broker.call(Code.HEART_BEAT, body=heartbeat("c1"), client=RequestContext("ray:c1")).code == 0
    for channel in broker.processor.consumers.groups["CG"].channels.values():
        channel.version = 61  # V3_1_7: before callClient existed
    calls = ConsumerCalls(broker.processor.context.identity, broker.topics, broker.store,
                          broker.processor.context.fence, lambda: broker.processor.consumers)
    answer = calls.get_consumer_running_info(*_request(ASK), RequestContext("tcp:admin#1", "127.0.0.1:1"))
    assert isinstance(answer, RemotingResponse) and answer.code == ResponseCode.SYSTEM_ERROR
    assert answer.remark == "The Consumer <c1> Version <61> too low to finish, please upgrade it to V3_1_8_SNAPSHOT"


def _ray_heartbeat(client_id: str, running: Any) -> bytes:
    data = json.loads(heartbeat(client_id))
    data["consumerDataSet"][0]["runningInfo"] = running
    return json.dumps(data).encode()


def test_a_ray_native_consumer_is_answered_for_from_its_latest_heartbeat(tmp_path: Path) -> None:
    broker = Broker(tmp_path)
    ray_client = RequestContext("ray:c9")
    text = fastjson.dumps(INFO.to_wire()).decode()
    assert broker.call(Code.HEART_BEAT, body=_ray_heartbeat("c9", text), client=ray_client).code == 0
    calls = ConsumerCalls(broker.processor.context.identity, broker.topics, broker.store,
                          broker.processor.context.fence, lambda: broker.processor.consumers)
    answer = calls.get_consumer_running_info(
        *_request(ASK | {"clientId": "c9"}), RequestContext("tcp:admin#1", "127.0.0.1:1"))
    assert isinstance(answer, RemotingResponse) and answer.body == text.encode()
    # A running info that is not one refuses the whole heartbeat: nothing recorded.
    bad = broker.call(Code.HEART_BEAT, body=_ray_heartbeat("c8", '{"mqTable":[]}'), client=RequestContext("ray:c8"))
    assert bad.code == ResponseCode.SYSTEM_ERROR
    assert "runningInfo of CG is not a ConsumerRunningInfo" in (bad.remark or "")
    assert broker.processor.consumers.consumer_ids("CG") == ["c9"]


def _request(ext: dict[str, str]) -> tuple[Any]:
    [decoded] = FrameDecoder().feed(encode_command(RemotingCommand(Code.GET_CONSUMER_RUNNING_INFO, 1, ext_fields=ext)))
    return (to_request(decoded),)
