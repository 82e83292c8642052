"""Plain ACL: RocketMQ's signature, plain_acl.yml accounts, the NameServer's rules, the broker's
PUB/SUB rules, and a property test that a refused request never changes a table."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import time
from pathlib import Path

import pytest

from namesrv.acl.broker_resources import wire_resources
from namesrv.acl.plain_acl import (
    AclError,
    AclManager,
    PlainAccessValidator,
    SessionCredentials,
    address_matches,
    long_poll_content,
    sign,
    signed,
)
from namesrv.acl.rpc_hook import AclHook, check_namesrv
from namesrv.protocol.codes import BrokerRequestCode, RequestCode, ResponseCode
from namesrv.remoting.command import MQServerError, RemotingRequest, request_ext_strings
from namesrv.routeinfo.long_poll import check_topic_versions

ACL_YAML = """
globalWhiteRemoteAddresses:
  - 10.10.103.*
accounts:
  - accessKey: RocketMQ
    secretKey: "12345678"
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - topicB=PUB|SUB
      - topicC=SUB
    groupPerms:
      - groupA=DENY
  - accessKey: admin
    secretKey: admin-secret
    admin: true
  - accessKey: brokers
    secretKey: broker-secret
    broker: true
  - accessKey: trusted-host
    secretKey: whatever
    whiteRemoteAddress: 192.168.1.*
