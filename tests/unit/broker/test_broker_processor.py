"""The broker's request processing over the wire, pure (real store files, a manual clock): every
code a client library uses, RocketMQ's binary message layout, and bad input that changes nothing."""

from __future__ import annotations

import asyncio
import json
import struct
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from namesrv.broker.client.consumer_offsets import ConsumerOffsetManager
from namesrv.broker.schedule.delivery import parse_delay_levels
from namesrv.broker.schedule.service import ScheduleService
from namesrv.protocol.broker_headers import SendMessageRequestHeader
from namesrv.protocol.codes import BrokerRequestCode as Code
from namesrv.protocol.codes import ResponseCode
from namesrv.protocol.constants import MAX_MESSAGE_SIZE, SCHEDULE_TOPIC
from namesrv.protocol.message.codec import BatchEntry, decode_offset_msg_id, encode_batch, offset_msg_id
from namesrv.protocol.message.properties import MessageIllegal, properties_to_string
from namesrv.protocol.message.types import MessageInner
from namesrv.protocol.models import TopicConfig
from namesrv.protocol.types import InvalidInput
from namesrv.remoting.command import MQServerError, RemotingResponse, to_request
from namesrv.remoting.pipeline import RequestContext
from namesrv.remoting.wire_command import RemotingCommand
from tests.support.broker import ADDR, CLIENT, WIRE, Broker, _await, decode_messages, heartbeat

LEVELS = parse_delay_levels()






@pytest.fixture
def broker(tmp_path: Path) -> Broker:
    return Broker(tmp_path)




# ---------------------------------------------------------------------------- send
def test_send_answers_rocketmqs_header_and_stores_what_it_acknowledged(broker: Broker) -> None:
    answer = broker.send(b"payload", queue_id=1, TAGS="TagA", KEYS="k1", color="blue")
    assert answer.code == ResponseCode.SUCCESS and answer.ext_fields is not None
    assert answer.ext_fields["queueId"] == "1" and answer.ext_fields["queueOffset"] == "0"
    host, commit_offset = decode_offset_msg_id(answer.ext_fields["msgId"])
    assert host == ADDR and commit_offset == 0 and answer.ext_fields["msgId"] == offset_msg_id(ADDR, 0)
    second = broker.send(b"again", queue_id=1)
    assert second.ext_fields is not None and second.ext_fields["queueOffset"] == "1"
    [stored, _] = broker.store.get_message("T", 1, 0)
    assert (stored.body, stored.properties["TAGS"], stored.properties["color"]) == (b"payload", "TagA", "blue")
    assert stored.born_host == CLIENT.remote and stored.properties["CLUSTER"] == "DefaultCluster"


def test_send_v2_uses_one_letter_keys(broker: Broker) -> None:
    ext = {"a": "PG", "b": "T", "c": "TBW102", "d": 4, "e": 0, "f": 0, "g": 5, "h": 0,
           "i": properties_to_string({"TAGS": "V2"}), "j": 0, "k": "false", "m": "false"}
    answer = broker.call(Code.SEND_MESSAGE_V2, ext, b"v2 body")
    assert answer.code == ResponseCode.SUCCESS
    assert broker.store.get_message("T", 0, 0)[0].properties["TAGS"] == "V2"


