"""The producer and pull consumer on a real local Ray: NameServer actors, broker actors with on-disk
stores, the route cache fed by long-poll push, and faults injected with ray.kill.

On the run's shared Ray (`ray_local`). The tests share one cluster (2 NameServers, 3 brokers, fast
profile), each on its own topics; a test that kills a broker gets it restarted from its store
afterwards (`mend`), so the next test finds the cluster whole. The one that kills both NameServers
gets a cluster of its own. Waits are event-driven: route changes through the NameServer long-poll,
everything else through bounded polling that fails with what it last saw.
"""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import ray

from actors.deployment.launcher import Deployment
from actors.deployment.spec import BrokerSpec
from clients.admin.client import AdminClient
from clients.consumer.pull_consumer import ConsumedMessage, PullConsumer
from clients.producer.producer import Message, MQClientError, Producer, SendFailedError, SendResult, select_by_hash
from namesrv.client.errors import NoNameServerAvailable
from namesrv.common.waiting import wait_until
from namesrv.protocol.constants import AUTO_CREATE_TOPIC_KEY_TOPIC, PERM_ALL, Perm
from tests.support.ray_cluster import (
    DeploymentFactory,
    actor_alive,
    broker_names,
    mend,
    registered_deployment,
    summarize_route,
    wait_for_route_everywhere,
    wait_registered_everywhere,
)

BROKERS = ["broker-a", "broker-b", "broker-c"]
RW = int(Perm.READ | Perm.WRITE)
QUEUES = 4

Ack = tuple[str, int, int, str]
"""(broker name, queue id, queue offset, msg id): what a producer was told and a consumer must see."""


# ---------------------------------------------------------------------------- helpers
def three_brokers() -> list[BrokerSpec]:
    return [BrokerSpec(name) for name in BROKERS]


def unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


@contextlib.contextmanager
def started_producer(dep: Deployment, **kwargs: Any) -> Iterator[Producer]:
    """A Producer in its own client instance (unique group and instance name), shut down afterwards."""
    group = unique("pg")
    p = Producer(group, namesrv=list(dep.namesrvs), namespace=dep.spec.namespace, instance_name=group, **kwargs)
    p.start()
    try:
        yield p
    finally:
        p.shutdown()


def create_topic_everywhere(dep: Deployment, topic: str, queues: int = QUEUES) -> None:
    """mqadmin updateTopic -c: the topic on every master, then wait until every NameServer routes it
    to every broker."""
    AdminClient(dep).create_topic(topic, read_queue_nums=queues, write_queue_nums=queues)
    want = {b.broker_name for b in dep.broker_specs.values()}
    wait_for_route_everywhere(dep, topic, lambda r: broker_names(r) == want, 15, f"on all of {sorted(want)}")


def ack_of(r: SendResult) -> Ack:
    return (r.message_queue.broker_name, r.message_queue.queue_id, r.queue_offset, r.msg_id)


def consumed_key(m: ConsumedMessage) -> Ack:
    return (m.broker_name, m.queue_id, m.queue_offset, m.msg_id)


def consume(dep: Deployment, topic: str) -> list[ConsumedMessage]:
    return PullConsumer(dep.spec.namespace, list(dep.namesrvs)).consume_all(topic)


def assert_all_acked_consumed(acked: dict[Ack, bytes], consumed: list[ConsumedMessage]) -> None:
    keys = [consumed_key(m) for m in consumed]
    assert len(keys) == len(set(keys)), "a message was consumed twice"
    got = {consumed_key(m): m.body for m in consumed}
    missing = set(acked) - set(got)
    assert not missing, f"{len(missing)} acknowledged messages never consumed, e.g. {sorted(missing)[:5]}"
    wrong = [k for k, body in acked.items() if got[k] != body]
    assert not wrong, f"bodies differ for {wrong[:5]}"


# ---------------------------------------------------------------------------- fixtures
@pytest.fixture
def deployments(ray_local: str, tmp_path: Path) -> Iterator[DeploymentFactory]:
    """Clusters of the test's own (fresh namespaces, tmp data dirs), all torn down afterwards."""
    factory = DeploymentFactory(tmp_path, prefix="producer")
    try:
        yield factory
    finally:
        factory.close()


