"""SQL92 subscriptions through the broker processor with real RemotingCommands (encoded, decoded,
real store files): refused as RocketMQ refuses them while `enable_property_filter` is off (at
CHECK_CLIENT_CONFIG and at every pull, never matched as a tag and skipped), and with it on, pulls
deliver exactly the messages whose properties the expression holds for."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from namesrv.broker.client.consumer_manager import SubscriptionData
from namesrv.filter import SqlFilter
from namesrv.filter.nodes import Expr
from namesrv.filter.values import Value
from namesrv.protocol.codes import BrokerRequestCode as Code
from namesrv.protocol.codes import ResponseCode
from tests.support.broker import Broker, decode_messages

UNSUPPORTED = "The broker does not support consumer to filter message by SQL92"


def check_body(expression: str, expression_type: str = "SQL92") -> bytes:
    """A CheckClientRequestBody as the Java client's checkClientInBroker sends it."""
    return json.dumps({"clientId": "127.0.0.1@1", "group": "CG", "subscriptionData": {
        "topic": "T", "subString": expression, "tagsSet": [], "codeSet": [], "subVersion": 1,
        "classFilterMode": False, "expressionType": expression_type}}).encode()


def heartbeat(expression: str, expression_type: str = "SQL92", group: str = "CG") -> bytes:
    return json.dumps({"clientID": "127.0.0.1@1", "producerDataSet": [], "consumerDataSet": [{
        "groupName": group, "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
        "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET", "unitMode": False,
        "subscriptionDataSet": [{"topic": "T", "subString": expression, "tagsSet": [], "codeSet": [],
                                 "subVersion": 1, "classFilterMode": False, "expressionType": expression_type}]}]}
                      ).encode()


def fill(broker: Broker) -> None:
    """Six messages on queue 0 with properties a SQL92 filter can look at."""
    broker.send(b"m0", a="1", TAGS="TagA")
    broker.send(b"m1", a="7", TAGS="TagA", region="eu")
    broker.send(b"m2", a="9", TAGS="TagB", region="us")
    broker.send(b"m3", TAGS="TagA")  # no `a`: unknown, not delivered
    broker.send(b"m4", a="abc", TAGS="TagA")  # `a > 5` cannot be evaluated: not delivered
    broker.send(b"m5", a="12", TAGS="TagA", region="eu-west")


def bodies(answer: Any) -> list[bytes]:
    return [m["body"] for m in decode_messages(answer.body or b"")]


@pytest.fixture
def filtering(tmp_path: Path) -> Broker:
    return Broker(tmp_path, enable_property_filter=True)


# ---------------------------------------------------------------------------- CHECK_CLIENT_CONFIG
def test_check_client_config_refuses_sql92_while_the_filter_is_off(tmp_path: Path) -> None:
    broker = Broker(tmp_path)
    answer = broker.call(Code.CHECK_CLIENT_CONFIG, body=check_body("a > 5"))
    assert (answer.code, answer.remark) == (ResponseCode.SYSTEM_ERROR, UNSUPPORTED)
    answer = broker.call(Code.CHECK_CLIENT_CONFIG, body=check_body("TagA || TagB", "TAG"))
    assert answer.code == ResponseCode.SUCCESS, "TAG subscriptions are always served"
    assert broker.call(Code.CHECK_CLIENT_CONFIG).code == ResponseCode.SUCCESS, "nothing to check"


def test_check_client_config_compiles_the_expression_when_the_filter_is_on(filtering: Broker) -> None:
    assert filtering.call(Code.CHECK_CLIENT_CONFIG, body=check_body("a > 5 AND region IN ('eu')")).code == 0
    bad = filtering.call(Code.CHECK_CLIENT_CONFIG, body=check_body("a > 'x'"))
    assert bad.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED == 23
    assert bad.remark is not None and "Invalid MessageSelector" in bad.remark and "column 5" in bad.remark
    unknown = filtering.call(Code.CHECK_CLIENT_CONFIG, body=check_body("x", "GROOVY"))
    assert unknown.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED
    garbled = filtering.call(Code.CHECK_CLIENT_CONFIG, body=b"{not json")
    assert garbled.code == ResponseCode.SYSTEM_ERROR