def test_batch_send_stores_every_message_in_one_queue(broker: Broker) -> None:
    body = encode_batch([BatchEntry(0, f"b{i}".encode(), {"UNIQ_KEY": f"u{i}"}) for i in range(3)])
    answer = broker.call(Code.SEND_BATCH_MESSAGE, {"producerGroup": "PG", "topic": "T", "queueId": 1,
                                                   "batch": "true"}, body)
    assert answer.code == ResponseCode.SUCCESS and answer.ext_fields is not None
    assert len(answer.ext_fields["msgId"].split(",")) == 3
    assert [m.msg_id for m in broker.store.get_message("T", 1, 0)] == ["u0", "u1", "u2"]
    # RocketMQ's Java and C++ clients send a batch with SendMessageRequestHeaderV2's letters
    v2 = broker.call(Code.SEND_BATCH_MESSAGE, {"a": "PG", "b": "T", "c": "TBW102", "d": "4", "e": "1", "f": "0",
                                               "g": "1", "h": "0", "i": "", "j": "0", "k": "false", "m": "true"},
                     encode_batch([BatchEntry(0, f"v{i}".encode(), {"UNIQ_KEY": f"v{i}"}) for i in range(2)]))
    assert v2.code == ResponseCode.SUCCESS, v2.remark
    assert [m.msg_id for m in broker.store.get_message("T", 1, 0)] == ["u0", "u1", "u2", "v0", "v1"]
    v1 = {"producerGroup": "PG", "topic": "T", "queueId": "1", "batch": "true", "extra": "kept"}
    letters = SendMessageRequestHeader.to_v2(v1)
    assert letters == {"a": "PG", "b": "T", "e": "1", "m": "true", "extra": "kept"}
    assert SendMessageRequestHeader.from_v2(letters) == v1, "this project's producer sends a batch by the letters"


def test_auto_create_through_tbw102_and_the_limits(broker: Broker) -> None:
    answer = broker.send(b"first", topic="NewTopic")
    assert answer.code == ResponseCode.SUCCESS and broker.created == ["NewTopic"]
    assert broker.topics.topic_config_table["NewTopic"].write_queue_nums == 4
    before = broker.state()
    too_big = broker.send(b"x" * (MAX_MESSAGE_SIZE + 1))
    assert too_big.code == ResponseCode.MESSAGE_ILLEGAL and "exceeds" in (too_big.remark or "")
    assert broker.send(b"x", queue_id=5).code == ResponseCode.SYSTEM_ERROR
    bad_topic = broker.call(Code.SEND_MESSAGE, {"producerGroup": "PG", "topic": "bad topic", "queueId": 0}, b"x")
    assert bad_topic.code == ResponseCode.SYSTEM_ERROR and "topic" in (bad_topic.remark or "")
    forbidden = broker.send(b"x", topic="SCHEDULE_TOPIC_XXXX")
    assert forbidden.code == ResponseCode.NO_PERMISSION
    assert broker.state() == before, "refused sends store nothing"


def test_a_broker_without_write_permission_refuses_sends(tmp_path: Path) -> None:
    b = Broker(tmp_path, broker_permission=4)
    answer = b.send(b"x")
    assert answer.code == ResponseCode.NO_PERMISSION
    assert answer.remark == f"the broker[{ADDR}] sending message is forbidden"


# ---------------------------------------------------------------------------- pull
def test_pull_returns_rocketmqs_stored_message_layout(broker: Broker) -> None:
    broker.clock.advance(1000)
    broker.send(b"one", TAGS="A", KEYS="k")
    broker.send(b"two")
    answer = broker.pull(0)
    assert answer.code == ResponseCode.SUCCESS and answer.remark == "FOUND"
    assert answer.ext_fields is not None
    assert (answer.ext_fields["nextBeginOffset"], answer.ext_fields["minOffset"], answer.ext_fields["maxOffset"]) == (
        "2", "0", "2")
    [one, two] = decode_messages(answer.body or b"")
    assert one["magic"] == -626843481 and one["topic"] == "T" and one["body"] == b"one"
    assert (one["queue_offset"], two["queue_offset"]) == (0, 1) and one["phys"] == 0 and two["phys"] > 0
    assert one["props"]["TAGS"] == "A" and one["props"]["KEYS"] == "k" and one["props"]["UNIQ_KEY"]
    assert one["store_host"] == bytes([127, 0, 0, 1]) + struct.pack(">i", 10911)
    assert one["born_host"] == bytes([127, 0, 0, 1]) + struct.pack(">i", 5555)
    assert one["store_ts"] == broker.clock() and one["crc"] != 0


