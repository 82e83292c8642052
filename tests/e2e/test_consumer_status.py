"""mqadmin consumerStatus against the real C++ client (rocketmq-client-cpp via PyPI `rocketmq`): the
broker asks the connected push consumer over its own TCP connection (GET_CONSUMER_RUNNING_INFO)
and hands its answer back to the admin tool."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
import ray

from actors.deployment.launcher import Deployment
from actors.deployment.spec import BrokerSpec
from namesrv.common.waiting import wait_until
from tests.e2e.test_real_client import create_topic, finish, run_client, start_client
from tests.support.mqadmin import fails, ok, tcp, tcp_json
from tests.support.ray_cluster import DeploymentFactory, wait_registered_everywhere

GROUP, TOPIC = "CID_status", "StatusTopic"


@pytest.fixture
def one_broker(deployments: DeploymentFactory) -> Iterator[Deployment]:
    dep = deployments.deploy(brokers=[BrokerSpec("broker-a")], namesrv_count=1, broker_port=0)
    wait_registered_everywhere(dep)
    yield dep


def _members(dep: Deployment) -> list[str]:
    [broker] = dep.brokers.values()
    groups: dict[str, list[str]] = ray.get(broker.get_runtime_info.remote(), timeout=60)["consumer_groups"]
    return groups.get(GROUP, [])


def test_consumer_status_asks_the_real_client_through_the_broker(one_broker: Deployment) -> None:
    dep = one_broker
    create_topic(dep, TOPIC, queues=2)
    addr = dep.namesrv_addr()
    consumer: subprocess.Popen[str] = start_client("consume", addr, GROUP, TOPIC, "4", "--timeout", "60",
                                                   "--linger", "20")
    try:
        wait_until(lambda: len(_members(dep)) == 1, 40, "the C++ consumer registered")
        sends = run_client("produce", addr, TOPIC, "4")
        assert all("error" not in s for s in sends)
        [cid] = _members(dep)

        def status() -> dict[str, Any]:
            every: dict[str, Any] = tcp_json(addr, "consumerStatus", "-g", GROUP)
            assert set(every) == {cid}
            return every[cid]

        def committed() -> int:  # the client's own offsets, as it reports them (longs as strings)
            return sum(int(q["processQueueInfo"]["commitOffset"]) for q in status()["mqTable"])

        wait_until(lambda: committed() == 4, 40, "the client reports every message consumed")
        info = status()
        # What rocketmq-client-cpp 2.x really answers: its properties (it calls itself V3_1_8 and
        # spells false "flase" in PROP_CONSUMEORDERLY), the retry topic among its subscriptions,
        # its process queues with longs written as strings, an empty jstack and no rates.
        props = info["properties"]
        assert props["PROP_CONSUME_TYPE"] == "CONSUME_PASSIVELY" and props["PROP_CLIENT_VERSION"] == "V3_1_8"
        assert props["PROP_NAMESERVER_ADDR"] == addr and props["PROP_CONSUMER_START_TIMESTAMP"].isdigit()
        assert sorted(s["topic"] for s in info["subscriptionSet"]) == [f"%RETRY%{GROUP}", TOPIC]
        assert sorted(q["messageQueue"]["queueId"] for q in info["mqTable"]) == [0, 1]
        assert all(q["processQueueInfo"]["cachedMsgCount"] == 0 for q in info["mqTable"])
        assert info["statusTable"] == {} and info["jstack"] == ""
        text = ok(tcp(addr, "consumerStatus", "-g", GROUP, "-i", cid))
        assert "#Consumer Properties#" in text and f"Topic: {TOPIC}" in text
        fails(tcp(addr, "consumerStatus", "-g", GROUP, "-i", "127.0.0.1@nobody"), 1,
              f"The Consumer <{GROUP}> <127.0.0.1@nobody> not online")
    finally:
        got = finish(consumer)
    assert len({m["msg_id"] for m in got}) == 4
