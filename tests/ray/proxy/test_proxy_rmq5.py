"""The RocketMQ 5 gRPC proxy actors (issue 35, points 1-2) with the official 5.x Python client
(PyPI rocketmq-python-client, run from its own venv): normal, FIFO, delayed and transactional sends
land on the brokers; an orphaned half is resolved through the client's checker over Telemetry; the
server's Settings answer the client's; bad requests get the proxy's status codes and send nothing;
an RPC the service does not have gets UNIMPLEMENTED; a killed proxy is restarted by Ray on its
endpoint; a SimpleConsumer receives (pop), acks, changes invisible durations and gets back what it
did not ack; bad receipt handles are refused; a delayed message recalled by its handle never
arrives; a FIFO group (its subscription group config) receives a message group in order, its queue
held while a batch is in flight; a PushConsumer whose listener fails a message sees it retried with
the group's back-off, then in the group's DLQ, and one whose listener outlasts the invisible time
keeps its message (renewed by the proxy); one AckMessage of a received batch (with bad and
repeated handles among them) acks it in one BATCH_ACK per broker; a broker killed while the client sends loses nothing
the client saw acknowledged; any bytes sent to any RPC get a status, never a hung or dead proxy
(hypothesis). One deployment (two TCP brokers, one proxy)."""

from __future__ import annotations

import hashlib
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import psutil
import pytest
import ray
from google.protobuf import json_format
from google.protobuf.message import DecodeError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from actors.deployment.launcher import Deployment
from actors.deployment.placement import free_port
from actors.deployment.spec import BrokerSpec
from actors.proxy.service import NOT_BUILT
from clients.admin.client import AdminClient
from namesrv.broker.subscription.config import SubscriptionGroupConfig
from namesrv.common.waiting import wait_until
from namesrv.proxy.descriptors import SERVICE
from tests.support.ray_cluster import mend, pull_all, registered_deployment
from tests.support.rmq5 import (
    P,
    code_name,
    endpoint,
    require_client,
    run_client,
    sends_through_a_kill,
    stub,
    transactions_with_an_orphan,
)