@pytest.mark.parametrize(
    ("offset", "code", "status", "next_offset"),
    [
        (2, ResponseCode.PULL_NOT_FOUND, "OFFSET_OVERFLOW_ONE", 2),
        (9, ResponseCode.PULL_OFFSET_MOVED, "OFFSET_OVERFLOW_BADLY", 2),
        (-3, ResponseCode.PULL_OFFSET_MOVED, "OFFSET_TOO_SMALL", 0),
    ],
)
def test_pull_codes_where_rocketmq_uses_them(broker: Broker, offset: int, code: int, status: str,
                                             next_offset: int) -> None:
    broker.send(b"a")
    broker.send(b"b")
    answer = broker.pull(offset)
    assert (answer.code, answer.remark) == (code, status) and answer.body is None
    assert answer.ext_fields is not None and answer.ext_fields["nextBeginOffset"] == str(next_offset)


def test_an_empty_queue_and_a_tag_filter(broker: Broker) -> None:
    assert broker.pull(0).code == ResponseCode.PULL_NOT_FOUND
    assert broker.pull(5).code == ResponseCode.PULL_OFFSET_MOVED
    broker.send(b"x", TAGS="Drop")
    broker.send(b"y", TAGS="Keep")
    only = broker.pull(0, subscription="Keep || Other")
    assert [m["body"] for m in decode_messages(only.body or b"")] == [b"y"]
    none = broker.pull(0, subscription="Nothing")
    assert none.code == ResponseCode.PULL_RETRY_IMMEDIATELY and none.ext_fields is not None
    assert none.ext_fields["nextBeginOffset"] == "2", "filtered messages are skipped, not re-scanned forever"


def test_a_suspended_pull_returns_when_a_message_arrives(broker: Broker) -> None:
    async def scenario() -> RemotingCommand:
        ext = {"consumerGroup": "CG", "topic": "T", "queueId": "0", "queueOffset": "0", "maxMsgNums": "32",
               "sysFlag": "2", "commitOffset": "0", "suspendTimeoutMillis": "20000", "subVersion": "0"}
        cmd = RemotingCommand(Code.PULL_MESSAGE, 1, 0, ext_fields=ext)
        pending = broker.processor.process(to_request(cmd), CLIENT)
        assert not isinstance(pending, RemotingResponse)
        task = asyncio.ensure_future(pending)
        await asyncio.sleep(0.05)
        assert not task.done() and broker.processor.hold.held == 1, "held while the queue is empty"
        await broker.processor.send([MessageInner("T", 0, b"wake up")], "TBW102", 4)
        return WIRE.encode(cmd, await asyncio.wait_for(task, 5))

    answer = asyncio.run(scenario())
    assert answer.code == ResponseCode.SUCCESS
    assert [m["body"] for m in decode_messages(answer.body or b"")] == [b"wake up"]


# ---------------------------------------------------------------------------- offsets and clients
def test_consumer_offsets(broker: Broker) -> None:
    q = {"consumerGroup": "CG", "topic": "T", "queueId": 1}
    # RocketMQ: no stored offset and no message at offset 0 -> QUERY_NOT_FOUND (the client then
    # starts at the max offset, 0 here); with its first message in memory, a new group starts at 0.
    assert broker.call(Code.QUERY_CONSUMER_OFFSET, q).code == ResponseCode.QUERY_NOT_FOUND
    assert broker.send(b"first", queue_id=1).code == ResponseCode.SUCCESS
    assert broker.call(Code.QUERY_CONSUMER_OFFSET, q).ext_fields == {"offset": "0"}, "a new group starts at 0"
    assert broker.call(Code.QUERY_CONSUMER_OFFSET, q | {"setZeroIfNotFound": "false"}).code == \
        ResponseCode.QUERY_NOT_FOUND
    assert broker.call(Code.UPDATE_CONSUMER_OFFSET, q | {"commitOffset": 7}).code == ResponseCode.SUCCESS
    assert broker.call(Code.QUERY_CONSUMER_OFFSET, q).ext_fields == {"offset": "7"}
    broker.pull(0, queue_id=1, sysFlag=1, commitOffset=9)
    assert broker.offsets.query_offset("CG", "T", 1) == 9, "a pull may commit the offset it carries"
    broker.offsets.persist()
    assert ConsumerOffsetManager(broker.offsets.path).query_offset("CG", "T", 1) == 9


