"""Reliability points of the NameServer and the brokers' registration (issue #15), on a real local
Ray with the `fast` profile: a transient error on a channel watch never removes a live broker, a
restarted NameServer never serves a partial route, pushed and polled routes are equal, the config
survives a restart."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import ray
from ray.exceptions import GetTimeoutError, RayActorError

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


def _register_ghost(ns: Any, handle: Any, token: str) -> None:
    ident = {"clusterName": "C", "brokerAddr": "ghost-0", "brokerName": "ghost", "brokerId": 0}
    body = encode_body({"topicConfigSerializeWrapper": {
        "topicConfigTable": {TOPIC: {"topicName": TOPIC, "readQueueNums": 2, "writeQueueNums": 2, "perm": RW}},
        "dataVersion": {"timestamp": 1, "counter": 1},
    }})
    # A long heartbeat timeout: only the channel may remove this broker in this test.
    resp = ray.get(ns.register_broker.remote(body, channel=BrokerChannel(handle, token),
                                             heartbeatTimeoutMillis=60_000, **ident), timeout=30)
    assert resp.ok, resp


def test_transient_watch_error_never_removes_a_live_broker(deployments: DeploymentFactory) -> None:
    """The watch call fails with ActorUnavailableError (a flapping connection): the broker stays,
    the watch is re-armed, and a real close still removes it at once."""
    dep = deployments.deploy(brokers=[], namesrv_count=1)
    ns = dep.namesrvs["namesrv-0"]
    stub = ChannelStub.options(namespace=dep.spec.namespace).remote()
    _register_ghost(ns, stub, "ghost-0#1")
    wait_for_route(ns, TOPIC, lambda r: broker_addrs(r) == {"ghost-0"}, timeout=10)
    wait_until(lambda: ray.get(stub.watch_calls.remote(), timeout=10) == 1, 10, "the watch to be armed")

    ray.get(stub.fail_pending.remote(), timeout=10)
    wait_until(lambda: ray.get(stub.watch_calls.remote(), timeout=10) == 2, 10, "the watch to be re-armed")
    assert removals_of(ns, "ghost-0") == []
    assert live_channel(ns, "ghost-0") == "ghost-0#1"
    assert broker_addrs(route_of(ns, TOPIC).wire_body()) == {"ghost-0"}

    ray.get(stub.close.remote(), timeout=10)  # the broker closes its channel: removed at once
    wait_for_route(ns, TOPIC, lambda r: r is None, timeout=10)
    assert [r.cause for r in removals_of(ns, "ghost-0")] == ["channel"]


def test_broker_answers_superseded_for_another_incarnations_token(deployments: DeploymentFactory) -> None:
    """A re-armed watch reaching a broker Ray restarted learns at once that its incarnation is gone."""
    dep = deployments.deploy(brokers=None, namesrv_count=1)
    broker = next(iter(dep.brokers.values()))
    assert ray.get(broker.wait_closed.remote("broker-a-0#not-this-one"), timeout=10) == SUPERSEDED
    token = broker_info(broker)["token"]
    pending = broker.wait_closed.remote(token)
    assert ray.wait([pending], timeout=0.5)[0] == []  # its own token: pends until shutdown
    ray.cancel(pending)


def test_broker_registers_at_start_before_its_initial_delay(deployments: DeploymentFactory) -> None:
    """As RocketMQ: one registration at start, the periodic ones only from the initial delay on (the
    default profile's 10 s; here 10 min, so only the registration at start can be seen)."""
    dep = deployments.deploy(brokers=None, namesrv_count=2, broker_overrides={"register_initial_delay_ms": 600_000},
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
    """3 NameServers x 4 brokers: each NameServer in turn is killed and restarted by Ray, and queried
    without pause from the moment it is back: every answer is 'not ready' or the route with all 4
    brokers, never a partial one (the window waits for every broker it knew, sized to let each
    retry after the restart)."""
    names = {f"broker-{c}" for c in "abcd"}
    dep = deployments.deploy(brokers=[BrokerSpec(n) for n in sorted(names)], namesrv_count=3)
    wait_registered_everywhere(dep, 60)
    for broker in dep.brokers.values():
        resp = ray.get(broker.create_topic.remote(TOPIC, 2, 2), timeout=30)
        assert resp.ok, resp
    wait_for_route_everywhere(dep, TOPIC, lambda r: broker_names(r) == names, 30)
    for name in dep.namesrvs:
        wait_until(lambda name=name: _known_brokers(dep.spec.data_dir, name) == set(dep.brokers), 10,
                   f"{name} to persist its known brokers")

    for name in sorted(dep.namesrvs) * 2:
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


def test_pushed_and_polled_routes_are_equal_with_an_order_conf(deployments: DeploymentFactory) -> None:
    """With order messages on, the long-poll hands out the orderTopicConf a route query gives, and
    a change to the conf wakes a held long-poll (it is a route change)."""
    dep = deployments.deploy(brokers=None, namesrv_count=2, namesrv_overrides={"order_message_enable": True})
    wait_registered_everywhere(dep, 30)
    for broker in dep.brokers.values():
        assert ray.get(broker.create_topic.remote(TOPIC, 2, 2), timeout=30).ok
    names = {s.broker_name for s in dep.broker_specs.values()}
    wait_for_route_everywhere(dep, TOPIC, lambda r: broker_names(r) == names, 30)
    conf = ";".join(f"{n}:2" for n in sorted(names))
    for ns in dep.namesrvs.values():
        held = route_version(route_of(ns, TOPIC))
        pending = ns.listen_for_change.remote({TOPIC: held}, 20)
        resp = ray.get(ns.put_kv_config.remote(namespace=ORDER_TOPIC_CONFIG_NAMESPACE, key=TOPIC, value=conf),
                       timeout=10)
        assert resp.ok, resp
        woken = ray.get(pending, timeout=30)
        assert TOPIC in woken, "a held long-poll missed the orderTopicConf change"
        polled = route_of(ns, TOPIC)
        pushed = ray.get(ns.listen_for_change.remote({TOPIC: -1}, 5), timeout=30)[TOPIC]
        assert polled.wire_body()["orderTopicConf"] == conf
        assert wire_route(pushed) == polled.wire_body() == wire_route(woken[TOPIC])
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


def test_producer_records_are_bounded_and_drops_counted(deployments: DeploymentFactory) -> None:
    from clients.producer.actor import RECORDS_KEPT, ProducerActor

    dep = deployments.deploy(brokers=[BrokerSpec("broker-a")], namesrv_count=1)
    wait_registered_everywhere(dep, 30)
    assert ray.get(next(iter(dep.brokers.values())).create_topic.remote(TOPIC, 2, 2), timeout=30).ok
    producer = ProducerActor("bounded_records", dep.spec.namespace, sorted(dep.namesrvs), records_kept=3)
    try:
        assert ProducerActor.__init__.__kwdefaults__["records_kept"] == RECORDS_KEPT
        summary = producer.run_send_loop([TOPIC], 0, 60.0, 64, 0, max_messages=5)
        assert summary["attempted"] == 3 and summary["records_dropped"] == 2, summary
        assert len(producer.get_records()) == 3
    finally:
        producer.shutdown()