@pytest.fixture(scope="module")
def dep(ray_local: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    require_client()
    with registered_deployment(tmp_path_factory.mktemp("proxy"), prefix="proxy",
                               brokers=[BrokerSpec("broker-a"), BrokerSpec("broker-b")], namesrv_count=1,
                               broker_port=0, proxy_count=1, proxy_port=free_port(),
                               proxy_overrides={"min_invisible_time_ms_for_recv": 1_000,
                                                "consumer_min_long_polling_timeout_ms": 500,
                                                "default_invisible_time_ms": 3_000, "renew_ahead_ms": 1_500},
                               broker_overrides={"transaction_timeout_ms": 1_000,
                                                 "transaction_check_interval_ms": 500,
                                                 "timer_precision_ms": 100, "recall_message_enable": True}) as d:
        yield d


def topic_of(dep: Deployment, prefix: str, queues: int = 2) -> str:
    topic = f"{prefix}{uuid.uuid4().hex[:6]}"
    AdminClient(dep).create_topic(topic, read_queue_nums=queues, write_queue_nums=queues)
    return topic


def messages(dep: Deployment, topic: str) -> list[dict[str, Any]]:
    """Every message of `topic` on every broker, as the brokers' pull reads them."""
    out = []
    for broker in dep.brokers.values():
        for q in range(2):
            for m in pull_all(broker, topic, q)["messages"]:
                out.append(m | {"broker": ray.get(broker.get_runtime_info.remote())["broker_name"], "queue": q})
    return out


def props(m: dict[str, Any]) -> dict[str, str]:
    p = m.get("properties") or {}
    if isinstance(p, str):
        from namesrv.protocol.message.properties import string_to_properties
        return string_to_properties(p)
    return dict(p)


def test_normal_fifo_and_delayed_sends_land_on_the_brokers(dep: Deployment, tmp_path: Path) -> None:
    topic = topic_of(dep, "Rmq5Send")
    actions: list[dict[str, Any]] = [
        {"op": "send", "body": f"n{i}", "tag": "TagA", "keys": [f"k{i}"], "properties": {"color": "red"}}
        for i in range(4)]
    actions += [{"op": "send", "body": f"f{i}", "group": "order-7"} for i in range(5)]
    actions += [{"op": "send", "body": "late", "delay_s": 2}]
    t0 = time.time()
    results = run_client(dep, topic, actions, tmp_path)
    assert [r for r in results if not r["ok"]] == []
    wait_until(lambda: len(messages(dep, topic)) == 10, 30, "all ten sends readable (the delayed one after its time)")
    stored = {m["body"]: m for m in messages(dep, topic)}
    # normal: tag, keys, user property and the client's message id arrive as the remoting properties
    n0 = props(stored[b"n0"])
    assert (n0["TAGS"], n0["KEYS"], n0["color"]) == ("TagA", "k0", "red")
    assert n0["UNIQ_KEY"] == results[0]["message_id"]
    assert len({(stored[f"n{i}".encode()]["broker"], stored[f"n{i}".encode()]["queue"]) for i in range(4)}) > 1, \
        "normal sends spread over the queues"
    # FIFO: one message group, one queue, in send order
    fifo = [stored[f"f{i}".encode()] for i in range(5)]
    assert len({(m["broker"], m["queue"]) for m in fifo}) == 1
    assert [m["queue_offset"] for m in fifo] == sorted(m["queue_offset"] for m in fifo)
    assert all(props(m)["__SHARDINGKEY"] == "order-7" for m in fifo)
    # delayed: put into its topic by the broker's timer at its delivery time: int(now) + 2 s, taken
    # by the driver at most a second before the client stamps born_timestamp (whole seconds too)
    late = stored[b"late"]
    assert late["born_timestamp"] >= int(t0) * 1000
    assert late["store_timestamp"] >= late["born_timestamp"] + 1000


def test_transactions_commit_rollback_and_orphan_check_back(dep: Deployment, tmp_path: Path) -> None:
    topic = topic_of(dep, "Rmq5Tx")
    transactions_with_an_orphan(endpoint(dep), topic, tmp_path,
                                lambda: sorted(m["body"] for m in messages(dep, topic)) == [b"commit", b"orphan"])
    status = ray.get(next(iter(dep.proxies.values())).get_status.remote())
    assert status["check_backs"] >= 1


def test_settings_answer_the_clients_on_telemetry(dep: Deployment) -> None:
    topic = topic_of(dep, "Rmq5Tel")
    settings = P.new("Settings")
    json_format.ParseDict({"client_type": "PRODUCER", "publishing": {"topics": [{"name": topic}]},
                           "request_timeout": "3s"}, settings)
    call = stub(dep, "Telemetry", "stream_stream")(iter([P.new("TelemetryCommand", settings=settings)]),
                                                   metadata=(("x-mq-client-id", "test-client-1"),), timeout=10)
    first = next(iter(call))
    assert code_name(first.status) == "OK"
    s = first.settings
    assert s.publishing.max_body_size == 4 * 1024 * 1024
    assert s.backoff_policy.max_attempts == 3
    assert s.backoff_policy.exponential_backoff.initial.ToMilliseconds() == 10
    assert [t.name for t in s.publishing.topics] == [topic]
    consumer = P.new("Settings")
    json_format.ParseDict({"client_type": "SIMPLE_CONSUMER", "subscription": {"group": {"name": "G1"}}}, consumer)
    answer = next(iter(stub(dep, "Telemetry", "stream_stream")(
        iter([P.new("TelemetryCommand", settings=consumer)]), metadata=(("x-mq-client-id", "c2"),), timeout=10)))
    sub = answer.settings.subscription
    assert (sub.receive_batch_size, sub.long_polling_timeout.seconds, sub.fifo) == (32, 20, False)
    assert answer.settings.backoff_policy.max_attempts == 17
    no_id = next(iter(stub(dep, "Telemetry", "stream_stream")(
        iter([P.new("TelemetryCommand", settings=consumer)]), timeout=10)))
    assert code_name(no_id.status) == "CLIENT_ID_REQUIRED"


def test_route_assignment_and_consumption_status(dep: Deployment) -> None:
    topic = topic_of(dep, "Rmq5Route")
    route = stub(dep, "QueryRoute")(P.new("QueryRouteRequest", topic={"name": topic}), timeout=10)
    assert code_name(route.status) == "OK"
    assert len(route.message_queues) == 4  # two brokers x two read-write queues
    host, port = endpoint(dep).rsplit(":", 1)
    assert {(a.host, a.port) for q in route.message_queues for a in q.broker.endpoints.addresses} == {(host, int(port))}
    dialled = {"scheme": P.enum("AddressScheme", "DOMAIN_NAME"), "addresses": [{"host": "localhost", "port": 1}]}
    named = stub(dep, "QueryRoute")(P.new("QueryRouteRequest", topic={"name": topic}, endpoints=dialled), timeout=10)
    assert {(a.host, a.port) for q in named.message_queues for a in q.broker.endpoints.addresses} == \
        {("localhost", int(port))}, "the host the client dialled, at the proxy's port (RouteActivity)"
    missing = stub(dep, "QueryRoute")(P.new("QueryRouteRequest", topic={"name": "NoSuchTopic42"}), timeout=10)
    assert code_name(missing.status) == "TOPIC_NOT_FOUND"
    assignment = stub(dep, "QueryAssignment")(P.new("QueryAssignmentRequest", topic={"name": topic},
                                                    group={"name": "G1"}), timeout=10)
    assert code_name(assignment.status) == "OK"
    assert sorted((a.message_queue.broker.name, a.message_queue.id) for a in assignment.assignments) == \
        [("broker-a", -1), ("broker-b", -1)]
    receive = list(stub(dep, "ReceiveMessage", "unary_stream")(P.new("ReceiveMessageRequest", group={"name": "G1"}),
                                                              timeout=10))
    assert [code_name(r.status) for r in receive] == ["ILLEGAL_TOPIC"]
    ack = stub(dep, "AckMessage")(P.new("AckMessageRequest", topic={"name": topic}), timeout=10)
    assert code_name(ack.status) == "ILLEGAL_CONSUMER_GROUP"
    pull = list(stub(dep, "PullMessage", "unary_stream")(P.new("PullMessageRequest"), timeout=10))
    assert [code_name(r.status) for r in pull] == ["NOT_IMPLEMENTED"]
    proxies = AdminClient(dep).status()["proxies"]  # what `namesrv status` lists
    assert [p["endpoint"] for p in proxies.values()] == [endpoint(dep)]
    assert proxies["proxy-0"]["calls"]["QueryRoute"] >= 2


def test_an_unknown_rpc_gets_unimplemented(dep: Deployment) -> None:
    channel = grpc.insecure_channel(endpoint(dep))
    call = channel.unary_unary(f"/{SERVICE}/NoSuchMethod", request_serializer=lambda b: b,
                               response_deserializer=lambda b: b)
    with pytest.raises(grpc.RpcError) as e:
        call(b"", timeout=10)
    assert e.value.code() == grpc.StatusCode.UNIMPLEMENTED


def _send(dep: Deployment, topic: str, body: bytes, **system: Any) -> Any:
    msg = P.new("Message")
    json_format.ParseDict({"topic": {"name": topic}, "system_properties": {"message_id": uuid.uuid4().hex,
                                                                          "message_type": "NORMAL", **system}}, msg)
    msg.body = body
    return stub(dep, "SendMessage")(P.new("SendMessageRequest", messages=[msg]), timeout=10)


def test_bad_sends_get_the_proxys_codes_and_send_nothing(dep: Deployment) -> None:
    topic = topic_of(dep, "Rmq5Bad")
    cases = [
        (_send(dep, "", b"x"), "ILLEGAL_TOPIC"),
        (_send(dep, "bad topic!", b"x"), "ILLEGAL_TOPIC"),
        (_send(dep, "RMQ_SYS_TRANS_HALF_TOPIC", b"x"), "ILLEGAL_TOPIC"),
        (_send(dep, topic, b"x" * (4 * 1024 * 1024 + 1)), "MESSAGE_BODY_TOO_LARGE"),
        (_send(dep, topic, b""), "MESSAGE_BODY_EMPTY"),
        (_send(dep, topic, b"x", tag="a|b"), "ILLEGAL_MESSAGE_TAG"),
        (_send(dep, topic, b"x", message_id=""), "ILLEGAL_MESSAGE_ID"),
        (_send(dep, topic, b"x", delivery_timestamp="2199-01-01T00:00:00Z"), "ILLEGAL_DELIVERY_TIME"),
        (stub(dep, "SendMessage")(P.new("SendMessageRequest"), timeout=10), "MESSAGE_CORRUPTED"),
        (stub(dep, "EndTransaction")(P.new("EndTransactionRequest", topic={"name": topic},
                                           transaction_id="not-ours"), timeout=10), "INVALID_TRANSACTION_ID"),
    ]
    assert [code_name(r.status) for r, _ in cases] == [want for _, want in cases]
    assert messages(dep, topic) == [], "nothing refused reached a broker"
    ok = _send(dep, topic, b"fine")
    assert code_name(ok.status) == "OK" and len(messages(dep, topic)) == 1


def test_a_killed_proxy_is_restarted_and_serves_the_same_endpoint(dep: Deployment, tmp_path: Path) -> None:
    topic = topic_of(dep, "Rmq5Restart")
    handle = next(iter(dep.proxies.values()))
    pid = ray.get(handle.get_status.remote())["pid"]
    ray.kill(handle, no_restart=False)
    wait_until(lambda: not psutil.pid_exists(pid), 30, "the killed proxy's process gone")

    def answers() -> bool:
        try:
            return code_name(stub(dep, "QueryRoute")(P.new("QueryRouteRequest", topic={"name": topic}),
                                                     timeout=2).status) == "OK"
        except grpc.RpcError:
            return False

    wait_until(answers, 60, "the restarted proxy serving its endpoint again (its constructor starts the server)")
    assert ray.get(handle.get_status.remote())["pid"] != pid
    assert [r["ok"] for r in run_client(dep, topic, [{"op": "send", "body": "after"}], tmp_path)] == [True]
    assert [m["body"] for m in messages(dep, topic)] == [b"after"]


def test_simple_consumer_receives_acks_and_gets_back_what_it_did_not_ack(dep: Deployment, tmp_path: Path) -> None:
    topic = topic_of(dep, "Rmq5Pop")
    group = f"GPop{uuid.uuid4().hex[:6]}"
    actions: list[dict[str, Any]] = [{"op": "send", "body": b, "tag": "TagA"} for b in ("a1", "a2", "a3")]
    actions += [{"op": "send", "body": "b1", "tag": "TagB"},
                {"op": "receive_until", "bodies": ["a1", "a2", "a3"], "invisible_s": 4, "ack": ["a1", "a2"]},
                # a3 was not acked: back after its 4 s, its attempt counted
                {"op": "receive_until", "bodies": ["a3"], "invisible_s": 2},
                {"op": "change", "body": "a3", "invisible_s": 1},
                {"op": "receive_until", "bodies": ["a3"], "invisible_s": 30},
                {"op": "ack", "body": "a3"},
                {"op": "drain", "for_s": 3, "invisible_s": 2}]
    results = run_client(dep, topic, actions, tmp_path, consumer={"group": group, "tag": "TagA", "await_s": 1})
    assert [r["ok"] for r in results] == [True] * len(actions), results
    first, back, changed, after_change, _, drained = results[4:]
    sent_ids = {r["body"]: r["message_id"] for r in results[:4]}
    got: dict[str, Any] = {}
    for r in first["received"]:
        got.setdefault(r["body"], r)  # the first delivery of each (a loaded machine may see one again)
    assert set(got) == {"a1", "a2", "a3"}, "the TAG filter passed through: b1 (TagB) not received"
    assert [(r["attempt"], r["tag"], r["message_id"]) for r in got.values()] == \
        [(1, "TagA", sent_ids[b]) for b in got]
    handle = got["a3"]["handle"].split(" ")
    assert len(handle) == 9 and handle[4] == "0" and handle[5] in ("broker-a", "broker-b"), \
        "ReceiptHandle form: extraInfo + commit-log offset, naming the broker"
    assert [r["body"] for r in back["received"]] == ["a3"] and back["received"][0]["attempt"] >= 2
    assert changed["new_handle"] != changed["old_handle"]
    assert [(r["body"], r["attempt"]) for r in after_change["received"]] == \
        [("a3", back["received"][0]["attempt"] + 1)], "changed to 1 s, a3 came back again"
    assert drained["received"] == [], "acked messages are not received again (nor b1, filtered out)"
    # a handle that does not parse, an old one (changed since), one forged onto another broker:
    # refused, and nothing acked behind them
    ack = stub(dep, "AckMessage")
    bad = ack(P.new("AckMessageRequest", group={"name": group}, topic={"name": topic}, entries=[
        {"message_id": "m", "receipt_handle": "not a handle"},
        {"message_id": "m", "receipt_handle": changed["old_handle"]}]), timeout=10)
    assert [code_name(e.status) for e in bad.entries] == ["INVALID_RECEIPT_HANDLE"] * 2
    assert code_name(bad.status) == "INVALID_RECEIPT_HANDLE"
    forged = changed["new_handle"].split(" ")
    forged[5] = "no-such-broker"
    change = stub(dep, "ChangeInvisibleDuration")(P.new(
        "ChangeInvisibleDurationRequest", group={"name": group}, topic={"name": topic},
        receipt_handle=" ".join(forged), invisible_duration={"seconds": 5}), timeout=10)
    assert code_name(change.status) == "INVALID_RECEIPT_HANDLE"
    status = ray.get(next(iter(dep.proxies.values())).get_status.remote())
    assert status["received"] >= 5 and status["acked"] >= 3


def test_receive_refusals_and_dead_letter_forwarding(dep: Deployment) -> None:
    topic = topic_of(dep, "Rmq5Dlq")
    group = f"GDlq{uuid.uuid4().hex[:6]}"
    receive = stub(dep, "ReceiveMessage", "unary_stream")

    def rcv(**fields: Any) -> list[Any]:
        req = P.new("ReceiveMessageRequest")
        json_format.ParseDict({"group": {"name": group}, "message_queue": {"topic": {"name": topic}},
                               "batch_size": 8, "invisible_duration": "5s", "long_polling_timeout": "1s"} | fields,
                              req)
        return list(receive(req, timeout=15))

    assert [code_name(r.status) for r in rcv(invisible_duration="0.1s")] == ["ILLEGAL_INVISIBLE_TIME"]
    assert [code_name(r.status) for r in rcv(group={"name": "bad group"})] == ["ILLEGAL_CONSUMER_GROUP"]
    assert [code_name(r.status) for r in rcv()] == ["MESSAGE_NOT_FOUND"], "nothing there: one status"
    assert code_name(_send(dep, topic, b"doomed", tag="T").status) == "OK"
    got: list[Any] = []
    wait_until(lambda: bool(got.extend(rcv()) or any(r.HasField("message") for r in got)), 30, "the message popped")
    answers = [r.WhichOneof("content") for r in got if r.WhichOneof("content") != "status"
               or code_name(r.status) != "MESSAGE_NOT_FOUND"]
    assert answers == ["status", "message", "delivery_timestamp"]
    msg = next(r.message for r in got if r.HasField("message"))
    assert msg.body == b"doomed" and msg.system_properties.delivery_attempt == 1
    assert msg.system_properties.body_digest.checksum == hashlib.md5(b"doomed").hexdigest().upper()
    fwd = stub(dep, "ForwardMessageToDeadLetterQueue")(P.new(
        "ForwardMessageToDeadLetterQueueRequest", group={"name": group}, topic={"name": topic},
        receipt_handle=msg.system_properties.receipt_handle, message_id=msg.system_properties.message_id),
        timeout=10)
    assert code_name(fwd.status) == "OK"
    dlq = f"%DLQ%{group}"
    wait_until(lambda: b"doomed" in dlq_bodies(dep, dlq), 30, "the message in the group's DLQ")
    again = ack_one(dep, group, topic, msg)
    assert code_name(again.status) == "INVALID_RECEIPT_HANDLE", "forwarded, then acked by the proxy"


def broker_requests(dep: Deployment) -> dict[str, int]:
    return dict(ray.get(next(iter(dep.proxies.values())).get_status.remote())["broker_requests"])


def test_one_ack_of_a_received_batch_acks_it_in_one_request_per_broker(dep: Deployment) -> None:
    topic = topic_of(dep, "Rmq5Batch")
    group = f"GBatch{uuid.uuid4().hex[:6]}"
    receive = stub(dep, "ReceiveMessage", "unary_stream")

    def rcv() -> list[Any]:
        req = P.new("ReceiveMessageRequest")
        json_format.ParseDict({"group": {"name": group}, "message_queue": {"topic": {"name": topic}},
                               "batch_size": 32, "invisible_duration": "8s", "long_polling_timeout": "1s"}, req)
        return [r.message for r in receive(req, timeout=15) if r.HasField("message")]

    for i in range(17):
        assert code_name(_send(dep, topic, f"b{i}".encode(), tag="T").status) == "OK"
    got: dict[bytes, Any] = {}

    def all_received() -> bool:
        got.update((m.body, m) for m in rcv())  # the latest delivery's handle (a slow machine may see one again)
        return len(got) == 17

    wait_until(all_received, 60, "all 17 received")
    msgs = [got[f"b{i}".encode()] for i in range(17)]
    assert code_name(ack_one(dep, group, topic, msgs[16]).status) == "OK"
    expired = msgs[1].system_properties.receipt_handle.split(" ")
    expired[1] = "1000"  # popped in 1970: its invisible time long past
    entries = [{"message_id": m.system_properties.message_id, "receipt_handle": m.system_properties.receipt_handle}
               for m in [*msgs[:16], msgs[0], msgs[16]]]
    entries += [{"message_id": "junk", "receipt_handle": "not a handle"},
                {"message_id": "old", "receipt_handle": " ".join(expired)}]
    before = broker_requests(dep)
    answer = stub(dep, "AckMessage")(P.new("AckMessageRequest", group={"name": group}, topic={"name": topic},
                                           entries=entries), timeout=10)
    after = broker_requests(dep)
    assert [code_name(e.status) for e in answer.entries] == ["OK"] * 16 + ["INVALID_RECEIPT_HANDLE"] * 4
    assert [e.status.message for e in answer.entries[18:]] == [
        "receipt handle is invalid: 3 fields, expected 9", "receipt handle is expired"]
    assert answer.entries[16].status.message.startswith("no message in flight"), "the same message twice"
    assert answer.entries[17].status.message.startswith("no message in flight"), "acked before"
    assert code_name(answer.status) == "MULTIPLE_RESULTS"
    sent = {code: after.get(code, 0) - before.get(code, 0) for code in ("BATCH_ACK_MESSAGE", "ACK_MESSAGE")}
    brokers = {m.system_properties.receipt_handle.split(" ")[5] for m in msgs}
    # a BATCH_ACK per broker, the repeat of msgs[0] alone (and a broker's one message would go alone)
    assert 1 <= sent["BATCH_ACK_MESSAGE"] <= len(brokers) and sum(sent.values()) <= len(brokers) + 2, sent
    assert sum(sent.values()) < len(entries) / 4
    # acked: none comes back once their 8 s are over (received until well past them)
    due = max(int(m.system_properties.receipt_handle.split(" ")[1]) for m in msgs) / 1000 + 8 + 2
    again: list[Any] = []
    wait_until(lambda: bool(again.extend(rcv())) or time.time() > due, 60, "the invisible time over")
    assert again == [], [m.body for m in again]


def ack_one(dep: Deployment, group: str, topic: str, msg: Any) -> Any:
    return stub(dep, "AckMessage")(P.new("AckMessageRequest", group={"name": group}, topic={"name": topic}, entries=[
        {"message_id": msg.system_properties.message_id, "receipt_handle": msg.system_properties.receipt_handle}]),
        timeout=10)


def dlq_bodies(dep: Deployment, dlq: str) -> list[bytes]:
    out = []
    for b in dep.brokers.values():
        try:
            out += [m["body"] for m in pull_all(b, dlq, 0)["messages"]]
        except Exception:  # the DLQ topic exists on the forwarding broker only
            continue
    return out


def test_a_recalled_delayed_message_never_arrives(dep: Deployment) -> None:
    """RecallMessage with the handle SendMessage answered: the message is not delivered at its time,
    while the one sent beside it for the same time is; a handle that does not decode, or whose time
    has passed, is refused with the proxy's status and the broker's reason."""
    import datetime

    topic = topic_of(dep, "Rmq5Recall")
    due = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=3)
    batch = []
    for body in (b"kept", b"recalled"):  # one request: one queue, so one broker's timers
        msg = P.new("Message")
        json_format.ParseDict({"topic": {"name": topic}, "system_properties": {
            "message_id": uuid.uuid4().hex, "message_type": "DELAY",
            "delivery_timestamp": due.isoformat(timespec="milliseconds").replace("+00:00", "Z")}}, msg)
        msg.body = body
        batch.append(msg)
    sent = stub(dep, "SendMessage")(P.new("SendMessageRequest", messages=batch), timeout=10)
    assert code_name(sent.status) == "OK", sent
    kept, recalled = sent.entries
    assert kept.recall_handle and recalled.recall_handle and kept.recall_handle != recalled.recall_handle
    recall = stub(dep, "RecallMessage")
    answer = recall(P.new("RecallMessageRequest", topic={"name": topic}, recall_handle=recalled.recall_handle),
                    timeout=10)
    assert code_name(answer.status) == "OK" and answer.message_id == recalled.message_id, answer
    bad = recall(P.new("RecallMessageRequest", topic={"name": topic}, recall_handle="garbage"), timeout=10)
    assert (code_name(bad.status), bad.status.message) == ("INTERNAL_SERVER_ERROR", "recall handle is invalid")
    wait_until(lambda: [m["body"] for m in messages(dep, topic)] == [b"kept"], 30, "the kept one at its time")
    assert [m["body"] for m in messages(dep, topic)] == [b"kept"], "the recalled one, due in the same pass, is not"
    late = recall(P.new("RecallMessageRequest", topic={"name": topic}, recall_handle=kept.recall_handle), timeout=10)
    assert code_name(late.status) == "INTERNAL_SERVER_ERROR" and "timestamp invalid" in late.status.message


