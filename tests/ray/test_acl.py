"""ACL on a deployed cluster: brokers register with a broker account, the real RocketMQ client signs
with the right and the wrong secret, every admin code over TCP unsigned, wrongly signed and signed
by a non-admin, the Ray path with and without credentials, and no refused request changing a table;
RocketMQ 5 clients through the gRPC proxy: the official client signs, sends and consumes as its
account (the brokers check it again), and unsigned, wrongly signed or unpermitted calls are
UNAUTHORIZED and reach no broker."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import ray
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from actors.deployment.launcher import Deployment
from actors.deployment.placement import free_port
from actors.deployment.spec import BrokerSpec
from clients.admin.brokers import MQAdminError
from clients.admin.client import AdminClient
from clients.impl.namesrv_client import NameServerClient
from namesrv.acl.plain_acl import SessionCredentials, signed
from namesrv.client.errors import MQClientError
from namesrv.common.waiting import wait_until
from namesrv.protocol.codes import BrokerRequestCode, RequestCode, ResponseCode
from namesrv.proxy.auth import authorization_header
from namesrv.remoting.client import RemotingClient, parse_namesrv_addr
from namesrv.remoting.command import MQServerError
from namesrv.remoting.wire_command import SerializeType
from tests.support.ray_cluster import DeploymentFactory, stable_tables
from tests.support.rmq5 import P, code_name, require_client, run_client, stub

ACL = """
accounts:
  - accessKey: app
    secretKey: app-secret
    defaultTopicPerm: PUB|SUB
    defaultGroupPerm: SUB
  - accessKey: ops
    secretKey: ops-secret
    admin: true
  - accessKey: broker
    secretKey: broker-secret
    broker: true
  - accessKey: reader
    secretKey: reader-secret
    topicPerms: ["Rmq5Acl=SUB"]
    groupPerms: ["GReader=SUB"]
