"""Metrics through Ray: the real Prometheus endpoint of the local Ray node, scraped over HTTP and
parsed with prometheus_client's text parser, holding values that follow from what the test did."""

from __future__ import annotations

import urllib.request
from collections.abc import Callable

import ray
from prometheus_client.parser import text_string_to_metric_families

from actors.deployment.spec import BrokerSpec
from clients.admin.client import AdminClient
from clients.producer.actor import ProducerActor
from namesrv.common.waiting import wait_until
from namesrv.protocol.codes import BrokerRequestCode, RequestCode
from namesrv.remoting.client import RemotingClient, parse_namesrv_addr
from tests.support.ray_cluster import DeploymentFactory, wait_registered_everywhere

Sample = tuple[str, dict[str, str], float]


def scrape() -> list[Sample]:
    port = ray.nodes()[0]["MetricsExportPort"]
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    return [(s.name, dict(s.labels), s.value) for family in text_string_to_metric_families(text)
            for s in family.samples]


def value(samples: list[Sample], name: str, **labels: str) -> float:
    return sum(v for n, lab, v in samples if n == name and all(lab.get(k) == want for k, want in labels.items()))


def delta(samples: list[Sample], base: list[Sample], name: str, **labels: str) -> float:
    """A counter's growth since `base` was scraped."""
    return value(samples, name, **labels) - value(base, name, **labels)


def eventually(check: Callable[[list[Sample]], bool], what: str) -> list[Sample]:
    """Ray exports metrics every few seconds: poll the endpoint until `check` holds."""
    return wait_until(lambda: (lambda s: s if check(s) else None)(scrape()), 60, what, interval_s=1.0)


def test_metrics_follow_what_happened(deployments: DeploymentFactory) -> None:
    """Brokers of names no other module uses (their series are this test's alone: the shared Ray
    keeps every series an earlier module's actors exported); the NameServer's counters are read as
    deltas from a scrape taken before anything happened."""
    base = scrape()
    dep = deployments.deploy(brokers=[BrokerSpec("meter-a"), BrokerSpec("meter-b")], namesrv_count=1, broker_port=0)
    wait_registered_everywhere(dep)
    AdminClient(dep).create_topic("Metered", read_queue_nums=2, write_queue_nums=2)
    host, port = parse_namesrv_addr(dep.namesrv_addr())[0]
    with RemotingClient(host, port) as c:
        for _ in range(25):
            assert c.invoke(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "Metered"}).code == 0
        assert c.invoke(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "NoSuchTopic"}).code == 17

    producer = ray.remote(ProducerActor).options(num_cpus=0, max_concurrency=4).remote(
        "metered_producer", dep.spec.namespace, list(dep.namesrvs))
    summary = ray.get(producer.run_send_loop.remote(["Metered"], 0, 60, 64, 1, 12), timeout=120)
    assert summary["acknowledged"] == 12
    on_b = sum(1 for r in ray.get(producer.get_records.remote(), timeout=60) if r["broker_name"] == "meter-b")
    broker_b = dep.addr_of("meter-b-0")
    bhost, bport = broker_b.rsplit(":", 1)
    with RemotingClient(bhost, int(bport)) as c:
        pull = {"consumerGroup": "G", "topic": "Metered", "queueId": 0, "queueOffset": 0, "maxMsgNums": 32,
                "sysFlag": 0, "commitOffset": 0, "suspendTimeoutMillis": 0, "subVersion": 0}
        assert c.invoke(BrokerRequestCode.PULL_MESSAGE, pull).is_response
    dep.kill_broker("meter-a-0")
    removals = dep.namesrvs["namesrv-0"].get_removals
    wait_until(lambda: any(r.cause == "channel" for r in ray.get(removals.remote(), timeout=60)),
               10, "meter-a removed by its channel")

    def done(s: list[Sample]) -> bool:
        return (delta(s, base, "ray_namesrv_requests_total", owner="namesrv-0", code="105", result="SUCCESS",
                      transport="tcp") >= 25
                and delta(s, base, "ray_namesrv_broker_removals_total", owner="namesrv-0", cause="channel") >= 1
                and value(s, "ray_producer_sends_total", owner="metered_producer", result="ok") >= 12
                and value(s, "ray_broker_pulls_total") >= 1
                and value(s, "ray_broker_sends_total", owner="meter-b-0", result="SUCCESS") >= on_b)

    s = eventually(done, "the NameServer, broker and producer metrics")
    assert delta(s, base, "ray_namesrv_requests_total", owner="namesrv-0", code="105", result="TOPIC_NOT_EXIST",
                 transport="tcp") == 1
    assert delta(s, base, "ray_namesrv_request_latency_ms_count", owner="namesrv-0", code="105") >= 1
    assert delta(s, base, "ray_namesrv_registration_bytes_total", owner="namesrv-0") > 0
    assert value(s, "ray_namesrv_topics", owner="namesrv-0") >= 1
    assert value(s, "ray_broker_sends_total", owner="meter-b-0", result="SUCCESS") == on_b, "counted once each"
    assert value(s, "ray_broker_messages", owner="meter-b-0") == on_b
    assert (value(s, "ray_broker_store_size_bytes", owner="meter-b-0") > 0) == (on_b > 0)
    assert value(s, "ray_producer_send_latency_ms_count", owner="metered_producer") >= 1
    s = eventually(lambda s: value(s, "ray_namesrv_live_brokers", owner="namesrv-0") == 1,
                   "the live-broker gauge after the kill")
    assert value(s, "ray_namesrv_broker_removal_delay_ms_count", owner="namesrv-0", cause="channel") >= 1