def test_a_fifo_group_receives_its_message_group_in_order_one_batch_at_a_time(dep: Deployment,
                                                                             tmp_path: Path) -> None:
    """consumeMessageOrderly: Settings say FIFO, assignments are per queue, and a pop is orderly: while
    a batch is in flight its queue gives nothing more, and a lapsed batch comes again first, in order,
    its attempts counted by the broker."""
    topic = topic_of(dep, "Rmq5Fifo")
    group = f"GFifo{uuid.uuid4().hex[:6]}"
    admin = AdminClient(dep)
    for addr in dep.brokers:
        admin.create_and_update_subscription_group_config(
            addr, SubscriptionGroupConfig(group_name=group, consume_message_orderly=True, retry_max_times=3))
    settings = P.new("Settings", client_type=P.enum("ClientType", "SIMPLE_CONSUMER"))
    settings.subscription.group.name = group
    settings.subscription.subscriptions.add().topic.name = topic
    answer = next(iter(stub(dep, "Telemetry", "stream_stream")(
        iter([P.new("TelemetryCommand", settings=settings)]), metadata=(("x-mq-client-id", "fifo-1"),), timeout=30)))
    assert (answer.settings.subscription.fifo, answer.settings.backoff_policy.max_attempts) == (True, 4)
    query = P.new("QueryAssignmentRequest")
    query.topic.name, query.group.name = topic, group
    assigned = stub(dep, "QueryAssignment")(query, timeout=30)
    assert sorted(a.message_queue.id for a in assigned.assignments) == [0, 0, 1, 1], "each queue of both brokers"

    actions: list[dict[str, Any]] = [{"op": "send", "body": f"f{i}", "group": "order-7"} for i in range(3)]
    actions += [{"op": "receive_until", "bodies": ["f0", "f1", "f2"], "invisible_s": 10},
                {"op": "send", "body": "f3", "group": "order-7"},
                {"op": "drain", "for_s": 1.5, "invisible_s": 30},  # the batch is in flight: its queue is held
                {"op": "receive_until", "bodies": ["f0", "f1", "f2", "f3"], "invisible_s": 30,
                 "ack": ["f0", "f1", "f2", "f3"], "timeout_s": 40},
                {"op": "drain", "for_s": 1, "invisible_s": 30}]
    results = run_client(dep, topic, actions, tmp_path, consumer={"group": group, "await_s": 1})
    assert [r["ok"] for r in results] == [True] * len(actions), results
    first, _, held, again, rest = results[3:]
    assert [(r["body"], r["attempt"]) for r in first["received"]] == [("f0", 1), ("f1", 1), ("f2", 1)]
    assert held["received"] == [], "nothing of the queue while its batch is in flight"
    assert [(r["body"], r["attempt"]) for r in again["received"]] == [("f0", 2), ("f1", 2), ("f2", 2), ("f3", 1)]
    assert rest["received"] == []


