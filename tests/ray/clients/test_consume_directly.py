"""CONSUME_MESSAGE_DIRECTLY (309) end to end on a local Ray over TCP: the admin (its API, and mqadmin
queryMsgById -g -d over TCP and over Ray) asks the broker that stores a message, the broker hands it
down a PushConsumer's own connection, the member's listener runs once on it and its answer comes
back as a ConsumeMessageDirectlyResult; nothing is committed and nothing sent back. An orderly
member answers with order=true; a lite pull member, an unknown client and a bad id are refused.

One deployment for the module (a NameServer and a broker on free ports); each test has its own
topic and group."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from actors.deployment.launcher import Deployment
from actors.deployment.spec import BrokerSpec
from clients.admin.brokers import MQAdminError
from clients.admin.client import AdminClient, DefaultMQAdminExt
from clients.cli.main import main as namesrv_main
from clients.consumer.lite_pull_consumer import LitePullConsumer
from clients.consumer.push_consumer import (
    ConsumeConcurrentlyStatus,
    ConsumeContext,
    ConsumeOrderlyStatus,
    MessageExt,
    PushConsumer,
)
from clients.producer.producer import Message, Producer
from namesrv.client.offsets import ReadOffsetType
from namesrv.common.waiting import wait_until
from namesrv.protocol.consume_directly import CMResult
from tests.support.consumer import committed
from tests.support.mqadmin import fails, ok, tcp, tcp_json
from tests.support.ray_cluster import registered_deployment

FAST = {"rebalance_interval_ms": 600_000, "consume_thread_max": 2, "consume_thread_min": 1,
        "broker_suspend_max_time_ms": 2_000, "persist_consumer_offset_interval_ms": 500,
        "consume_from_where": "CONSUME_FROM_FIRST_OFFSET"}


@pytest.fixture(scope="module")
def dep(ray_local: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    with registered_deployment(tmp_path_factory.mktemp("direct"), brokers=[BrokerSpec("broker-a")], namesrv_count=1,
                               broker_port=0) as d:
        yield d


@pytest.fixture(scope="module")
def producer(dep: Deployment) -> Iterator[Producer]:
    with Producer("direct_test_producer", namesrv=list(dep.namesrvs), namespace=dep.spec.namespace) as p:
        yield p


@pytest.fixture(scope="module")
def admin(dep: Deployment) -> Iterator[DefaultMQAdminExt]:
    with DefaultMQAdminExt.over_tcp(dep.namesrv_addr()) as a:
        yield a


class Seen:
    """Every message a listener was given, and what it answers next (changeable)."""

    def __init__(self, answer: Any) -> None:
        self.cv = threading.Condition()
        self.bodies: list[bytes] = []
        self.msgs: list[MessageExt] = []
        self.answer = answer

    def __call__(self, msgs: list[MessageExt], ctx: ConsumeContext) -> Any:
        with self.cv:
            self.bodies.extend(m.body for m in msgs)
            self.msgs.extend(msgs)
            self.cv.notify_all()
        return self.answer

    def count(self, body: bytes) -> int:
        with self.cv:
            return self.bodies.count(body)

    def wait(self, test: Callable[[], bool], what: str) -> None:
        with self.cv:
            assert self.cv.wait_for(test, 30), what


def new_topic(dep: Deployment) -> str:
    topic = f"Direct_{uuid.uuid4().hex[:8]}"
    AdminClient(dep).create_topic(topic, read_queue_nums=2, write_queue_nums=2)
    return topic


def member(dep: Deployment, group: str, topic: str, listener: Seen, orderly: bool = False) -> PushConsumer:
    c = PushConsumer(group, namesrv=list(dep.namesrvs), namespace=dep.spec.namespace, **FAST)
    c.subscribe(topic, "*")
    if orderly:
        c.register_message_listener_orderly(listener)
    else:
        c.register_message_listener(listener)
    return c.start()


def test_the_listener_runs_once_on_the_message_and_nothing_is_committed_or_sent_back(
        dep: Deployment, producer: Producer, admin: DefaultMQAdminExt, capsys: pytest.CaptureFixture[str]) -> None:
    topic, group = new_topic(dep), f"CG_direct_{uuid.uuid4().hex[:6]}"
    seen = Seen(ConsumeConcurrentlyStatus.CONSUME_SUCCESS)
    c = member(dep, group, topic, seen)
    try:
        sent = producer.send(Message(topic, b"direct-1"))
        seen.wait(lambda: seen.bodies == [b"direct-1"], "the message consumed as usual, once")
        wait_until(lambda: committed(dep, group, topic) == 1, 20, "its offset committed")
        mq = sent.message_queue
        in_memory = c.core.offset_store.read_offset(mq, ReadOffsetType.READ_FROM_MEMORY)
        stats = c.stats()

        result = admin.consume_message_directly(group, c.client_id, sent.offset_msg_id)

        assert (result.consume_result, result.order, result.auto_commit) == (CMResult.CR_SUCCESS, False, True)
        assert result.spent_time_mills >= 0 and result.remark is None
        assert seen.count(b"direct-1") == 2, "the listener ran once more, before the answer"
        direct = seen.msgs[-1]
        assert (direct.topic, direct.queue_id, direct.msg_id) == (topic, mq.queue_id, sent.offset_msg_id)
        seen.answer = ConsumeConcurrentlyStatus.RECONSUME_LATER
        later = admin.consume_message_directly(group, c.client_id, sent.msg_id, topic)  # a client message id
        assert later.consume_result is CMResult.CR_LATER and seen.count(b"direct-1") == 3
        assert c.core.offset_store.read_offset(mq, ReadOffsetType.READ_FROM_MEMORY) == in_memory
        assert committed(dep, group, topic) == 1, "the group's offset is where it was"
        assert {k: c.stats()[k] for k in ("consume_ok", "consume_failed", "sent_back")} == {
            k: stats[k] for k in ("consume_ok", "consume_failed", "sent_back")}, "no send-back, no consume counted"

        with pytest.raises(MQAdminError, match=f"The Consumer <{group}> <nobody@x> not online"):
            admin.consume_message_directly(group, "nobody@x", sent.offset_msg_id)
        with pytest.raises(MQAdminError, match="give the topic"):
            admin.consume_message_directly(group, c.client_id, "not-an-id")
        assert seen.count(b"direct-1") == 3, "a refused request runs nothing"

        # mqadmin queryMsgById -g -d: over TCP (a subprocess, JSON and text) and over Ray (this driver)
        addr = dep.namesrv_addr()
        [row] = tcp_json(addr, "queryMsgById", "-i", sent.offset_msg_id, "-g", group, "-d", c.client_id)
        assert (row["msgId"], row["consumeResult"], row["order"]) == (sent.offset_msg_id, "CR_LATER", False)
        seen.answer = ConsumeConcurrentlyStatus.CONSUME_SUCCESS
        capsys.readouterr()
        assert namesrv_main(["queryMsgById", "-i", sent.offset_msg_id, "-g", group, "-d", c.client_id,
                             "--namespace", dep.spec.namespace]) == 0
        assert capsys.readouterr().out.startswith(
            "ConsumeMessageDirectlyResult [order=false, autoCommit=true, consumeResult=CR_SUCCESS, remark=null, "
            "spentTimeMills=")
        fails(tcp(addr, "queryMsgById", "-i", sent.offset_msg_id, "-g", group, "-d", "nobody@x"), 1, "not online")
        fails(tcp(addr, "queryMsgById", "-i", sent.offset_msg_id, "-g", group), 1, "give both")
        assert "Message Body:        direct-1" in ok(tcp(addr, "queryMsgById", "-i", sent.offset_msg_id))
        assert seen.count(b"direct-1") == 5 and committed(dep, group, topic) == 1
    finally:
        c.shutdown()


def test_an_orderly_member_answers_in_order_and_a_listener_answering_nothing_is_return_null(
        dep: Deployment, producer: Producer, admin: DefaultMQAdminExt) -> None:
    topic, group = new_topic(dep), f"CG_direct_ord_{uuid.uuid4().hex[:6]}"
    seen = Seen(ConsumeOrderlyStatus.SUCCESS)
    c = member(dep, group, topic, seen, orderly=True)
    try:
        sent = producer.send(Message(topic, b"ordered"))
        seen.wait(lambda: seen.bodies == [b"ordered"], "the message consumed as usual")
        result = admin.consume_message_directly(group, c.client_id, sent.offset_msg_id)
        assert (result.consume_result, result.order) == (CMResult.CR_SUCCESS, True)
        seen.answer = ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
        assert admin.consume_message_directly(group, c.client_id, sent.offset_msg_id).consume_result is \
            CMResult.CR_LATER
        seen.answer = None
        assert admin.consume_message_directly(group, c.client_id, sent.offset_msg_id).consume_result is \
            CMResult.CR_RETURN_NULL
        assert seen.count(b"ordered") == 4
    finally:
        c.shutdown()


def test_a_lite_pull_member_says_the_group_is_not_in_it(dep: Deployment, producer: Producer,
                                                       admin: DefaultMQAdminExt) -> None:
    topic, group = new_topic(dep), f"CG_direct_lite_{uuid.uuid4().hex[:6]}"
    sent = producer.send(Message(topic, b"pulled"))
    lite = LitePullConsumer(group, namesrv=list(dep.namesrvs), namespace=dep.spec.namespace,
                            consume_from_where="CONSUME_FROM_FIRST_OFFSET")
    lite.subscribe(topic, "*")
    lite.start()
    try:
        with pytest.raises(MQAdminError, match=f"The Consumer Group <{group}> not exist in this consumer"):
            admin.consume_message_directly(group, lite.core.client_id, sent.offset_msg_id)
    finally:
        lite.shutdown()
