"""CONSUME_MESSAGE_DIRECTLY (309): the ConsumeMessageDirectlyResult body as fastjson writes it, its
header read from the wire (fuzzed), the ACL's resources, and the broker handing a stored message
to one client of a group over the client's own TCP connection (a real server and socket)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from namesrv.acl.broker_resources import wire_resources
from namesrv.acl.plain_acl import SUB
from namesrv.broker.processor import consumer_calls
from namesrv.broker.processor.consumer_calls import ConsumerCalls
from namesrv.protocol.broker_headers import ConsumeMessageDirectlyResultRequestHeader as Header
from namesrv.protocol.codes import BrokerRequestCode as Code
from namesrv.protocol.codes import ResponseCode
from namesrv.protocol.consume_directly import CMResult, ConsumeMessageDirectlyResult, direct_result_problem
from namesrv.protocol.message.codec import offset_msg_id
from namesrv.protocol.message.decoder import decode_messages
from namesrv.protocol.types import InvalidInput
from namesrv.remoting.codec import encode_command
from namesrv.remoting.command import to_request
from namesrv.remoting.frame_decoder import FrameDecoder
from namesrv.remoting.pipeline import RequestContext
from namesrv.remoting.wire_command import RemotingCommand
from tests.support.broker import ADDR, Broker, heartbeat
from tests.support.client_channel import Answerer, Client, answering, ask_through_client

DONE = ConsumeMessageDirectlyResult(False, True, CMResult.CR_SUCCESS, None, 3)


def _ask(answer: Answerer, broker: Broker, **ext: str) -> tuple[RemotingCommand, Client]:
    """CONSUME_MESSAGE_DIRECTLY asked of the client "c1" of group CG over its own connection."""
    return asyncio.run(ask_through_client(Code.CONSUME_MESSAGE_DIRECTLY, answer, broker, **ext))


# ---------------------------------------------------------------------------- the body


def test_the_result_is_written_as_fastjson_writes_it_and_read_back() -> None:
    assert DONE.encode() == b'{"autoCommit":true,"consumeResult":"CR_SUCCESS","order":false,"spentTimeMills":3}'
    failed = ConsumeMessageDirectlyResult(True, False, CMResult.CR_THROW_EXCEPTION, "ValueError: boom", 12)
    assert ConsumeMessageDirectlyResult.decode(failed.encode()) == failed
    assert ConsumeMessageDirectlyResult.decode(b"{}") == ConsumeMessageDirectlyResult(), "RocketMQ's defaults"
    assert DONE.to_string() == ("ConsumeMessageDirectlyResult [order=false, autoCommit=true, consumeResult=CR_SUCCESS, "
                                "remark=null, spentTimeMills=3]")


@pytest.mark.parametrize("body, problem", [
    (b"", "no body"), (None, "no body"), (b"[1]", "JSON object"), (b"{not json", "not JSON"),
    (b'{"consumeResult":"CR_MAYBE"}', "not a CMResult"), (b'{"order":"yes"}', "booleans"),
    (b'{"spentTimeMills":"3"}', "whole number"), (b'{"remark":5}', "remark")])
def test_what_is_not_a_result_says_why(body: bytes | None, problem: str) -> None:
    assert problem in (direct_result_problem(body) or "")


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.binary(max_size=80), st.dictionaries(
    st.sampled_from(["order", "autoCommit", "consumeResult", "remark", "spentTimeMills", "x"]),
    st.one_of(st.booleans(), st.integers(), st.text(max_size=8), st.none(),
              st.sampled_from([r.value for r in CMResult]))).map(lambda d: json.dumps(d).encode())))
def test_result_decoder_fuzz(body: bytes) -> None:
    """Any body: a result that encodes and decodes back to itself, or InvalidInput."""
    try:
        result = ConsumeMessageDirectlyResult.decode(body)
    except InvalidInput:
        return
    assert ConsumeMessageDirectlyResult.decode(result.encode()) == result


# ---------------------------------------------------------------------------- the header


def test_the_header_reads_rocketmq_names_only() -> None:
    h = Header.from_ext({"consumerGroup": "CG", "clientId": "10.0.0.1@1", "msgId": "AB", "topic": "T",
                         "brokerName": "broker-a", "topicSysFlag": "0", "groupSysFlag": "0"}, wire=True)
    assert (h.consumer_group, h.client_id, h.msg_id, h.topic, h.broker_name, h.topic_sys_flag) == (
        "CG", "10.0.0.1@1", "AB", "T", "broker-a", 0)
    assert Header.from_ext({"consumerGroup": "CG", "client_id": "x"}, wire=True).client_id is None
    for bad in ({}, {"consumerGroup": ""}, {"consumerGroup": "bad group"}, {"consumerGroup": "CG", "topic": "a b"},
                {"consumerGroup": "CG", "topicSysFlag": "x"}):
        with pytest.raises(ValidationError):
            Header.from_ext(bad, wire=True)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(["consumerGroup", "clientId", "msgId", "brokerName", "topic", "topicSysFlag",
                                        "groupSysFlag", "consumer_group", "x"]),
                       st.one_of(st.text(max_size=70), st.sampled_from(["CG", "0", "-1", "T", "%RETRY%CG"])),
                       max_size=7))
def test_header_decode_fuzz(ext: dict[str, str]) -> None:
    """Any extFields: a header whose group is the camelCase value given, or ValidationError."""
    try:
        h = Header.from_ext(ext, wire=True)
    except ValidationError:
        return
    assert h.consumer_group == ext["consumerGroup"] and h.client_id == ext.get("clientId")


def test_the_acl_asks_sub_on_the_group_and_the_topic_named() -> None:
    def resources(**ext: str) -> dict[str, int]:
        [cmd] = FrameDecoder().feed(encode_command(RemotingCommand(Code.CONSUME_MESSAGE_DIRECTLY, 1, ext_fields=ext)))
        return wire_resources(to_request(cmd))
    assert resources(consumerGroup="CG", clientId="c1", msgId="X", topic="T") == {"%RETRY%CG": SUB, "T": SUB}
    assert resources(consumerGroup="CG", clientId="c1", msgId="X") == {"%RETRY%CG": SUB}
    with pytest.raises(ValidationError):
        resources(clientId="c1", msgId="X")


# ---------------------------------------------------------------------------- the broker hands it on


def _stored(broker: Broker) -> str:
    """Two messages stored; the offset message id of the second."""
    broker.send(b"first")
    assert broker.send(b"second", TAGS="TagA").code == ResponseCode.SUCCESS
    [m] = broker.store.get_message("T", 0, 1)
    return offset_msg_id(ADDR, m.commit_log_offset)


def test_the_broker_hands_the_stored_message_to_the_client_and_answers_with_its_result(tmp_path: Path) -> None:
    broker = Broker(tmp_path)
    msg_id = _stored(broker)
    ask = {"consumerGroup": "CG", "clientId": "c1", "msgId": msg_id, "topic": "T"}
    answer, client = _ask(answering(0, DONE.encode()), broker, **ask)
    assert (answer.code, answer.body) == (ResponseCode.SUCCESS, DONE.encode())
    [asked] = [c for c in client.asked if not c.is_response]
    assert asked.code == Code.CONSUME_MESSAGE_DIRECTLY
    assert asked.ext_fields == ask | {"brokerName": "broker-a", "topicSysFlag": "0"}, "RocketMQ's additions"
    [m] = decode_messages(asked.body or b"")
    assert (m.body, m.topic, m.queue_offset, m.tags, m.msg_id) == (b"second", "T", 1, "TagA", msg_id)
    other = Broker(tmp_path / "other")
    ask |= {"msgId": _stored(other)}
    refused, _ = _ask(answering(ResponseCode.SYSTEM_ERROR, None, "no such group here"), other, **ask)
    assert (refused.code, refused.remark) == (ResponseCode.SYSTEM_ERROR, "no such group here"), "handed on"


def test_unknown_clients_groups_and_messages_are_refused_without_asking(tmp_path: Path) -> None:
    broker = Broker(tmp_path)
    msg_id = _stored(broker)
    ask = {"consumerGroup": "CG", "clientId": "c1", "msgId": msg_id}
    cases = [
        (ask | {"clientId": "nobody"}, "The Consumer <CG> <nobody> not online"),
        (ask | {"consumerGroup": "Nope"}, "The Consumer <Nope> <c1> not online"),
        ({"consumerGroup": "CG", "msgId": msg_id}, "The Consumer <CG> <None> not online"),
        ({"consumerGroup": "CG", "clientId": "c1"}, "CONSUME_MESSAGE_DIRECTLY names no msgId"),
        (ask | {"msgId": "not-an-id"}, "bad msgId: "),
        (ask | {"msgId": offset_msg_id(ADDR, 10**9)}, f"can not find message by the offset, {10**9}"),
    ]
    for i, (ext, remark) in enumerate(cases):
        fresh = Broker(tmp_path / str(i))  # a broker per call: each call's client has a connection of its own
        _stored(fresh)
        answer, client = _ask(answering(0, DONE.encode()), fresh, **ext)
        assert answer.code == ResponseCode.SYSTEM_ERROR and (answer.remark or "").startswith(remark), ext
        assert client.asked == [], f"nobody was asked: {ext}"


def test_a_client_answering_garbage_or_nothing_gets_a_clear_error(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    broker = Broker(tmp_path)
    ask = {"consumerGroup": "CG", "clientId": "c1", "msgId": _stored(broker)}
    answer, _ = _ask(answering(0, b'{"consumeResult":"CR_MAYBE"}'), broker, **ask)
    assert answer.code == ResponseCode.SYSTEM_ERROR
    assert (answer.remark or "").startswith("invoke consumer <CG> <c1> Exception: its answer is not a "
                                            "ConsumeMessageDirectlyResult: consumeResult 'CR_MAYBE'")
    monkeypatch.setattr(consumer_calls, "CALL_CLIENT_TIMEOUT_S", 0.2)
    broker = Broker(tmp_path / "silent")
    ask |= {"msgId": _stored(broker)}
    silent, _ = _ask(lambda cmd: None, broker, **ask)
    assert silent.code == ResponseCode.CONSUME_MSG_TIMEOUT
    assert broker.processor.consumers.consumer_ids("CG") == ["c1"], "the member stays"


def test_a_ray_native_consumer_cannot_be_handed_a_message(tmp_path: Path) -> None:
    broker = Broker(tmp_path)
    msg_id = _stored(broker)
    assert broker.call(Code.HEART_BEAT, body=heartbeat("c9"), client=RequestContext("ray:c9")).code == 0
    calls = ConsumerCalls(broker.processor.context.identity, broker.topics, broker.store,
                          broker.processor.context.fence, lambda: broker.processor.consumers)
    [cmd] = FrameDecoder().feed(encode_command(RemotingCommand(Code.CONSUME_MESSAGE_DIRECTLY, 1, ext_fields={
        "consumerGroup": "CG", "clientId": "c9", "msgId": msg_id})))
    answer = calls.consume_message_directly(to_request(cmd), RequestContext("tcp:admin#1", "127.0.0.1:1"))
    assert not asyncio.iscoroutine(answer) and getattr(answer, "code", None) == ResponseCode.SYSTEM_ERROR
    assert "Ray-native consumer" in (getattr(answer, "remark", "") or "")