def test_max_min_and_search_offsets(broker: Broker) -> None:
    for _ in range(3):
        broker.clock.advance(100)
        broker.send(b"m")
    t = {"topic": "T", "queueId": 0}
    assert broker.call(Code.GET_MAX_OFFSET, t).ext_fields == {"offset": "3"}
    assert broker.call(Code.GET_MIN_OFFSET, t).ext_fields == {"offset": "0"}
    first = broker.clock() - 200
    assert broker.call(Code.SEARCH_OFFSET_BY_TIMESTAMP, t | {"timestamp": first + 1}).ext_fields == {"offset": "1"}
    assert broker.call(Code.GET_EARLIEST_MSG_STORETIME, t).ext_fields == {"timestamp": str(first)}




def test_heartbeats_build_the_group_and_its_retry_topic(broker: Broker) -> None:
    other = RequestContext("tcp:other#2", "127.0.0.1:6666")
    assert broker.call(Code.HEART_BEAT, body=heartbeat("c1")).code == ResponseCode.SUCCESS
    assert "%RETRY%CG" in broker.topics.topic_config_table and broker.created == ["%RETRY%CG"]
    broker.call(Code.HEART_BEAT, body=heartbeat("c2"), client=other)
    answer = broker.call(Code.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "CG"})
    assert json.loads(answer.body or b"") == {"consumerIdList": ["c1", "c2"]}
    assert [g for g, _ in broker.notified] == ["CG", "CG"], "every join tells the group to rebalance"
    broker.processor.channel_closed(other.channel)
    assert json.loads(broker.call(Code.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "CG"}).body or b"") == {
        "consumerIdList": ["c1"]}
    broker.call(Code.UNREGISTER_CLIENT, {"clientID": "c1", "consumerGroup": "CG"})
    missing = broker.call(Code.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "CG"})
    assert (missing.code, missing.remark) == (ResponseCode.SYSTEM_ERROR, "no consumer for this group, CG")


def test_a_message_sent_back_goes_to_the_retry_topic_then_the_dead_letter_topic(broker: Broker) -> None:
    """As RocketMQ: back off by delay level 3 + reconsume times through SCHEDULE_TOPIC_XXXX into
    %RETRY%group, then, past maxReconsumeTimes, into %DLQ%group at once."""
    broker.call(Code.HEART_BEAT, body=heartbeat("c1"))
    broker.send(b"poison", TAGS="P")
    [m] = broker.store.get_message("T", 0, 0)
    back = {"offset": m.commit_log_offset, "group": "CG", "delayLevel": 0, "originMsgId": "ORIG",
            "maxReconsumeTimes": 1}
    assert broker.call(Code.CONSUMER_SEND_MSG_BACK, back).code == ResponseCode.SUCCESS
    assert broker.store.get_message("%RETRY%CG", 0, 0) == [], "not before its back-off"
    [parked] = broker.store.get_message(SCHEDULE_TOPIC, 2, 0)  # level 3: 10 s
    assert (parked.properties["REAL_TOPIC"], parked.properties["DELAY"]) == ("%RETRY%CG", "3")
    service = ScheduleService(broker.store, None, broker.clock, LEVELS, broker.store.put)
    broker.clock.advance(9_999)
    assert asyncio.run(service.pass_once()) == 0
    broker.clock.advance(1)
    assert asyncio.run(service.pass_once()) == 1
    [retry] = broker.store.get_message("%RETRY%CG", 0, 0)
    assert (retry.body, retry.reconsume_times, retry.properties["RETRY_TOPIC"]) == (b"poison", 1, "T")
    again = back | {"offset": retry.commit_log_offset}
    assert broker.call(Code.CONSUMER_SEND_MSG_BACK, again).code == ResponseCode.SUCCESS
    [dead] = broker.store.get_message("%DLQ%CG", 0, 0)
    assert dead.reconsume_times == 2 and dead.properties["ORIGIN_MESSAGE_ID"] == "ORIG"


