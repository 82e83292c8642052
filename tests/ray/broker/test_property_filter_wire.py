"""SQL92 subscriptions over real TCP against broker actors, in frames built by hand here (RocketMQ's
length-prefixed JSON header + body, not our codec): a broker with the property filter off refuses
such a consumer as RocketMQ does, one with it on delivers exactly the matching messages. (The PyPI
`rocketmq` 0.4.4 client subscribes by tag only, so it cannot express a SQL92 subscription.)"""

from __future__ import annotations

import json
from typing import Any

from actors.deployment.launcher import Deployment
from actors.deployment.spec import BrokerSpec
from clients.admin.client import AdminClient
from tests.support.broker import decode_messages
from tests.support.raw_remoting import RawClient
from tests.support.ray_cluster import DeploymentFactory, wait_registered_everywhere

CHECK_CLIENT_CONFIG, HEART_BEAT, PULL_MESSAGE, SEND_MESSAGE = 46, 34, 11, 10
SUCCESS, SYSTEM_ERROR, PULL_RETRY_IMMEDIATELY = 0, 1, 20
UNSUPPORTED = "The broker does not support consumer to filter message by SQL92"


def sql92(expression: str) -> dict[str, Any]:
    return {"topic": "Filtered", "subString": expression, "tagsSet": [], "codeSet": [], "subVersion": 1,
            "classFilterMode": False, "expressionType": "SQL92"}


def heartbeat(expression: str) -> bytes:
    return json.dumps({"clientID": "127.0.0.1@raw", "producerDataSet": [], "consumerDataSet": [{
        "groupName": "SqlGroup", "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
        "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET", "unitMode": False,
        "subscriptionDataSet": [sql92(expression)]}]}).encode()


def send(c: RawClient, body: bytes, properties: dict[str, str]) -> None:
    props = "".join(f"{k}\x01{v}\x02" for k, v in properties.items())
    answer, _ = c.call(SEND_MESSAGE, {"producerGroup": "PG", "topic": "Filtered", "defaultTopic": "TBW102",
                                      "defaultTopicQueueNums": 4, "queueId": 0, "sysFlag": 0, "bornTimestamp": 0,
                                      "flag": 0, "properties": props}, body)
    assert answer["code"] == SUCCESS, answer


def pull(c: RawClient, **extra: Any) -> tuple[dict[str, Any], bytes]:
    return c.call(PULL_MESSAGE, {"consumerGroup": "SqlGroup", "topic": "Filtered", "queueId": 0, "queueOffset": 0,
                                 "maxMsgNums": 32, "sysFlag": 0, "commitOffset": 0, "suspendTimeoutMillis": 0,
                                 "subVersion": 1} | extra)


def deploy(deployments: DeploymentFactory, enable: bool) -> tuple[Deployment, RawClient]:
    dep = deployments.deploy(brokers=[BrokerSpec("broker-a")], namesrv_count=1, broker_port=0,
                             broker_overrides={"enable_property_filter": True} if enable else {})  # off by default
    wait_registered_everywhere(dep)
    AdminClient(dep).create_topic("Filtered", read_queue_nums=1, write_queue_nums=1)
    c = RawClient(next(iter(dep.brokers)))
    for i, props in enumerate([{"a": "1", "TAGS": "TagA"}, {"a": "7", "TAGS": "TagA", "UNIQ_KEY": "k1"},
                               {"a": "9", "TAGS": "TagB"}, {"TAGS": "TagA"}, {"a": "12", "TAGS": "TagA"}]):
        send(c, f"m{i}".encode(), props)
    return dep, c


def test_a_broker_without_the_property_filter_refuses_a_sql92_consumer(deployments: DeploymentFactory) -> None:
    _, c = deploy(deployments, enable=False)
    try:
        answer, _ = c.call(CHECK_CLIENT_CONFIG, body=json.dumps(
            {"clientId": "127.0.0.1@raw", "group": "SqlGroup", "subscriptionData": sql92("a > 5")}).encode())
        assert (answer["code"], answer.get("remark")) == (SYSTEM_ERROR, UNSUPPORTED)
        answer, _ = c.call(HEART_BEAT, body=heartbeat("a > 5"))
        assert answer["code"] == SUCCESS, "the heartbeat is taken, as RocketMQ takes it"
        answer, body = pull(c)
        assert (answer["code"], answer.get("remark"), body) == (SYSTEM_ERROR, UNSUPPORTED, b"")
    finally:
        c.close()


def test_a_broker_with_the_property_filter_delivers_the_matching_messages(deployments: DeploymentFactory) -> None:
    _, c = deploy(deployments, enable=True)
    try:
        answer, _ = c.call(CHECK_CLIENT_CONFIG, body=json.dumps(
            {"clientId": "127.0.0.1@raw", "group": "SqlGroup", "subscriptionData": sql92("a > 5")}).encode())
        assert answer["code"] == SUCCESS
        assert c.call(HEART_BEAT, body=heartbeat("a > 5 AND TAGS = 'TagA'"))[0]["code"] == SUCCESS
        answer, body = pull(c)
        assert answer["code"] == SUCCESS
        assert [m["body"] for m in decode_messages(body)] == [b"m1", b"m4"]
        assert answer["extFields"]["nextBeginOffset"] == "5"
        answer, body = pull(c, subscription="a BETWEEN 8 AND 10", expressionType="SQL92")
        assert [m["body"] for m in decode_messages(body)] == [b"m2"], "the pull's own subscription"
        answer, _ = pull(c, subscription="a > 'x'", expressionType="SQL92")
        assert answer["code"] == 23 and "Invalid MessageSelector" in answer["remark"]
    finally:
        c.close()
