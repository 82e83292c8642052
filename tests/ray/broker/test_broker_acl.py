"""A broker's ACL holds on the Ray path as over TCP (one pipeline): topic admin, sends and pulls
need the same accounts; a message can be sent back only into a retry topic its reader may read; no
method hands out the broker's secret."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import ray

from actors.deployment.launcher import Deployment
from actors.deployment.spec import BrokerSpec
from clients.admin.client import AdminClient
from clients.consumer.pull_consumer import PullConsumer, PullError
from namesrv.acl.plain_acl import ACCESS_KEY, SIGNATURE, SessionCredentials, signed
from namesrv.common.waiting import wait_until
from namesrv.protocol.broker_headers import broker_permission_body, pull_message_ext, topic_config_ext
from namesrv.protocol.codes import BrokerRequestCode, ResponseCode
from namesrv.protocol.message.codec import decode_offset_msg_id, ray_send_ext
from namesrv.protocol.models import TopicConfig
from namesrv.remoting.client import RemotingClient, parse_namesrv_addr
from tests.support.broker import heartbeat
from tests.support.ray_cluster import DeploymentFactory

ACL = """
accounts:
  - accessKey: app
    secretKey: app-secret
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms: ["Open=PUB|SUB", "Secret=%s"]
  - accessKey: ops
    secretKey: ops-secret
    admin: true
  - accessKey: broker
    secretKey: broker-secret
    broker: true
"""
APP = SessionCredentials(access_key="app", secret_key="app-secret")
OPS = SessionCredentials(access_key="ops", secret_key="ops-secret")
BROKER = SessionCredentials(access_key="broker", secret_key="broker-secret")
OK = ResponseCode.SUCCESS


def auth(ext: dict[str, str], body: bytes | None, creds: SessionCredentials) -> dict[str, str]:
    return {k: v for k, v in signed(ext, body, creds).items() if k in (ACCESS_KEY, SIGNATURE)}


@pytest.fixture
def acl_file(tmp_path: Path) -> Path:
    path = tmp_path / "plain_acl.yml"
    path.write_text(ACL % "SUB")
    return path


@pytest.fixture
def dep(deployments: DeploymentFactory, acl_file: Path) -> Deployment:
    d = deployments.deploy(brokers=[BrokerSpec("broker-a")], namesrv_count=1, broker_port=0,
                           broker_overrides={"acl_enable": True, "acl_file": str(acl_file), "credentials": BROKER})
    AdminClient(d, credentials=OPS).create_topic("Open", read_queue_nums=1, write_queue_nums=1)
    AdminClient(d, credentials=OPS).create_topic("Secret", read_queue_nums=1, write_queue_nums=1)
    return d


def broker_of(dep: Deployment) -> Any:
    return dep.brokers[next(iter(dep.brokers))]


def send_as(broker: Any, creds: SessionCredentials, topic: str, body: bytes) -> Any:
    ext = ray_send_ext(topic, 0, {"k": "v"}, "UNIQ-1")
    return ray.get(broker.send_message.remote(topic, 0, body, {"k": "v"}, "UNIQ-1", auth=auth(ext, body, creds)),
                   timeout=60)


def test_the_ray_path_checks_the_same_accounts_as_tcp(dep: Deployment) -> None:
    broker = broker_of(dep)
    before = ray.get(broker.get_topic_config_table.remote(), timeout=60)
    # Topic admin needs an admin account, whatever the transport.
    made = ray.get(broker.create_topic.remote("Made", 2, 2), timeout=60)
    assert made.code == ResponseCode.NO_PERMISSION, made
    app_auth = auth(topic_config_ext(TopicConfig(topic_name="Made", read_queue_nums=2, write_queue_nums=2)), None, APP)
    assert ray.get(broker.create_topic.remote("Made", 2, 2, auth=app_auth), timeout=60).code == (
        ResponseCode.NO_PERMISSION)
    assert ray.get(broker.delete_topic.remote("Open"), timeout=60).code == ResponseCode.NO_PERMISSION
    assert ray.get(broker.get_topic_config_table.remote(), timeout=60) == before
    # A signature covers the whole request: one signed for another topic does not carry over.
    body = b"payload"
    unsigned = ray.get(broker.send_message.remote("Secret", 0, body), timeout=60)
    assert unsigned.code == ResponseCode.NO_PERMISSION
    forged = auth(ray_send_ext("Open", 0, None, None), body, APP)
    assert ray.get(broker.send_message.remote("Secret", 0, body, auth=forged), timeout=60).code == (
        ResponseCode.NO_PERMISSION)
    assert send_as(broker, APP, "Secret", body).code == ResponseCode.NO_PERMISSION, "app may only SUB Secret"
    assert send_as(broker, OPS, "Secret", body).ok
    assert send_as(broker, APP, "Open", b"open").ok
    # Pulls: the topic needs SUB and the group too.
    page = ray.get(broker.pull_message.remote("Secret", 0, 0, 32), timeout=60)
    assert page["code"] == ResponseCode.NO_PERMISSION and page["messages"] == []
    signed_pull = auth(pull_message_ext("Secret", 0, 0, 32), None, APP)
    page = ray.get(broker.pull_message.remote("Secret", 0, 0, 32, auth=signed_pull), timeout=60)
    assert page["code"] == ResponseCode.SUCCESS and [m["body"] for m in page["messages"]] == [body]
    consumer = PullConsumer(dep.spec.namespace, list(dep.namesrvs), credentials=APP)
    assert [m.body for m in consumer.consume_all("Open")] == [b"open"]
    with pytest.raises(PullError, match="No accessKey"):
        PullConsumer(dep.spec.namespace, list(dep.namesrvs)).consume_all("Open")
    consumer.heartbeat(["Open"])  # over Ray, signed as over TCP: SUB on its group and topics
    with pytest.raises(PullError, match="No accessKey"):
        PullConsumer(dep.spec.namespace, list(dep.namesrvs)).heartbeat(["Open"])


def test_no_method_hands_out_a_secret(dep: Deployment) -> None:
    info = ray.get(broker_of(dep).get_runtime_info.remote(), timeout=60)
    assert "broker-secret" not in repr(info) and info["signs_as"] == "broker"
    status = ray.get(dep.namesrvs["namesrv-0"].get_status.remote(), timeout=60)
    assert "secret" not in json.dumps(status, default=str)


def invoke(c: RemotingClient, code: int, ext: dict[str, Any], creds: SessionCredentials,
           body: bytes | None = None) -> Any:
    return c.invoke(code, signed(ext, body, creds), body)


def test_a_message_is_sent_back_only_from_a_topic_its_group_reads(dep: Deployment, acl_file: Path) -> None:
    """CONSUMER_SEND_MSG_BACK names a message only by its commit-log offset: RocketMQ's plain ACL
    checks just the group, so a consumer could copy any topic's message into its own retry topic."""
    broker = broker_of(dep)
    secret = send_as(broker, OPS, "Secret", b"classified")
    _, secret_offset = decode_offset_msg_id(secret.ext_fields["offsetMsgId"])
    with RemotingClient(*parse_namesrv_addr(next(iter(dep.brokers)))[0]) as c:
        assert invoke(c, BrokerRequestCode.HEART_BEAT, {}, APP, heartbeat("c1", "Reader", "Open")).code == OK
        back = {"offset": str(secret_offset), "group": "Reader", "delayLevel": "0", "originMsgId": "X"}
        refused = invoke(c, BrokerRequestCode.CONSUMER_SEND_MSG_BACK, back, APP)
        assert refused.code == ResponseCode.NO_PERMISSION and "subscribes" in (refused.remark or "")
        # A group that did subscribe, whose account may no longer read the topic (the ACL changed).
        assert invoke(c, BrokerRequestCode.HEART_BEAT, {}, APP, heartbeat("c1", "Spy", "Secret")).code == OK
        acl_file.write_text(ACL % "DENY")
        wait_until(lambda: ray.get(broker.pull_message.remote(
            "Secret", 0, 0, 1, auth=auth(pull_message_ext("Secret", 0, 0, 1), None, APP)))["code"]
            == ResponseCode.NO_PERMISSION, 15, "the broker to reload its ACL")
        refused = invoke(c, BrokerRequestCode.CONSUMER_SEND_MSG_BACK, back | {"group": "Spy"}, APP)
        assert refused.code == ResponseCode.NO_PERMISSION and "Secret" in (refused.remark or "")
    for group in ("Reader", "Spy"):
        page = ray.get(broker.pull_message.remote(f"%RETRY%{group}", 0, 0, 32, group,
                                                  auth(pull_message_ext(f"%RETRY%{group}", 0, 0, 32, group), None,
                                                       OPS)), timeout=60)
        assert page["messages"] == [], f"nothing was copied into %RETRY%{group}"