"""
APP = SessionCredentials(access_key="app", secret_key="app-secret")
OPS = SessionCredentials(access_key="ops", secret_key="ops-secret")
BROKER = SessionCredentials(access_key="broker", secret_key="broker-secret")
WRONG = SessionCredentials(access_key="ops", secret_key="guessed")
READER = SessionCredentials(access_key="reader", secret_key="reader-secret")
ADMIN_CODES = {
    RequestCode.PUT_KV_CONFIG: {"namespace": "ns", "key": "k", "value": "v"},
    RequestCode.DELETE_KV_CONFIG: {"namespace": "ns", "key": "k"},
    RequestCode.DELETE_TOPIC_IN_NAMESRV: {"topic": "Guarded"},
    RequestCode.WIPE_WRITE_PERM_OF_BROKER: {"brokerName": "broker-a"},
    RequestCode.ADD_WRITE_PERM_OF_BROKER: {"brokerName": "broker-a"},
    RequestCode.UPDATE_NAMESRV_CONFIG: {},
}


@pytest.fixture(scope="module")
def dep(ray_local: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    """One ACL deployment for the module's tests: each leaves the tables as it found them (a refused
    request changes nothing, and the tests assert so). The first test runs before any refusal."""
    tmp_path = tmp_path_factory.mktemp("acl")
    acl = tmp_path / "plain_acl.yml"
    acl.write_text(ACL)
    factory = DeploymentFactory(tmp_path)
    try:
        on = {"acl_enable": True, "acl_file": str(acl)}
        d = factory.deploy(brokers=[BrokerSpec("broker-a")], namesrv_count=1, broker_port=0, namesrv_overrides=on,
                           broker_overrides={**on, "credentials": BROKER}, proxy_count=1, proxy_port=free_port(),
                           proxy_mode="local",
                           proxy_overrides={**on, "credentials": BROKER, "min_invisible_time_ms_for_recv": 1_000,
                                            "consumer_min_long_polling_timeout_ms": 500})
        admin = AdminClient(d, credentials=OPS)
        wait_until(lambda: set(d.brokers) <= {a for bd in admin.cluster_info().broker_addr_table.values()
                                              for a in bd.broker_addrs.values()}, 15,
                   "the broker's signed registration")
        admin.create_topic("Guarded", read_queue_nums=2, write_queue_nums=2)
        admin.create_topic("Rmq5Acl", read_queue_nums=2, write_queue_nums=2)
        yield d
    finally:
        factory.close()


def tcp(dep: Deployment, kind: SerializeType = SerializeType.JSON) -> RemotingClient:
    host, port = parse_namesrv_addr(dep.namesrv_addr())[0]
    return RemotingClient(host, port, serialize_type=kind)


def rejections(dep: Deployment) -> dict[str, int]:
    return ray.get(dep.namesrvs["namesrv-0"].get_status.remote(), timeout=60)["acl_rejections"]


def invoke(c: RemotingClient, code: int, ext: dict[str, Any], creds: SessionCredentials | None,
           body: bytes | None = None) -> Any:
    return c.invoke(code, signed(ext, body, creds), body)


def test_brokers_register_with_their_broker_account(dep: Deployment) -> None:
    assert AdminClient(dep, credentials=OPS).route("Guarded") is not None
    assert rejections(dep) == {}, "the broker's signed registrations all passed"


@pytest.mark.parametrize("kind", list(SerializeType))
def test_every_admin_code_unsigned_wrongly_signed_and_by_a_non_admin(dep: Deployment, kind: SerializeType) -> None:
    ns = dep.namesrvs["namesrv-0"]
    before = stable_tables(ns)
    with tcp(dep, kind) as c:
        for code, ext in ADMIN_CODES.items():
            body = b"orderMessageEnable=true\n" if code == RequestCode.UPDATE_NAMESRV_CONFIG else None
            for creds, reason in ((None, "No accessKey"), (WRONG, "Check signature failed"),
                                  (APP, "Need admin permission")):
                answer = invoke(c, code, ext, creds, body)
                assert answer.code == ResponseCode.NO_PERMISSION, (code, creds, answer)
                assert reason in (answer.remark or "") and "secret" not in (answer.remark or ""), answer.remark
    assert stable_tables(ns) == before
    assert ray.get(ns.get_kv_config.remote(**signed({"namespace": "ns", "key": "k"}, None, OPS)), timeout=60).code == 22
    counts = rejections(dep)
    assert counts["missing_access_key"] >= 6 and counts["bad_signature"] >= 6 and counts["not_admin"] >= 6
    with tcp(dep, kind) as c:
        assert invoke(c, RequestCode.PUT_KV_CONFIG, ADMIN_CODES[RequestCode.PUT_KV_CONFIG], OPS).code == 0
        # and the admin leaves the table as the test found it (the module's tests share the deployment)
        assert invoke(c, RequestCode.DELETE_KV_CONFIG, ADMIN_CODES[RequestCode.DELETE_KV_CONFIG], OPS).code == 0
    assert stable_tables(ns) == before


def test_route_queries_need_any_valid_account(dep: Deployment) -> None:
    with tcp(dep) as c:
        assert invoke(c, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "Guarded"}, APP).code == ResponseCode.SUCCESS
        assert invoke(c, RequestCode.GET_BROKER_CLUSTER_INFO, {}, APP).code == ResponseCode.SUCCESS
        assert invoke(c, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "Guarded"}, None).code == 16
        assert invoke(c, RequestCode.REGISTER_BROKER, {"clusterName": "C", "brokerAddr": "x:1", "brokerName": "evil",
                                                       "brokerId": 0}, APP).code == 16, "not a broker account"


def test_the_ray_path_carries_credentials(dep: Deployment) -> None:
    names = list(dep.namesrvs)
    route, _ = NameServerClient(names, dep.spec.namespace, credentials=APP).get_topic_route("Guarded")
    assert route.broker_datas
    with pytest.raises(MQClientError, match="No accessKey"):
        NameServerClient(names, dep.spec.namespace).get_topic_route("Guarded")
    with pytest.raises(MQAdminError, match="Need admin permission"):
        AdminClient(dep, credentials=APP).wipe_write_perm_of_broker("broker-a")
    with pytest.raises(MQServerError, match="No accessKey") as refused:
        ray.get(dep.namesrvs["namesrv-0"].listen_for_change.remote({"Guarded": -1}, 0.1), timeout=60)
    assert refused.value.code == ResponseCode.NO_PERMISSION


def test_the_real_client_with_the_right_and_the_wrong_secret(dep: Deployment) -> None:
    code = r'''
import sys
from rocketmq.client import Producer, Message
p = Producer('PID_acl_' + sys.argv[3]); p.set_namesrv_addr(sys.argv[1])
p.set_session_credentials('app', sys.argv[2], 'ALIYUN'); p.start()
m = Message('Guarded'); m.set_body('secret data')
try:
    print('status', p.send_sync(m).status)
except Exception as e:
    print('error', e)
p.shutdown()
'''
    results = {}
    for label, secret in (("right", "app-secret"), ("wrong", "not-the-secret")):
        out = subprocess.run([sys.executable, "-c", code, dep.namesrv_addr(), secret, label], capture_output=True,
                             text=True, timeout=60)
        results[label] = out.stdout.strip()
    assert results["right"].startswith("status"), results
    assert results["wrong"].startswith("error"), results
    log = ray.get(dep.namesrvs["namesrv-0"].get_wire_log.remote(), timeout=60)
    codes = {r.response_code for r in log if r.subject == "Guarded" and r.language == 1}
    assert codes == {ResponseCode.SUCCESS, ResponseCode.NO_PERMISSION}, "accepted once, refused once"


@given(st.lists(st.tuples(st.sampled_from(sorted(ADMIN_CODES)), st.sampled_from([None, WRONG, APP]),
                          st.dictionaries(st.sampled_from(["namespace", "key", "value", "topic", "brokerName"]),
                                          st.sampled_from(["ns", "k", "Guarded", "broker-a", "x"]), max_size=4)),
                min_size=1, max_size=6))
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_no_refused_request_changes_a_table(dep: Deployment, requests: list) -> None:
    ns = dep.namesrvs["namesrv-0"]
    before = stable_tables(ns)
    with tcp(dep) as c:
        for code, creds, ext in requests:
            assert invoke(c, code, ext, creds).code == ResponseCode.NO_PERMISSION
    assert stable_tables(ns) == before


def test_only_an_admin_creates_or_deletes_topics_on_a_broker(deployments: DeploymentFactory, tmp_path: Path) -> None:
    """mqadmin updateTopic / deleteTopic reach the broker itself: with its ACL on, an admin account only."""
    acl = tmp_path / "plain_acl.yml"
    acl.write_text(ACL)
    d = deployments.deploy(brokers=[BrokerSpec("broker-a")], namesrv_count=1, broker_port=0,
                           broker_overrides={"acl_enable": True, "acl_file": str(acl)})
    broker = d.brokers[next(iter(d.brokers))]
    before = ray.get(broker.get_topic_config_table.remote())
    create = {"topic": "AdminOnly", "defaultTopic": "TBW102", "readQueueNums": "2", "writeQueueNums": "2", "perm": "6"}
    with RemotingClient(*parse_namesrv_addr(next(iter(d.brokers)))[0]) as c:
        for creds in (None, WRONG, APP):
            for code, ext in ((BrokerRequestCode.UPDATE_AND_CREATE_TOPIC, create),
                              (BrokerRequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "TBW102"})):
                answer = invoke(c, code, ext, creds)
                assert answer.code == ResponseCode.NO_PERMISSION, (code, creds, answer.remark)
        assert ray.get(broker.get_topic_config_table.remote()) == before
        assert invoke(c, BrokerRequestCode.UPDATE_AND_CREATE_TOPIC, create, OPS).code == ResponseCode.SUCCESS
        assert invoke(c, BrokerRequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "AdminOnly"}, OPS).code == (
            ResponseCode.SUCCESS)


# ---------------------------------------------------------------------------- RocketMQ 5 through the proxy
def signed_metadata(creds: SessionCredentials) -> tuple[tuple[str, str], ...]:
    """What the official 5.x clients send with each call (their Signature.metadata)."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    return (("x-mq-client-id", f"acl-test-{creds.access_key}"), ("x-mq-date-time", stamp),
            ("authorization", authorization_header(creds.access_key, creds.secret_key, stamp)))


