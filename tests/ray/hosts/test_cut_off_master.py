"""A master cut off by the kernel while it still runs (issue 36, item 4; ray-project/ray #26405).

Three hosts as network namespaces: NameServer, controller and Ray's head on host 0, broker-a's slave
on host 1, its ASYNC master on host 2 (controller mode, the fast profile: 500 ms heartbeats, the
controller's 3 s timeout, the master's 2.5 s lease). Ray's health checks are quick here, so Ray
declares host 2's node dead within seconds, as early as the controller's timeout or earlier.

The kernel isolates host 2 from the other hosts; this test's driver (on the bridge, in no host)
still reaches the old master's TCP port, as a client on its side of the partition would, and sends
to it straight every few milliseconds. What must hold:
- every send the old master acknowledged was answered before the new master took the role (with an
  ASYNC master, RocketMQ's old master goes on acknowledging, and those messages are cut from its log
  when it comes back as a slave);
- once cut off, it refuses (SERVICE_NOT_AVAILABLE, its lease ran out), and still does after Ray
  declared it dead with its node: the process runs on, and answers;
- Ray's verdict is noted by the controller and starts no election of its own.

Needs root (namespaces, nftables)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
import ray

from actors.deployment.spec import BrokerSpec, ClusterSpec
from clients.chaos.hosts.ray_nodes import RayOnHosts
from namesrv.common.waiting import wait_until
from namesrv.protocol.codes import BrokerRequestCode, ResponseCode
from namesrv.protocol.message.properties import properties_to_string
from namesrv.remoting.config import ALL_INTERFACES
from tests.support.raw_remoting import RawClient
from tests.support.ray_cluster import FAILOVER_HA, broker_status
from tests.support.test_bed import Bed, deployed_bed, require_test_bed

require_test_bed()

HOSTS = 3
CONTROL_HOST, SLAVE_HOST, MASTER_HOST = 0, 1, 2
TOPIC = "TopicCutOff"
RAY_HEALTH = {"RAY_health_check_initial_delay_ms": "1000", "RAY_health_check_period_ms": "1000",
              "RAY_health_check_timeout_ms": "1000", "RAY_health_check_failure_threshold": "3"}
"""Ray declares a node dead after three missed 1 s health checks (its defaults take 15-30 s)."""
BOUND_S = 60.0


@pytest.fixture(scope="module")
def bed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bed]:
    data = tmp_path_factory.mktemp("cutoff") / "data"

    def spec(cluster: RayOnHosts, namespace: str) -> ClusterSpec:
        made = ClusterSpec(
            namesrv_count=1,
            brokers=[BrokerSpec("broker-a", 0, node_id=cluster.node_id(MASTER_HOST)),
                     BrokerSpec("broker-a", 1, node_id=cluster.node_id(SLAVE_HOST))],
            profile="fast", namespace=namespace, data_dir=str(data), controller=True,
            broker_overrides=FAILOVER_HA | {"broker_role": "ASYNC_MASTER"},
            namesrv_port=0, broker_port=0, listen_host=ALL_INTERFACES,
        )
        made.namesrv_node_ids = [cluster.node_id(CONTROL_HOST)]
        return made

    with deployed_bed(HOSTS, spec, "cutoff", ray_env=RAY_HEALTH) as bed:
        yield bed


def send_straight(client: RawClient, i: int) -> tuple[int, str]:
    """One SEND_MESSAGE on the connection: the answer's code and remark."""
    ext = {"producerGroup": "PG_cutoff", "topic": TOPIC, "defaultTopic": "TBW102", "defaultTopicQueueNums": 4,
           "queueId": i % 4, "sysFlag": 0, "bornTimestamp": int(time.time() * 1000), "flag": 0,
           "properties": properties_to_string({"UNIQ_KEY": f"CUT{i:08d}"})}
    answer, _ = client.call(BrokerRequestCode.SEND_MESSAGE, ext, f"m{i}".encode())
    return int(answer["code"]), str(answer.get("remark") or "")


