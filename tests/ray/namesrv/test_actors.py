"""NameServer and broker actors on a real local Ray: registration, propagation, failure detection,
restarts, durability and bad input, with the `fast` timing profile.

Every wait is for an event: route changes through the NameServer's long-poll, everything else
through `wait_until` (a short bounded poll with a deadline). Bounds are generous against the profile
(0.5 s heartbeat, 0.2 s scan, 2 s expiry, 1 s register timeout); the channel watch is asserted well
under the expiry, so a pass proves the watch (not the expiry scan) removed the broker. Tests whose
subject is not expiry lengthen it (LONG_EXPIRY) so a starved actor on a busy machine cannot be
expired in the middle of an exact assertion.

Most tests share the module's deployment (`shared`: broker-a and broker-b on two NameServers), each
on topics of its own, counting removals and registrations from where it found them: the ones that
kill or shut down a broker get it restarted from its store afterwards (`mend`), the ones that
restart or pause a NameServer wait until it has caught up. A test keeps a deployment of its own
where its subject is the deployment's start (the slave before its master), the fast expiry
(SIGSTOP of a broker), a broker's config (single-topic registration, flush mode) or a bare
NameServer (a stale channel).
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from typing import Any

import pytest
import ray

from actors.deployment.launcher import Deployment, connect
from actors.deployment.profiles import get_profile
from actors.deployment.spec import BrokerSpec
from actors.namesrv.housekeeping import BrokerChannel
from namesrv.common.waiting import wait_until
from namesrv.protocol.bodies import body_crc32
from namesrv.protocol.codes import ResponseCode
from namesrv.protocol.constants import AUTO_CREATE_TOPIC_KEY_TOPIC, PERM_ALL, Perm
from namesrv.protocol.msgpack_codec import encode_body
from namesrv.remoting.command import MQServerError, RemotingRequest
from tests.support.ray_cluster import (
    ChannelStub,
    DeploymentFactory,
    actor_alive,
    assert_quiet,
    assert_quiet_everywhere,
    broker_addrs,
    broker_info,
    broker_names,
    cluster_addrs,
    live_channel,
    mend,
    namesrv_pid,
    normalize_route,
    pull_all,
    queue_perms,
    registered_deployment,
    removals_of,
    route_of,
    stable_tables,
    stopped,
    time_route_changes,
    wait_for_route,
    wait_for_route_everywhere,
    wait_registered_everywhere,
)

pytestmark = pytest.mark.timeout(180)

FAST = get_profile("fast")
EXPIRY_MS = FAST.namesrv.broker_channel_expired_time_ms
SCAN_MS = FAST.namesrv.scan_not_active_broker_interval_ms
PERIOD_MS = FAST.broker.register_name_server_period_ms
REGISTER_TIMEOUT_S = FAST.broker.register_broker_timeout_ms / 1000
CHANNEL_BOUND_S = 2.0
"""Channel-watch removal is ~10 ms; 2 s is generous yet still no more than the expiry."""
LONG_EXPIRY = {"broker_channel_expired_time_ms": 10_000}
"""For tests whose subject is not expiry: on a loaded 2-core machine a broker can go 2 s without
getting a heartbeat through, and a spurious expiry would break their exact assertions."""
SHARED_NAMESRV = {"broker_channel_expired_time_ms": 15_000, "not_ready_window_ms": 20_000}
"""The shared deployment's NameServers: expiry out of the way for a NameServer paused a while (a
broker restarted meanwhile) and a 20 s "not ready" window (instead of the profile's 0.5 s) that a
restart on a loaded machine cannot outlast before the test looks; the gate still opens as soon as
every known broker is back."""

RW = int(Perm.READ | Perm.WRITE)
TOPIC = "TopicTest"
A, B = "broker-a-0", "broker-b-0"


@pytest.fixture(scope="module")
def _module_deployment(ray_local: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    with registered_deployment(tmp_path_factory.mktemp("actors"), prefix="actors",
                               namesrv_overrides=SHARED_NAMESRV) as dep:
        yield dep


@pytest.fixture
def shared(_module_deployment: Deployment) -> Iterator[Deployment]:
    """The module's deployment, whole at the start of every test (`mend` after each)."""
    yield _module_deployment
    mend(_module_deployment)


@pytest.fixture
def topic(request: pytest.FixtureRequest) -> str:
    """The name of a topic of the test's own on the shared deployment (the test's name)."""
    return str(request.node.name)


def create_topic(dep: Deployment, topic: str, queues: int = 4, masters: tuple[str, ...] | None = None) -> None:
    """`topic` on `masters` (default: every master), registered with every NameServer when this returns."""
    for addr in masters if masters is not None else [a for a, s in dep.broker_specs.items() if s.broker_id == 0]:
        resp = ray.get(dep.brokers[addr].create_topic.remote(topic, queues, queues), timeout=60)
        assert resp.ok, resp
        assert set(resp.ext_fields["registered"].values()) == {"registered"}, resp


def deploy_with_topic(
    deployments: DeploymentFactory, brokers: list[BrokerSpec] | None = None, queues: int = 4, **spec: Any
) -> Deployment:
    """A deployment in which every master hosts TOPIC and every NameServer knows every broker."""
    dep = deployments.deploy(brokers=brokers, **spec)
    wait_registered_everywhere(dep)
    create_topic(dep, TOPIC, queues)
    return dep


def removals_since(dep: Deployment, addr: str) -> dict[str, int]:
    """How many removals of `addr` each NameServer has recorded so far (a test counts from there)."""
    return {name: len(removals_of(ns, addr)) for name, ns in dep.namesrvs.items()}


def stats(broker: Any) -> dict[str, int]:
    return broker_info(broker)["stats"]


def stats_after_lite_rounds(broker: Any, namesrvs: int, rounds: int) -> dict[str, int]:
    """Stats once `rounds` more lite heartbeats per NameServer went out (so any registration round
    that started earlier, e.g. one racing a topic change, has finished too)."""
    want = stats(broker)["lite_heartbeats"] + rounds * namesrvs
    return wait_until(
        lambda: (s := stats(broker))["lite_heartbeats"] >= want and s,
        rounds * PERIOD_MS / 1000 + 10,
        f"{rounds} rounds of lite heartbeats",
    )


# ============================================================================ registration
def test_registration_reaches_every_namesrv(deployments: DeploymentFactory) -> None:
    # The slave starts before its master: it must still learn the master once that registers.
    dep = deployments.deploy(brokers=[BrokerSpec("broker-a", 1), BrokerSpec("broker-b")], namesrv_overrides=LONG_EXPIRY)
    wait_registered_everywhere(dep)
    slave = dep.brokers["broker-a-1"]
    assert broker_info(slave)["master_addr"] is None
    ray.get(dep.start_broker(BrokerSpec("broker-a")).ping.remote(), timeout=60)
    wait_registered_everywhere(dep)

    for addr, broker in dep.brokers.items():
        outcomes = ray.get(broker.register_broker_all.remote(), timeout=60)
        assert set(outcomes) == set(dep.namesrvs), outcomes
        assert set(outcomes.values()) <= {"registered", "heartbeat"}, f"{addr}: {outcomes}"

    for name, ns in dep.namesrvs.items():
        info = ray.get(ns.get_broker_cluster_info.remote(), timeout=60).wire_body()
        assert {n: bd["brokerAddrs"] for n, bd in info["brokerAddrTable"].items()} == {
            "broker-a": {0: "broker-a-0", 1: "broker-a-1"},
            "broker-b": {0: "broker-b-0"},
        }, name
        assert info["clusterAddrTable"] == {"DefaultCluster": ["broker-a", "broker-b"]}, name
        # Only masters write queue data: TBW102 (auto-create) is served by both groups, inheritable.
        route = ray.get(ns.get_routeinfo_by_topic.remote(topic=AUTO_CREATE_TOPIC_KEY_TOPIC), timeout=60).wire_body()
        assert queue_perms(route) == {"broker-a": PERM_ALL, "broker-b": PERM_ALL}, name
        status = ray.get(ns.get_status.remote(), timeout=60)
        assert all(b["watched"] for b in status["brokers"]), status

    # The slave learns its master from a registration answer (lite heartbeats do not carry it).
    wait_until(lambda: broker_info(slave)["master_addr"] == "broker-a-0", 5, "slave's masterAddr")
    tables = [stable_tables(ns) for ns in dep.namesrvs.values()]
    assert all(t == tables[0] for t in tables), "NameServers disagree after registration"


def test_topic_creation_propagates_to_every_namesrv(shared: Deployment, topic: str) -> None:
    dep = shared

    for addr in (A, B):
        resp = ray.get(dep.brokers[addr].create_topic.remote(topic, 4, 4), timeout=60)
        assert resp.ok and resp.ext_fields["changed"], resp
        assert resp.ext_fields["registered"] == dict.fromkeys(dep.namesrvs, "registered"), resp

    # create_topic answers only after every NameServer took the registration: no waiting needed.
    routes = {}
    for name, ns in dep.namesrvs.items():
        resp = route_of(ns, topic)
        assert resp.ok, f"{name}: {resp}"
        route = resp.wire_body()
        assert broker_names(route) == {"broker-a", "broker-b"}, name
        queues = {(q["brokerName"], q["readQueueNums"], q["writeQueueNums"], q["perm"])
                  for q in route["queueDatas"]}
        assert queues == {
            ("broker-a", 4, 4, RW),
            ("broker-b", 4, 4, RW),
        }, name
        routes[name] = normalize_route(route)
    assert len({repr(r) for r in routes.values()}) == 1, routes

    # The same config again changes nothing; a new queue count reaches every NameServer at once.
    again = ray.get(dep.brokers[A].create_topic.remote(topic, 4, 4), timeout=60)
    assert again.ok and not again.ext_fields["changed"] and again.ext_fields["registered"] == {}
    resp = ray.get(dep.brokers[A].create_topic.remote(topic, 8, 8), timeout=60)
    assert resp.ok and resp.ext_fields["changed"]
    for name, ns in dep.namesrvs.items():
        route = route_of(ns, topic).wire_body()
        assert {q["brokerName"]: q["writeQueueNums"] for q in route["queueDatas"]} == {
            "broker-a": 8,
            "broker-b": 4,
        }, name
        assert topic in ray.get(ns.get_all_topic_list_from_nameserver.remote(), timeout=60).wire_body()["topicList"]


def test_single_topic_register_sends_one_topic_then_the_table_at_the_next_period(
    deployments: DeploymentFactory,
) -> None:
    """enableSingleTopicRegister (RocketMQ 5): a new topic reaches every NameServer through
    REGISTER_TOPIC_IN_NAMESRV before create_topic answers; the periodic round then registers in full."""
    dep = deployments.deploy(brokers=[BrokerSpec("broker-a")], namesrv_overrides=LONG_EXPIRY,
                             broker_overrides={"enable_single_topic_register": True})
    wait_registered_everywhere(dep)
    broker = dep.brokers[A]
    before = stats(broker)

    resp = ray.get(broker.create_topic.remote(TOPIC, 2, 2), timeout=60)

    assert resp.ok and resp.ext_fields["registered"] == dict.fromkeys(dep.namesrvs, "registered"), resp
    assert stats(broker)["single_topic_registrations"] == before["single_topic_registrations"] + len(dep.namesrvs)
    for name, ns in dep.namesrvs.items():
        route = route_of(ns, TOPIC).wire_body()
        assert [(q["brokerName"], q["writeQueueNums"], q["perm"]) for q in route["queueDatas"]] == [
            ("broker-a", 2, RW)], name
    # The DataVersion moved: the next round is a full registration, not a lite heartbeat.
    full = before["full_registrations"] + len(dep.namesrvs)
    wait_until(lambda: stats(broker)["full_registrations"] >= full, 30, "a full round after the topic")


# ============================================================================ failure detection
def test_ray_kill_removes_broker_via_channel_watch(shared: Deployment, topic: str) -> None:
    dep = shared
    create_topic(dep, topic)
    earlier = removals_since(dep, B)

    elapsed = time_route_changes(
        dep, topic, lambda r: "broker-b" not in broker_names(r), lambda: dep.kill_broker(B), timeout=10
    )

    assert set(elapsed) == set(dep.namesrvs)
    assert max(elapsed.values()) < CHANNEL_BOUND_S, f"channel watch too slow: {elapsed}"
    for name, ns in dep.namesrvs.items():
        assert [r.cause for r in removals_of(ns, B)[earlier[name]:]] == ["channel"], name
        assert cluster_addrs(ns) == {A}, name
        assert broker_addrs(route_of(ns, topic).wire_body()) == {A}, name


def test_connect_skips_a_broker_that_died_after_being_listed(
    shared: Deployment, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ray drops a dead actor's name asynchronously: a listing taken just before a kill still shows
    the broker, whose lookup then fails. connect() carries on without it (CI once failed here)."""
    dep = shared
    ns = dep.spec.namespace
    listed = ray.util.list_named_actors(all_namespaces=True)
    dep.kill_broker(B)
    wait_until(lambda: _lookup_fails(B, ns), 30, f"{B}'s name released")
    monkeypatch.setattr(ray.util, "list_named_actors", lambda all_namespaces=False: listed)

    other = connect(ns)

    assert sorted(other.namesrvs) == sorted(dep.namesrvs)
    assert sorted(other.brokers) == [A]
    assert ray.get(other.brokers[A].ping.remote(), timeout=30)


def _lookup_fails(name: str, namespace: str) -> bool:
    try:
        ray.get_actor(name, namespace=namespace)
    except ValueError:
        return True
    return False


def test_sigstop_broker_removed_only_after_expiry_and_back_on_sigcont(deployments: DeploymentFactory) -> None:
    dep = deploy_with_topic(deployments)
    broker = dep.brokers[B]
    pid = broker_info(broker)["pid"]
    full_before = stats(broker)["full_registrations"]
    wait_registered_everywhere(dep)
    # Only removals after the stop count (a starved broker on a busy machine may have been expired
    # and come back before it).
    earlier = {name: len(removals_of(ns, B)) for name, ns in dep.namesrvs.items()}

    with stopped(pid):
        stop_ms = time.time() * 1000
        # Read after the stop: the true last heartbeat is at or after what we read, so the removal
        # minus this value is a lower bound on how long the NameServer really waited.
        last_seen = {
            name: ray.get(ns.dump_tables.remote(), timeout=60)["brokerLiveTable"][B]["lastUpdateTimestamp"]
            for name, ns in dep.namesrvs.items()
        }
        wait_for_route_everywhere(
            dep, TOPIC, lambda r: "broker-b" not in broker_names(r), timeout=(EXPIRY_MS + SCAN_MS) / 1000 + 5
        )
        for name, ns in dep.namesrvs.items():
            events = removals_of(ns, B)[earlier[name]:]
            assert [e.cause for e in events] == ["expired"], f"{name}: {events}"
            waited = events[0].t_ms - last_seen[name]
            assert waited > EXPIRY_MS, f"{name} removed {B} {waited} ms after its last heartbeat"
            assert waited <= EXPIRY_MS + SCAN_MS + 3000, f"{name} took {waited} ms to expire {B}"
            since_stop = events[0].t_ms - stop_ms
            assert since_stop >= EXPIRY_MS - PERIOD_MS - 500, f"{name} expired {B} {since_stop} ms after stop"
        # Still alive to Ray: no channel removal happened, the watch is still pending.
        assert not any(e.cause == "channel" for ns in dep.namesrvs.values() for e in removals_of(ns, B))

    # Back on its next heartbeat (bound: one period plus a generous margin for a busy machine).
    wait_for_route_everywhere(dep, TOPIC, lambda r: "broker-b" in broker_names(r), PERIOD_MS / 1000 + 5)
    wait_for_route_everywhere(dep, TOPIC, lambda r: broker_names(r) == {"broker-a", "broker-b"}, 10)
    # Each NameServer answered the lite heartbeat with "unknown", so the broker registered in full
    # (counted when the broker reads the answer, which may be after the route already shows it).
    wait_until(lambda: stats(broker)["full_registrations"] >= full_before + len(dep.namesrvs), 10,
               "a full registration with each NameServer")
    for ns in dep.namesrvs.values():
        assert B in cluster_addrs(ns)


def test_killed_namesrv_restarts_empty_not_ready_then_refilled(shared: Deployment, topic: str) -> None:
    # The shared NameServers' 20 s window (SHARED_NAMESRV) so the "not ready" answer cannot be missed
    # however long the restart takes on a loaded machine; the gate still opens as soon as every known
    # broker is back, which is what this test waits for.
    dep = shared
    create_topic(dep, topic)
    ns0, ns1 = dep.namesrvs["namesrv-0"], dep.namesrvs["namesrv-1"]
    old_pid = namesrv_pid(ns0)
    broker_pids = [broker_info(b)["pid"] for b in dep.brokers.values()]

    with stopped(*broker_pids):  # no broker can re-register before we look
        dep.kill_namesrv("namesrv-0", restart=True)
        # Calls that reached the old process before it died fail with ActorUnavailableError; the
        # first answer comes from the restarted actor.
        status = wait_until(
            lambda: (s := ray.get(ns0.get_status.remote(), timeout=60))["pid"] != old_pid and s,
            30,
            "namesrv-0 to restart",
        )
        resp = route_of(ns0, topic)
        tables = ray.get(ns0.dump_tables.remote(), timeout=60)
    assert resp.code == ResponseCode.SYSTEM_ERROR and "not ready" in resp.remark, resp
    assert "known brokers" in resp.remark, resp.remark
    assert status["reconstructed"] and status["pid"] != old_pid and not status["ready"], status
    assert all(not table for table in tables.values()), f"restarted NameServer is not empty: {tables}"

    route = wait_for_route(ns0, topic, lambda r: broker_names(r) == {"broker-a", "broker-b"}, timeout=10)
    assert ray.get(ns0.get_status.remote(), timeout=60)["ready"]
    wait_until(
        lambda: stable_tables(ns0) == stable_tables(ns1), 10, "namesrv-0's tables to equal namesrv-1's"
    )
    assert normalize_route(route) == normalize_route(route_of(ns1, topic).wire_body())


def test_stale_watch_never_removes_a_newer_registration(deployments: DeploymentFactory) -> None:
    """Deterministic order: the new channel registers before the old one dies."""
    dep = deployments.deploy(brokers=[], namesrv_count=1)
    ns = dep.namesrvs["namesrv-0"]
    old, new = (ChannelStub.options(namespace=dep.spec.namespace).remote() for _ in range(2))
    ray.get([old.ping.remote(), new.ping.remote()], timeout=60)
    ident = {"clusterName": "C", "brokerAddr": "ghost-0", "brokerName": "ghost", "brokerId": 0}
    body = encode_body(
        {
            "topicConfigSerializeWrapper": {
                "topicConfigTable": {
                    TOPIC: {"topicName": TOPIC, "readQueueNums": 2, "writeQueueNums": 2, "perm": RW}
                },
                "dataVersion": {"timestamp": 1, "counter": 1},
            }
        }
    )
    # A long heartbeat timeout: only the channels may remove this broker in this test.
    for handle, token in ((old, "ghost-0#old"), (new, "ghost-0#new")):
        resp = ray.get(
            ns.register_broker.remote(
                body, channel=BrokerChannel(handle, token), heartbeatTimeoutMillis=60_000, **ident
            ),
            timeout=60,
        )
        assert resp.ok, resp
    wait_for_route(ns, TOPIC, lambda r: broker_addrs(r) == {"ghost-0"}, timeout=5)
    assert live_channel(ns, "ghost-0") == "ghost-0#new"

    ray.kill(old, no_restart=True)  # asynchronous: a ping sent right after may still be answered
    wait_until(lambda: not actor_alive(old, 10), 10, "the old channel's actor to die")
    assert_quiet(ns, TOPIC, 1.5)  # the old watch fires within ~10 ms of the kill: it changed nothing
    assert live_channel(ns, "ghost-0") == "ghost-0#new"
    assert removals_of(ns, "ghost-0") == []

    # The current channel still works.
    elapsed = time_route_changes(dep, TOPIC, lambda r: r is None, lambda: ray.kill(new, no_restart=True), 10)
    assert elapsed["namesrv-0"] < CHANNEL_BOUND_S
    assert [r.cause for r in removals_of(ns, "ghost-0")] == ["channel"]


def test_restarted_broker_survives_the_old_incarnations_watch(shared: Deployment, topic: str) -> None:
    """namesrv-1 sees the old watch fire before the new incarnation registers; namesrv-0 is stopped
    meanwhile, so both events are queued when it resumes and reach it in either order."""
    # Expiry out of the way (SHARED_NAMESRV): this test is about channels, and namesrv-0 is paused for a while.
    dep = shared
    create_topic(dep, topic)
    earlier = removals_since(dep, B)
    ns0, ns1 = dep.namesrvs["namesrv-0"], dep.namesrvs["namesrv-1"]
    old_token = broker_info(dep.brokers[B])["token"]

    with stopped(namesrv_pid(ns0)):
        dep.kill_broker(B)
        wait_for_route(ns1, topic, lambda r: B not in broker_addrs(r), timeout=CHANNEL_BOUND_S)
        new = dep.restart_broker(B)
        new_token = broker_info(new)["token"]
        assert new_token != old_token
        wait_for_route(ns1, topic, lambda r: B in broker_addrs(r), timeout=10)

    wait_until(lambda: live_channel(ns0, B) == new_token, 10, f"{B}'s new incarnation on namesrv-0")
    wait_for_route(ns0, topic, lambda r: B in broker_addrs(r), timeout=10)
    seen = {name: len(removals_of(ns, B)) - earlier[name] for name, ns in dep.namesrvs.items()}
    assert_quiet_everywhere(dep, topic, 1.5)
    for name, ns in dep.namesrvs.items():
        assert live_channel(ns, B) == new_token, name
        events = removals_of(ns, B)[earlier[name]:]
        assert len(events) == seen[name] and all(e.cause == "channel" for e in events), f"{name}: {events}"
        status = ray.get(ns.get_status.remote(), timeout=60)
        assert any(b["broker_addr"] == B and b["watched"] for b in status["brokers"])
    assert seen["namesrv-1"] == 1
    assert seen["namesrv-0"] <= 1


def test_unreachable_namesrv_does_not_slow_registration(shared: Deployment, topic: str) -> None:
    dep = shared
    ns0, ns1 = dep.namesrvs["namesrv-0"], dep.namesrvs["namesrv-1"]
    broker = dep.brokers[A]

    with stopped(namesrv_pid(ns0)):
        t_ms = time.time() * 1000
        t0 = time.monotonic()
        outcomes = ray.get(broker.register_broker_all.remote(), timeout=30)
        elapsed = time.monotonic() - t0
        assert outcomes["namesrv-1"] in ("registered", "heartbeat"), outcomes
        assert outcomes["namesrv-0"] == "failed: timeout", outcomes
        assert elapsed < REGISTER_TIMEOUT_S + 1.5, f"registerBrokerAll took {elapsed:.2f} s"
        live = ray.get(ns1.dump_tables.remote(), timeout=60)["brokerLiveTable"][A]
        assert live["lastUpdateTimestamp"] >= t_ms - 1

        # A topic change is acknowledged within the timeout and is on the healthy NameServer at once.
        t0 = time.monotonic()
        resp = ray.get(broker.create_topic.remote(topic, 2, 2), timeout=30)
        elapsed = time.monotonic() - t0
        assert resp.ext_fields["registered"] == {"namesrv-0": "failed: timeout", "namesrv-1": "registered"}
        assert elapsed < REGISTER_TIMEOUT_S + 1.5, f"create_topic took {elapsed:.2f} s"
        assert route_of(ns1, topic).ok

    # The paused NameServer catches up from the broker's next registrations.
    wait_for_route(ns0, topic, lambda r: broker_addrs(r) == {A}, timeout=10)


# ============================================================================ durability
@pytest.mark.parametrize("flush", ["SYNC_FLUSH", pytest.param("ASYNC_FLUSH", marks=pytest.mark.slow)])
def test_broker_sigkill_and_restart_keeps_every_acknowledged_message(
    deployments: DeploymentFactory, flush: str
) -> None:
    dep = deploy_with_topic(
        deployments, brokers=[BrokerSpec("broker-a")], namesrv_count=1, broker_overrides={"flush_disk_type": flush}
    )
    broker = dep.brokers[A]
    n = 200
    bodies = [f"msg-{i}".encode() * (1 + i % 7) for i in range(n)]
    sends = [broker.send_message.remote(TOPIC, i % 4, body, {"i": str(i)}) for i, body in enumerate(bodies)]
    acked: dict[tuple[int, int], bytes] = {}
    for body, resp in zip(bodies, ray.get(sends, timeout=60), strict=True):
        assert resp.ok and resp.ext_fields["status"] == "SEND_OK", resp
        acked[(resp.ext_fields["queueId"], resp.ext_fields["queueOffset"])] = body
    assert len(acked) == n and {k[0] for k in acked} == {0, 1, 2, 3}
    for q in range(4):  # offsets are dense per queue
        assert sorted(o for qq, o in acked if qq == q) == list(range(n // 4))

    dep.signal_broker(A, signal.SIGKILL)
    wait_for_route_everywhere(dep, TOPIC, lambda r: r is None, timeout=CHANNEL_BOUND_S + 3)
    broker = dep.restart_broker(A)

    info = broker_info(broker)
    assert info["recovered_messages"] == n and info["truncated_bytes"] == 0, info
    stored: dict[tuple[int, int], bytes] = {}
    for q in range(4):
        page = pull_all(broker, TOPIC, q)
        assert page["max_offset"] == n // 4
        for m in page["messages"]:
            stored[(q, m["queue_offset"])] = m["body"]
            assert m["properties"]["i"].isdigit()
    assert stored == acked

    # The restarted broker is routable again and appends after the recovered offsets.
    wait_for_route_everywhere(dep, TOPIC, lambda r: broker_addrs(r) == {A}, timeout=10)
    resp = ray.get(broker.send_message.remote(TOPIC, 0, b"after restart"), timeout=60)
    assert resp.ok and resp.ext_fields["queueOffset"] == n // 4


# ============================================================================ heartbeats and lifecycle
def test_lite_heartbeats_in_steady_state_and_full_registration_after_namesrv_restart(
    shared: Deployment, topic: str
) -> None:
    dep = shared
    create_topic(dep, topic, masters=(A,))
    earlier = removals_since(dep, A)
    broker = dep.brokers[A]
    nss = len(dep.namesrvs)
    base = stats_after_lite_rounds(broker, nss, 2)
    assert base["last_body_bytes"] > 0
    seen = {n: ray.get(ns.dump_tables.remote(), timeout=60)["brokerLiveTable"][A] for n, ns in dep.namesrvs.items()}

    now = stats_after_lite_rounds(broker, nss, 3)
    assert now["full_registrations"] == base["full_registrations"], (base, now)
    # A round of lite heartbeats never builds the topic table (its cost is independent of topics).
    assert now["bodies_encoded"] == base["bodies_encoded"], (base, now)
    assert now["register_failures"] == base["register_failures"]
    # The lite heartbeats alone refreshed the broker's liveness on every NameServer.
    for name, ns in dep.namesrvs.items():
        live = ray.get(ns.dump_tables.remote(), timeout=60)["brokerLiveTable"][A]
        assert live["lastUpdateTimestamp"] > seen[name]["lastUpdateTimestamp"], name
        assert live["dataVersion"] == seen[name]["dataVersion"] and live["channel"] == seen[name]["channel"]
        assert removals_of(ns, A)[earlier[name]:] == []

    dep.kill_namesrv("namesrv-0", restart=True)
    after = wait_until(
        lambda: (s := stats(broker))["full_registrations"] > now["full_registrations"] and s,
        60,
        "a full registration to the restarted NameServer",
    )
    assert after["last_body_bytes"] > 0
    wait_for_route(dep.namesrvs["namesrv-0"], topic, lambda r: broker_addrs(r) == {A}, timeout=60)

    # ...and back to lite heartbeats only.
    settled = stats_after_lite_rounds(broker, nss, 2)
    later = stats_after_lite_rounds(broker, nss, 2)
    assert later["full_registrations"] == settled["full_registrations"], (settled, later)


def test_topic_deleted_on_one_namesrv_comes_back_from_the_broker_that_still_holds_it(
    shared: Deployment, topic: str
) -> None:
    """RocketMQ 5 re-creates a topic its master still reports; here the lite heartbeat's answer
    asks for one full registration (same DataVersion), which brings the route back."""
    dep = shared
    create_topic(dep, topic, masters=(A,))
    broker = dep.brokers[A]
    ns = dep.namesrvs["namesrv-0"]
    base = stats_after_lite_rounds(broker, len(dep.namesrvs), 1)

    assert ray.get(ns.delete_topic_in_namesrv.remote(topic=topic), timeout=60).ext_fields["deleted"] is True

    wait_for_route(ns, topic, lambda r: r is not None and broker_addrs(r) == {A}, timeout=10, what="route back")
    after = wait_until(
        lambda: (st := stats(broker))["full_registrations"] > base["full_registrations"] and st,
        10, "the full registration's answer",
    )
    assert after["full_registrations"] == base["full_registrations"] + 1, (base, after)
    assert topic in ray.get(broker.get_topic_config_table.remote(), timeout=60)  # the broker never changed its table
    settled = stats_after_lite_rounds(broker, len(dep.namesrvs), 2)
    assert settled["full_registrations"] == after["full_registrations"], "then lite heartbeats again"


def test_graceful_shutdown_unregisters_from_every_namesrv(shared: Deployment, topic: str) -> None:
    dep = shared
    create_topic(dep, topic)
    earlier = removals_since(dep, B)

    outcomes = dep.shutdown_broker(B)

    assert outcomes == dict.fromkeys(dep.namesrvs, "unregistered")
    for name, ns in dep.namesrvs.items():  # unregistered before shutdown answered: no waiting
        assert broker_names(route_of(ns, topic).wire_body()) == {"broker-a"}, name
        assert cluster_addrs(ns) == {A}, name
        assert [e.cause for e in removals_of(ns, B)[earlier[name]:]] == ["unregister"], name
    assert_quiet_everywhere(dep, topic, 1.0)  # the closing channel afterwards removes nothing more
    for name, ns in dep.namesrvs.items():
        assert [e.cause for e in removals_of(ns, B)[earlier[name]:]] == ["unregister"], name


def test_broker_permission_change_shows_in_routes(shared: Deployment, topic: str) -> None:
    dep = shared
    create_topic(dep, topic)
    broker = dep.brokers[A]

    resp = ray.get(broker.update_broker_permission.remote(int(Perm.READ)), timeout=60)
    assert resp.ok and resp.ext_fields["registered"] == dict.fromkeys(dep.namesrvs, "registered"), resp
    for name, ns in dep.namesrvs.items():
        assert queue_perms(route_of(ns, topic).wire_body()) == {"broker-a": 4, "broker-b": RW}, name
        tbw = route_of(ns, AUTO_CREATE_TOPIC_KEY_TOPIC).wire_body()
        assert queue_perms(tbw) == {"broker-a": 4, "broker-b": PERM_ALL}, name
    refused = ray.get(broker.send_message.remote(topic, 0, b"x"), timeout=60)
    assert refused.code == ResponseCode.NO_PERMISSION, refused

    resp = ray.get(broker.update_broker_permission.remote(RW), timeout=60)
    assert resp.ok
    for name, ns in dep.namesrvs.items():  # each topic's own perm is back
        assert queue_perms(route_of(ns, topic).wire_body()) == {"broker-a": RW, "broker-b": RW}, name
        tbw = route_of(ns, AUTO_CREATE_TOPIC_KEY_TOPIC).wire_body()
        assert queue_perms(tbw) == {"broker-a": PERM_ALL, "broker-b": PERM_ALL}, name
    assert ray.get(broker.send_message.remote(topic, 0, b"x"), timeout=60).ok


# ============================================================================ bad input
def test_bad_requests_get_clear_errors_and_change_nothing(shared: Deployment, topic: str) -> None:
    dep = shared
    create_topic(dep, topic, masters=(A,))
    ns = dep.namesrvs["namesrv-0"]
    broker = dep.brokers[A]
    ident = {"clusterName": "DefaultCluster", "brokerAddr": A, "brokerName": "broker-a", "brokerId": 0}
    good_body = encode_body(
        {
            "topicConfigSerializeWrapper": {
                "topicConfigTable": {
                    "Other": {"topicName": "Other", "readQueueNums": 1, "writeQueueNums": 1}
                },
                "dataVersion": {"timestamp": 1, "counter": 99},
            }
        }
    )
    before_ns = {name: stable_tables(h) for name, h in dep.namesrvs.items()}
    before_topics = ray.get(broker.get_topic_config_table.remote(), timeout=60)
    before_queues = broker_info(broker)["queues"]
    # No queue of the topics below holds a message yet (other tests' topics may).
    assert not [q for q in before_queues if q.split(":")[0] in (topic, "NotYetCreated", "Fine")], before_queues

    def ns_error(ref: Any, code: int, *words: str) -> None:
        resp = ray.get(ref, timeout=60)
        assert resp.code == code, resp
        assert all(w in resp.remark for w in words), resp.remark

    SE = ResponseCode.SYSTEM_ERROR
    ns_error(ns.process.remote(RemotingRequest(999)), ResponseCode.REQUEST_CODE_NOT_SUPPORTED, "999")
    ns_error(ns.process.remote("not a request"), SE, "RemotingRequest")
    ns_error(ns.register_broker.remote(b"\xc1\x00garbage", **ident), SE, "msgpack")
    ns_error(ns.register_broker.remote(good_body[:-3], **ident), SE, "msgpack")
    ns_error(ns.register_broker.remote(good_body, bodyCrc32=body_crc32(good_body) ^ 1, **ident), SE, "crc32")
    ns_error(ns.register_broker.remote(good_body, **{**ident, "brokerId": "0"}), SE, "brokerId")
    ns_error(ns.register_broker.remote(good_body, **{**ident, "brokerAddr": "no spaces"}), SE, "brokerAddr")
    # As in RocketMQ, a name no topic can have simply has no route.
    ns_error(ns.get_routeinfo_by_topic.remote(topic="bad topic!"), ResponseCode.TOPIC_NOT_EXIST, "No topic route")
    ns_error(ns.get_routeinfo_by_topic.remote(topic="T" * 200), ResponseCode.TOPIC_NOT_EXIST, "No topic route")
    ns_error(ns.get_routeinfo_by_topic.remote(), SE, "topic")
    ns_error(ns.get_routeinfo_by_topic.remote(topic=7), SE, "topic")
    ns_error(ns.unregister_broker.remote(**{**ident, "brokerId": "zero"}), SE, "brokerId")
    blacklisted = encode_body({"kvConfigPath": "/tmp/x"})
    ns_error(ns.update_namesrv_config.remote(blacklisted), ResponseCode.NO_PERMISSION, "black list")
    # A stale unregister naming another address at the master's id removes nothing.
    stale = ray.get(ns.unregister_broker.remote(**{**ident, "brokerAddr": "someone-else"}), timeout=60)
    assert stale.ok and stale.ext_fields["removed"] is False
    with pytest.raises(MQServerError, match="topic_versions") as refused:
        ray.get(ns.listen_for_change.remote({topic: "1"}, 0.1), timeout=60)
    assert refused.value.code == SE

    def send_error(code: int, *args: Any, words: tuple[str, ...] = (), **kwargs: Any) -> None:
        resp = ray.get(broker.send_message.remote(*args, **kwargs), timeout=60)
        assert resp.code == code, (args, kwargs, resp)
        assert all(w in resp.remark for w in words), resp.remark

    ILLEGAL = ResponseCode.MESSAGE_ILLEGAL
    send_error(ILLEGAL, topic, 0, b"", words=("non-empty",))
    send_error(ILLEGAL, topic, 0, b"x" * (4 * 1024 * 1024 + 1), words=("exceeds",))
    send_error(ILLEGAL, topic, 0, "text, not bytes", words=("bytes",))
    send_error(ILLEGAL, topic, 0, None, words=("bytes",))
    send_error(ILLEGAL, "bad topic!", 0, b"x", words=("characters",))
    send_error(ILLEGAL, "", 0, b"x", words=("blank",))
    send_error(ILLEGAL, topic, 0, b"x", properties={"k": 1}, words=("properties",))
    send_error(SE, topic, 4, b"x", words=("queueId[4]",))
    send_error(SE, topic, -1, b"x", words=("queueId[-1]",))
    send_error(SE, topic, True, b"x", words=("queueId",))
    send_error(SE, topic, "0", b"x", words=("queueId",))
    # A bad queue id for a topic the broker would auto-create must not create it either.
    send_error(SE, "NotYetCreated", 99, b"x", words=("queueId[99]",))
    send_error(SE, "NotYetCreated", 4, b"x", words=("queueId[4]",))  # at most 4 queues by default
    send_error(ILLEGAL, "NotYetCreated", 0, b"x", default_topic_queue_nums="4", words=("defaultTopicQueueNums",))
    bad_topic = ray.get(broker.create_topic.remote("Fine", -1, 4), timeout=60)
    assert bad_topic.code == SE and "invalid topic config" in bad_topic.remark
    assert ray.get(broker.update_broker_permission.remote(8), timeout=60).code == SE
    bad_pull = ray.get(broker.pull_message.remote(topic, 0, -1), timeout=60)
    assert bad_pull["code"] == SE and "offset" in bad_pull["remark"] and bad_pull["messages"] == []

    assert ray.get(broker.get_topic_config_table.remote(), timeout=60) == before_topics
    assert broker_info(broker)["queues"] == before_queues
    for name, h in dep.namesrvs.items():
        assert stable_tables(h) == before_ns[name], name
    assert route_of(ns, "NotYetCreated").code == ResponseCode.TOPIC_NOT_EXIST
