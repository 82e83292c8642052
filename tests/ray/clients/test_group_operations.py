"""Operating consumer and producer groups against a real broker on Ray over real TCP (one NameServer,
broker-a on a free port; one deployment for the module): mqadmin's updateSubGroup / deleteSubGroup
and the configs kept across a broker restart, what the broker enforces from them (consumeEnable,
retryMaxTimes), producerConnection, resetOffsetByTime on a stopped and on a live group (and of one
queue, -b -q -o), skipAccumulatedMessage and cloneGroupOffset, and bad names and settings refused with
nothing changed.

The verbs run in this driver (`clients.cli.main.main` with -n: the admin client over TCP; one test
through the Ray namespace's actors); what they did is checked on the wire (raw remoting clients) or
through the admin client, not through the verb under test.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
import ray

from actors.deployment.launcher import Deployment
from actors.deployment.spec import BrokerSpec
from clients.admin.brokers import MQAdminError
from clients.admin.client import AdminClient, DefaultMQAdminExt
from clients.cli.main import main as namesrv_main
from clients.producer.producer import Message, Producer
from namesrv.broker.subscription.config import TOOLS_CONSUMER_GROUP, SubscriptionGroupConfig
from namesrv.common.waiting import wait_until
from namesrv.protocol.admin_bodies import ResetOffsetBody
from namesrv.protocol.codes import BrokerRequestCode as Code
from namesrv.protocol.codes import ResponseCode
from namesrv.protocol.keyed_json import loads_keyed
from namesrv.protocol.message.decoder import decode_messages
from namesrv.protocol.models import MessageQueue
from namesrv.remoting.client import RemotingClient, parse_namesrv_addr
from tests.support.ray_cluster import registered_deployment, wait_registered_everywhere

pytestmark = pytest.mark.timeout(300)

T = "GroupOpsTopic"
"""Two queues on broker-a."""


EXPIRY_MS = 4_000
"""The broker's channelExpiredTimeout here (RocketMQ's 120 s): a client silent this long is forgotten."""


@pytest.fixture(scope="module")
def dep(ray_local: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    with registered_deployment(tmp_path_factory.mktemp("groups"), brokers=[BrokerSpec("broker-a")], namesrv_count=1,
                               broker_port=0, broker_overrides={"channel_expired_timeout_ms": EXPIRY_MS}) as d:
        AdminClient(d).create_topic(T, read_queue_nums=2, write_queue_nums=2)
        yield d


@pytest.fixture(scope="module")
def addr(dep: Deployment) -> str:
    return dep.namesrv_addr()


@pytest.fixture(scope="module")
def broker(dep: Deployment) -> str:
    [only] = dep.brokers
    return only


@pytest.fixture
def admin(addr: str) -> Iterator[DefaultMQAdminExt]:
    with DefaultMQAdminExt.over_tcp(addr) as a:
        yield a


def verb(capsys: pytest.CaptureFixture[str], addr: str, *argv: str) -> tuple[int, str, str]:
    """A verb in this driver over TCP (-n), its exit code, stdout and stderr."""
    capsys.readouterr()
    try:
        code = namesrv_main([*argv, "-n", addr])
    except SystemExit as e:  # argparse refusing an argument
        code = int(e.code or 0)
    out, err = capsys.readouterr()
    assert "Traceback" not in err, err
    return code, out, err


def verb_json(capsys: pytest.CaptureFixture[str], addr: str, *argv: str) -> Any:
    code, out, err = verb(capsys, addr, *argv, "--json")
    assert code == 0, (out, err)
    return json.loads(out)


def connect(broker: str) -> RemotingClient:
    [(host, port)] = parse_namesrv_addr(broker)
    return RemotingClient(host, port, timeout_s=10)


def heartbeat(client: RemotingClient, client_id: str, group: str, topic: str = T) -> None:
    body = json.dumps({"clientID": client_id, "producerDataSet": [], "consumerDataSet": [{
        "groupName": group, "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
        "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET", "unitMode": False,
        "subscriptionDataSet": [{"topic": topic, "subString": "*", "tagsSet": [], "codeSet": [], "subVersion": 1,
                                 "classFilterMode": False, "expressionType": "TAG"}]}]}).encode()
    assert client.invoke(Code.HEART_BEAT, body=body).code == ResponseCode.SUCCESS


def pull(client: RemotingClient, group: str, queue_id: int, offset: int = 0, topic: str = T) -> Any:
    return client.invoke(Code.PULL_MESSAGE, {
        "consumerGroup": group, "topic": topic, "queueId": queue_id, "queueOffset": offset, "maxMsgNums": 32,
        "sysFlag": 0, "commitOffset": 0, "suspendTimeoutMillis": 0, "subscription": "*", "subVersion": 0})


def send(dep: Deployment, bodies: list[bytes], group: str = "GroupOpsProducer") -> list[Any]:
    with Producer(group, namespace=dep.spec.namespace) as producer:
        return [producer.send(Message(T, b)) for b in bodies]


# ============================================================================ subscription groups
def test_subscription_groups_over_tcp_are_kept_across_a_broker_restart(
        dep: Deployment, addr: str, broker: str, admin: DefaultMQAdminExt, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = verb(capsys, addr, "updateSubGroup", "-c", "DefaultCluster", "-g", "KeptGroup", "-s", "false",
                          "-q", "3", "-r", "5", "-d", "true")
    assert code == 0 and f"create subscription group to {broker} success." in out, (out, err)
    assert verb(capsys, addr, "updateSubGroup", "-b", broker, "-g", "GoneGroup")[0] == 0
    table = admin.get_all_subscription_group(broker)
    assert table["KeptGroup"] == SubscriptionGroupConfig(
        group_name="KeptGroup", consume_enable=False, consume_from_min_enable=False, consume_broadcast_enable=True,
        retry_queue_nums=3, retry_max_times=5)
    code, out, err = verb(capsys, addr, "deleteSubGroup", "-b", broker, "-g", "GoneGroup")
    assert code == 0 and "delete subscription group [GoneGroup]" in out, (out, err)
    assert "GoneGroup" not in admin.get_all_subscription_group(broker)

    dep.restart_broker(broker)
    wait_registered_everywhere(dep)
    admin.transport.close()  # the old connection went with the old broker
    after = admin.get_all_subscription_group(broker)
    assert after["KeptGroup"] == table["KeptGroup"] and "GoneGroup" not in after
    assert TOOLS_CONSUMER_GROUP in after


def test_a_group_with_consume_enable_off_cannot_pull(dep: Deployment, addr: str, broker: str,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    send(dep, [b"for the refused group"])
    assert verb(capsys, addr, "updateSubGroup", "-b", broker, "-g", "StoppedReader", "-s", "false")[0] == 0
    with connect(broker) as client:
        refused = pull(client, "StoppedReader", 0)
        assert (refused.code, refused.remark) == (ResponseCode.NO_PERMISSION,
                                                  "subscription group no permission, StoppedReader")
        assert verb(capsys, addr, "updateSubGroup", "-b", broker, "-g", "StoppedReader", "-s", "true")[0] == 0
        assert pull(client, "StoppedReader", 0).code in (ResponseCode.SUCCESS, ResponseCode.PULL_NOT_FOUND)


def _sent_back(dep: Deployment, broker: str, group: str) -> None:
    """A message of T pulled by `group`'s member and sent back failed, as a consumer does (no
    maxReconsumeTimes in the request: the group's config decides)."""
    [result] = send(dep, [f"poison for {group}".encode()])
    with connect(broker) as client:
        heartbeat(client, f"{group}-client", group)
        answer = pull(client, group, result.message_queue.queue_id, result.queue_offset)
        [message] = [m for m in decode_messages(answer.body or b"") if m.queue_offset == result.queue_offset]
        back = client.invoke(Code.CONSUMER_SEND_MSG_BACK, {"offset": message.commit_log_offset, "group": group,
                                                           "delayLevel": 0, "originMsgId": result.msg_id})
        assert back.code == ResponseCode.SUCCESS, back.remark


