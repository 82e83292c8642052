"""The producer's batch sends, body compression and RocketMQ namespace against a real broker on Ray
over real TCP (one NameServer, broker-a on a free port; one deployment for the module): a batch is
stored as N messages from one request, an oversized one is refused (by the producer before sending,
and by the broker with MESSAGE_ILLEGAL when a client sends it anyway); a compressed body, from this
producer and from the PyPI C++ client (which deflates bodies over 4 KiB), is read plain by a TCP
pull, the Ray pull consumer and queryMsgById; a namespaced producer's topic and group are `ns%...`
on the broker and plain in its results; a request gets the reply a responder sends, pushed by the
broker down the requester's connection, or times out."""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from actors.deployment.launcher import Deployment
from actors.deployment.spec import BrokerSpec
from clients.admin.client import AdminClient, DefaultMQAdminExt
from clients.consumer.pull_consumer import PullConsumer
from clients.interop.real_client import command, parse_lines
from clients.producer.producer import Message, MQClientError, Producer
from namesrv.client.reply import RequestTimeoutError, create_reply_message
from namesrv.common.waiting import wait_until
from namesrv.protocol.codes import BrokerRequestCode as Code
from namesrv.protocol.codes import ResponseCode
from namesrv.protocol.constants import MAX_MESSAGE_SIZE
from namesrv.protocol.message.codec import BatchEntry, encode_batch
from namesrv.protocol.message.compression import COMPRESSED_FLAG
from namesrv.protocol.message.decoder import MessageExt, decode_messages
from namesrv.remoting.client import RemotingClient, parse_namesrv_addr
from tests.support.ray_cluster import registered_deployment

pytestmark = pytest.mark.timeout(300)

BODY = b"a compressible JSON-ish body, " * 600
"""18 KiB: over the 4 KiB compression threshold, deflates to a few hundred bytes."""