def test_unknown_codes_and_bad_headers_answer_clearly_and_change_nothing(broker: Broker) -> None:
    broker.send(b"kept")
    before = broker.state()
    answer = broker.call(777)
    assert (answer.code, answer.remark) == (ResponseCode.REQUEST_CODE_NOT_SUPPORTED, " request type 777 not supported")
    answer = broker.call(Code.PULL_MESSAGE, {"consumerGroup": "CG", "topic": "T", "queueId": "x"})
    assert answer.code == ResponseCode.SYSTEM_ERROR and "queueId" in (answer.remark or "")
    answer = broker.call(Code.SEND_BATCH_MESSAGE, {"producerGroup": "PG", "topic": "T", "queueId": 0}, b"\x00\x01")
    assert answer.code != ResponseCode.SUCCESS
    assert broker.call(Code.HEART_BEAT, body=b"{not json").code == ResponseCode.SYSTEM_ERROR
    lost = broker.call(Code.CONSUMER_SEND_MSG_BACK, {"offset": 999_999, "group": "CG"})
    assert lost.code == ResponseCode.SYSTEM_ERROR
    assert broker.state() == before


@given(code=st.sampled_from([int(c) for c in Code] + [0, 999]),
       ext=st.dictionaries(st.sampled_from(["topic", "queueId", "queueOffset", "consumerGroup", "producerGroup",
                                            "maxMsgNums", "offset", "group", "commitOffset", "properties", "b", "e"]),
                           st.one_of(st.text(max_size=12), st.sampled_from(["T", "0", "-1", "99", "bad topic"])),
                           max_size=6),
       body=st.one_of(st.none(), st.binary(max_size=64)))
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_fuzzed_broker_requests_never_escape_and_invalid_ones_store_nothing(broker: Broker, code: int,
                                                                             ext: dict[str, str],
                                                                             body: bytes | None) -> None:
    before = broker.store.queues()
    answer = broker.call(code, ext, body)
    assert answer.is_response
    if answer.code != ResponseCode.SUCCESS:
        assert broker.store.queues() == before, "a refused request never touches the store"


# ---------------------------------------------------------------------------- runtime info (28)


def test_broker_runtime_info_is_what_mqadmin_cluster_list_reads(broker: Broker) -> None:
    broker.clock.advance(5_000)
    assert broker.send(b"first").code == ResponseCode.SUCCESS
    stored_at = broker.clock()
    for _ in range(11):  # eleven one-second samples, 3 sends and 2 deliveries in each second
        broker.clock.advance(1_000)
        for _ in range(3):
            broker.send()
        broker.processor.stats[("pulled_messages", "")] += 2
        broker.processor.broker_stats.sample()

    answer = broker.call(Code.GET_BROKER_RUNTIME_INFO)

    assert answer.code == ResponseCode.SUCCESS and answer.ext_fields is None
    table = json.loads(answer.body or b"")["table"]
    assert all(isinstance(v, str) for v in table.values())
    assert (table["brokerVersionDesc"], table["brokerVersion"], table["brokerActive"]) == ("V5_3_3", "479", "true")
    assert table["msgPutTotalTodayNow"] == "34" and table["msgGetTotalTodayNow"] == "22"
    assert table["msgPutTotalTodayMorning"] == table["msgPutTotalYesterdayMorning"] == "0"
    assert table["putTps"] == "3.0  " and table["getTransferredTps"] == "2.0  ", "10 s known; 1 and 10 min not yet"
    assert table["earliestMessageTimeStamp"] == str(stored_at)
    assert int(table["commitLogMaxOffset"]) == broker.store.size_bytes() > 0
    assert 0.0 < float(table["commitLogDiskRatio"]) < 1.0
    assert table["commitLogDirCapacity"].startswith("Total : ") and "iB, Free : " in table["commitLogDirCapacity"]
    assert table["runtime"] == "[ 0 days, 0 hours, 0 minutes, 16 seconds ]"
    assert (table["sendThreadPoolQueueSize"], table["pullThreadPoolQueueSize"]) == ("0", "0")
    assert table["timerReadBehind"] == "0" and float(table["timerEnqueueTps"]) == 0.0