def test_retry_max_times_of_the_group_sends_a_failed_message_to_the_dlq(
        dep: Deployment, addr: str, broker: str, admin: DefaultMQAdminExt, capsys: pytest.CaptureFixture[str]) -> None:
    assert verb(capsys, addr, "updateSubGroup", "-b", broker, "-g", "NoRetries", "-r", "0")[0] == 0
    _sent_back(dep, broker, "NoRetries")
    stats = admin.examine_topic_stats(broker, "%DLQ%NoRetries")
    assert sum(o.max_offset for o in stats.offset_table.values()) == 1, "straight into the DLQ"
    _sent_back(dep, broker, "DefaultRetries")  # retryMaxTimes 16: a retry, not the DLQ
    topics = ray.get(dep.brokers[broker].get_topic_config_table.remote(), timeout=10)
    assert "%RETRY%DefaultRetries" in topics and "%DLQ%DefaultRetries" not in topics


# ============================================================================ producers
def test_producer_connection_lists_a_producer(dep: Deployment, addr: str, capsys: pytest.CaptureFixture[str]) -> None:
    with Producer("ListedProducer", namespace=dep.spec.namespace) as producer:
        producer.send(Message(T, b"hello"))
        client_id = producer.instance.client_id if producer.instance is not None else ""
        rows = verb_json(capsys, addr, "producerConnection", "-g", "ListedProducer", "-t", T)
    assert [(r["clientId"], r["language"]) for r in rows] == [(client_id, "PYTHON")]
    code, _, err = verb(capsys, addr, "producerConnection", "-g", "NobodyProduces", "-t", T)
    assert code != 0 and "not online" in err


