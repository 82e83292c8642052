"""PushConsumer and LitePullConsumer against real brokers on a local Ray over TCP (issue 34, the
consumer side): a group's
members share a topic's queues without overlap, a member leaving or joining moves queues at once (the
broker's NOTIFY_CONSUMER_IDS_CHANGED; the rebalance timer is set far off, so only the notice can
do it), offsets live on the broker and survive a restart, a failed message comes back with back-off
and then lands in %DLQ%group, an orderly listener sees each queue in order through a rebalance, and
bad settings are refused before anything connects; lite pull members share the queues and auto
commit, or poll assigned queues, seek and commit_sync.

One deployment for the module (a NameServer, two brokers on free ports, every retry delay level 1 s);
each test has its own topic and group."""

from __future__ import annotations

import itertools
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from actors.deployment.launcher import Deployment
from actors.deployment.spec import BrokerSpec
from clients.admin.client import AdminClient
from clients.consumer.lite_pull_consumer import LitePullConsumer
from clients.consumer.push_consumer import (
    ConsumeConcurrentlyStatus,
    ConsumeContext,
    ConsumeOrderlyStatus,
    MessageExt,
    MessageSelector,
    PushConsumer,
)
from clients.producer.producer import Message, Producer
from namesrv.client.errors import MQClientError
from namesrv.client.offsets import LocalFileOffsetStore
from namesrv.common.waiting import wait_until
from namesrv.protocol.models import MessageQueue
from tests.support.consumer import committed
from tests.support.ray_cluster import pull_all, registered_deployment

LEVELS = " ".join(["1s"] * 18)
"""Every delay level 1 s: a retry comes back after 1 s."""
QUEUES_PER_BROKER = 4
FAST = {"rebalance_interval_ms": 600_000, "consume_thread_max": 4, "consume_thread_min": 1,
        "broker_suspend_max_time_ms": 2_000, "persist_consumer_offset_interval_ms": 500}
"""Test timings: no rebalance timer within a test (only the broker's notice moves queues), short long-polls."""


