"""Where a member starts in a queue (namesrv/client/consume_from.py) against the broker's own request
processing (tests/support/broker.py: a real store, the requests encoded and decoded as on the wire):
the group's committed offset first; without one (QUERY_NOT_FOUND) LAST -> the max offset, FIRST ->
the min offset, TIMESTAMP -> SEARCH_OFFSET_BY_TIMESTAMP; a retry topic from 0 (or its max offset from
a timestamp); a broker that cannot answer -> no start (the queue waits for the next rebalance)."""

from __future__ import annotations

from pathlib import Path

import pytest

from namesrv.client.consume_from import ConsumeFromWhere, compute_pull_from_where
from namesrv.client.offsets import OFFSET_QUERY_FAILED, OffsetNotFound, RemoteBrokerOffsetStore
from namesrv.protocol.codes import BrokerRequestCode as Code
from namesrv.protocol.codes import ResponseCode
from namesrv.protocol.models import MessageQueue, TopicConfig
from tests.support.broker import Broker

T0 = MessageQueue("T", "broker-a", 0)
RETRY = MessageQueue("%RETRY%G", "broker-a", 0)


class OverTheWire:
    """The consumer's broker calls, made through the broker's request processing."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.down = False

    def _call(self, code: int, ext: dict[str, object]) -> dict[str, str]:
        if self.down:
            raise ConnectionError("broker unreachable")
        answer = self.broker.call(code, ext)
        if answer.code == ResponseCode.QUERY_NOT_FOUND:
            raise OffsetNotFound(answer.remark or "")
        assert answer.code == ResponseCode.SUCCESS, answer.remark
        return answer.ext_fields or {}

    def query_consumer_offset(self, group: str, mq: MessageQueue) -> int:
        ext = {"consumerGroup": group, "topic": mq.topic, "queueId": mq.queue_id, "setZeroIfNotFound": "false"}
        return int(self._call(Code.QUERY_CONSUMER_OFFSET, ext)["offset"])

    def update_consumer_offset(self, group: str, mq: MessageQueue, offset: int) -> None:
        self._call(Code.UPDATE_CONSUMER_OFFSET, {"consumerGroup": group, "topic": mq.topic, "queueId": mq.queue_id,
                                                 "commitOffset": offset})

    def max_offset(self, mq: MessageQueue) -> int:
        return int(self._call(Code.GET_MAX_OFFSET, {"topic": mq.topic, "queueId": mq.queue_id})["offset"])

    def min_offset(self, mq: MessageQueue) -> int:
        return int(self._call(Code.GET_MIN_OFFSET, {"topic": mq.topic, "queueId": mq.queue_id})["offset"])

    def search_offset(self, mq: MessageQueue, timestamp_ms: int) -> int:
        return int(self._call(Code.SEARCH_OFFSET_BY_TIMESTAMP, {"topic": mq.topic, "queueId": mq.queue_id,
                                                                "timestamp": timestamp_ms})["offset"])


@pytest.fixture
def wire(tmp_path: Path) -> OverTheWire:
    broker = Broker(tmp_path)
    broker.topics.update_topic_config(TopicConfig(topic_name="%RETRY%G", read_queue_nums=1, write_queue_nums=1))
    for i in range(5):
        broker.send(f"m{i}".encode())
        broker.clock.advance(1_000)
    for i in range(3):
        broker.send(f"r{i}".encode(), topic="%RETRY%G")
    return OverTheWire(broker)


def start(wire: OverTheWire, mq: MessageQueue, where: ConsumeFromWhere, timestamp_ms: int = 0) -> int:
    return compute_pull_from_where(mq, RemoteBrokerOffsetStore("G", wire), where, timestamp_ms, wire)


def test_a_group_without_an_offset_starts_by_its_rule(wire: OverTheWire) -> None:
    assert start(wire, T0, ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET) == 5
    assert start(wire, T0, ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET) == 0
    third_stored = wire.broker.clock.now_ms - 3_000
    assert start(wire, T0, ConsumeFromWhere.CONSUME_FROM_TIMESTAMP, third_stored) == 2


def test_a_retry_topic_starts_at_zero_or_at_its_end_from_a_timestamp(wire: OverTheWire) -> None:
    assert start(wire, RETRY, ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET) == 0
    assert start(wire, RETRY, ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET) == 0
    assert start(wire, RETRY, ConsumeFromWhere.CONSUME_FROM_TIMESTAMP, 0) == 3


def test_the_committed_offset_wins_over_every_rule(wire: OverTheWire) -> None:
    store = RemoteBrokerOffsetStore("G", wire)
    store.update_offset(T0, 3)
    store.persist_all({T0})
    for where in ConsumeFromWhere:
        assert start(wire, T0, where) == 3


def test_an_unreachable_broker_gives_no_start(wire: OverTheWire) -> None:
    wire.down = True
    assert start(wire, T0, ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET) == OFFSET_QUERY_FAILED


def test_persist_all_commits_held_queues_and_forgets_the_others(wire: OverTheWire) -> None:
    store = RemoteBrokerOffsetStore("G", wire)
    store.update_offset(T0, 4)
    store.update_offset(RETRY, 1)
    store.persist_all({T0})
    assert store.clone_offset_table() == {T0: 4}
    assert wire.query_consumer_offset("G", T0) == 4
    with pytest.raises(OffsetNotFound):
        wire.query_consumer_offset("G", RETRY)
    store.update_offset(RETRY, 2)
    store.persist(RETRY)
    assert store.clone_offset_table() == {T0: 4, RETRY: 2}, "persist(mq) leaves the other queues alone"
    assert wire.query_consumer_offset("G", RETRY) == 2
