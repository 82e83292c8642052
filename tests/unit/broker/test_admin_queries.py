"""The read-only admin codes mqadmin's topicStatus, consumerProgress, consumerConnection,
getBrokerConfig and the dashboard use, through a broker pipeline and RocketMQ's wire format: bodies
keyed by MessageQueue objects as fastjson writes them, RocketMQ's setting names, no secret."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from namesrv.acl.plain_acl import SessionCredentials
from namesrv.broker.config import BrokerConfig
from namesrv.protocol.admin_bodies import (
    ConsumerConnection,
    ConsumeStats,
    GroupList,
    ProducerConnection,
    TopicOffset,
    TopicStatsTable,
)
from namesrv.protocol.bodies import parse_properties
from namesrv.protocol.codes import BrokerRequestCode as Code
from namesrv.protocol.codes import ResponseCode
from namesrv.protocol.keyed_json import loads_keyed
from namesrv.protocol.models import MessageQueue, TopicConfig
from namesrv.remoting.pipeline import RequestContext
from tests.support.broker import Admin, Broker, heartbeat

CLIENT = RequestContext("tcp:127.0.0.1:5555#1", "127.0.0.1:5555")




async def _await(x: Any) -> Any:
    return await x


@pytest.fixture
def setup(tmp_path: Path) -> tuple[Broker, Admin]:
    broker = Broker(tmp_path)
    secret = SessionCredentials(access_key="broker", secret_key="never-shown")
    return broker, Admin(broker, BrokerConfig(credentials=secret))


def test_topic_status(setup: tuple[Broker, Admin]) -> None:
    broker, admin = setup
    broker.send(b"one")
    broker.send(b"two")
    answer = admin.call(Code.GET_TOPIC_STATS_INFO, topic="T")
    assert answer.code == ResponseCode.SUCCESS
    stats = TopicStatsTable.from_wire(loads_keyed(answer.body or b""))
    [last] = broker.store.get_message("T", 0, 1, 1)
    assert stats.offset_table == {MessageQueue("T", "broker-a", 0): TopicOffset(0, 2, last.store_timestamp),
                                  MessageQueue("T", "broker-a", 1): TopicOffset(0, 0, 0)}
    missing = admin.call(Code.GET_TOPIC_STATS_INFO, topic="Nope")
    assert (missing.code, missing.remark) == (ResponseCode.TOPIC_NOT_EXIST, "topic[Nope] not exist")
    bad = admin.call(Code.GET_TOPIC_STATS_INFO)
    assert bad.code == ResponseCode.SYSTEM_ERROR and "invalid request" in (bad.remark or "")


def test_consumer_progress_connections_and_groups(setup: tuple[Broker, Admin]) -> None:
    broker, admin = setup
    for body in (b"a", b"b", b"c"):
        broker.send(body)
    assert broker.call(Code.HEART_BEAT, body=heartbeat("c1")).code == ResponseCode.SUCCESS
    broker.call(Code.UPDATE_CONSUMER_OFFSET, {"consumerGroup": "CG", "topic": "T", "queueId": 0, "commitOffset": 1})
    progress = ConsumeStats.from_wire(loads_keyed(admin.call(Code.GET_CONSUME_STATS, consumerGroup="CG").body or b""))
    assert progress.offset_table[MessageQueue("T", "broker-a", 0)].broker_offset == 3
    assert progress.offset_table[MessageQueue("T", "broker-a", 0)].consumer_offset == 1
    assert progress.diff_total() == 2
    conn = ConsumerConnection.from_wire(loads_keyed(admin.call(Code.GET_CONSUMER_CONNECTION_LIST,
                                                               consumerGroup="CG").body or b""))
    assert [(c.client_id, c.client_addr) for c in conn.connection_set] == [("c1", "127.0.0.1:5555")]
    assert set(conn.subscription_table) == {"T"} and conn.message_model == "CLUSTERING"
    offline = admin.call(Code.GET_CONSUMER_CONNECTION_LIST, consumerGroup="Nobody")
    assert offline.code == ResponseCode.CONSUMER_NOT_ONLINE
    groups = GroupList.from_wire(loads_keyed(admin.call(Code.QUERY_TOPIC_CONSUME_BY_WHO, topic="T").body or b""))
    assert groups.group_list == ["CG"]


def test_producer_connections_from_heartbeats_until_the_channel_closes_or_expires(
        setup: tuple[Broker, Admin]) -> None:
    broker, admin = setup
    other = RequestContext("tcp:127.0.0.1:6666#2", "127.0.0.1:6666")
    broker.call(Code.HEART_BEAT, body=heartbeat("c1"))
    broker.clock.advance(1000)
    broker.call(Code.HEART_BEAT, body=heartbeat("c2"), client=other)
    conn = ProducerConnection.from_wire(loads_keyed(admin.call(Code.GET_PRODUCER_CONNECTION_LIST,
                                                               producerGroup="PG").body or b""))
    assert [(c.client_id, c.client_addr, c.language, c.version) for c in conn.connection_set] == [
        ("c2", "127.0.0.1:6666", "CPP", 63), ("c1", "127.0.0.1:5555", "CPP", 63)]
    broker.processor.channel_closed(other.channel)
    broker.clock.advance(120_001)
    broker.processor.scan_not_active_clients()
    gone = admin.call(Code.GET_PRODUCER_CONNECTION_LIST, producerGroup="PG")
    assert (gone.code, gone.remark) == (ResponseCode.SYSTEM_ERROR, "the producer group[PG] not exist")


def test_one_topic_s_config_as_rocketmq_5_answers_it(setup: tuple[Broker, Admin]) -> None:
    """GET_TOPIC_CONFIG (351): the topic's whole config (what an update must keep), RocketMQ's
    TOPIC_NOT_EXIST for a topic this broker does not hold, a clear refusal for no topic."""
    broker, admin = setup
    broker.topics.update_topic_config(TopicConfig(topic_name="Ordered", read_queue_nums=3, write_queue_nums=2,
                                                  topic_sys_flag=1, order=True))
    answer = admin.call(Code.GET_TOPIC_CONFIG, topic="Ordered", lo="true")
    assert answer.code == ResponseCode.SUCCESS
    assert loads_keyed(answer.body or b"") == {"topicName": "Ordered", "readQueueNums": 3, "writeQueueNums": 2,
                                               "perm": 6, "topicFilterType": "SINGLE_TAG", "topicSysFlag": 1,
                                               "order": True}
    missing = admin.call(Code.GET_TOPIC_CONFIG, topic="Nope")
    assert (missing.code, missing.remark) == (ResponseCode.TOPIC_NOT_EXIST, "No topic in this broker. topic: Nope")
    bad = admin.call(Code.GET_TOPIC_CONFIG)
    assert bad.code == ResponseCode.SYSTEM_ERROR and "invalid request" in (bad.remark or "")


def test_topic_table_and_broker_config(setup: tuple[Broker, Admin]) -> None:
    broker, admin = setup
    table = admin.call(Code.GET_ALL_TOPIC_CONFIG)
    body = loads_keyed(table.body or b"")
    assert set(body["topicConfigTable"]) == set(broker.topics.topic_config_table)
    assert table.ext_fields == {"totalTopicNum": str(len(broker.topics.topic_config_table))}
    config = admin.call(Code.GET_BROKER_CONFIG)
    props = parse_properties(config.body or b"")
    assert props["brokerName"] == "broker-a" and props["brokerClusterName"] == "DefaultCluster"
    assert props["flushDiskType"] == "SYNC_FLUSH" and props["brokerPermission"] == "6"
    assert props["autoCreateTopicEnable"] == "true" and props["registerNameServerPeriod"] == "30000"
    assert props["listenPort"] == "10911" and props["brokerIP1"] == "127.0.0.1"
    assert b"never-shown" not in (config.body or b"") and "credentials" not in props
    assert config.ext_fields is not None and "counter" in config.ext_fields["version"]