def test_a_push_consumers_failed_message_is_retried_then_dead_lettered(dep: Deployment, tmp_path: Path) -> None:
    """RECONSUME_LATER: the client changes the invisible time by the group's back-off (1 s, then 5 s),
    the broker revives the message into the retry topic (attempt 2), and past the group's
    retryMaxTimes (1) into %DLQ%group; the message the listener consumed is delivered once."""
    topic = topic_of(dep, "Rmq5Push")
    group = f"GPush{uuid.uuid4().hex[:6]}"
    admin = AdminClient(dep)
    for addr in dep.brokers:
        admin.create_and_update_subscription_group_config(addr, SubscriptionGroupConfig(group_name=group,
                                                                                        retry_max_times=1))
    actions: list[dict[str, Any]] = [{"op": "send", "body": "poison"}, {"op": "send", "body": "fine"},
                                     {"op": "push", "group": group, "fail": ["poison"],
                                      "until": {"poison": 2, "fine": 1}, "timeout_s": 60}]
    results = run_client(dep, topic, actions, tmp_path)
    assert [r["ok"] for r in results] == [True] * len(actions), results
    deliveries = results[2]["deliveries"]
    assert [d["attempt"] for d in deliveries if d["body"] == "poison"][:2] == [1, 2]
    assert [d["attempt"] for d in deliveries if d["body"] == "fine"] == [1]
    dlq = f"%DLQ%{group}"

    def dead_lettered() -> list[str]:
        return [m["body"] if isinstance(m["body"], str) else m["body"].decode()
                for broker in dep.brokers.values() for m in pull_all(broker, dlq, 0)["messages"]]
    wait_until(lambda: dead_lettered() == ["poison"], 60, "the twice-failed message in the group's DLQ")