@pytest.fixture(scope="module")
def dep(ray_local: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    with registered_deployment(tmp_path_factory.mktemp("batch"), brokers=[BrokerSpec("broker-a")], namesrv_count=1,
                               broker_port=0) as d:
        admin = AdminClient(d)
        for topic in ("Batched", "Compressed", "FromRealClient", "ns1%Spaced", "Asked"):
            admin.create_topic(topic, read_queue_nums=2, write_queue_nums=2)
        yield d


@pytest.fixture(scope="module")
def broker(dep: Deployment) -> str:
    [only] = dep.brokers
    return only


def connect(broker: str) -> RemotingClient:
    [(host, port)] = parse_namesrv_addr(broker)
    return RemotingClient(host, port, timeout_s=10)


def pulled(broker: str, topic: str, queue_id: int, offset: int = 0) -> list[MessageExt]:
    """A PULL_MESSAGE over TCP, decoded by the one message decoder."""
    with connect(broker) as client:
        answer = client.invoke(Code.PULL_MESSAGE, {
            "consumerGroup": "BatchReader", "topic": topic, "queueId": queue_id, "queueOffset": offset,
            "maxMsgNums": 32, "sysFlag": 0, "commitOffset": 0, "suspendTimeoutMillis": 0, "subscription": "*",
            "subVersion": 0})
    assert answer.code in (ResponseCode.SUCCESS, ResponseCode.PULL_NOT_FOUND), answer.remark
    return decode_messages(answer.body or b"")


# ============================================================================ batches
def test_a_batch_is_stored_as_n_messages_from_one_request(dep: Deployment, broker: str) -> None:
    messages = [Message("Batched", f"m{i}".encode(), keys=f"k{i}") for i in range(10)]
    with Producer("BatchProducer", namespace=dep.spec.namespace) as producer:
        result = producer.send_batch(messages)
        stats = producer.stats()
    assert stats["attempts"] == 1 and result.send_status == "SEND_OK"
    ids = result.msg_id.split(",")
    assert len(ids) == 10 == len(set(ids)) and len(result.offset_msg_id.split(",")) == 10
    stored = pulled(broker, "Batched", result.message_queue.queue_id, result.queue_offset)
    assert [m.body for m in stored] == [m.body for m in messages], "one queue, in order"
    assert [m.unique_key for m in stored] == ids and [m.keys for m in stored] == [[f"k{i}"] for i in range(10)]


def test_an_oversized_batch_is_refused_by_the_producer_and_by_the_broker(dep: Deployment, broker: str) -> None:
    half = b"x" * (MAX_MESSAGE_SIZE // 2)
    with Producer("OversizedProducer", namespace=dep.spec.namespace) as producer:
        with pytest.raises(MQClientError, match=f"the message body size over max value, MAX: {MAX_MESSAGE_SIZE}"):
            producer.send_batch([Message("Batched", half), Message("Batched", half)])
        assert producer.stats().get("attempts", 0) == 0, "refused before anything was sent"
    before = [len(pulled(broker, "Batched", q)) for q in range(2)]
    body = encode_batch([BatchEntry(0, half, {"UNIQ_KEY": "a"}), BatchEntry(0, half, {"UNIQ_KEY": "b"})])
    with connect(broker) as client:  # a client that does not check: the broker refuses, as RocketMQ's
        answer = client.invoke(Code.SEND_BATCH_MESSAGE, {"producerGroup": "Raw", "topic": "Batched", "queueId": 0,
                                                         "sysFlag": 0, "bornTimestamp": 0, "flag": 0,
                                                         "batch": "true"}, body)
    assert answer.code == ResponseCode.MESSAGE_ILLEGAL and "exceeds the limit" in (answer.remark or "")
    assert [len(pulled(broker, "Batched", q)) for q in range(2)] == before, "nothing stored"


# ============================================================================ compression
def test_a_compressed_body_is_read_plain_by_every_reader(dep: Deployment, broker: str) -> None:
    with Producer("CompressingProducer", namespace=dep.spec.namespace) as producer:
        big = producer.send(Message("Compressed", BODY))
        small = producer.send(Message("Compressed", b"small"))
    [raw] = [m for m in pulled(broker, "Compressed", big.message_queue.queue_id, big.queue_offset)
             if m.queue_offset == big.queue_offset]
    assert raw.sys_flag & COMPRESSED_FLAG and raw.body == BODY, "stored deflated, decoded plain"
    with DefaultMQAdminExt.over_tcp(dep.namesrv_addr()) as admin:  # queryMsgById
        assert admin.view_message(big.offset_msg_id).body == BODY
        assert admin.view_message(small.offset_msg_id).sys_flag & COMPRESSED_FLAG == 0
    read = PullConsumer(dep.spec.namespace, list(dep.namesrvs)).consume_all("Compressed")  # over Ray
    assert sorted(m.body for m in read) == sorted([BODY, b"small"])


def test_a_body_the_real_cpp_client_compressed_is_read_plain(dep: Deployment, broker: str) -> None:
    out = subprocess.run(command("produce", dep.namesrv_addr(), "FromRealClient", "2", "--body-size", "8192",
                                 "--prefix", "cpp"), capture_output=True, text=True, timeout=120)
    sends, done = parse_lines(out.stdout)
    assert done is not None and done["sent"] == 2, (out.stdout[-2000:], out.stderr[-2000:])
    bodies = {s["body"].encode() for s in sends}
    stored = [m for q in range(2) for m in pulled(broker, "FromRealClient", q)]
    assert {m.body for m in stored} == bodies and all(m.sys_flag & COMPRESSED_FLAG for m in stored), \
        "the C++ client deflated them; read plain"
    read = PullConsumer(dep.spec.namespace, list(dep.namesrvs)).consume_all("FromRealClient")
    assert {m.body for m in read} == bodies


# ============================================================================ namespaces
def test_a_namespaced_producer_sends_to_ns_topics_and_sees_plain_names(dep: Deployment, broker: str) -> None:
    with Producer("SpacedProducer", namespace=dep.spec.namespace, rocketmq_namespace="ns1") as producer:
        result = producer.send(Message("Spaced", b"in ns1"))
        batch = producer.send_batch([Message("Spaced", b"b1"), Message("Spaced", b"b2")])
        with DefaultMQAdminExt.over_tcp(dep.namesrv_addr()) as admin:
            conns = admin.examine_producer_connection_info(broker, "ns1%SpacedProducer").connection_set
    assert result.message_queue.topic == batch.message_queue.topic == "Spaced"
    stored: list[Any] = [m for q in range(2) for m in pulled(broker, "ns1%Spaced", q)]
    assert sorted(m.body for m in stored) == [b"b1", b"b2", b"in ns1"] and {m.topic for m in stored} == {"ns1%Spaced"}
    assert len(conns) == 1


# ============================================================================ request-reply
def test_a_request_gets_the_reply_its_responder_sends(dep: Deployment, broker: str) -> None:
    replies: list[Any] = []
    with Producer("Requester", namespace=dep.spec.namespace) as requester, \
            Producer("Responder", namespace=dep.spec.namespace) as responder:
        asking = threading.Thread(target=lambda: replies.append(
            requester.request(Message("Asked", b"what is 6 x 7?"), timeout_ms=15_000)))
        asking.start()
        found: list[MessageExt] = []
        wait_until(lambda: bool(found.extend(m for q in range(2) for m in pulled(broker, "Asked", q)) or found),
                   15, "the request stored")
        [question] = found
        assert question.properties["REPLY_TO_CLIENT"] and question.properties["CLUSTER"] == "DefaultCluster"
        sent = responder.send(create_reply_message(question.properties, b"42"))
        assert sent.send_status == "SEND_OK"
        asking.join(15)
        with pytest.raises(RequestTimeoutError, match="but wait reply message timeout, 300 ms"):
            requester.request(Message("Asked", b"nobody answers this"), timeout_ms=300)
    [reply] = replies
    assert reply.body == b"42" and reply.topic == "DefaultCluster_REPLY_TOPIC"
    assert reply.properties["CORRELATION_ID"] == question.properties["CORRELATION_ID"]
