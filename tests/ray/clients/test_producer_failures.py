"""Broker-side failures reaching a producer over Ray, with real broker actors made to fail for real:
a full disk (the broker process's file-size limit lowered with prlimit, so its commit-log write
fails with EFBIG), a graceful shutdown racing many concurrent sends, and a dead broker still in an
async sender's cached route. Each failed attempt is retried on another broker within the budget,
carries the broker's own message, and is counted in the producer's stats.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import resource
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import ray

from actors.deployment.launcher import Deployment
from actors.deployment.spec import BrokerSpec
from clients.admin.client import AdminClient
from clients.consumer.pull_consumer import PullConsumer
from clients.producer.actor import ProducerActor
from clients.producer.producer import Message, Producer, SendFailedError, SendResult
from namesrv.common.waiting import wait_until
from tests.support.ray_cluster import (
    DeploymentFactory,
    broker_names,
    wait_for_route_everywhere,
    wait_registered_everywhere,
)

BROKERS = ["broker-a", "broker-b"]
QUEUES = 4


def unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


def two_brokers_with_topic(deployments: DeploymentFactory) -> tuple[Deployment, str]:
    dep = deployments.deploy(brokers=[BrokerSpec(b) for b in BROKERS], namesrv_count=1)
    wait_registered_everywhere(dep)
    topic = unique("Fail")
    AdminClient(dep).create_topic(topic, read_queue_nums=QUEUES, write_queue_nums=QUEUES)
    wait_for_route_everywhere(dep, topic, lambda r: broker_names(r) == set(BROKERS), 15, "on both brokers")
    return dep, topic


@contextlib.contextmanager
def producer(dep: Deployment, **kwargs: Any) -> Iterator[Producer]:
    group = unique("pg")
    p = Producer(group, namesrv=list(dep.namesrvs), namespace=dep.spec.namespace, instance_name=group,
                 auto_create_topic=False, **kwargs).start()
    try:
        yield p
    finally:
        p.shutdown()


@contextlib.contextmanager
def disk_full(pid: int) -> Iterator[None]:
    """The process may not grow any file: every append to its commit log fails (EFBIG), as on a
    full disk. Python ignores SIGXFSZ, so the write fails instead of killing the process."""
    old = resource.prlimit(pid, resource.RLIMIT_FSIZE)
    resource.prlimit(pid, resource.RLIMIT_FSIZE, (1, old[1]))
    try:
        yield
    finally:
        resource.prlimit(pid, resource.RLIMIT_FSIZE, old)


def stored_bodies(dep: Deployment, topic: str) -> set[bytes]:
    return {m.body for m in PullConsumer(dep.spec.namespace, list(dep.namesrvs)).consume_all(topic)}


# ---------------------------------------------------------------------------- tests
@pytest.mark.timeout(180)
def test_a_full_disk_on_one_broker_is_retried_on_the_other_counted_and_explained(
    deployments: DeploymentFactory,
) -> None:
    dep, topic = two_brokers_with_topic(deployments)
    with producer(dep) as p, producer(dep, retry_times_when_send_failed=0) as once:
        with disk_full(dep.broker_pid("broker-a-0")):
            results = [p.send(Message(topic, f"m{i}".encode())) for i in range(16)]
            failures: list[SendFailedError] = []
            for i in range(8):  # round robin: some land on broker-a first
                try:
                    once.send(Message(topic, f"once {i}".encode()))
                except SendFailedError as e:
                    failures.append(e)
        stats = p.stats()

        assert all(r.message_queue.broker_name == "broker-b" for r in results)
        hit_a = [r for r in results if r.brokers_tried[0] == "broker-a"]
        assert hit_a and all(r.attempts == 2 and r.brokers_tried == ["broker-a", "broker-b"] for r in hit_a)
        assert stats["failed_attempts.broker_error"] == len(hit_a) == stats["retries"]
        assert stats["sends_ok"] == 16 and "sends_failed" not in stats
        # Without retries, the error says what the broker said.
        assert failures, "no send of the no-retry producer reached broker-a"
        # (EFBIG, or a short write when part of the record still fitted under the limit.)
        assert all("code 1: store write failed" in e.failures[0][1] and e.brokers_tried == ["broker-a"]
                   for e in failures), [e.failures for e in failures]
        # The disk "freed", broker-a stores again, and nothing it refused was stored.
        assert p.send(Message(topic, b"after")).attempts == 1
    bodies = stored_bodies(dep, topic)
    assert {f"m{i}".encode() for i in range(16)} <= bodies
    assert not {b for b in bodies if b.startswith(b"once")} - {f"once {i}".encode() for i in range(8)}


@pytest.mark.timeout(240)
def test_sends_racing_a_broker_shutdown_are_all_acknowledged_elsewhere_and_kept(
    deployments: DeploymentFactory,
) -> None:
    """16 threads send without pause while broker-a shuts down gracefully (unregister, close the
    store). A send caught in the store's close gets an error answer at once (not a hang that eats
    its whole timeout) and is retried on broker-b: every send is acknowledged, and every
    acknowledged message is readable (broker-a's after its restart)."""
    dep, topic = two_brokers_with_topic(deployments)
    stop = threading.Event()
    acked: list[tuple[SendResult, bytes]] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def sender(p: Producer, worker: int) -> None:
        i = 0
        while not stop.is_set():
            body = f"w{worker}-{i}".encode()
            i += 1
            try:
                r = p.send(Message(topic, body))
            except Exception as e:
                with lock:
                    errors.append(e)
                continue
            with lock:
                acked.append((r, body))

    with producer(dep, send_msg_timeout_ms=10_000) as p, concurrent.futures.ThreadPoolExecutor(16) as pool:
        futures = [pool.submit(sender, p, w) for w in range(16)]
        try:
            wait_until(lambda: sum(1 for r, _ in acked if r.message_queue.broker_name == "broker-a") >= 200,
                       60, "200 acks from broker-a before its shutdown")
            assert dep.shutdown_broker("broker-a-0")  # graceful, then killed
            n = len(acked)
            wait_until(lambda: len(acked) >= n + 200, 60, "200 more acks after broker-a's shutdown")
        finally:
            stop.set()
            for f in futures:
                f.result(timeout=30)
        stats = p.stats()

    assert errors == [], f"{len(errors)} sends failed: {errors[:3]}"
    retried = [r for r, _ in acked if r.attempts > 1]
    assert all(r.brokers_tried[0] == "broker-a" and r.message_queue.broker_name == "broker-b" for r in retried)
    assert stats.get("failed_attempts.no_answer", 0) + stats.get("failed_attempts.broker_error", 0) == len(retried)

    dep.restart_broker("broker-a-0")
    wait_for_route_everywhere(dep, topic, lambda r: broker_names(r) == set(BROKERS), 20, "with broker-a back")
    bodies = stored_bodies(dep, topic)
    missing = [b for _, b in acked if b not in bodies]
    assert not missing, f"{len(missing)} acknowledged messages lost, e.g. {missing[:3]}"


@pytest.mark.timeout(180)
def test_async_sends_retry_a_dead_broker_of_a_stale_route_on_another(deployments: DeploymentFactory) -> None:
    """retryTimesWhenSendAsyncFailed (RocketMQ 4.9, default 2): an async attempt that gets no
    answer moves to another broker. The producer's route is stale on purpose (no push, no poll
    for 10 min), so it still names broker-a after broker-a died."""
    dep, topic = two_brokers_with_topic(deployments)
    with producer(dep, route_push=False, poll_name_server_interval_ms=600_000) as p:
        assert p.send(Message(topic, b"caches the route")).send_status == "SEND_OK"
        dep.kill_broker("broker-a-0")
        info = p.publish_info(topic)
        assert info is not None and "broker-a" in info.broker_names(), "the cached route is stale"

        futures = [p.send_async(Message(topic, f"async {i}".encode())) for i in range(2 * QUEUES * len(BROKERS))]
        results = [f.result(timeout=60) for f in futures]

    assert all(r.message_queue.broker_name == "broker-b" for r in results)
    moved = [r for r in results if r.brokers_tried[0] == "broker-a"]
    assert moved and all(r.brokers_tried == ["broker-a", "broker-b"] for r in moved)


@pytest.mark.timeout(180)
def test_producer_actor_send_loop_survives_failures_and_reports_them(deployments: DeploymentFactory) -> None:
    dep, topic = two_brokers_with_topic(deployments)
    actor = ray.remote(ProducerActor).options(num_cpus=0, max_concurrency=4).remote(
        unique("pa"), dep.spec.namespace, list(dep.namesrvs), auto_create_topic=False)
    try:
        with disk_full(dep.broker_pid("broker-a-0")):
            summary = ray.get(actor.run_send_loop.remote([topic], 0.0, 60.0, 64, 0, 24), timeout=120)
        assert (summary["attempted"], summary["acknowledged"], summary["failed"]) == (24, 24, 0)
        assert summary["retried"] > 0
        assert summary["engine"]["failed_attempts.broker_error"] == summary["retried"]
    finally:
        ray.kill(actor, no_restart=True)
