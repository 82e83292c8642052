"""The unmodified RocketMQ C++ client (PyPI `rocketmq`) producing through a master kill in controller
mode (issue 21): SIGKILL of broker-a's master mid-stream, its slave takes over as brokerId 0, and
every message the client was told SEND_OK is then consumed by a fresh real consumer (0 lost).

The C++ client refreshes routes only every 30 s (pollNameServerInterval), so until then its sends
to broker-a fail over to broker-b (retryTimesWhenSendFailed), as with RocketMQ 5's own controller."""

from __future__ import annotations

import signal
import time
from typing import Any

import pytest
import ray

from actors.deployment.launcher import Deployment
from actors.deployment.spec import BrokerSpec
from namesrv.common.waiting import wait_until
from tests.e2e.test_real_client import finish, run_client, start_client
from tests.support.ray_cluster import DeploymentFactory, wait_for_route_everywhere

TOPIC = "RealFailover"
HA = {"slave_sync_interval_ms": 200, "slave_read_enable": True, "ha_poll_wait_ms": 300, "broker_role": "SYNC_MASTER",
      "slave_timeout_ms": 1_000, "controller_first_elect_delay_ms": 500}


def status(dep: Deployment, broker: str) -> dict[str, Any]:
    return ray.get(dep.brokers[dep.addr_of(broker)].status.remote(), timeout=30)


def master_routed(addr: str) -> Any:
    def check(route: dict[str, Any] | None) -> bool:
        return route is not None and any(bd["brokerName"] == "broker-a" and
                                         {str(k): v for k, v in bd["brokerAddrs"].items()}.get("0") == addr
                                         for bd in route["brokerDatas"])
    return check


@pytest.mark.timeout(300)
def test_real_client_loses_nothing_acknowledged_through_a_master_kill(deployments: DeploymentFactory) -> None:
    dep = deployments.deploy([BrokerSpec("broker-a", 0), BrokerSpec("broker-a", 1), BrokerSpec("broker-b", 0)],
                             namesrv_count=2, controller=True, broker_overrides=HA, broker_port=0)
    wait_until(lambda: status(dep, "broker-a-0")["role"] == "SYNC_MASTER" and
               len(status(dep, "broker-a-0")["controller"]["sync_state_set"]) == 2 and
               status(dep, "broker-b-0")["role"] == "SYNC_MASTER", 60, "masters elected, broker-a's slave in sync")
    for broker in ("broker-a-0", "broker-b-0"):
        assert ray.get(dep.brokers[dep.addr_of(broker)].create_topic.remote(TOPIC, 4, 4), timeout=30).ok
    wait_for_route_everywhere(dep, TOPIC, master_routed(dep.addr_of("broker-a-0")), 15, "broker-a-0 routed")

    producer = start_client("produce", dep.namesrv_addr(), TOPIC, "150", "--rate", "50")
    time.sleep(1.0)  # mid-stream
    dep.signal_broker("broker-a-0", signal.SIGKILL)
    sends = finish(producer)
    acked = {s["msg_id"] for s in sends if "error" not in s and s["status"] == 0}
    assert len(acked) >= 140, f"{len(acked)} of 150 acknowledged"

    wait_until(lambda: status(dep, "broker-a-1")["role"] == "SYNC_MASTER", 15, "broker-a-1 promoted")
    wait_for_route_everywhere(dep, TOPIC, master_routed(dep.addr_of("broker-a-1")), 15, "broker-a-1 as brokerId 0")
    got = run_client("consume", dep.namesrv_addr(), "CID_failover", TOPIC, str(len(acked)), "--timeout", "60")
    assert acked <= {m["msg_id"] for m in got}, "every acknowledged message is consumed after the failover"
    after = run_client("produce", dep.namesrv_addr(), TOPIC, "8")  # a fresh client: its route names the new master
    assert all("error" not in s and s["status"] == 0 for s in after), after