def proxy_status(dep: Deployment) -> dict[str, Any]:
    return ray.get(next(iter(dep.proxies.values())).get_status.remote(), timeout=60)


def test_the_official_5x_client_sends_and_consumes_as_its_account(dep: Deployment, tmp_path: Path) -> None:
    """Signed by the client's own code; what the proxy sends on is signed as `app` too, or the
    broker (ACL on) would refuse it."""
    require_client()
    actions: list[dict[str, Any]] = [{"op": "send", "body": b} for b in ("acl-1", "acl-2")]
    actions.append({"op": "receive_until", "bodies": ["acl-1", "acl-2"], "invisible_s": 30,
                    "ack": ["acl-1", "acl-2"]})
    results = run_client(dep, "Rmq5Acl", actions, tmp_path, credentials=APP,
                         consumer={"group": "GApp", "await_s": 1})
    assert [r["ok"] for r in results] == [True] * 3, results
    assert proxy_status(dep)["acl_refused"] == 0


def test_unsigned_wrongly_signed_and_unpermitted_5x_calls_are_unauthorized(dep: Deployment) -> None:
    require_client()
    route = P.new("QueryRouteRequest")
    route.topic.name = "Rmq5Acl"
    before = proxy_status(dep)
    for metadata, why in (((("x-mq-client-id", "anon"),), "No accessKey"),
                          (signed_metadata(WRONG), "Check signature failed"),
                          ((("x-mq-date-time", "20261129T000000Z"), ("authorization", "MQv2-HMAC-SHA1 nonsense")),
                           "authentication header is incorrect")):
        answer = stub(dep, "QueryRoute")(route, metadata=metadata, timeout=30)
        assert (code_name(answer.status), why in answer.status.message) == ("UNAUTHORIZED", True), answer.status
    reader = signed_metadata(READER)
    assert code_name(stub(dep, "QueryRoute")(route, metadata=reader, timeout=30).status) == "OK", "SUB reads routes"
    msg = P.new("Message", body=b"not allowed")
    msg.topic.name = "Rmq5Acl"
    msg.system_properties.message_id = uuid.uuid4().hex
    msg.system_properties.message_type = P.enum("MessageType", "NORMAL")
    sent = stub(dep, "SendMessage")(P.new("SendMessageRequest", messages=[msg]), metadata=reader, timeout=30)
    assert code_name(sent.status) == "UNAUTHORIZED" and "No permission for topic Rmq5Acl" in sent.status.message
    receive = P.new("ReceiveMessageRequest", auto_renew=False)
    receive.group.name = "GApp"
    receive.message_queue.topic.name = "Rmq5Acl"
    answers = list(stub(dep, "ReceiveMessage", "unary_stream")(receive, metadata=reader, timeout=30))
    assert [code_name(a.status) for a in answers] == ["UNAUTHORIZED"]
    assert "No permission for group GApp" in answers[0].status.message
    settings = P.new("Settings", client_type=P.enum("ClientType", "PRODUCER"))
    settings.publishing.topics.add(name="Rmq5Acl")
    telemetry = list(stub(dep, "Telemetry", "stream_stream")(iter([P.new("TelemetryCommand", settings=settings)]),
                                                             metadata=reader, timeout=30))
    assert [code_name(t.status) for t in telemetry] == ["UNAUTHORIZED"], "no Settings for a publisher without PUB"
    after = proxy_status(dep)
    assert after["sent"] == before["sent"] and after["received"] == before["received"], "nothing reached a broker"
    assert after["acl_refused"] - before["acl_refused"] == 6


