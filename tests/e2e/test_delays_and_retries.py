"""Delay levels and retry back-off with the real RocketMQ client (issue 22, point 3): a message sent
with delay level 2 (5 s) reaches its queue no sooner, by the broker's own clocks; a consumer that
fails a message sees it again after each back-off (delay level 3 + reconsume times), then it lands
in the group's dead-letter topic."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from actors.deployment.launcher import Deployment
from actors.deployment.spec import BrokerSpec
from clients.admin.client import AdminClient
from namesrv.common.waiting import wait_until
from tests.e2e.test_real_client import run_client
from tests.support.ray_cluster import DeploymentFactory, pull_all, wait_registered_everywhere

LEVELS = "1s 5s " + " ".join(["1s"] * 18)
"""Level 2 waits 5 s as in RocketMQ; every retry level (3 and up) 1 s, so a test sees 16 retries."""


@pytest.fixture
def dep(deployments: DeploymentFactory, tmp_path: Path) -> Deployment:
    d = deployments.deploy(brokers=[BrokerSpec("broker-a")], namesrv_count=1, broker_port=0,
                           broker_overrides={"message_delay_level": LEVELS})
    wait_registered_everywhere(d)
    AdminClient(d).create_topic("Delayed", read_queue_nums=1, write_queue_nums=1)
    AdminClient(d).create_topic("Retried", read_queue_nums=1, write_queue_nums=1)
    return d


def test_a_delayed_message_arrives_after_its_delay_and_not_before(dep: Deployment) -> None:
    broker = next(iter(dep.brokers.values()))
    [sent] = run_client("produce", dep.namesrv_addr(), "Delayed", "1", "--delay-level", "2")
    assert "error" not in sent, sent
    assert pull_all(broker, "Delayed", 0)["messages"] == [], "not consumable right after the send"
    wait_until(lambda: pull_all(broker, "Delayed", 0)["messages"], 30, "the delayed message in its queue")
    [m] = pull_all(broker, "Delayed", 0)["messages"]
    assert m["body"] == sent["body"].encode() and "DELAY" not in m["properties"]
    waited = m["store_timestamp"] - m["born_timestamp"]
    assert 5_000 <= waited < 20_000, f"stored in its queue {waited} ms after it was sent"


def test_a_failed_message_backs_off_then_goes_to_the_dead_letter_topic(dep: Deployment) -> None:
    broker = next(iter(dep.brokers.values()))
    [sent] = run_client("produce", dep.namesrv_addr(), "Retried", "1")
    deliveries = run_client("consume", dep.namesrv_addr(), "CID_retry", "Retried", "17", "--fail", "--timeout", "120",
                            timeout=180)
    assert [d["reconsume_times"] for d in deliveries] == list(range(17)), "each retry once, in order"
    gaps = [b["t"] - a["t"] for a, b in itertools.pairwise(deliveries)]
    assert min(gaps) >= 1.0, f"a retry came back before its 1 s back-off: {gaps}"
    wait_until(lambda: pull_all(broker, "%DLQ%CID_retry", 0)["messages"], 30, "the message in %DLQ%CID_retry")
    [dead] = pull_all(broker, "%DLQ%CID_retry", 0)["messages"]
    assert dead["body"] == sent["body"].encode() and dead["properties"]["RETRY_TOPIC"] == "Retried"
