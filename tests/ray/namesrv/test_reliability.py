"""Reliability points of the NameServer and the brokers' registration (issue #15), on a real local
Ray with the `fast` profile: a transient error on a channel watch never removes a live broker, a
restarted NameServer never serves a partial route, pushed and polled routes are equal, the config
survives a restart.

The tests that fault nothing share the module's deployment (`shared`: 2 NameServers with order
messages on, broker-a and broker-b), each on a topic (and a ghost broker) of its own; the ones
that restart a NameServer, or need a broker or NameServer config of their own, deploy their own."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import ray
from ray.exceptions import GetTimeoutError, RayActorError

from actors.deployment.launcher import Deployment
from actors.deployment.spec import BrokerSpec
from actors.namesrv.housekeeping import SUPERSEDED, BrokerChannel
from namesrv.common.waiting import wait_until
from namesrv.protocol.constants import ORDER_TOPIC_CONFIG_NAMESPACE
from namesrv.protocol.msgpack_codec import encode_body
from tests.support.ray_cluster import (
    ChannelStub,
    DeploymentFactory,
    broker_addrs,
    broker_info,
    broker_names,
    live_channel,
    namesrv_pid,
    registered_deployment,
    removals_of,
    route_of,
    route_version,
    wait_for_route,
    wait_for_route_everywhere,
    wait_registered_everywhere,
    wire_route,
)

pytestmark = pytest.mark.timeout(180)

TOPIC = "ReliabilityTopic"
RW = 6


@pytest.fixture(scope="module")
def shared(ray_local: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    """broker-a and broker-b on 2 NameServers with order messages on: for the tests that fault nothing."""
    with registered_deployment(tmp_path_factory.mktemp("reliability"), prefix="reliability",
                               namesrv_overrides={"order_message_enable": True}) as dep:
        yield dep


@pytest.fixture
def topic(request: pytest.FixtureRequest) -> str:
    """A topic of the test's own on the shared deployment (the test's name)."""
    return str(request.node.name)


def _register_ghost(ns: Any, handle: Any, token: str, topic: str = TOPIC, ghost: str = "ghost") -> None:
    ident = {"clusterName": "C", "brokerAddr": f"{ghost}-0", "brokerName": ghost, "brokerId": 0}
    body = encode_body({"topicConfigSerializeWrapper": {
        "topicConfigTable": {topic: {"topicName": topic, "readQueueNums": 2, "writeQueueNums": 2, "perm": RW}},
        "dataVersion": {"timestamp": 1, "counter": 1},
    }})
    # A long heartbeat timeout: only the channel may remove this broker in this test.
    resp = ray.get(ns.register_broker.remote(body, channel=BrokerChannel(handle, token),
                                             heartbeatTimeoutMillis=60_000, **ident), timeout=30)
    assert resp.ok, resp


def test_transient_watch_error_never_removes_a_live_broker(shared: Deployment, topic: str) -> None:
    """The watch call fails with ActorUnavailableError (a flapping connection): the broker stays,
    the watch is re-armed, and a real close still removes it at once."""
    ns = shared.namesrvs["namesrv-0"]
    stub = ChannelStub.options(namespace=shared.spec.namespace).remote()
    _register_ghost(ns, stub, "flapping-0#1", topic, "flapping")
    wait_for_route(ns, topic, lambda r: broker_addrs(r) == {"flapping-0"}, timeout=10)
    wait_until(lambda: ray.get(stub.watch_calls.remote(), timeout=10) == 1, 10, "the watch to be armed")

    ray.get(stub.fail_pending.remote(), timeout=10)
    wait_until(lambda: ray.get(stub.watch_calls.remote(), timeout=10) == 2, 10, "the watch to be re-armed")
    assert removals_of(ns, "flapping-0") == []
    assert live_channel(ns, "flapping-0") == "flapping-0#1"
    assert broker_addrs(route_of(ns, topic).wire_body()) == {"flapping-0"}

    ray.get(stub.close.remote(), timeout=10)  # the broker closes its channel: removed at once
    wait_for_route(ns, topic, lambda r: r is None, timeout=10)
    assert [r.cause for r in removals_of(ns, "flapping-0")] == ["channel"]
    ray.kill(stub, no_restart=True)


def test_broker_answers_superseded_for_another_incarnations_token(shared: Deployment) -> None:
    """A re-armed watch reaching a broker Ray restarted learns at once that its incarnation is gone."""
    broker = next(iter(shared.brokers.values()))
    assert ray.get(broker.wait_closed.remote("broker-a-0#not-this-one"), timeout=10) == SUPERSEDED
    token = broker_info(broker)["token"]
    pending = broker.wait_closed.remote(token)
    assert ray.wait([pending], timeout=0.5)[0] == []  # its own token: pends until shutdown
    ray.cancel(pending)


def test_broker_registers_at_start_before_its_initial_delay(deployments: DeploymentFactory) -> None:
    """As RocketMQ: one registration at start, the periodic ones only from the initial delay on (the
    default profile's 10 s; here 10 min, so only the registration at start can be seen)."""
    dep = deployments.deploy(brokers=[BrokerSpec("broker-a")], namesrv_count=2,
                             broker_overrides={"register_initial_delay_ms": 600_000},
                             namesrv_overrides={"broker_channel_expired_time_ms": 600_000})

    def live(ns: Any) -> set[str]:
        return set(ray.get(ns.dump_tables.remote(), timeout=10)["brokerLiveTable"])

    for ns in dep.namesrvs.values():
        wait_until(lambda ns=ns: set(dep.brokers) <= live(ns), 30, "every broker registered at start")


def _known_brokers(data_dir: str, namesrv: str) -> set[str]:
    path = Path(data_dir) / namesrv / "known_brokers.json"
    return set(json.loads(path.read_text())) if path.exists() else set()


@pytest.mark.timeout(240)
def test_restarted_namesrv_serves_not_ready_or_the_complete_route(deployments: DeploymentFactory) -> None:
    """2 NameServers x 4 brokers: each NameServer in turn, three times (6 restarts), is killed and
    restarted by Ray, and queried without pause from the moment it is back: every answer is 'not
    ready' or the route with all 4 brokers, never a partial one (the window waits for every broker
    it knew, sized to let each retry after the restart)."""
    names = {f"broker-{c}" for c in "abcd"}
    dep = deployments.deploy(brokers=[BrokerSpec(n) for n in sorted(names)], namesrv_count=2)
    wait_registered_everywhere(dep, 60)
    for broker in dep.brokers.values():
        resp = ray.get(broker.create_topic.remote(TOPIC, 2, 2), timeout=30)
        assert resp.ok, resp
    wait_for_route_everywhere(dep, TOPIC, lambda r: broker_names(r) == names, 30)
    for name in dep.namesrvs:
        wait_until(lambda name=name: _known_brokers(dep.spec.data_dir, name) == set(dep.brokers), 10,
                   f"{name} to persist its known brokers")

    for name in sorted(dep.namesrvs) * 3:
        ns = dep.namesrvs[name]
        old_pid = namesrv_pid(ns)
        dep.kill_namesrv(name, restart=True)

        def restarted(ns: Any = ns, old_pid: int = old_pid) -> bool:
            try:
                return namesrv_pid(ns) != old_pid
            except (RayActorError, GetTimeoutError):
                return False

        wait_until(restarted, 60, f"{name} to restart")
        not_ready = 0
        while True:
            resp = route_of(ns, TOPIC)
            if resp.ok:
                assert broker_names(resp.wire_body()) == names, f"{name} served a partial route: {resp.wire_body()}"
                break
            assert "not ready" in (resp.remark or ""), f"{name} answered neither 'not ready' nor the route: {resp}"
            not_ready += 1


def test_pushed_and_polled_routes_are_equal_with_an_order_conf(shared: Deployment, topic: str) -> None:
    """With order messages on, the long-poll hands out the orderTopicConf a route query gives, and
    a change to the conf wakes a held long-poll (it is a route change)."""
    dep = shared
    for broker in dep.brokers.values():
        assert ray.get(broker.create_topic.remote(topic, 2, 2), timeout=30).ok
    names = {s.broker_name for s in dep.broker_specs.values()}
    wait_for_route_everywhere(dep, topic, lambda r: broker_names(r) == names, 30)
    conf = ";".join(f"{n}:2" for n in sorted(names))
    for ns in dep.namesrvs.values():
        held = route_version(route_of(ns, topic))
        pending = ns.listen_for_change.remote({topic: held}, 20)
        resp = ray.get(ns.put_kv_config.remote(namespace=ORDER_TOPIC_CONFIG_NAMESPACE, key=topic, value=conf),
                       timeout=10)
        assert resp.ok, resp
        woken = ray.get(pending, timeout=30)
        assert topic in woken, "a held long-poll missed the orderTopicConf change"
        polled = route_of(ns, topic)
        pushed = ray.get(ns.listen_for_change.remote({topic: -1}, 5), timeout=30)[topic]
        assert polled.wire_body()["orderTopicConf"] == conf
        assert wire_route(pushed) == polled.wire_body() == wire_route(woken[topic])
        assert pushed.version == polled.ext_fields["routeVersion"]


def test_namesrv_config_update_survives_an_actor_restart(deployments: DeploymentFactory) -> None:
    dep = deployments.deploy(brokers=[], namesrv_count=1)
    ns = dep.namesrvs["namesrv-0"]
    body = encode_body({"orderMessageEnable": "true", "deleteTopicWithBrokerRegistration": "true"})
    assert ray.get(ns.update_namesrv_config.remote(body), timeout=30).ok
    store = Path(dep.spec.data_dir) / "namesrv-0" / "namesrv.json"
    wait_until(lambda: store.exists() and json.loads(store.read_text()).get("order_message_enable") is True, 10,
               "the update to be persisted")
    old_pid = namesrv_pid(ns)
    dep.kill_namesrv("namesrv-0", restart=True)

    def restarted() -> bool:
        try:
            return namesrv_pid(ns) != old_pid
        except (RayActorError, GetTimeoutError):
            return False

    wait_until(restarted, 60, "namesrv-0 to restart")
    props = ray.get(ns.get_namesrv_config.remote(), timeout=30).payload.properties
    assert props["orderMessageEnable"] == "true" and props["deleteTopicWithBrokerRegistration"] == "true", props


def test_producer_records_are_bounded_and_drops_counted(shared: Deployment, topic: str) -> None:
    from clients.producer.actor import RECORDS_KEPT, ProducerActor

    assert ray.get(next(iter(shared.brokers.values())).create_topic.remote(topic, 2, 2), timeout=30).ok
    producer = ProducerActor("bounded_records", shared.spec.namespace, sorted(shared.namesrvs), records_kept=3)
    try:
        assert ProducerActor.__init__.__kwdefaults__["records_kept"] == RECORDS_KEPT
        summary = producer.run_send_loop([topic], 0, 60.0, 64, 0, max_messages=5)
        assert summary["attempted"] == 3 and summary["records_dropped"] == 2, summary
        assert len(producer.get_records()) == 3
    finally:
        producer.shutdown()
