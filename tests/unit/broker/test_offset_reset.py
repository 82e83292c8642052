"""Operators moving a group's offsets: INVOKE_BROKER_TO_RESET_OFFSET (mqadmin resetOffsetByTime,
skipAccumulatedMessage) on a stopped and on a live group, and CLONE_GROUP_OFFSET. Pure: real store
files, a manual clock, requests as on the wire, the members' RESET_CONSUMER_CLIENT_OFFSET recorded
where the broker would write it to their connections."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from namesrv.broker.client.consumer_manager import ClientChannel, SubscriptionData
from namesrv.broker.processor.offset_reset import OffsetResetProcessor
from namesrv.protocol.admin_bodies import ResetOffsetBody
from namesrv.protocol.codes import BrokerRequestCode as Code
from namesrv.protocol.codes import ResponseCode
from namesrv.protocol.keyed_json import loads_keyed
from namesrv.protocol.models import MessageQueue
from namesrv.remoting.pipeline import RequestPipeline
from namesrv.remoting.wire_command import RemotingCommand
from tests.support.broker import CLIENT, WIRE, Broker, heartbeat, through_pipeline


class Resets:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.told: list[tuple[str, RemotingCommand]] = []
        self.pipeline = RequestPipeline("broker-a", WIRE.encode)
        self.pipeline.register(OffsetResetProcessor(broker.processor.context, self._tell).handlers)

    def _tell(self, requests: list[tuple[str, RemotingCommand]]) -> int:
        self.told += requests
        return len(requests)

    def call(self, code: int, **ext: str) -> RemotingCommand:
        return through_pipeline(self.pipeline, RemotingCommand(code, 3, ext_fields=ext))

    def reset(self, timestamp: int, force: bool = False, group: str = "CG", topic: str = "T") -> RemotingCommand:
        return self.call(Code.INVOKE_BROKER_TO_RESET_OFFSET, topic=topic, group=group, timestamp=str(timestamp),
                         isForce=str(force).lower())


T0 = 1_700_000_000_000
"""The manual clock's start."""


def offsets_of(answer: RemotingCommand) -> dict[int, int]:
    body = ResetOffsetBody.from_wire(loads_keyed(answer.body or b""))
    return {mq.queue_id: o for mq, o in body.offset_table.items()}


@pytest.fixture
def resets(tmp_path: Path) -> Resets:
    """Topic T (2 queues): queue 0 holds 3 messages stored at T0 + 1 s and 3 at T0 + 5 s; CG committed 6 there."""
    broker = Broker(tmp_path)
    for at in (1_000, 5_000):
        broker.clock.advance(T0 + at - broker.clock())
        for i in range(3):
            broker.send(f"m{at}-{i}".encode())
    broker.offsets.commit_offset("CG", "T", 0, 6)
    return Resets(broker)


def test_a_stopped_group_is_rewound_by_the_broker_itself(resets: Resets) -> None:
    answer = resets.reset(T0 + 3_000)
    assert answer.code == ResponseCode.SUCCESS and offsets_of(answer) == {0: 3, 1: 0}
    assert resets.broker.offsets.query_offset("CG", "T", 0) == 3, "committed: consumerProgress shows it"
    assert resets.told == [], "no member to tell"


def test_without_force_a_queue_only_moves_back(resets: Resets) -> None:
    resets.broker.offsets.commit_offset("CG", "T", 0, 2)
    assert offsets_of(resets.reset(T0 + 3_000)) == {0: 2, 1: 0}
    assert offsets_of(resets.reset(T0 + 3_000, force=True)) == {0: 3, 1: 0}


def test_skip_accumulated_messages_resets_to_the_max_offset(resets: Resets) -> None:
    resets.broker.offsets.commit_offset("CG", "T", 0, 1)
    assert offsets_of(resets.reset(-1, force=True)) == {0: 6, 1: 0}
    assert resets.broker.offsets.query_offset("CG", "T", 0) == 6


def test_live_members_are_told_over_their_connections_in_their_language(resets: Resets) -> None:
    broker = resets.broker
    broker.call(Code.HEART_BEAT, body=heartbeat("cpp-client"))
    broker.processor.consumers.register_consumer("CG", ClientChannel("java-client", "tcp:java#9", 0, 400, 0),
                                                 "CONSUME_PASSIVELY", "CLUSTERING", "CONSUME_FROM_LAST_OFFSET",
                                                 [SubscriptionData("T")])
    answer = resets.reset(T0 + 3_000)
    assert answer.code == ResponseCode.SUCCESS and offsets_of(answer) == {0: 3, 1: 0}
    told = dict(resets.told)
    assert set(told) == {CLIENT.channel, "tcp:java#9"}
    for request in told.values():
        assert request.code == Code.RESET_CONSUMER_CLIENT_OFFSET
        assert request.ext_fields == {"topic": "T", "group": "CG", "timestamp": str(T0 + 3_000), "isForce": "false"}
    java = ResetOffsetBody.from_wire(loads_keyed(told["tcp:java#9"].body or b""))
    assert java.offset_table == {MessageQueue("T", "broker-a", 0): 3, MessageQueue("T", "broker-a", 1): 0}
    cpp = json.loads(told[CLIENT.channel].body or b"")  # the Heartbeat came as a C++ client (language 1)
    assert cpp == {"offsetTable": [{"brokerName": "broker-a", "offset": 3, "queueId": 0, "topic": "T"},
                                   {"brokerName": "broker-a", "offset": 0, "queueId": 1, "topic": "T"}]}