def test_a_broker_killed_mid_stream_loses_nothing_the_client_saw_acknowledged(dep: Deployment,
                                                                              tmp_path: Path) -> None:
    """ray.kill of broker-a (its process ends at once, Ray starts it again from its store) while the
    official producer streams sends through the proxy: the client retries elsewhere, the stream goes
    on, and every send it saw acknowledged is on a broker afterwards."""
    topic = topic_of(dep, "Rmq5Kill")
    victim = next(h for h in dep.brokers.values() if ray.get(h.get_runtime_info.remote())["broker_name"] == "broker-a")
    proxy = next(iter(dep.proxies.values()))
    before = ray.get(proxy.get_status.remote())["sent"]
    results = sends_through_a_kill(endpoint(dep), topic, 300, tmp_path,
                                   lambda: ray.get(proxy.get_status.remote())["sent"] - before >= 60,
                                   lambda: ray.kill(victim, no_restart=False))
    acked = {r["message_id"] for r in results if r["ok"]}
    assert results[-1]["ok"] and len(acked) >= len(results) // 2, "the stream went on past the kill"
    mend(dep)
    stored = {props(m).get("UNIQ_KEY") for m in messages(dep, topic)}
    assert acked <= stored, f"{len(acked - stored)} acknowledged sends lost"