def test_a_brokers_local_mode_proxy_checks_clients_and_signs_as_them(dep: Deployment, tmp_path: Path) -> None:
    """The proxy inside broker-a (local mode) admits the official client signed as `app` and asks its
    broker in process signed as `app` too (the broker's ACL hook checks that request as a TCP one);
    an unsigned call and a reader's send are UNAUTHORIZED and reach no broker."""
    require_client()
    local = next(e for name, e in dep.proxy_endpoints.items() if name not in dep.proxies)
    broker = next(iter(dep.brokers.values()))
    before = ray.get(broker.proxy_status.remote(), timeout=60)
    actions: list[dict[str, Any]] = [{"op": "send", "body": "local-acl"},
                                     {"op": "receive_until", "bodies": ["local-acl"], "invisible_s": 30,
                                      "ack": ["local-acl"]}]
    results = run_client(dep, "Rmq5Acl", actions, tmp_path, credentials=APP, endpoint=local,
                         consumer={"group": "GApp", "await_s": 1})
    assert [r["ok"] for r in results] == [True, True], results
    route = P.new("QueryRouteRequest")
    route.topic.name = "Rmq5Acl"
    unsigned = stub(dep, "QueryRoute", at=local)(route, metadata=(("x-mq-client-id", "anon"),), timeout=30)
    assert code_name(unsigned.status) == "UNAUTHORIZED" and "No accessKey" in unsigned.status.message
    msg = P.new("Message", body=b"not allowed")
    msg.topic.name = "Rmq5Acl"
    msg.system_properties.message_id = uuid.uuid4().hex
    msg.system_properties.message_type = P.enum("MessageType", "NORMAL")
    sent = stub(dep, "SendMessage", at=local)(P.new("SendMessageRequest", messages=[msg]),
                                              metadata=signed_metadata(READER), timeout=30)
    assert code_name(sent.status) == "UNAUTHORIZED"
    after = ray.get(broker.proxy_status.remote(), timeout=60)
    assert after["sent"] - before["sent"] == 1 and after["in_process"] > before["in_process"]
    assert after["acl_refused"] - before["acl_refused"] == 2
    assert sum(after["broker_requests"].values()) - sum(before["broker_requests"].values()) == \
        after["in_process"] - before["in_process"], "its own broker asked in process only"