@pytest.fixture(scope="module")
def _module_cluster(ray_local: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    with registered_deployment(tmp_path_factory.mktemp("shared"), prefix="producer-shared", brokers=three_brokers(),
                               namesrv_count=2) as dep:
        yield dep


@pytest.fixture
def cluster(_module_cluster: Deployment) -> Iterator[Deployment]:
    """The cluster the tests share (each on its own topics), whole at the start of every test: a
    broker a test killed is restarted from its store afterwards (`mend`)."""
    yield _module_cluster
    mend(_module_cluster)


def test_round_trip_without_loss(cluster: Deployment) -> None:
    """Every acknowledged (broker, queue, offset, msgId) comes back from the consumer with its body,
    once; sends spread over every queue of every broker."""
    topic = unique("RoundTrip")
    create_topic_everywhere(cluster, topic)
    acked: dict[Ack, bytes] = {}
    with started_producer(cluster) as p:
        for i in range(240):
            body = f"round-trip {i} ".encode() + uuid.uuid4().bytes
            r = p.send(Message(topic, body, tags="TagA", keys=f"k{i}"))
            assert r.send_status == "SEND_OK" and r.attempts == 1
            acked[ack_of(r)] = body
    assert len(acked) == 240, "two sends were acknowledged at the same (broker, queue, offset)"
    assert {(b, q) for b, q, _, _ in acked} == {(b, q) for b in BROKERS for q in range(QUEUES)}
    consumed = consume(cluster, topic)
    assert_all_acked_consumed(acked, consumed)
    assert len(consumed) == len(acked)
    assert all(m.properties.get("TAGS") == "TagA" for m in consumed)


def test_async_send_with_callback(cluster: Deployment) -> None:
    topic = unique("Async")
    create_topic_everywhere(cluster, topic)
    n = 24
    done = threading.Event()
    lock = threading.Lock()
    outcomes: list[tuple[SendResult | None, BaseException | None]] = []

    def callback(result: SendResult | None, error: BaseException | None) -> None:
        with lock:
            outcomes.append((result, error))
            if len(outcomes) == n:
                done.set()

    with started_producer(cluster, auto_create_topic=False) as p:
        bodies = [f"async {i}".encode() for i in range(n)]
        futures = [p.send_async(Message(topic, b), callback) for b in bodies]
        assert done.wait(30), f"only {len(outcomes)} of {n} callbacks ran within 30 s"
        assert [e for _, e in outcomes if e is not None] == []
        results = [f.result(timeout=1) for f in futures]
        assert {ack_of(r) for r, _ in outcomes if r} == {ack_of(r) for r in results}
        # A failing async send reports through the callback (and the future), not by raising.
        failed = threading.Event()
        seen: list[BaseException | None] = []
        fut = p.send_async(Message(unique("NoSuchTopic"), b"x"), lambda r, e: (seen.append(e), failed.set()))
        assert failed.wait(30), "the callback of a failing async send never ran"
        assert isinstance(seen[0], MQClientError) and "No route info of this topic" in str(seen[0])
        assert isinstance(fut.exception(timeout=1), MQClientError)
    assert_all_acked_consumed({ack_of(r): b for r, b in zip(results, bodies, strict=True)}, consume(cluster, topic))


def test_oneway_send_arrives(cluster: Deployment) -> None:
    topic = unique("Oneway")
    create_topic_everywhere(cluster, topic)
    consumer = PullConsumer(cluster.spec.namespace, list(cluster.namesrvs))
    bodies = {f"oneway {i} {uuid.uuid4().hex}".encode() for i in range(6)}
    with started_producer(cluster) as p:
        for body in bodies:
            assert p.send_oneway(Message(topic, body)) is None
    got: list[ConsumedMessage] = []

    def arrived() -> bool:
        got.extend(consumer.consume_all(topic))
        return {m.body for m in got} >= bodies

    wait_until(arrived, 15, f"{len(bodies)} oneway messages on {topic}")
    assert len(got) == len(bodies)


def test_send_orderly_keeps_per_key_order(cluster: Deployment) -> None:
    """Ordered sends with select_by_hash: each key stays on one queue, and reading that queue gives
    the key's messages in the order they were sent."""
    topic = unique("Ordered")
    create_topic_everywhere(cluster, topic)
    keys = [f"order-{i}" for i in range(10)]
    per_key_queue: dict[str, set[tuple[str, int]]] = defaultdict(set)
    with started_producer(cluster) as p:
        for seq in range(25):
            for key in keys:
                r = p.send_orderly(Message(topic, f"{key}:{seq}".encode()), select_by_hash, key)
                assert r.brokers_tried == [r.message_queue.broker_name]
                per_key_queue[key].add((r.message_queue.broker_name, r.message_queue.queue_id))
    assert all(len(qs) == 1 for qs in per_key_queue.values()), dict(per_key_queue)
    assert len({b for qs in per_key_queue.values() for b, _ in qs}) > 1, "every key hashed to one broker"
    sequences: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for m in consume(cluster, topic):
        key, seq = m.body.decode().split(":")
        assert {(m.broker_name, m.queue_id)} == per_key_queue[key], f"{key} read from another queue"
        sequences[key].append((m.queue_offset, int(seq)))
    for key in keys:
        in_queue_order = [seq for _, seq in sorted(sequences[key])]
        assert in_queue_order == list(range(25)), f"{key} out of order: {in_queue_order}"


def test_auto_create_puts_the_topic_on_one_broker_explicit_creation_on_all(cluster: Deployment) -> None:
    """The seed's TBW102 problem. Every broker offers TBW102, yet a topic auto-created by its first
    message lives on the one broker that received it, and stays there. A topic created across the
    cluster with the admin API gets queues on every broker and traffic spreads over all of them."""
    tbw = wait_for_route_everywhere(cluster, AUTO_CREATE_TOPIC_KEY_TOPIC, lambda r: broker_names(r) == set(BROKERS), 15)
    assert all(q["perm"] == PERM_ALL for r in tbw.values() for q in r["queueDatas"])
    auto_topic, explicit_topic = unique("Auto"), unique("Explicit")
    with started_producer(cluster) as p:
        first = p.send(Message(auto_topic, b"first"))
        home = first.message_queue.broker_name
        routes = wait_for_route_everywhere(cluster, auto_topic, lambda r: r is not None, 15, "after auto-create")
        for name, route in routes.items():
            assert broker_names(route) == {home}, f"{name}: {summarize_route(route)}"
            [qd] = route["queueDatas"]
            assert qd["writeQueueNums"] == 4 == qd["readQueueNums"], "min(defaultTopicQueueNums 4, TBW102's 8)"
            assert qd["perm"] == RW, "TBW102's perm without INHERIT"
        wait_until(lambda: (info := p.publish_info(auto_topic)) is not None and info.broker_names() == [home], 15,
                   f"the producer's route of {auto_topic} on {home}")
        auto_brokers = {p.send(Message(auto_topic, f"a{i}".encode())).message_queue.broker_name for i in range(30)}
        assert auto_brokers == {home}

        create_topic_everywhere(cluster, explicit_topic)
        explicit_brokers = {p.send(Message(explicit_topic, f"e{i}".encode())).message_queue.broker_name
                            for i in range(30)}
        assert explicit_brokers == set(BROKERS)
    routes = wait_for_route_everywhere(cluster, auto_topic, lambda r: r is not None, 5)
    assert all(broker_names(r) == {home} for r in routes.values()), "the auto-created topic spread after all"
    assert len(consume(cluster, auto_topic)) == 31


def test_no_route_and_auto_create_off_is_a_clear_error(cluster: Deployment) -> None:
    topic = unique("Nowhere")
    with started_producer(cluster, auto_create_topic=False) as p:
        with pytest.raises(MQClientError, match=f"No route info of this topic: {topic}"):
            p.send(Message(topic, b"x"))
        # The topic stays subscribed for route push; with no route to hold, the long-poll must still
        # wait rather than return at once again and again (it did: ~700 round trips a second).
        assert p.instance is not None
        seen = len(p.instance.route_updates)
        time.sleep(1.0)  # an observation window for something that must NOT happen: no event to await
        spins = len(p.instance.route_updates) - seen
        assert spins <= 2, f"{spins} route updates for a topic without a route in 1 s: the long-poll spins"
    routes = wait_for_route_everywhere(cluster, topic, lambda r: r is None, 5)
    assert set(routes.values()) == {None}, "nothing may be created when auto-create is off"


# ---------------------------------------------------------------------------- faults
def _send_until_stopped(p: Producer, topic: str, stop: threading.Event, acked: dict[Ack, bytes],
                        results: list[SendResult], errors: list[BaseException]) -> None:
    i = 0
    while not stop.is_set():
        body = f"{p.group} {i}".encode()
        i += 1
        try:
            r = p.send(Message(topic, body))
        except Exception as e:  # recorded; the test fails on any
            errors.append(e)
            if len(errors) >= 20:
                return
            continue
        acked[ack_of(r)] = body
        results.append(r)


def test_broker_killed_mid_stream(cluster: Deployment) -> None:
    """Two producers send without pause while broker-b is killed. Both keep succeeding: the one on
    route push drops broker-b from its cached route within moments (its poll is 30 s away); the one
    without push or poll keeps broker-b in its route, and each send that lands there is retried on
    another broker. An ordered send whose key maps to broker-b fails there and never moves. After
    broker-b restarts from its store, every acknowledged message is consumed."""
    dep = cluster
    topic = unique("KillMidStream")
    create_topic_everywhere(dep, topic)
    with (
        started_producer(dep) as pushed,
        started_producer(dep, route_push=False, poll_name_server_interval_ms=600_000,
                         send_latency_fault_enable=False) as stale,
    ):
        stop = threading.Event()
        acked: dict[Ack, bytes] = {}
        runs = {p.group: ([], []) for p in (pushed, stale)}
        threads = [
            threading.Thread(target=_send_until_stopped, args=(p, topic, stop, acked, *runs[p.group]), daemon=True)
            for p in (pushed, stale)
        ]
        for t in threads:
            t.start()
        try:
            wait_until(lambda: all(len(r) >= 30 for r, _ in runs.values()), 30, "30 acks per producer before the kill")
            before = {g: len(r) for g, (r, _) in runs.items()}
            killed_at = time.monotonic_ns()
            dep.kill_broker("broker-b-0")
            wait_until(lambda: all(len(r) >= before[g] + 60 for g, (r, _) in runs.items()), 60,
                       "60 more acks per producer after the kill")
        finally:
            stop.set()
            for t in threads:
                t.join(10)
        for group, (results, errors) in runs.items():
            assert errors == [], f"{group}: sends failed after broker-b died: {errors[:3]}"
            after = results[before[group]:]
            assert all(r.message_queue.broker_name != "broker-b" for r in after[5:]), group
        stale_results = runs[stale.group][0][before[stale.group]:]
        retried = [r for r in stale_results if r.attempts > 1]
        assert any(r.brokers_tried[0] == "broker-b" for r in retried), (
            f"no send hit the dead broker, though the stale route still led there: {[r.brokers_tried for r in retried]}"
        )
        assert all(r.message_queue.broker_name != "broker-b" for r in retried)

        # Route push: the pushed producer's cache dropped broker-b, through a push after the kill.
        wait_until(lambda: pushed.publish_info(topic).broker_names() == ["broker-a", "broker-c"], 15,
                   "broker-b gone from the pushed producer's cached route")
        assert pushed.instance is not None
        assert any(t == topic and src == "push" and at > killed_at for t, at, src in pushed.instance.route_updates)
        # The stale producer still routes to broker-b (no push, no poll): an ordered send for a key
        # on broker-b fails there and is not moved to another queue.
        info = stale.publish_info(topic)
        assert info is not None and "broker-b" in info.broker_names()
        key = next(k for k in (f"key-{i}" for i in range(1000))
                   if select_by_hash(info.message_queues, Message(topic, b"x"), k).broker_name == "broker-b")
        lost = b"ordered to the dead broker"
        with pytest.raises(SendFailedError) as err:
            stale.send_orderly(Message(topic, lost), select_by_hash, key)
        assert err.value.brokers_tried == ["broker-b"]

    dep.restart_broker("broker-b-0")
    wait_for_route_everywhere(dep, topic, lambda r: broker_names(r) == set(BROKERS), 20, "with broker-b back")
    consumed = consume(dep, topic)
    assert_all_acked_consumed(acked, consumed)
    assert lost not in {m.body for m in consumed}


def test_a_send_after_a_broker_restart_reaches_its_new_actor(cluster: Deployment) -> None:
    """A producer that held broker-b's actor handle across a kill and restart (it sent nothing to
    broker-b meanwhile) sends there again at its first attempt: the dead handle is replaced by the
    restarted actor's, not reported as a failed attempt (which moved the message to another broker,
    and with that broker faulted too, failed the send: the chaos soak's unexplained timeout)."""
    dep = cluster
    topic = unique("RestartedHandle")
    create_topic_everywhere(dep, topic)
    with started_producer(dep, route_push=False, poll_name_server_interval_ms=600_000) as producer:
        producer.send(Message(topic, b"route"))  # fetches and caches the route
        info = producer.publish_info(topic)
        assert info is not None
        key = next(k for k in (f"key-{i}" for i in range(1000))
                   if select_by_hash(info.message_queues, Message(topic, b"x"), k).broker_name == "broker-b")
        first = producer.send_orderly(Message(topic, b"before"), select_by_hash, key)
        assert first.brokers_tried == ["broker-b"]
        dep.kill_broker("broker-b-0")
        ray.get(dep.restart_broker("broker-b-0").ping.remote(), timeout=60)
        again = producer.send_orderly(Message(topic, b"after"), select_by_hash, key)
        assert again.brokers_tried == ["broker-b"] and again.message_queue == first.message_queue
        assert again.queue_offset == first.queue_offset + 1
    # The restarted broker registers on its own schedule; a consumer routes by the NameServer's table.
    wait_for_route_everywhere(dep, topic, lambda r: "broker-b" in broker_names(r), 30, "broker-b back in the route")
    assert {m.body for m in consume(dep, topic)} >= {b"before", b"after"}


@pytest.mark.parametrize("route_union", [False, True], ids=["one-namesrv", "union"])
def test_namesrv_failover(deployments: DeploymentFactory, route_union: bool) -> None:
    """Kill a NameServer the producer uses (no restart): one at a time (RocketMQ), it moves to the
    other one for route queries and route push; with the union of views, the dead one's views are
    dropped and the survivor's serve. With every NameServer gone, cached routes still send, and an
    unknown topic fails with "no name server available"."""
    dep = deployments.deploy(brokers=three_brokers(), namesrv_count=2)
    wait_registered_everywhere(dep)
    first_topic, second_topic = unique("BeforeNsDeath"), unique("AfterNsDeath")
    create_topic_everywhere(dep, first_topic)
    with started_producer(dep, route_union=route_union) as p:
        assert p.instance is not None
        p.send(Message(first_topic, b"before"))
        victim = p.instance.namesrv.current
        survivor = next(n for n in dep.namesrvs if n != victim)
        dep.kill_namesrv(victim, restart=False)
        wait_until(lambda: not actor_alive(dep.namesrvs[victim], 5), 15, f"{victim} dead")

        # A new topic's route comes from the survivor.
        AdminClient(dep).create_topic(second_topic, read_queue_nums=QUEUES, write_queue_nums=QUEUES)
        wait_for_route_everywhere(
            _only(dep, survivor), second_topic, lambda r: broker_names(r) == set(BROKERS), 15
        )
        r = p.send(Message(second_topic, b"after"))
        assert r.send_status == "SEND_OK"
        assert route_union or p.instance.namesrv.current == survivor
        assert set(p.publish_info(second_topic).broker_names()) == set(BROKERS)

        # Route push now comes from the survivor: a broker's death reaches the cache.
        dep.kill_broker("broker-c-0")
        wait_until(lambda: "broker-c" not in p.publish_info(first_topic).broker_names(), 15,
                   "broker-c dropped from the cached route via the surviving NameServer")
        for i in range(6):
            assert p.send(Message(first_topic, f"x{i}".encode())).message_queue.broker_name != "broker-c"

        # Every NameServer gone.
        dep.kill_namesrv(survivor, restart=False)
        wait_until(lambda: not actor_alive(dep.namesrvs[survivor], 5), 15, f"{survivor} dead")
        assert p.send(Message(first_topic, b"cached route")).send_status == "SEND_OK"
        with pytest.raises(NoNameServerAvailable, match="no name server available"):
            p.send(Message(unique("Unknown"), b"x"))


def _only(dep: Deployment, namesrv: str) -> Deployment:
    """A view of `dep` with one NameServer (for waiting on that one only)."""
    view = Deployment(dep.spec)
    view.namesrvs = {namesrv: dep.namesrvs[namesrv]}
    view.brokers = dep.brokers
    return view



def test_shutdown_stops_the_route_threads_while_their_polls_are_held(deployments: DeploymentFactory) -> None:
    """A producer holds a route long-poll on every NameServer; shutdown cancels them and returns only
    once its route threads have ended, so a process that ends right after never has a thread inside
    a Ray call (which ended such a script with an error)."""
    dep = deployments.deploy(brokers=[BrokerSpec("broker-a")], namesrv_count=2)
    wait_registered_everywhere(dep)
    topic = unique("Shutdown")
    create_topic_everywhere(dep, topic)
    p = Producer(unique("pg"), namesrv=list(dep.namesrvs), namespace=dep.spec.namespace, instance_name=unique("i"))
    p.start()
    try:
        assert p.send(Message(topic, b"x")).send_status == "SEND_OK"
        assert p.instance is not None
        threads = list(p.instance._threads)
        assert len([t for t in threads if "route-push" in t.name]) == 2  # one per NameServer (route_union)
        wait_until(lambda: all(ray.get(ns.get_status.remote(), timeout=30)["long_poll_waiters"] >= 1
                               for ns in dep.namesrvs.values()), 30, "a long-poll held on every NameServer")
    finally:
        started = time.monotonic()
        p.shutdown()
        took = time.monotonic() - started
    assert not [t.name for t in threads if t.is_alive()], "a route thread outlived shutdown"
    assert took < 2.0, f"shutdown took {took:.2f} s"


def test_a_restarting_namesrv_is_late_not_lost(deployments: DeploymentFactory) -> None:
    """With the union of views, a route query answers within the grace once one NameServer has
    answered, while another restarts (Ray holds calls to a restarting actor for seconds): the late
    one keeps its last view instead of holding the query for the call time-out or losing its view.
    A consumer's rebalance asks topic after topic; each used to wait for the restart."""
    from clients.impl.namesrv_client import NameServerClient
    from clients.impl.route_views import LATE_GRACE_S, RouteViews
    from namesrv.client.errors import NameServerLate

    dep = deployments.deploy(brokers=three_brokers(), namesrv_count=2)
    wait_registered_everywhere(dep)
    topic = unique("LateNotLost")
    create_topic_everywhere(dep, topic)
    names = sorted(dep.namesrvs)
    client = NameServerClient(names, dep.spec.namespace, call_timeout_ms=10_000)
    views = RouteViews(client)
    assert {b.broker_name for b in views.get_topic_route(topic)[0].broker_datas} == set(BROKERS)
    late_seen: list[float] = []

    def restarting_answers_late() -> bool:
        started = time.monotonic()
        answers = client.get_topic_route_everywhere(topic, grace_s=LATE_GRACE_S)
        if isinstance(answers[names[0]], NameServerLate):
            late_seen.append(time.monotonic() - started)
            return True
        return False

    dep.kill_namesrv(names[0], restart=True)
    wait_until(restarting_answers_late, 30, f"{names[0]} answering late while it restarts", interval_s=0.05)
    assert late_seen[0] < LATE_GRACE_S + 2.0, f"the query waited {late_seen[0]:.2f} s, not the grace"
    route, _ = views.get_topic_route(topic)  # the late NameServer's last view still stands beside the other's
    assert {b.broker_name for b in route.broker_datas} == set(BROKERS)