"""
USER = SessionCredentials(access_key="RocketMQ", secret_key="12345678")
ADMIN = SessionCredentials(access_key="admin", secret_key="admin-secret")
BROKER = SessionCredentials(access_key="brokers", secret_key="broker-secret")
REMOTE = "172.16.0.9:50000"


@pytest.fixture
def validator() -> PlainAccessValidator:
    return PlainAccessValidator.from_yaml(ACL_YAML)


def test_signature_is_hmac_sha1_over_sorted_values_then_body() -> None:
    ext = {"topic": "T", "AccessKey": "ak", "b": "2"}
    expected = base64.b64encode(hmac.new(b"secret", b"ak" + b"2" + b"T" + b"BODY", hashlib.sha1).digest()).decode()
    assert sign(ext, b"BODY", "secret") == expected
    assert sign(ext | {"Signature": "ignored"}, b"BODY", "secret") == expected
    out = signed({"brokerId": 0, "flag": True}, None, USER)
    assert out["AccessKey"] == "RocketMQ" and out["brokerId"] == 0, "typed values stay typed"
    assert out["Signature"] == sign({"brokerId": "0", "flag": "true", "AccessKey": "RocketMQ"}, None, "12345678")
    assert signed({"a": 1}, None, None) == {"a": 1}


@pytest.mark.parametrize(
    ("pattern", "remote", "ok"),
    [("*", "1.2.3.4:5", True), ("10.10.103.*", "10.10.103.7:1", True), ("10.10.103.*", "10.10.104.7:1", False),
     ("192.168.1.1-100", "192.168.1.50", True), ("192.168.1.1-100", "192.168.1.101", False),
     ("192.168.{1,2}.5", "192.168.2.5", True), ("1.1.1.1,2.2.2.2", "2.2.2.2:9", True), (None, "1.1.1.1", False),
     ("10.*.*.*", "ray", False)],
)
def test_remote_address_patterns(pattern: str | None, remote: str, ok: bool) -> None:
    assert address_matches(pattern, remote) is ok


def namesrv_ext(code: int, creds: SessionCredentials | None, body: bytes | None = None, **ext: object) -> dict:
    return request_ext_strings(RemotingRequest(code, signed(ext, body, creds), body))


def test_namesrv_rules(validator: PlainAccessValidator) -> None:
    route = RequestCode.GET_ROUTEINFO_BY_TOPIC
    assert validator.check_namesrv(route, namesrv_ext(route, USER, topic="T"), None, REMOTE) is None
    denied = validator.check_namesrv(route, namesrv_ext(route, None, topic="T"), None, REMOTE)
    assert denied is not None and denied.reason == "missing_access_key"
    assert validator.check_namesrv(route, namesrv_ext(route, None, topic="T"), None, "10.10.103.1:2") is None
    wrong = SessionCredentials(access_key="RocketMQ", secret_key="not-it")
    denied = validator.check_namesrv(route, namesrv_ext(route, wrong, topic="T"), None, REMOTE)
    assert denied is not None and denied.reason == "bad_signature" and "12345678" not in denied.remark
    ghost = SessionCredentials(access_key="ghost", secret_key="x")
    denied = validator.check_namesrv(route, namesrv_ext(route, ghost, topic="T"), None, REMOTE)
    assert denied is not None and denied.reason == "unknown_access_key"
    tampered = namesrv_ext(route, USER, topic="T") | {"topic": "Other"}
    assert validator.check_namesrv(route, tampered, None, REMOTE) is not None, "the signature covers the header"
    body = b"register me"
    reg = namesrv_ext(RequestCode.REGISTER_BROKER, BROKER, body, brokerName="b")
    assert validator.check_namesrv(RequestCode.REGISTER_BROKER, reg, body, REMOTE) is None
    assert validator.check_namesrv(RequestCode.REGISTER_BROKER, reg, b"other body", REMOTE) is not None
    user_reg = namesrv_ext(RequestCode.REGISTER_BROKER, USER, body, brokerName="b")
    assert validator.check_namesrv(RequestCode.REGISTER_BROKER, user_reg, body, REMOTE).reason == "not_broker"


@pytest.mark.parametrize("code", sorted([RequestCode.REGISTER_BROKER, RequestCode.UNREGISTER_BROKER,
                                         RequestCode.BROKER_HEARTBEAT, RequestCode.QUERY_DATA_VERSION,
                                         RequestCode.REGISTER_TOPIC_IN_NAMESRV]))
def test_every_broker_code_needs_a_broker_or_an_admin(validator: PlainAccessValidator, code: int) -> None:
    ext = {"clusterName": "c", "brokerAddr": "10.0.0.1:10911", "brokerName": "b", "brokerId": "0", "topic": "T"}
    body = b"{}"
    unsigned = validator.check_namesrv(code, namesrv_ext(code, None, body, **ext), body, REMOTE)
    assert unsigned is not None and unsigned.reason == "missing_access_key"
    assert validator.check_namesrv(code, namesrv_ext(code, USER, body, **ext), body, REMOTE).reason == "not_broker"
    assert validator.check_namesrv(code, namesrv_ext(code, BROKER, body, **ext), body, REMOTE) is None
    assert validator.check_namesrv(code, namesrv_ext(code, ADMIN, body, **ext), body, REMOTE) is None


@pytest.mark.parametrize("code", sorted([RequestCode.PUT_KV_CONFIG, RequestCode.DELETE_KV_CONFIG,
                                         RequestCode.DELETE_TOPIC_IN_NAMESRV, RequestCode.WIPE_WRITE_PERM_OF_BROKER,
                                         RequestCode.ADD_WRITE_PERM_OF_BROKER, RequestCode.UPDATE_NAMESRV_CONFIG]))
def test_every_admin_code_needs_an_admin(validator: PlainAccessValidator, code: int) -> None:
    ext = {"namespace": "ns", "key": "k", "value": "v", "topic": "T", "brokerName": "b"}
    assert validator.check_namesrv(code, namesrv_ext(code, None, **ext), None, REMOTE).reason == "missing_access_key"
    wrong = SessionCredentials(access_key="admin", secret_key="guess")
    assert validator.check_namesrv(code, namesrv_ext(code, wrong, **ext), None, REMOTE).reason == "bad_signature"
    assert validator.check_namesrv(code, namesrv_ext(code, USER, **ext), None, REMOTE).reason == "not_admin"
    assert validator.check_namesrv(code, namesrv_ext(code, ADMIN, **ext), None, REMOTE) is None


def test_broker_rules_are_rocketmqs_plain_acl(validator: PlainAccessValidator) -> None:
    def check(code: int, ext: dict, creds: SessionCredentials = USER, heartbeat: dict | None = None) -> str | None:
        body = json.dumps(heartbeat).encode() if heartbeat else None
        full = namesrv_ext(code, creds, body, **ext)
        cmd = RemotingRequest(code, full, body, wire=True)
        denied = validator.check_broker(code, full, body, REMOTE, lambda: wire_resources(cmd))
        return denied.reason if denied else None

    send = BrokerRequestCode.SEND_MESSAGE
    assert check(send, {"topic": "topicB", "producerGroup": "g", "queueId": 0}) is None
    assert check(send, {"topic": "topicC", "producerGroup": "g", "queueId": 0}) == "no_permission", "SUB only"
    assert check(send, {"topic": "topicX", "producerGroup": "g", "queueId": 0}) == "no_permission", "default DENY"
    assert check(send, {"topic": "%RETRY%groupB", "producerGroup": "g", "queueId": 0}) is None, "group SUB"
    assert check(send, {"topic": "%RETRY%groupA", "producerGroup": "g", "queueId": 0}) == "no_permission"
    assert check(BrokerRequestCode.SEND_MESSAGE_V2, {"b": "topicB", "a": "g", "e": 0}) is None
    recall = BrokerRequestCode.RECALL_MESSAGE  # cancelling a send needs what the send needed: PUB
    assert check(recall, {"topic": "topicB", "recallHandle": "h"}) is None
    assert check(recall, {"topic": "topicC", "recallHandle": "h"}) == "no_permission", "SUB only"
    pull = BrokerRequestCode.PULL_MESSAGE
    at = {"queueId": 0, "queueOffset": 0, "maxMsgNums": 32}
    assert check(pull, {"topic": "topicC", "consumerGroup": "groupB"} | at) is None
    assert check(pull, {"topic": "topicC", "consumerGroup": "groupA"} | at) == "no_permission", "group DENY"
    assert check(pull, {"topic": "topicC"} | at) == "invalid_request", "a header that does not parse"
    def batch_ack(*acks: tuple[str, str]) -> str | None:  # each entry as its own ACK_MESSAGE: SUB on topic and group
        entries = [{"c": group, "t": topic, "r": "0", "so": 0, "q": 0, "rq": 0, "pt": 1, "it": 1000, "b": "AQ=="}
                   for topic, group in acks]
        body = json.dumps({"brokerName": "broker-a", "acks": entries}).encode()
        full = namesrv_ext(BrokerRequestCode.BATCH_ACK_MESSAGE, USER, body)
        cmd = RemotingRequest(BrokerRequestCode.BATCH_ACK_MESSAGE, full, body, wire=True)
        denied = validator.check_broker(BrokerRequestCode.BATCH_ACK_MESSAGE, full, body, REMOTE,
                                        lambda: wire_resources(cmd))
        return denied.reason if denied else None

    assert batch_ack(("topicC", "groupB"), ("topicB", "groupB")) is None
    assert batch_ack(("topicC", "groupB"), ("topicX", "groupB")) == "no_permission", "one entry's topic DENY"
    assert batch_ack(("topicC", "groupB"), ("topicC", "groupA")) == "no_permission", "one entry's group DENY"
    config = BrokerRequestCode.GET_TOPIC_CONFIG  # a topic's config: SUB on it, as a query by key
    assert check(config, {"topic": "topicC"}) is None
    assert check(config, {"topic": "topicX"}) == "no_permission", "default DENY"
    running = BrokerRequestCode.GET_CONSUMER_RUNNING_INFO  # a member's subscriptions and queues: SUB on the group
    assert check(running, {"consumerGroup": "groupB", "clientId": "c1"}) is None
    assert check(running, {"consumerGroup": "groupA", "clientId": "c1"}) == "no_permission", "group DENY"
    assert check(running, {"clientId": "c1"}) == "invalid_request", "a header that does not parse"
    hb = {"clientID": "c", "consumerDataSet": [{"groupName": "g", "subscriptionDataSet": [{"topic": "topicX"}]}]}
    assert check(BrokerRequestCode.HEART_BEAT, {}, heartbeat=hb) == "no_permission"
    assert check(send, {"topic": "anything", "producerGroup": "g", "queueId": 0}, creds=ADMIN) is None


def test_the_file_reloads_when_it_changes_and_bad_files_keep_the_old_rules(tmp_path: Path) -> None:
    path = tmp_path / "plain_acl.yml"
    path.write_text(ACL_YAML)
    acl = AclManager(path)
    assert "admin" in acl.validator.accounts and not acl.reload(), "unchanged file: nothing reloaded"
    path.write_text(ACL_YAML.replace("accessKey: admin", "accessKey: root"))
    os.utime(path, (time.time() + 5, time.time() + 5))
    assert acl.reload() and "root" in acl.validator.accounts and "admin" not in acl.validator.accounts
    path.write_text("accounts: [{accessKey: x}]")  # no secretKey
    os.utime(path, (time.time() + 10, time.time() + 10))
    with pytest.raises(AclError, match="secretKey"):
        acl.reload()
    assert "root" in acl.validator.accounts, "the previous rules stay in force"
    with pytest.raises(AclError, match="does not exist"):
        AclManager(tmp_path / "missing.yml")


def test_signatures_are_compared_in_constant_time(validator: PlainAccessValidator,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """hmac.compare_digest decides (a plain == leaks how long a prefix matched); any string a client
    sends as its signature, ASCII or not, is refused cleanly."""
    compared: list[tuple[bytes, bytes]] = []
    real = hmac.compare_digest

    def compare_digest(a: bytes, b: bytes) -> bool:
        compared.append((a, b))
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", compare_digest)
    code = RequestCode.GET_ROUTEINFO_BY_TOPIC
    good = namesrv_ext(code, USER, topic="T")
    assert validator.check_namesrv(code, good, None, REMOTE) is None
    assert compared == [(good["Signature"].encode(), good["Signature"].encode())]
    for forged in (good["Signature"][:-2] + "AA", "", "é\ud800☃"):
        denied = validator.check_namesrv(code, good | {"Signature": forged}, None, REMOTE)
        assert denied is not None and denied.reason == "bad_signature"
    assert len(compared) == 4


def test_a_broken_acl_file_is_reported_by_line_and_column_never_by_its_contents(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    secret = "s3cr3t-never-logged"
    path = tmp_path / "plain_acl.yml"
    path.write_text(ACL_YAML)
    acl = AclManager(path)
    broken = [
        f'accounts:\n  - accessKey: ops\n    secretKey: "{secret}\n',  # an unterminated quote
        f"accounts:\n  - accessKey: ops\n    secretKey: {secret}: x\n",  # a mapping where none may be
        f"accounts:\n  - accessKey: ops\n    secretKey: {secret}\n    admin: {secret}\n",  # not a boolean
        "accounts:\n  - accessKey: ops\n    secretKey: " + "\t" + secret + "\n\t- x",
    ]
    for i, text in enumerate(broken):
        path.write_text(text)
        os.utime(path, (time.time() + 10 + i, time.time() + 10 + i))
        with pytest.raises(AclError) as raised:
            acl.reload()
        assert secret not in str(raised.value)
        caplog.clear()
        with caplog.at_level("DEBUG"):
            assert acl.try_reload() is False
        assert secret not in caplog.text, caplog.text
        assert "not reloaded" in caplog.text
        assert "admin" in acl.validator.accounts, "the previous rules stay in force"
    path.write_text(broken[1])
    os.utime(path, (time.time() + 50, time.time() + 50))
    with pytest.raises(AclError, match=r"line 3, column \d+"):
        acl.reload()


def test_a_logged_config_or_account_never_shows_a_secret() -> None:
    from namesrv.acl.plain_acl import Account
    from namesrv.broker.config import BrokerConfig

    config = BrokerConfig(credentials=SessionCredentials(access_key="broker", secret_key="zzz-secret-1"))
    account = Account.model_validate({"accessKey": "app", "secretKey": "zzz-secret-2"})
    for shown in (repr(config), str(config), repr(account), f"{config.credentials}"):
        assert "zzz-secret" not in shown and ("broker" in shown or "app" in shown)


def test_a_refused_long_poll_raises_the_servers_refusal_with_no_permission(tmp_path: Path) -> None:
    """The route long-poll (a Ray call with no response of its own) refuses as the route query
    would be answered: MQServerError with NO_PERMISSION and the ACL's reason; malformed held
    versions are SYSTEM_ERROR, before the ACL is asked."""
    acl = tmp_path / "plain_acl.yml"
    acl.write_text(ACL_YAML)
    hook = AclHook(AclManager(acl), check_namesrv)
    held = {"topicB": -1}
    hook.check_long_poll(held, signed(long_poll_content(held), None, USER))
    with pytest.raises(MQServerError, match="accessKey") as refused:
        hook.check_long_poll(held, {})
    assert refused.value.code == ResponseCode.NO_PERMISSION
    assert hook.rejections["missing_access_key"] == 1
    for bad in ({"topicB": "1"}, ["topicB"], {7: 1}):
        with pytest.raises(MQServerError, match="topic_versions") as malformed:
            check_topic_versions(bad)
        assert malformed.value.code == ResponseCode.SYSTEM_ERROR
    check_topic_versions(held)