def test_only_an_admin_changes_the_brokers_permission(dep: Deployment) -> None:
    """UPDATE_BROKER_CONFIG (mqadmin updateBrokerConfig -k brokerPermission), and its Ray method."""
    broker = broker_of(dep)
    assert ray.get(broker.update_broker_permission.remote(4), timeout=60).code == ResponseCode.NO_PERMISSION
    app = auth({}, broker_permission_body(4), APP)
    assert ray.get(broker.update_broker_permission.remote(4, app), timeout=60).code == ResponseCode.NO_PERMISSION
    assert ray.get(broker.get_runtime_info.remote(), timeout=60)["permission"] == 6
    with RemotingClient(*parse_namesrv_addr(next(iter(dep.brokers)))[0]) as c:
        unsigned = c.invoke(BrokerRequestCode.UPDATE_BROKER_CONFIG, {}, broker_permission_body(4))
        assert unsigned.code == ResponseCode.NO_PERMISSION
        other_key = invoke(c, BrokerRequestCode.UPDATE_BROKER_CONFIG, {}, OPS, b"flushDiskType=ASYNC_FLUSH\n")
        assert other_key.code == ResponseCode.INVALID_PARAMETER and "flushDiskType" in (other_key.remark or "")
        assert invoke(c, BrokerRequestCode.UPDATE_BROKER_CONFIG, {}, OPS, broker_permission_body(4)).code == OK
    assert ray.get(broker.get_runtime_info.remote(), timeout=60)["permission"] == 4
    ops = auth({}, broker_permission_body(6), OPS)
    assert ray.get(broker.update_broker_permission.remote(6, ops), timeout=60).ok
    assert ray.get(broker.get_runtime_info.remote(), timeout=60)["permission"] == 6
