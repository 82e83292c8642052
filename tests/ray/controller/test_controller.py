"""The controller actor on a real local Ray: elections from heartbeats, a silent or dead master
replaced, and the controller's own deaths survived through the GCS key-value store."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
import ray
from ray.exceptions import RayActorError
from ray.experimental import internal_kv

from actors.controller.actor import CONTROLLER_NAME, kv_prefix
from actors.controller.gcs_kv import KV_NAMESPACE
from actors.controller.start import start_controller
from actors.deployment.spec import BrokerSpec
from actors.namesrv.housekeeping import BrokerChannel
from namesrv.common.waiting import wait_until
from namesrv.controller.codes import ControllerRequestCode as Req
from namesrv.controller.codes import ControllerResponseCode as Code
from namesrv.controller.config import ControllerConfig
from namesrv.controller.events import ElectMasterEvent, encode_event
from namesrv.protocol import fastjson
from namesrv.remoting.client import RemotingClient
from namesrv.remoting.config import RemotingServerConfig
from tests.support.ray_cluster import unique_namespace

CLUSTER = "DefaultCluster"
BROKER = "broker-a"
FAST = ControllerConfig(broker_heartbeat_timeout_ms=1_000, scan_not_active_broker_interval_ms=100,
                        scan_inactive_master_interval_ms=100, snapshot_every_events=4)


def addr(i: int) -> str:
    return f"127.0.0.1:{20910 + i}"


def call(handle: Any, method: str, *args: Any, **kwargs: Any) -> Any:
    return ray.get(getattr(handle, method).remote(*args, **kwargs), timeout=60)


class Controller:
    """A controller actor in a namespace of its own; found again by name after Ray restarts it."""

    def __init__(self, config: ControllerConfig, remoting: RemotingServerConfig | None = None) -> None:
        self.namespace = unique_namespace("ctl")
        self.handle = start_controller(self.namespace, config, remoting=remoting)
        call(self.handle, "stats")

    def __call__(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return call(self.handle, method, *args, **kwargs)

    def close(self) -> None:
        ray.kill(self.handle, no_restart=True)


class Heartbeats:
    """Brokers' heartbeats, sent every 100 ms from a thread, for the replicas listed in `alive`
    (with their epoch and max offset); a replica taken out of `alive` falls silent."""

    def __init__(self, ctl: Controller) -> None:
        self.ctl = ctl
        self.alive: dict[int, tuple[int, int]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            for bid, (epoch, offset) in list(self.alive.items()):
                # fire and forget, as a broker's periodic heartbeat: a restarting controller never
                # stalls the next beat (a beat sent to the dead incarnation is simply lost)
                self.ctl.handle.heartbeat.remote(CLUSTER, BROKER, addr(bid), bid, epoch=epoch, max_offset=offset)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)


@pytest.fixture
def ctl(ray_local: str) -> Iterator[Controller]:
    c = Controller(FAST)
    yield c
    c.close()


@pytest.fixture
def beats(ctl: Controller) -> Iterator[Heartbeats]:
    h = Heartbeats(ctl)
    yield h
    h.close()


def join(ctl: Controller, n: int) -> list[int]:
    ids = []
    for _ in range(n):
        next_id = ctl("get_next_broker_id", CLUSTER, BROKER).header["nextBrokerId"]
        assert ctl("apply_broker_id", CLUSTER, BROKER, next_id, f"{addr(next_id)};1").ok
        assert ctl("register_broker", CLUSTER, BROKER, next_id, addr(next_id)).ok
        ids.append(next_id)
    return ids


def master_with_set(ctl: Controller, beats: Heartbeats, members: set[int]) -> None:
    """Replicas 1..n heartbeat; 1 becomes master (epoch 1) and takes the others into its SyncStateSet."""
    for bid in join(ctl, len(members)):
        beats.alive[bid] = (1, 0)
    wait_until(lambda: len(ctl("stats")["live_brokers"]) == len(members), 30, "every replica heard")
    first = ctl("elect_master", BROKER, 1)
    assert first.ok and first.header["masterBrokerId"] == 1 and first.header["masterEpoch"] == 1
    assert ctl("alter_sync_state_set", BROKER, 1, 1, sorted(members), first.header["syncStateSetEpoch"]).ok


def test_heartbeats_elect_a_master_and_a_silent_master_is_replaced(ctl: Controller, beats: Heartbeats) -> None:
    master_with_set(ctl, beats, {1, 2, 3})
    known = {BROKER: tuple(ctl("stats")["epochs"][BROKER])}
    beats.alive[2] = (1, 900)  # 2 holds more of the log ...
    beats.alive[3] = (2, 100)  # ... but 3 saw a newer epoch: 3 wins
    del beats.alive[1]  # the master falls silent (a SIGSTOP, a partition): only its heartbeats tell
    changed = call(ctl.handle, "wait_for_change", known, 30)
    info = changed[BROKER]
    assert info.header["masterBrokerId"] == 3 and info.header["masterEpoch"] == 2
    assert info.body["syncStateSet"] == [3]
    # the old master comes back: its heartbeat answer tells it it was deposed; it cannot alter the set
    hb = ctl("heartbeat", CLUSTER, BROKER, addr(1), 1)
    assert (hb.header["masterBrokerId"], hb.header["masterEpoch"]) == (3, 2)
    assert ctl("alter_sync_state_set", BROKER, 1, 1, [1, 2], 2).code == Code.CONTROLLER_INVALID_MASTER


def test_a_dead_broker_actor_is_replaced_at_once_without_waiting_for_heartbeats(deployments: Any) -> None:
    dep = deployments.deploy([BrokerSpec(BROKER, 0), BrokerSpec(BROKER, 1)], namesrv_count=1)
    ctl = Controller(FAST.model_copy(update={"broker_heartbeat_timeout_ms": 120_000}))
    try:
        actors = {1: dep.brokers[f"{BROKER}-0"], 2: dep.brokers[f"{BROKER}-1"]}
        join(ctl, 2)
        channels = {bid: BrokerChannel(h, call(h, "get_runtime_info")["token"]) for bid, h in actors.items()}
        for bid, channel in channels.items():
            assert ctl("heartbeat", CLUSTER, BROKER, addr(bid), bid, epoch=1, max_offset=0, channel=channel).ok
        assert ctl("elect_master", BROKER, 1).ok
        assert ctl("alter_sync_state_set", BROKER, 1, 1, [1, 2], 1).ok
        wait_until(lambda: ctl("stats")["watched_channels"] == 2, 30, "both channels watched")
        ray.kill(actors[1], no_restart=True)
        info = call(ctl.handle, "wait_for_change", {BROKER: (1, 2)}, 30)[BROKER]  # 2 min before a timeout would
        assert info.header["masterBrokerId"] == 2 and info.header["masterEpoch"] == 2
        # a heartbeat the dead broker sent just before it died arrives late: it does not revive it
        late = ctl("heartbeat", CLUSTER, BROKER, addr(1), 1, epoch=1, max_offset=0, channel=channels[1])
        assert late.code == Code.CONTROLLER_BROKER_NOT_ALIVE
        assert (BROKER, 1) not in [tuple(b) for b in ctl("stats")["live_brokers"]]
    finally:
        ctl.close()


def test_controller_killed_mid_election_restores_its_state_and_never_forks_an_epoch(
    ctl: Controller, beats: Heartbeats
) -> None:
    """Four manual elections, the controller killed during each: held before its event is persisted
    (lost, never announced), held after (replayed, though never announced), after its answer
    (durable), and at a random moment (either). Every master epoch ever seen names one master."""
    master_with_set(ctl, beats, {1, 2, 3})
    seen: dict[int, int] = {1: 1}  # masterEpoch -> masterBrokerId, from every answer and every restored state

    def observe(epoch: int, master: int) -> None:
        assert seen.setdefault(epoch, master) == master, f"epoch {epoch}: masters {seen[epoch]} and {master}"

    for round_, failpoint in enumerate(["before-persist", "after-persist", "answered", "racing"]):
        before = ctl("get_replica_info", BROKER)
        master, epoch = before.header["masterBrokerId"], before.header["masterEpoch"]
        sync = ctl("get_sync_state_data", [BROKER]).body["replicasInfoTable"][BROKER]
        if len(sync["inSyncReplicas"]) < 3:  # the last election shrank it to its new master
            altered = ctl("alter_sync_state_set", BROKER, master, epoch, [1, 2, 3], sync["syncStateSetEpoch"])
            assert altered.ok, altered
        target = [b for b in (1, 2, 3) if b != master][round_ % 2]
        incarnation = ctl("stats")["incarnation"]
        if failpoint in ("before-persist", "after-persist"):
            ctl("set_failpoint", failpoint)
        pending = ctl.handle.elect_master.remote(BROKER, target, True)
        if failpoint in ("before-persist", "after-persist"):
            assert ctl("wait_failpoint", failpoint, 30), f"the election never reached {failpoint}"
        elif failpoint == "answered":
            ray.wait([pending], timeout=60)
        ray.kill(ctl.handle, no_restart=False)
        try:
            answer = ray.get(pending, timeout=60)
        except RayActorError:
            answer = None  # killed before answering
        wait_until(lambda old=incarnation: ctl("stats")["incarnation"] != old, 60, "the controller back after the kill")
        after = ctl("get_replica_info", BROKER).header
        observe(after["masterEpoch"], after["masterBrokerId"])
        if failpoint == "before-persist":
            assert answer is None and (after["masterEpoch"], after["masterBrokerId"]) == (epoch, master)
        elif failpoint in ("after-persist", "answered"):
            assert (after["masterEpoch"], after["masterBrokerId"]) == (epoch + 1, target)
            assert (answer is None) == (failpoint == "after-persist")
        else:
            assert after["masterEpoch"] in (epoch, epoch + 1)
        if answer is not None and answer.ok:
            observe(answer.header["masterEpoch"], answer.header["masterBrokerId"])
            assert after["masterEpoch"] >= answer.header["masterEpoch"], "an acknowledged election was lost"
        assert ctl("stats")["stale_reloads"] == 0
        wait_until(lambda: len(ctl("stats")["live_brokers"]) == 3, 30, "every replica heard again")
    # after all the restarts, a silent master is still replaced, by exactly one new master epoch
    before = ctl("get_replica_info", BROKER).header
    del beats.alive[before["masterBrokerId"]]
    known = {BROKER: tuple(ctl("stats")["epochs"][BROKER])}
    info = call(ctl.handle, "wait_for_change", known, 30)[BROKER]
    observe(info.header["masterEpoch"], info.header["masterBrokerId"])
    assert info.header["masterEpoch"] == before["masterEpoch"] + 1


def test_state_lives_in_the_gcs_kv_under_the_namespace(ctl: Controller, beats: Heartbeats) -> None:
    master_with_set(ctl, beats, {1, 2})  # 2 applies, an election, an alter: 4 events, compacted
    assert ctl("elect_master", BROKER, 2, True).ok  # a 5th, after the snapshot
    keys = internal_kv._internal_kv_list(kv_prefix(ctl.namespace, CONTROLLER_NAME), namespace=KV_NAMESPACE)
    prefix = kv_prefix(ctl.namespace, CONTROLLER_NAME).encode()
    assert sorted(keys) == [prefix + b"/event/000000000005", prefix + b"/snapshot"]
    stats = ctl("stats")
    assert (stats["snapshot_index"], stats["last_index"]) == (4, 5)


def test_a_second_writer_in_the_gcs_makes_the_controller_reload_never_fork(ctl: Controller, beats: Heartbeats) -> None:
    """Another controller instance (a zombie on a partitioned node) appended an election: this one's
    next change loses the race for that index, is refused, and it adopts the other's history."""
    master_with_set(ctl, beats, {1, 2, 3})  # 5 events: 3 applies, an election, an alter
    stats = ctl("stats")
    prefix = kv_prefix(ctl.namespace, CONTROLLER_NAME)
    index = stats["last_index"] + 1
    assert not internal_kv._internal_kv_put(f"{prefix}/event/{index:012d}",
                                            encode_event(ElectMasterEvent(BROKER, 3)), overwrite=False,
                                            namespace=KV_NAMESPACE)
    refused = ctl("elect_master", BROKER, 2, True)
    assert refused.code == Code.CONTROLLER_NOT_LEADER and "state reloaded" in refused.remark
    after = ctl("get_replica_info", BROKER)
    assert (after.header["masterBrokerId"], after.header["masterEpoch"]) == (3, 2)
    assert ctl("stats")["stale_reloads"] == 1
    again = ctl("elect_master", BROKER, 3, True)  # its view is current again
    assert again.code == Code.CONTROLLER_MASTER_STILL_EXIST