def test_broker_runtime_info_of_an_empty_store(broker: Broker) -> None:
    table = json.loads(broker.call(Code.GET_BROKER_RUNTIME_INFO).body or b"")["table"]
    assert table["earliestMessageTimeStamp"] == "-1" and table["msgPutTotalTodayNow"] == "0"
    assert table["putTps"] == "  ", "no window has enough samples yet"


def test_only_a_message_of_a_topic_the_group_reads_is_sent_back(broker: Broker) -> None:
    """The message is named by its commit-log offset alone: one of a topic the group does not
    subscribe to stays where it is (RocketMQ would copy it into the group's retry topic)."""
    broker.call(Code.HEART_BEAT, body=heartbeat("c1"))
    broker.topics.update_topic_config(TopicConfig(topic_name="Other", read_queue_nums=1, write_queue_nums=1))
    broker.send(b"not yours", topic="Other")
    [m] = broker.store.get_message("Other", 0, 0)
    before = broker.state()
    back = {"offset": m.commit_log_offset, "group": "CG", "delayLevel": 0, "originMsgId": "ORIG"}
    refused = broker.call(Code.CONSUMER_SEND_MSG_BACK, back)
    assert refused.code == ResponseCode.NO_PERMISSION and "subscribes" in (refused.remark or "")
    assert broker.state() == before
    # a pop consumer (the gRPC proxy's) registers no subscription: offsets of the topic say it reads it
    broker.offsets.commit_offset("CG", "Other", 0, 1)
    dead = broker.call(Code.CONSUMER_SEND_MSG_BACK, back | {"delayLevel": -1})
    assert dead.code == ResponseCode.SUCCESS
    assert [x.body for x in broker.store.get_message("%DLQ%CG", 0, 0)] == [b"not yours"]


@pytest.mark.parametrize(("raised", "code", "remark"), [
    (MQServerError(ResponseCode.NO_PERMISSION, "not yours"), ResponseCode.NO_PERMISSION, "not yours"),
    (MessageIllegal("properties too long"), ResponseCode.MESSAGE_ILLEGAL, "properties too long"),
    (InvalidInput("queueId is bad"), ResponseCode.SYSTEM_ERROR, "invalid request: queueId is bad"),
    (OSError(28, "No space left on device"), ResponseCode.SYSTEM_ERROR, "store write failed: [Errno 28] No space left"),
])
def test_one_mapping_of_exceptions_to_codes_whether_refused_at_once_or_later(
        broker: Broker, raised: Exception, code: int, remark: str) -> None:
    """A handler's exception is answered the same whether it raised at once or once awaited."""

    def at_once(cmd: Any, client: Any) -> RemotingResponse:
        raise raised

    async def later_(cmd: Any, client: Any) -> RemotingResponse:
        await asyncio.sleep(0)
        raise raised

    def later(cmd: Any, client: Any) -> Any:
        return later_(cmd, client)

    answers = []
    for handler in (at_once, later):
        broker.processor.handlers[Code.SEND_MESSAGE] = handler
        answer = broker.call(Code.SEND_MESSAGE, {"topic": "T"}, b"x")
        answers.append((answer.code, answer.remark))
    assert answers[0] == answers[1]
    assert answers[0][0] == code and (answers[0][1] or "").startswith(remark), answers
    assert broker.processor.stats[("sends", ResponseCode(code).name)] == 2


def test_a_bug_in_a_handler_is_raised_to_the_pipeline_on_either_path(broker: Broker) -> None:
    async def later(cmd: Any, client: Any) -> RemotingResponse:
        raise ValueError("a bug")

    def at_once(cmd: Any, client: Any) -> RemotingResponse:
        raise ValueError("a bug")

    request = to_request(RemotingCommand(Code.SEND_MESSAGE, 1, 0, 1, 63, None, {"topic": "T"}, b"x"))
    broker.processor.handlers[Code.SEND_MESSAGE] = at_once
    with pytest.raises(ValueError, match="a bug"):
        broker.processor.process(request, CLIENT)
    broker.processor.handlers[Code.SEND_MESSAGE] = later
    with pytest.raises(ValueError, match="a bug"):
        asyncio.run(_await(broker.processor.process(request, CLIENT)))