def test_an_unknown_topic_or_a_group_with_nothing_here_is_refused(resets: Resets) -> None:
    before = json.dumps(resets.broker.offsets.table)
    missing = resets.reset(T0 + 3_000, topic="Nope")
    assert missing.code == ResponseCode.TOPIC_NOT_EXIST and "no topic in this broker. topic=Nope" in (
        missing.remark or "")
    unknown = resets.reset(T0 + 3_000, group="Nobody")
    assert (unknown.code, unknown.remark) == (ResponseCode.SYSTEM_ERROR, "THe consumer group <Nobody> not exist")
    bad = resets.call(Code.INVOKE_BROKER_TO_RESET_OFFSET, topic="T", group="bad group", timestamp="1")
    assert bad.code == ResponseCode.SYSTEM_ERROR and "group" in (bad.remark or "")
    assert json.dumps(resets.broker.offsets.table) == before


def test_clone_group_offset(resets: Resets) -> None:
    offsets = resets.broker.offsets
    assert resets.call(Code.CLONE_GROUP_OFFSET, srcGroup="CG", destGroup="CG2", topic="T").code == ResponseCode.SUCCESS
    assert offsets.query_offset("CG2", "T", 0) == 6
    offsets.commit_offset("CG", "Gone", 0, 4)  # a topic this broker no longer has: skipped
    assert resets.call(Code.CLONE_GROUP_OFFSET, srcGroup="CG", destGroup="CG3", offline="true").code == 0
    assert offsets.query_offset("CG3", "T", 0) == 6 and offsets.query_offset("CG3", "Gone", 0) == -1


def test_one_queue_moves_to_an_offset_or_a_time_and_the_others_stay(resets: Resets) -> None:
    """RocketMQ 5's queueId/offset (mqadmin resetOffsetByTime -b -q -o): that queue alone, forward
    or back; its members are told of that queue only; an offset outside the queue is refused."""
    broker = resets.broker
    broker.offsets.commit_offset("CG", "T", 1, 0)
    to_offset = resets.call(Code.INVOKE_BROKER_TO_RESET_OFFSET, topic="T", group="CG", timestamp=str(T0),
                            isForce="false", queueId="0", offset="4")
    assert to_offset.code == ResponseCode.SUCCESS and offsets_of(to_offset) == {0: 4}
    assert (broker.offsets.query_offset("CG", "T", 0), broker.offsets.query_offset("CG", "T", 1)) == (4, 0)
    by_time = resets.call(Code.INVOKE_BROKER_TO_RESET_OFFSET, topic="T", group="CG", timestamp=str(T0 + 3_000),
                          isForce="false", queueId="0", offset="-1")
    assert offsets_of(by_time) == {0: 3}, "the timestamp's offset when the offset is -1"
    broker.offsets.commit_offset("CG", "T", 0, 1)
    forward = resets.call(Code.INVOKE_BROKER_TO_RESET_OFFSET, topic="T", group="CG", timestamp=str(T0 + 3_000),
                          isForce="false", queueId="0")
    assert offsets_of(forward) == {0: 3}, "one queue moves forward too, as RocketMQ 5's server-side reset"
    before = json.dumps(broker.offsets.table)
    for ext, remark in (({"queueId": "0", "offset": "7"}, "Target offset 7 not in consume queue range [0-6]"),
                        ({"queueId": "2", "offset": "0"}, "topic T has no queue 2 here (queues 0-1)")):
        refused = resets.call(Code.INVOKE_BROKER_TO_RESET_OFFSET, topic="T", group="CG", timestamp="0",
                              isForce="true", **ext)
        assert refused.code == ResponseCode.SYSTEM_ERROR and remark in (refused.remark or ""), refused
    bad = resets.call(Code.INVOKE_BROKER_TO_RESET_OFFSET, topic="T", group="CG", timestamp="0", queueId="-2")
    assert bad.code == ResponseCode.SYSTEM_ERROR and "queueId" in (bad.remark or "")
    assert json.dumps(broker.offsets.table) == before, "a refusal changes nothing"
    broker.call(Code.HEART_BEAT, body=heartbeat("cpp-client"))
    resets.call(Code.INVOKE_BROKER_TO_RESET_OFFSET, topic="T", group="CG", timestamp="0", queueId="1", offset="0")
    [(_, told)] = resets.told
    assert json.loads(told.body or b"") == {"offsetTable": [{"brokerName": "broker-a", "offset": 0, "queueId": 1,
                                                             "topic": "T"}]}