def test_a_cut_off_master_stops_acknowledging_before_another_is_elected(bed: Bed,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    dep, nemesis = bed.dep, bed.nemesis
    old, new = "broker-a-0", "broker-a-1"
    wait_until(lambda: broker_status(dep, old)["role"] == "ASYNC_MASTER" and broker_status(dep, new)["role"] == "SLAVE",
               BOUND_S, f"{old} master and {new} slave")
    assert ray.get(dep.brokers[dep.addr_of(old)].create_topic.remote(TOPIC, 4, 4), timeout=30).ok
    wait_until(lambda: len(broker_status(dep, old)["controller"]["sync_state_set"]) == 2, BOUND_S,
               "the slave in the controller's SyncStateSet")
    epoch = broker_status(dep, old)["masterEpoch"]
    old_id = broker_status(dep, old)["controller"]["controller_broker_id"]
    master_addr = next(s.addr for s in dep.broker_specs.values() if s.broker_name == "broker-a" and s.broker_id == 0)
    assert master_addr.startswith(bed.hosts.address(MASTER_HOST) + ":")

    client = RawClient(master_addr, timeout_s=5)
    answers: list[tuple[float, int, str]] = []  # (answered at, wall-clock s; code; remark)
    try:
        assert send_straight(client, 0)[0] == ResponseCode.SUCCESS
        nemesis.isolate(MASTER_HOST)
        cut_at = time.time()
        i = 0

        def elected_and_refused() -> Any:
            nonlocal i
            i += 1
            code, remark = send_straight(client, i)
            answers.append((time.time(), code, remark))
            status = broker_status(dep, new)
            return status if status["role"] == "ASYNC_MASTER" and code != ResponseCode.SUCCESS else None

        promoted = wait_until(elected_and_refused, BOUND_S, f"{new} elected and {old} refusing", interval_s=0.02)
        elected_at = promoted["role_log"][-1]["atMs"] / 1000
        assert promoted["masterEpoch"] == epoch + 1 and promoted["role_log"][-1]["role"] == "ASYNC_MASTER"

        acked = [t for t, code, _ in answers if code == ResponseCode.SUCCESS]
        refusals = [(t, remark) for t, code, remark in answers if code != ResponseCode.SUCCESS]
        assert acked, "the old master took sends right after the cut (the probe reaches it)"
        assert max(acked) < elected_at, "the old master acknowledged a send after the new master took the role"
        assert all(code in (ResponseCode.SUCCESS, ResponseCode.SERVICE_NOT_AVAILABLE) for _, code, _ in answers)
        assert "has not heard from the controller" in refusals[0][1]
        fenced_at = refusals[0][0]
        assert all(code != ResponseCode.SUCCESS for t, code, _ in answers if t >= fenced_at), \
            "once fenced, the cut-off master must not take a send again"

        # Ray declares the cut-off node dead; its broker runs on and still refuses
        node = bed.cluster.node_id(MASTER_HOST)
        wait_until(lambda: node not in {n["NodeID"] for n in ray.nodes() if n["Alive"]}, BOUND_S,
                   "Ray to declare the cut-off node dead", interval_s=0.1)
        verdict_at = time.time()
        code, remark = send_straight(client, 10_000)
        assert code == ResponseCode.SERVICE_NOT_AVAILABLE and "controller" in remark, \
            "the broker Ray declared dead still runs, and must refuse"
        notes = wait_until(lambda: [d for d in ray.get(dep.controller.stats.remote(), timeout=30)["deaths"]
                                    if d["brokerId"] == old_id and d["how"].startswith("declared dead with its node")],
                           BOUND_S, "the controller's note of Ray's verdict")
        assert "not definite" in notes[0]["how"]
        assert broker_status(dep, new)["masterEpoch"] == epoch + 1, "Ray's verdict must not start another election"
    finally:
        client.close()
        nemesis.heal()
    with capsys.disabled():
        print(f"\n[cut-off master] fenced {fenced_at - cut_at:.2f} s after the cut (last ack at "
              f"{max(acked) - cut_at:.2f} s, {len(acked)} acknowledged while cut off), new master "
              f"{elected_at - cut_at:.2f} s after the cut, Ray declared the node dead after "
              f"{verdict_at - cut_at:.2f} s: its broker still answered, refusing")