def test_rocketmq_controller_codes_over_tcp(ray_local: str) -> None:
    """A broker's registration, heartbeats and election, and mqadmin's queries, over RocketMQ's
    remoting protocol; a master whose heartbeat connection closes is replaced at once (RocketMQ's
    onBrokerChannelClose), while its heartbeat timeout is 2 minutes."""
    ctl = Controller(FAST.model_copy(update={"broker_heartbeat_timeout_ms": 120_000}),
                     RemotingServerConfig(listen_port=0))
    try:
        host, port = ctl("stats")["remoting_address"].rsplit(":", 1)
        brokers = {bid: RemotingClient(host, int(port), timeout_s=30) for bid in (1, 2)}
        admin = RemotingClient(host, int(port), timeout_s=30)
        for bid, conn in brokers.items():
            nxt = conn.invoke(Req.CONTROLLER_GET_NEXT_BROKER_ID, {"clusterName": CLUSTER, "brokerName": BROKER})
            assert nxt.code == 0 and nxt.ext_fields["nextBrokerId"] == str(bid)
            applied = conn.invoke(Req.CONTROLLER_APPLY_BROKER_ID, {
                "clusterName": CLUSTER, "brokerName": BROKER, "appliedBrokerId": bid,
                "registerCheckCode": f"{addr(bid)};1700000000000"})
            assert applied.code == 0, applied.remark
            reg = conn.invoke(Req.CONTROLLER_REGISTER_BROKER, {"clusterName": CLUSTER, "brokerName": BROKER,
                                                               "brokerId": bid, "brokerAddress": addr(bid)})
            assert reg.code == 0 and fastjson.loads(reg.body) == {"syncStateSet": [], "syncStateSetEpoch": 0}
            conn.invoke_oneway(Req.BROKER_HEARTBEAT, {"clusterName": CLUSTER, "brokerName": BROKER,
                                                      "brokerAddr": addr(bid), "brokerId": bid, "epoch": 0,
                                                      "maxOffset": 0})
        wait_until(lambda: len(ctl("stats")["live_brokers"]) == 2, 30, "both heartbeats over TCP")
        elected = brokers[1].invoke(Req.CONTROLLER_ELECT_MASTER, {"clusterName": CLUSTER, "brokerName": BROKER,
                                                                  "brokerId": 1, "designateElect": False})
        assert elected.code == 0 and elected.ext_fields["masterBrokerId"] == "1"
        members = fastjson.loads(elected.body)["brokerMemberGroup"]["brokerAddrs"]  # standard JSON: version 479
        assert members == {"1": addr(1), "2": addr(2)}
        altered = brokers[1].invoke(Req.CONTROLLER_ALTER_SYNC_STATE_SET,
                                    {"brokerName": BROKER, "masterBrokerId": 1, "masterEpoch": 1},
                                    b'{"syncStateSet":[1,2],"syncStateSetEpoch":1}')
        assert altered.code == 0 and altered.ext_fields["newSyncStateSetEpoch"] == "2"
        stale = brokers[1].invoke(Req.CONTROLLER_ALTER_SYNC_STATE_SET,
                                  {"brokerName": BROKER, "masterBrokerId": 1, "masterEpoch": 0},
                                  b'{"syncStateSet":[1],"syncStateSetEpoch":2}')
        assert stale.code == 2000  # CONTROLLER_FENCED_MASTER_EPOCH

        meta = admin.invoke(Req.CONTROLLER_GET_METADATA_INFO)
        assert meta.code == 0 and meta.ext_fields["isLeader"] == "true"
        assert meta.ext_fields["controllerLeaderAddress"] == f"{host}:{port}"
        data = admin.invoke(Req.CONTROLLER_GET_SYNC_STATE_DATA, None, b'["broker-a"]')
        table = fastjson.loads(data.body)["replicasInfoTable"][BROKER]
        assert [r["brokerId"] for r in table["inSyncReplicas"]] == [1, 2] and table["masterEpoch"] == 1
        assert admin.invoke(Req.CONTROLLER_ELECT_MASTER, {}).code == 2005  # no brokerName: INVALID_REQUEST
        assert admin.invoke(105, {"topic": "t"}).code == 3  # not a controller code

        brokers[1].close()  # the master's connection closes: replaced without waiting for a timeout
        info = admin.invoke(Req.CONTROLLER_GET_REPLICA_INFO, {"brokerName": BROKER})
        known = {BROKER: (int(info.ext_fields["masterEpoch"]), 2)}
        changed = call(ctl.handle, "wait_for_change", known, 30)[BROKER]
        assert changed.header["masterBrokerId"] == 2 and changed.header["masterEpoch"] == 2
        switched = admin.invoke(Req.CONTROLLER_ELECT_MASTER, {"clusterName": CLUSTER, "brokerName": BROKER,
                                                             "brokerId": 1, "designateElect": True})
        assert switched.code == 2012  # broker 1 is dead: a manual switch to it fails
        brokers[2].close()
        admin.close()
    finally:
        ctl.close()