# ---------------------------------------------------------------------------- heartbeat + pull
def test_a_sql92_group_is_registered_but_its_pulls_are_refused_while_the_filter_is_off(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    broker = Broker(tmp_path)
    fill(broker)
    with caplog.at_level(logging.WARNING):
        assert broker.call(Code.HEART_BEAT, body=heartbeat("a > 5")).code == ResponseCode.SUCCESS
    assert "enable_property_filter is off" in caplog.text
    assert broker.processor.consumers.consumer_ids("CG") == ["127.0.0.1@1"], "registered, as RocketMQ does"
    answer = broker.pull(0, sysFlag=1, commitOffset=3)
    assert (answer.code, answer.remark) == (ResponseCode.SYSTEM_ERROR, UNSUPPORTED)
    assert answer.body is None and broker.offsets.query_offset("CG", "T", 0) == -1, "nothing delivered or skipped"
    header = broker.pull(0, subscription="a > 5", expressionType="SQL92")
    assert (header.code, header.remark) == (ResponseCode.SYSTEM_ERROR, UNSUPPORTED)


def test_pulls_deliver_what_the_heartbeats_expression_selects(filtering: Broker) -> None:
    fill(filtering)
    assert filtering.call(Code.HEART_BEAT, body=heartbeat("a > 5 AND TAGS = 'TagA'")).code == 0
    answer = filtering.pull(0)
    assert answer.code == ResponseCode.SUCCESS
    assert bodies(answer) == [b"m1", b"m5"]
    assert answer.ext_fields is not None and answer.ext_fields["nextBeginOffset"] == "6"


def test_a_pull_carrying_its_sql92_subscription_uses_it(filtering: Broker) -> None:
    fill(filtering)
    eu = filtering.pull(0, subscription="region STARTSWITH 'eu' OR a BETWEEN 8 AND 10", expressionType="SQL92")
    assert bodies(eu) == [b"m1", b"m2", b"m5"]
    none = filtering.pull(0, subscription="region = 'asia'", expressionType="SQL92")
    assert none.code == ResponseCode.PULL_RETRY_IMMEDIATELY and none.remark == "NO_MATCHED_MESSAGE"
    assert none.ext_fields is not None and none.ext_fields["nextBeginOffset"] == "6"
    tags = filtering.pull(0, subscription="TagB", expressionType="TAG")
    assert bodies(tags) == [b"m2"], "TAG subscriptions are matched by tag as before"
    bare = filtering.pull(0, subscription="TagB")
    assert bodies(bare) == [b"m2"], "no expressionType is TAG"


def test_a_bad_expression_is_refused_at_pull_with_rocketmqs_codes(filtering: Broker) -> None:
    fill(filtering)
    header = filtering.pull(0, subscription="a >", expressionType="SQL92")
    assert header.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED
    assert header.remark is not None and header.remark.startswith("parse the consumer's subscription failed")
    assert filtering.call(Code.HEART_BEAT, body=heartbeat("a BETWEEN 9 AND 1")).code == ResponseCode.SUCCESS
    stored = filtering.pull(0)
    assert stored.code == ResponseCode.FILTER_DATA_NOT_EXIST == 27
    assert stored.remark == "The broker's consumer filter data is not exist!Your expression may be wrong!"


def test_a_changed_subscription_takes_effect_at_the_next_heartbeat(filtering: Broker) -> None:
    fill(filtering)
    filtering.call(Code.HEART_BEAT, body=heartbeat("region IS NOT NULL"))
    assert bodies(filtering.pull(0)) == [b"m1", b"m2", b"m5"]
    filtering.call(Code.HEART_BEAT, body=heartbeat("TagB", "TAG"))
    assert bodies(filtering.pull(0)) == [b"m2"]


def test_a_filter_that_fails_unexpectedly_delivers_nothing_and_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    """RocketMQ catches any Throwable from the filter: the message is not delivered, the pull goes on."""

    class Broken(Expr):
        is_boolean = True

        def evaluate(self, props: Mapping[str, str]) -> Value:
            raise RuntimeError("a bug in the evaluator")

    sub = SubscriptionData("T", "broken", expression_type="SQL92", sql=SqlFilter("broken", Broken()))
    with caplog.at_level(logging.ERROR):
        assert sub.accepts({"a": "1"}) is False
    assert "a bug in the evaluator" in caplog.text
    assert SubscriptionData.build("T", "a = 1", "SQL92").accepts({"a": "1"}) is True