UNARY = sorted(name for name, (_, _, client_stream, server_stream) in P.methods().items()
               if not client_stream and not server_stream)


@given(st.sampled_from(UNARY), st.binary(max_size=512))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_any_bytes_to_any_rpc_get_a_status_and_the_proxy_serves_on(dep: Deployment, method: str, data: bytes) -> None:
    """The servicer boundary fuzzed: every call is answered with a v2 status (BAD_REQUEST "the request
    is not a valid ..." for bytes that do not parse), and the proxy answers the next call."""
    _, resp_cls, _, _ = P.methods()[method]
    channel = grpc.insecure_channel(endpoint(dep))
    call = channel.unary_unary(f"/{SERVICE}/{method}", request_serializer=lambda b: b,
                               response_deserializer=resp_cls.FromString)
    try:
        answer = call(data, timeout=30)
    finally:
        channel.close()
    assert answer.HasField("status") and answer.status.code != 0, (method, answer)
    req_cls = P.methods()[method][0]
    try:
        req_cls.FromString(data)
    except DecodeError:
        if method in NOT_BUILT:  # an RPC the proxy does not serve says so first
            assert code_name(answer.status) == "NOT_IMPLEMENTED", answer
            return
        assert code_name(answer.status) == "BAD_REQUEST", answer
        assert f"the request is not a valid {req_cls.DESCRIPTOR.name}" in answer.status.message, answer
    alive = stub(dep, "QueryRoute")(P.new("QueryRouteRequest", topic={"name": "Absent"}), timeout=30)
    assert code_name(alive.status) in ("TOPIC_NOT_FOUND", "OK")