@pytest.fixture(scope="module")
def dep(ray_local: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    with registered_deployment(tmp_path_factory.mktemp("push"),
                               brokers=[BrokerSpec("broker-a"), BrokerSpec("broker-b")], namesrv_count=1, broker_port=0,
                               broker_overrides={"message_delay_level": LEVELS}) as d:
        yield d


@pytest.fixture(scope="module")
def producer(dep: Deployment) -> Iterator[Producer]:
    with Producer("push_test_producer", namesrv=list(dep.namesrvs), namespace=dep.spec.namespace) as p:
        yield p


def new_topic(dep: Deployment, name: str) -> str:
    topic = f"{name}_{uuid.uuid4().hex[:8]}"
    AdminClient(dep).create_topic(topic, read_queue_nums=QUEUES_PER_BROKER, write_queue_nums=QUEUES_PER_BROKER)
    return topic


class Deliveries:
    """Every delivery, by member; waited on with a condition."""

    def __init__(self) -> None:
        self.cv = threading.Condition()
        self.got: dict[str, list[MessageExt]] = defaultdict(list)
        self.at: dict[str, list[float]] = defaultdict(list)

    def listener(self, member: str, answer: Callable[[MessageExt], Any] | None = None) -> Callable[..., Any]:
        def on(msgs: list[MessageExt], ctx: ConsumeContext) -> Any:
            with self.cv:
                self.got[member].extend(msgs)
                self.at[member].extend(time.monotonic() for _ in msgs)
                self.cv.notify_all()
            return answer(msgs[0]) if answer else ConsumeConcurrentlyStatus.CONSUME_SUCCESS
        return on

    def bodies(self, *members: str) -> Counter[bytes]:
        with self.cv:
            return Counter(m.body for who in (members or list(self.got)) for m in self.got[who])

    def await_bodies(self, expected: set[bytes], timeout: float = 30) -> None:
        with self.cv:
            if not self.cv.wait_for(lambda: expected <= set(self.bodies()), timeout):
                missing = expected - set(self.bodies())
                raise AssertionError(f"{len(missing)} of {len(expected)} messages never delivered")


def send(producer: Producer, topic: str, prefix: str, n: int) -> set[bytes]:
    bodies = {f"{prefix}-{i}".encode() for i in range(n)}
    for body in sorted(bodies):
        assert producer.send(Message(topic, body)).send_status == "SEND_OK"
    return bodies


def member(dep: Deployment, group: str, topic: str, listener: Callable[..., Any], orderly: bool = False,
           expression: str | MessageSelector = "*", **options: Any) -> PushConsumer:
    c = PushConsumer(group, namesrv=list(dep.namesrvs), namespace=dep.spec.namespace,
                     **(FAST | {"consume_from_where": "CONSUME_FROM_FIRST_OFFSET"} | options))
    c.subscribe(topic, expression)
    if orderly:
        c.register_message_listener_orderly(listener)
    else:
        c.register_message_listener(listener)
    return c.start()


def partitioned(members: list[PushConsumer], topic: str) -> bool:
    """Every queue of `topic` held by exactly one of `members`."""
    held = [mq for c in members for mq in c.assignment() if mq.topic == topic]
    return len(held) == len(set(held)) == 2 * QUEUES_PER_BROKER


def test_members_share_the_queues_without_overlap_and_move_them_at_once(dep: Deployment, producer: Producer) -> None:
    topic, group, seen = new_topic(dep, "Shared"), f"CG_share_{uuid.uuid4().hex[:6]}", Deliveries()
    a, b, c = (member(dep, group, topic, seen.listener(n)) for n in "abc")
    try:
        # every queue held once, by members that all see three members (a member yet to rebalance
        # holds none while the other two still hold half each: also "every queue once")
        wait_until(lambda: partitioned([a, b, c], topic) and all(
            len([q for q in m.assignment() if q.topic == topic]) in (2, 3) for m in (a, b, c)), 20,
            "three members holding every queue once, a share each")
        first = send(producer, topic, "first", 60)
        seen.await_bodies(first)
        assert max(seen.bodies().values()) == 1, "a message delivered to two members"
        assert all(seen.got[n] for n in "abc"), "every member consumed a share"
        # committed on the brokers first: what moves to another member may then come twice only if
        # it was not (RocketMQ's at-least-once), and this test wants to see no duplicate at all
        wait_until(lambda: committed(dep, group, topic) == 60, 10, "every consumed message committed")

        left = time.monotonic()
        c.shutdown()
        wait_until(lambda: partitioned([a, b], topic), 10, "the two members left holding every queue")
        took = time.monotonic() - left
        assert took < 5, f"queues moved {took:.2f} s after the member left (the timer is 10 min off)"
        second = send(producer, topic, "second", 40)
        seen.await_bodies(second)
        assert max(seen.bodies().values()) == 1 and not set(seen.bodies("c")) & second

        wait_until(lambda: committed(dep, group, topic) == 100, 10, "every consumed message committed")
        d = member(dep, group, topic, seen.listener("d"))
        try:
            wait_until(lambda: partitioned([a, b, d], topic) and d.assignment(), 10, "the new member holding a share")
            third = send(producer, topic, "third", 40)
            seen.await_bodies(third)
            assert max(seen.bodies().values()) == 1
            assert set(seen.bodies("d")) & third, "the new member consumed its share"
        finally:
            d.shutdown()
    finally:
        for m in (a, b, c):
            m.shutdown()


def test_offsets_live_on_the_broker_and_a_new_member_resumes_there(dep: Deployment, producer: Producer) -> None:
    topic, group, seen = new_topic(dep, "Resume"), f"CG_resume_{uuid.uuid4().hex[:6]}", Deliveries()
    first = member(dep, group, topic, seen.listener("first"))
    try:
        wait_until(lambda: partitioned([first], topic), 20, "the member holding every queue")
        before = send(producer, topic, "before", 30)
        seen.await_bodies(before)
    finally:
        first.shutdown()  # commits its offsets on the brokers
    assert committed(dep, group, topic) == 30, "every consumed message committed on the brokers"
    after = send(producer, topic, "after", 20)
    second = member(dep, group, topic, seen.listener("second"), consume_from_where="CONSUME_FROM_FIRST_OFFSET")
    try:
        seen.await_bodies(after)
        wait_until(lambda: committed(dep, group, topic) == 50, 10, "the second member's offsets committed")
        assert set(seen.bodies("second")) == after, "the new member resumed at the broker's offsets"
    finally:
        second.shutdown()


def test_a_failed_message_comes_back_with_back_off_then_goes_to_the_dlq(dep: Deployment, producer: Producer) -> None:
    topic, group, seen = new_topic(dep, "Failing"), f"CG_fail_{uuid.uuid4().hex[:6]}", Deliveries()
    c = member(dep, group, topic, seen.listener("c", lambda m: ConsumeConcurrentlyStatus.RECONSUME_LATER),
               max_reconsume_times=2)
    try:
        wait_until(lambda: partitioned([c], topic), 20, "the member holding every queue")
        [body] = send(producer, topic, "doomed", 1)
        with seen.cv:
            assert seen.cv.wait_for(lambda: len(seen.got["c"]) >= 3, 30), "delivered 3 times"
        got = list(seen.got["c"])
        times = list(seen.at["c"])
        assert [m.reconsume_times for m in got[:3]] == [0, 1, 2] and {m.body for m in got} == {body}
        assert all(m.topic == topic for m in got), "a retried message shows its own topic"
        gaps = [b - a for a, b in itertools.pairwise(times)][:2]
        assert min(gaps) >= 0.9, f"a retry came back before its 1 s back-off: {gaps}"
        dlq = f"%DLQ%{group}"
        found = wait_until(lambda: [m for h in dep.brokers.values() for m in pull_all(h, dlq, 0)["messages"]], 20,
                           f"the message in {dlq}")
        assert [m["body"] for m in found] == [body] and found[0]["properties"]["RETRY_TOPIC"] == topic
        assert len(seen.got["c"]) == 3, "not delivered again once in the DLQ"
    finally:
        c.shutdown()



def test_an_orderly_listener_sees_each_queue_in_order_through_a_rebalance(dep: Deployment, producer: Producer) -> None:
    """Two orderly members; a third joins mid-stream and takes queues (locked on the broker only once
    their old holder has let them go): per queue, deliveries across members are in offset order, and
    no member runs two listeners on one queue at once."""
    topic, group, seen = new_topic(dep, "Ordered"), f"CG_order_{uuid.uuid4().hex[:6]}", Deliveries()
    busy: set[MessageQueue] = set()
    overlap: list[MessageQueue] = []
    guard = threading.Lock()

    def orderly(name: str) -> Callable[..., Any]:
        record = seen.listener(name)

        def on(msgs: list[MessageExt], ctx: ConsumeContext) -> ConsumeOrderlyStatus:
            with guard:
                if ctx.message_queue in busy:
                    overlap.append(ctx.message_queue)
                busy.add(ctx.message_queue)
            record(msgs, ctx)
            time.sleep(0.002)  # a listener doing work: lets a second one on the same queue show itself
            with guard:
                busy.discard(ctx.message_queue)
            return ConsumeOrderlyStatus.SUCCESS
        return on

    opts = {"lock_interval_ms": 500, "rebalance_interval_ms": 1_000}
    a, b = member(dep, group, topic, orderly("a"), orderly=True, **opts), \
        member(dep, group, topic, orderly("b"), orderly=True, **opts)
    c = None
    try:
        wait_until(lambda: partitioned([a, b], topic), 20, "two orderly members holding every queue")
        first = send(producer, topic, "o1", 120)
        c = member(dep, group, topic, orderly("c"), orderly=True, **opts)
        second = send(producer, topic, "o2", 120)
        wait_until(lambda: partitioned([a, b, c], topic) and c.assignment(), 20, "the third member holding a share")
        third = send(producer, topic, "o3", 60)
        seen.await_bodies(first | second | third, 40)
    finally:
        for m in (a, b, c):
            if m is not None:
                m.shutdown()
    assert not overlap, f"two listeners at once on {overlap[:3]}"
    with seen.cv:
        events = sorted((t, (m.store_host, m.queue_id), m.queue_offset)
                        for who in seen.got for m, t in zip(seen.got[who], seen.at[who], strict=True))
    per_queue: dict[Any, list[int]] = defaultdict(list)
    for _, q, offset in events:
        per_queue[q].append(offset)
    for q, offsets in per_queue.items():
        assert offsets == sorted(set(offsets)), f"queue {q} consumed out of order or twice: {offsets[:20]}"
    assert max(seen.bodies().values()) == 1, "an orderly member consumed a message its predecessor had committed"
    assert seen.got["c"], "the joining member consumed its share"


@pytest.mark.parametrize("group, options, words", [
    ("bad group!", {}, "the specified group"),
    ("DEFAULT_CONSUMER", {}, "consumerGroup can not equal DEFAULT_CONSUMER"),
    ("CG_ok", {"consume_thread_min": 30, "consume_thread_max": 20}, "consume_thread_min \\(30\\) is larger"),
    ("CG_ok", {"pull_batch_size": 0}, "pull_batch_size"),
    ("CG_ok", {"pull_threshold_for_queue": 70_000}, "pull_threshold_for_queue"),
    ("CG_ok", {"message_model": "CLUSTER"}, "message_model"),
    ("CG_ok", {"no_such_setting": 1}, "no_such_setting"),
])
def test_bad_groups_and_settings_are_refused_before_anything_connects(group: str, options: dict[str, Any],
                                                                      words: str) -> None:
    with pytest.raises(MQClientError, match=words):
        PushConsumer(group, namesrv=["namesrv-0"], namespace="nowhere", **options)


def test_a_consumer_without_listener_subscription_or_valid_selector_is_refused(dep: Deployment) -> None:
    c = PushConsumer("CG_refused", namesrv=list(dep.namesrvs), namespace=dep.spec.namespace)
    with pytest.raises(MQClientError, match="no subscription"):
        c.register_message_listener(lambda msgs, ctx: ConsumeConcurrentlyStatus.CONSUME_SUCCESS)
        c.start()
    with pytest.raises(MQClientError, match="bad SQL92 expression"):
        MessageSelector.by_sql("a >< 3")
    with pytest.raises(MQClientError, match="topic"):
        c.subscribe("bad topic!", "*")
    d = PushConsumer("CG_refused", namesrv=list(dep.namesrvs), namespace=dep.spec.namespace)
    d.subscribe("Anything", "*")
    with pytest.raises(MQClientError, match="listener"):
        d.start()


# ---------------------------------------------------------------------------- LitePullConsumer
def lite(dep: Deployment, group: str, **options: Any) -> LitePullConsumer:
    return LitePullConsumer(group, namesrv=list(dep.namesrvs), namespace=dep.spec.namespace,
                            **(FAST | {"consume_from_where": "CONSUME_FROM_FIRST_OFFSET"} | options))


def poll_until(consumers: list[LitePullConsumer], expected: set[bytes],
               got: dict[int, list[MessageExt]], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not expected <= {m.body for ms in got.values() for m in ms}:
        assert time.monotonic() < deadline, "not every message polled in time"
        for i, c in enumerate(consumers):
            got[i].extend(c.poll(timeout_s=0.2))


def test_lite_pull_members_share_the_queues_and_auto_commit(dep: Deployment, producer: Producer) -> None:
    topic, group = new_topic(dep, "Lite"), f"CG_lite_{uuid.uuid4().hex[:6]}"
    a, b = lite(dep, group), lite(dep, group)
    for c in (a, b):
        c.subscribe(topic, "*")
        c.start()
    try:
        wait_until(lambda: len({q for c in (a, b) for q in c.assignment() if q.topic == topic}) == 8
                   and all(c.assignment() for c in (a, b)), 20, "two members holding every queue")
        sent = send(producer, topic, "lite", 40)
        got: dict[int, list[MessageExt]] = defaultdict(list)
        poll_until([a, b], sent, got)
        bodies = Counter(m.body for ms in got.values() for m in ms)
        assert max(bodies.values()) == 1 and got[0] and got[1], "shared without overlap"
    finally:
        a.shutdown()
        b.shutdown()
    assert committed(dep, group, topic) == 40, "auto commit: what poll returned is committed"


def test_lite_pull_assign_seek_and_commit_sync(dep: Deployment, producer: Producer) -> None:
    topic, group = new_topic(dep, "Assigned"), f"CG_assign_{uuid.uuid4().hex[:6]}"
    c = lite(dep, group, auto_commit=False)
    mine = [mq for mq in c.fetch_message_queues(topic) if mq.broker_name == "broker-a"]
    c.assign(mine)
    with pytest.raises(MQClientError, match="mutually exclusive"):
        c.subscribe(topic, "*")
    c.start()
    try:
        sent = [producer.send(Message(topic, f"as-{i}".encode())) for i in range(40)]
        expected = {f"as-{i}".encode() for i, r in enumerate(sent) if r.message_queue.broker_name == "broker-a"}
        got: dict[int, list[MessageExt]] = defaultdict(list)
        poll_until([c], expected, got)
        assert {m.body for m in got[0]} == expected, "only the assigned queues were polled"
        # past a long poll that found nothing on each queue (2 s): still nothing committed
        pulled = c.stats()["pulls"]
        wait_until(lambda: c.stats()["pulls"] >= pulled + len(mine), 10, "an empty pull answered on each queue")
        c.core.offset_store.persist_all(c.assignment())
        assert committed(dep, group, topic) == 0, "nothing committed without auto commit"
        first = mine[0]
        again = [m.body for m in got[0] if m.queue_id == first.queue_id]
        c.seek(first, 0)
        replay: dict[int, list[MessageExt]] = defaultdict(list)
        poll_until([c], set(again), replay)
        assert [m.body for m in replay[0] if m.queue_id == first.queue_id][:len(again)] == again, "replayed in order"
        c.commit_sync()
        assert committed(dep, group, topic) == len(expected), "commit_sync committed what poll returned"
    finally:
        c.shutdown()


def test_consumer_status_reads_the_members_running_info_over_its_connection(dep: Deployment) -> None:
    """GET_CONSUMER_RUNNING_INFO (mqadmin consumerStatus) is handed by the broker down the member's
    own connection, and the member answers with its queues, offsets and settings."""
    from clients.admin.client import DefaultMQAdminExt

    topic, group = new_topic(dep, "Status"), f"CG_status_{uuid.uuid4().hex[:6]}"
    c = member(dep, group, topic, lambda msgs, ctx: ConsumeConcurrentlyStatus.CONSUME_SUCCESS)
    try:
        wait_until(lambda: partitioned([c], topic), 20, "the member holding every queue")
        addr = sorted(a for a in (c.core.routes.broker_addrs({topic}) if c.core.routes else set()))[0]
        with DefaultMQAdminExt.over_tcp(dep.namesrv_addr()) as admin:
            info = admin.get_consumer_running_info(addr, group, c.client_id)
        assert info.properties["PROP_CONSUME_TYPE"] == "CONSUME_PASSIVELY"
        assert info.properties["messageModel"] == "CLUSTERING"
        assert {mq for mq in info.mq_table if mq.topic == topic} == {q for q in c.assignment() if q.topic == topic}
        assert {s["topic"] for s in info.subscription_set} == {topic, f"%RETRY%{group}"}
    finally:
        c.shutdown()


def test_broadcasting_members_each_read_every_message_with_offsets_of_their_own(
        dep: Deployment, producer: Producer, tmp_path: Path) -> None:
    topic, group, seen = new_topic(dep, "Broadcast"), f"CG_bcast_{uuid.uuid4().hex[:6]}", Deliveries()
    opts = {"message_model": "BROADCASTING", "offset_store_dir": str(tmp_path)}
    a, b = member(dep, group, topic, seen.listener("a"), **opts), member(dep, group, topic, seen.listener("b"), **opts)
    try:
        wait_until(lambda: all(len([q for q in m.assignment() if q.topic == topic]) == 8 for m in (a, b)), 20,
                   "both members holding every queue")
        sent = send(producer, topic, "all", 24)
        with seen.cv:
            assert seen.cv.wait_for(lambda: set(seen.bodies("a")) == set(seen.bodies("b")) == sent, 30)
    finally:
        a.shutdown()
        b.shutdown()
    files = sorted(tmp_path.glob("*/*/offsets.json"))
    assert len(files) == 2, "one offsets file per member"
    for f in files:
        table = LocalFileOffsetStore(f).clone_offset_table()
        assert sum(o for mq, o in table.items() if mq.topic == topic) == 24
    assert committed(dep, group, topic) == 0, "broadcasting commits nothing on the brokers"


def test_a_new_group_starts_from_last_or_from_a_timestamp(dep: Deployment, producer: Producer) -> None:
    topic, seen = new_topic(dep, "StartAt"), Deliveries()
    old = send(producer, topic, "old", 16)
    last = member(dep, f"CG_last_{uuid.uuid4().hex[:6]}", topic, seen.listener("last"),
                  consume_from_where="CONSUME_FROM_LAST_OFFSET")
    stamp = member(dep, f"CG_stamp_{uuid.uuid4().hex[:6]}", topic, seen.listener("stamp"),
                   consume_from_where="CONSUME_FROM_TIMESTAMP", consume_timestamp_ms=0)
    try:
        wait_until(lambda: partitioned([last], topic) and partitioned([stamp], topic), 20, "both holding every queue")
        new = send(producer, topic, "new", 16)
        with seen.cv:
            assert seen.cv.wait_for(lambda: new <= set(seen.bodies("last")) and old | new <= set(seen.bodies("stamp")),
                                    30), "both members consumed what they start at"
        assert set(seen.bodies("last")) == new, "from the last offset: only what came after the start"
        assert set(seen.bodies("stamp")) == old | new, "from timestamp 0: everything stored"
    finally:
        last.shutdown()
        stamp.shutdown()


def test_a_slow_listener_holds_pulls_back_at_the_queue_threshold(dep: Deployment, producer: Producer) -> None:
    """Flow control: with the listener stuck, a queue is pulled only while it caches no more than
    pull_threshold_for_queue messages (one batch over it at most); released, everything arrives."""
    topic, group = new_topic(dep, "Flow"), f"CG_flow_{uuid.uuid4().hex[:6]}"
    release, seen = threading.Event(), Deliveries()
    record = seen.listener("c")

    def stuck(msgs: list[MessageExt], ctx: ConsumeContext) -> Any:
        release.wait(30)
        return record(msgs, ctx)

    c = member(dep, group, topic, stuck, pull_threshold_for_queue=5, pull_batch_size=4, consume_thread_max=2)
    try:
        wait_until(lambda: partitioned([c], topic), 20, "the member holding every queue")
        sent = send(producer, topic, "flow", 160)
        wait_until(lambda: c.stats()["flow_controlled"] > 0, 20, "pulls held back by flow control")
        cached = {mq: pq.cached_count for mq, pq in c.core.assignment_table().items() if mq.topic == topic}
        assert max(cached.values()) <= 5 + 4, f"a queue cached past its threshold: {cached}"
        assert sum(cached.values()) < len(sent), "not everything was pulled while the listener was stuck"
        release.set()
        seen.await_bodies(sent)
    finally:
        release.set()
        c.shutdown()


def test_reset_consumer_client_offset_makes_a_member_jump_back(dep: Deployment, producer: Producer) -> None:
    """RESET_CONSUMER_CLIENT_OFFSET (220, oneway, ResetOffsetBody), as a broker sends it down a
    member's connection, handed to the member as its connection's reader hands it: the member drops
    its queues, commits the offsets given and consumes again from there."""
    from namesrv.protocol import fastjson
    from namesrv.remoting.wire_command import RemotingCommand

    topic, group, seen = new_topic(dep, "Rewind"), f"CG_rewind_{uuid.uuid4().hex[:6]}", Deliveries()
    c = member(dep, group, topic, seen.listener("c"))
    try:
        wait_until(lambda: partitioned([c], topic), 20, "the member holding every queue")
        sent = send(producer, topic, "rewind", 24)
        seen.await_bodies(sent)
        wait_until(lambda: committed(dep, group, topic) == 24, 10, "every consumed message committed")
        table = {mq: 0 for mq in c.assignment() if mq.topic == topic}
        body = fastjson.dumps({"offsetTable": table})
        request = RemotingCommand(220, 1, 2, ext_fields={"topic": topic, "group": group, "timestamp": "0",
                                                         "isForce": "true"}, body=body)
        assert c.core.api is not None and c.core.routes is not None
        conn = c.core.api.connection(sorted(c.core.routes.broker_addrs({topic}))[0])
        c.core.processor.process_request(conn, request)
        with seen.cv:
            assert seen.cv.wait_for(lambda: sum(seen.bodies().values()) == 48, 30), "every message consumed again"
        assert set(seen.bodies().values()) == {2}
        wait_until(lambda: committed(dep, group, topic) == 24, 10, "the offsets committed again after the replay")
    finally:
        c.shutdown()