def test_an_idle_producer_keeps_heartbeating_and_stays_listed(dep: Deployment, addr: str,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """A producer that sends once and then idles heartbeats every heartbeatBrokerInterval, as
    RocketMQ's client instance does: it outlives the broker's channel expiry, while one that
    heartbeats less often than the expiry is dropped (before, both were: heartbeats rode on sends)."""
    def listed(group: str) -> bool:
        code, _, _ = verb(capsys, addr, "producerConnection", "-g", group, "-t", T)
        return code == 0

    with (Producer("IdleHeartbeats", namespace=dep.spec.namespace, heartbeat_broker_interval_ms=500) as idle,
          Producer("IdleSilent", namespace=dep.spec.namespace, heartbeat_broker_interval_ms=600_000) as silent):
        idle.send(Message(T, b"once"))
        silent.send(Message(T, b"once"))
        assert listed("IdleHeartbeats") and listed("IdleSilent")
        wait_until(lambda: not listed("IdleSilent"), EXPIRY_MS / 1000 * 4, "the silent producer expired")
        assert listed("IdleHeartbeats"), "still known: its heartbeats went on without sends"


# ============================================================================ offsets
def test_reset_offset_by_time_rewinds_a_stopped_group(dep: Deployment, addr: str, broker: str,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    first = send(dep, [b"old-1", b"old-2"])
    time.sleep(0.01)  # the store's clock is milliseconds: the cut lies strictly between the two sends
    cut = int(time.time() * 1000)
    time.sleep(0.01)
    send(dep, [b"new-1", b"new-2"])
    with connect(broker) as client:  # a member once (its retry topic is routed), committed to the end, gone
        heartbeat(client, "rewound-client", "Rewound")
        for q in range(2):
            progress = client.invoke(Code.GET_MAX_OFFSET, {"topic": T, "queueId": q})
            end = int((progress.ext_fields or {})["offset"])
            client.invoke(Code.UPDATE_CONSUMER_OFFSET, {"consumerGroup": "Rewound", "topic": T, "queueId": q,
                                                        "commitOffset": end})
    wait_until(lambda: _routed(addr, "%RETRY%Rewound"), 10, "the group's retry topic routed")
    before = {q["queueId"]: q for q in verb_json(capsys, addr, "consumerProgress", "-g", "Rewound", "-t", T)["queues"]}
    assert all(q["diff"] == 0 for q in before.values())
    reset = verb_json(capsys, addr, "resetOffsetByTime", "-g", "Rewound", "-t", T, "-s", str(cut))
    after = {q["queueId"]: q for q in verb_json(capsys, addr, "consumerProgress", "-g", "Rewound", "-t", T)["queues"]}
    assert {o["queueId"]: o["offset"] for o in reset["offsets"]} == {q: a["consumerOffset"] for q, a in after.items()}
    assert sum(a["diff"] for a in after.values()) == 2, "the two messages sent after the cut are to be read again"
    assert all(after[r.message_queue.queue_id]["consumerOffset"] > r.queue_offset for r in first), "sent before"

    skipped = verb_json(capsys, addr, "skipAccumulatedMessage", "-g", "Rewound", "-t", T)
    assert {o["queueId"]: o["offset"] for o in skipped["offsets"]} == {q: b["brokerOffset"] for q, b in after.items()}
    # one queue (-b -q -o): queue 0 to its start, queue 1 where skipAccumulatedMessage left it
    one = verb_json(capsys, addr, "resetOffsetByTime", "-g", "Rewound", "-t", T, "-s", "now", "-b", broker,
                    "-q", "0", "-o", "0")
    assert [(o["queueId"], o["offset"]) for o in one["offsets"]] == [(0, 0)]
    moved = {q["queueId"]: q for q in verb_json(capsys, addr, "consumerProgress", "-g", "Rewound", "-t", T)["queues"]}
    assert (moved[0]["consumerOffset"], moved[1]["consumerOffset"]) == (0, after[1]["brokerOffset"])
    code, _, err = verb(capsys, addr, "resetOffsetByTime", "-g", "Rewound", "-t", T, "-s", "now", "-b", broker,
                        "-q", "0", "-o", str(after[0]["brokerOffset"] + 1))
    assert code != 0 and "not in consume queue range" in err, err
    skipped = verb_json(capsys, addr, "skipAccumulatedMessage", "-g", "Rewound", "-t", T)
    clone = verb(capsys, addr, "cloneGroupOffset", "-s", "Rewound", "-d", "RewoundCopy", "-t", T, "-o", "true")
    assert clone[0] == 0, clone
    with connect(broker) as client:
        copied = {q: int((client.invoke(Code.QUERY_CONSUMER_OFFSET, {"consumerGroup": "RewoundCopy", "topic": T,
                                                                     "queueId": q}).ext_fields or {})["offset"])
                  for q in range(2)}
    assert copied == {q: b["brokerOffset"] for q, b in after.items()}


def _routed(addr: str, topic: str) -> bool:
    with DefaultMQAdminExt.over_tcp(addr) as a:
        try:
            return bool(a.examine_topic_route_info(topic).broker_datas)
        except MQAdminError:
            return False


def test_reset_offset_by_time_tells_the_live_members(dep: Deployment, addr: str, broker: str,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    send(dep, [b"live-1", b"live-2"])
    with connect(broker) as member:
        heartbeat(member, "live-client", "LiveGroup")
        for q in range(2):
            member.invoke(Code.UPDATE_CONSUMER_OFFSET, {"consumerGroup": "LiveGroup", "topic": T, "queueId": q,
                                                        "commitOffset": 1})
        reset = verb_json(capsys, addr, "resetOffsetByTime", "-g", "LiveGroup", "-t", T, "-s", "0")
        assert {o["offset"] for o in reset["offsets"]} == {0}
        wait_until(lambda: any(r.code == Code.RESET_CONSUMER_CLIENT_OFFSET
                               for r in member.server_requests_after(0.2)), 10, "the member told")
        [told] = [r for r in member.server_requests if r.code == Code.RESET_CONSUMER_CLIENT_OFFSET]
    assert told.ext_fields is not None and told.ext_fields["group"] == "LiveGroup" and told.ext_fields["topic"] == T
    body = ResetOffsetBody.from_wire(loads_keyed(told.body or b""))
    assert body.offset_table == {MessageQueue(T, "broker-a", 0): 0, MessageQueue(T, "broker-a", 1): 0}


# ============================================================================ refusals
def test_bad_group_names_and_settings_are_refused_and_change_nothing(
        addr: str, broker: str, admin: DefaultMQAdminExt, capsys: pytest.CaptureFixture[str]) -> None:
    before = admin.get_all_subscription_group(broker)
    for argv, words in [(("-g", "bad name"), "illegal characters"), (("-g", "G", "-q", "-1"), "-q"),
                        (("-g", "G", "-s", "maybe"), "true or false"), (("-g", "g" * 256), "longer than")]:
        code, _, err = verb(capsys, addr, "updateSubGroup", "-b", broker, *argv)
        assert code != 0 and words in err, (argv, err)
    code, _, err = verb(capsys, addr, "deleteSubGroup", "-b", broker, "-g", TOOLS_CONSUMER_GROUP)
    assert code != 0 and "INVALID_PARAMETER" in err and "system group" in err, err
    with pytest.raises(MQAdminError, match=r"INVALID_PARAMETER.*illegal characters"):  # past the CLI: the broker
        admin.create_and_update_subscription_group_config(
            broker, SubscriptionGroupConfig.model_construct(group_name="bad name", consume_enable=True))
    assert admin.get_all_subscription_group(broker) == before


def test_the_group_verbs_work_through_the_ray_namespace_too(dep: Deployment, broker: str, admin: DefaultMQAdminExt,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    def over_ray(*argv: str) -> tuple[int, str, str]:
        capsys.readouterr()
        code = namesrv_main([*argv, "--namespace", dep.spec.namespace])
        out, err = capsys.readouterr()
        assert "Traceback" not in err, err
        return code, out, err

    code, out, err = over_ray("updateSubGroup", "-b", broker, "-g", "MadeOverRay", "-r", "7")
    assert code == 0, (out, err)
    assert admin.get_all_subscription_group(broker)["MadeOverRay"].retry_max_times == 7  # seen over TCP
    with Producer("RayListedProducer", namespace=dep.spec.namespace) as producer:
        producer.send(Message(T, b"over ray"))
        code, out, err = over_ray("producerConnection", "-g", "RayListedProducer", "-t", T, "--json")
    assert code == 0 and len(json.loads(out)) == 1, (out, err)
    assert over_ray("deleteSubGroup", "-b", broker, "-g", "MadeOverRay")[0] == 0
    assert "MadeOverRay" not in admin.get_all_subscription_group(broker)