def test_a_push_consumers_slow_listener_keeps_its_message_while_the_proxy_renews_it(dep: Deployment,
                                                                                   tmp_path: Path) -> None:
    """auto_renew: popped for 3 s here and renewed 1.5 s ahead, a message whose listener takes 8 s is
    delivered once (without renewal it would come back at 3 s), and once acked it never comes again."""
    topic = topic_of(dep, "Rmq5Slow")
    group = f"GSlow{uuid.uuid4().hex[:6]}"
    proxy = next(iter(dep.proxies.values()))
    before = ray.get(proxy.get_status.remote())["renewed"]
    actions: list[dict[str, Any]] = [{"op": "send", "body": "slow"}, {"op": "send", "body": "quick"},
                                     {"op": "push", "group": group, "until": {"slow": 1, "quick": 1},
                                      "slow": {"slow": 8}, "linger_s": 4, "timeout_s": 60}]
    results = run_client(dep, topic, actions, tmp_path)
    assert [r["ok"] for r in results] == [True] * len(actions), results
    deliveries = results[2]["deliveries"]
    assert sorted((d["body"], d["attempt"]) for d in deliveries) == [("quick", 1), ("slow", 1)], deliveries
    status = ray.get(proxy.get_status.remote())
    assert status["renewed"] - before >= 2, "renewed while the listener ran"
    wait_until(lambda: ray.get(proxy.get_status.remote())["held_for_renewal"] == 0, 30,
               "nothing held once acked and the client gone")
