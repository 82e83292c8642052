"""RocketMQ 5's pop consumption over real TCP against a broker actor, in frames built by hand here
(length-prefixed JSON header + body, not our codec): a held pop woken by a send, ack, change of
invisible time, a message not acked coming back after its invisible time (from the pop retry
topic, reconsumeTimes counted), the DLQ past the group's retryMaxTimes, bad handles refused with
nothing changed, and a broker restart that loses nothing in flight. One deployment for the module.
"""

from __future__ import annotations

import concurrent.futures
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import ray

from actors.deployment.launcher import Deployment
from actors.deployment.spec import BrokerSpec
from namesrv.common.waiting import wait_until
from namesrv.remoting.command import RemotingRequest
from tests.support.broker import decode_messages
from tests.support.raw_remoting import RawClient
from tests.support.ray_cluster import registered_deployment

SEND_MESSAGE, UPDATE_SUBSCRIPTION_GROUP = 10, 200
POP, ACK, CHANGE, BATCH_ACK = 200050, 200051, 200053, 200151
SUCCESS, INVALID_PARAMETER, NO_MESSAGE, POLLING_TIMEOUT = 0, 29, 208, 210
TOPIC = "PopTopic"


class PopClient(RawClient):
    """Hand-made frames (tests.support.raw_remoting) with the pop codes' requests."""

    def __init__(self, addr: str) -> None:
        super().__init__(addr, timeout_s=30)

    # ---------------------------------------------------------------- pop helpers
    def send(self, body: bytes, queue_id: int = 0) -> None:
        answer, _ = self.call(SEND_MESSAGE, {"producerGroup": "PG", "topic": TOPIC, "defaultTopic": "TBW102",
                                             "defaultTopicQueueNums": 4, "queueId": queue_id, "sysFlag": 0,
                                             "bornTimestamp": 0, "flag": 0, "properties": "TAGS\x01t\x02"}, body)
        assert answer["code"] == SUCCESS, answer

    def pop(self, group: str, invisible_ms: int, poll_ms: int = 0, nums: int = 32) -> tuple[dict[str, Any],
                                                                                          list[dict[str, Any]]]:
        answer, body = self.call(POP, {"consumerGroup": group, "topic": TOPIC, "queueId": -1, "maxMsgNums": nums,
                                       "invisibleTime": invisible_ms, "pollTime": poll_ms,
                                       "bornTime": int(time.time() * 1000), "initMode": 0})
        return answer, decode_messages(body)

    def ack(self, group: str, m: dict[str, Any], handle: str | None = None, code: int = ACK,
            **extra: Any) -> dict[str, Any]:
        answer, _ = self.call(code, {"consumerGroup": group, "topic": TOPIC, "queueId": m["queue_id"],
                                     "offset": m["queue_offset"],
                                     "extraInfo": m["props"]["POP_CK"] if handle is None else handle} | extra)
        return answer


@pytest.fixture(scope="module")
def cluster(ray_local: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Deployment, PopClient]]:
    data: Path = tmp_path_factory.mktemp("pop-wire")
    with registered_deployment(data, prefix="pop", brokers=[BrokerSpec("broker-a")], namesrv_count=1,
                               broker_port=0) as dep:
        broker = dep.brokers[next(iter(dep.brokers))]
        assert ray.get(broker.create_topic.remote(TOPIC, 2, 2)).ok
        c = PopClient(next(iter(dep.brokers)))
        for group, retries in (("PopWake", 16), ("PopRetry", 1), ("PopBad", 16), ("PopRestart", 16)):
            answer, _ = c.call(UPDATE_SUBSCRIPTION_GROUP, body=json.dumps(
                {"groupName": group, "retryMaxTimes": retries}).encode())
            assert answer["code"] == SUCCESS, answer
        try:
            yield dep, c
        finally:
            c.close()


def status(dep: Deployment) -> dict[str, Any]:
    return dict(ray.get(dep.brokers[next(iter(dep.brokers))].get_runtime_info.remote(), timeout=30))


def drain(c: PopClient, group: str) -> None:
    """Take every message there is for `group` and ack it (groups of the module start at the
    queues' start: earlier tests' messages are there too)."""
    while True:
        _, msgs = c.pop(group, 60_000)
        if not msgs:
            return
        for m in msgs:
            assert c.ack(group, m)["code"] == SUCCESS


def pop_eventually(c: PopClient, group: str, invisible_ms: int, what: str) -> list[dict[str, Any]]:
    """The next messages a pop of `group` gets, popping (held 2 s each) until there are some."""
    return wait_until(lambda: c.pop(group, invisible_ms, poll_ms=2000)[1] or None, 30, what)


def test_a_held_pop_is_woken_by_a_send_then_acked(cluster: tuple[Deployment, PopClient]) -> None:
    dep, c = cluster
    drain(c, "PopWake")
    waiter = PopClient(next(iter(dep.brokers)))
    try:
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            started = time.monotonic()
            held = pool.submit(waiter.pop, "PopWake", 30_000, 20_000)
            wait_until(lambda: status(dep)["held_pulls"] >= 1, 15, "the pop is held")
            c.send(b"wake", queue_id=1)
            answer, msgs = held.result(timeout=15)
            assert time.monotonic() - started < 15, "woken by the send, not by its poll time"
        assert answer["code"] == SUCCESS and [m["body"] for m in msgs] == [b"wake"]
        ext = answer["extFields"]
        assert {"popTime", "invisibleTime", "reviveQid", "restNum", "startOffsetInfo", "msgOffsetInfo"} <= set(ext)
        assert c.ack("PopWake", msgs[0])["code"] == SUCCESS
        assert c.ack("PopWake", msgs[0])["code"] == NO_MESSAGE
        assert c.pop("PopWake", 1000)[0]["code"] == POLLING_TIMEOUT
    finally:
        waiter.close()


def test_an_unacked_message_comes_back_then_goes_to_the_dlq(cluster: tuple[Deployment, PopClient]) -> None:
    dep, c = cluster
    drain(c, "PopRetry")
    c.send(b"again")
    _, [m] = c.pop("PopRetry", 300)
    assert m["reconsume"] == 0
    # invisible time 300 ms: revived into %RETRY%PopRetry_PopTopic, delivered under the topic
    msgs = pop_eventually(c, "PopRetry", 5000, "the message back after its invisible time")
    assert [(x["body"], x["topic"], x["reconsume"]) for x in msgs] == [(b"again", TOPIC, 1)]
    assert msgs[0]["props"]["POP_CK"].split(" ")[4] == "1"  # from the retry topic
    assert c.ack("PopRetry", m)["code"] == NO_MESSAGE  # the first delivery's handle is stale
    # change its invisible time to 200 ms: past retryMaxTimes 1 when it lapses, into %DLQ%PopRetry
    changed = c.ack("PopRetry", msgs[0], code=CHANGE, invisibleTime=200)
    assert changed["code"] == SUCCESS and changed["extFields"]["invisibleTime"] == "200"
    wait_until(lambda: status(dep)["queues"].get("%DLQ%PopRetry:0") == 1, 20, "the message in the DLQ")
    assert c.pop("PopRetry", 1000)[0]["code"] == POLLING_TIMEOUT


def test_bad_handles_are_refused_and_change_nothing(cluster: tuple[Deployment, PopClient]) -> None:
    dep, c = cluster
    drain(c, "PopBad")
    c.send(b"bad")
    _, [m] = c.pop("PopBad", 60_000)
    before = status(dep)["pop_in_flight"]
    assert c.ack("PopBad", m, handle="not a handle")["code"] == INVALID_PARAMETER
    stale = m["props"]["POP_CK"].split(" ")
    stale[1] = str(int(stale[1]) - 5)
    assert c.ack("PopBad", m, handle=" ".join(stale))["code"] == NO_MESSAGE
    assert c.ack("PopBad", m, code=CHANGE, handle=" ".join(stale), invisibleTime=10)["code"] == NO_MESSAGE
    answer, _ = c.call(BATCH_ACK, body=b'{"acks": "nope"}')
    assert answer["code"] != SUCCESS
    assert status(dep)["pop_in_flight"] == before
    assert c.ack("PopBad", m)["code"] == SUCCESS


def test_pop_and_ack_over_ray_as_over_tcp(cluster: tuple[Deployment, PopClient]) -> None:
    """A Ray caller (the gRPC proxy actors) sends the same codes through `process` and gets the
    messages as objects, handle in their properties."""
    dep, c = cluster
    broker = dep.brokers[next(iter(dep.brokers))]
    drain(c, "PopRay")
    c.send(b"by ray")
    popped = ray.get(broker.process.remote(RemotingRequest(POP, {
        "consumerGroup": "PopRay", "topic": TOPIC, "queueId": "-1", "maxMsgNums": "8", "invisibleTime": "60000",
        "pollTime": "0", "bornTime": "0", "initMode": "0"})), timeout=30)
    assert popped.code == SUCCESS and [m.body for m in popped.payload.messages] == [b"by ray"]
    m = popped.payload.messages[0]
    acked = ray.get(broker.process.remote(RemotingRequest(ACK, {
        "consumerGroup": "PopRay", "topic": TOPIC, "queueId": str(m.queue_id), "offset": str(m.queue_offset),
        "extraInfo": m.properties["POP_CK"]})), timeout=30)
    assert acked.code == SUCCESS


def test_a_broker_restart_loses_nothing_in_flight(cluster: tuple[Deployment, PopClient]) -> None:
    dep, c = cluster
    drain(c, "PopRestart")
    c.send(b"kept")
    _, [m] = c.pop("PopRestart", 2000)
    assert status(dep)["pop_in_flight"] >= 1
    addr = next(iter(dep.brokers))
    dep.restart_broker(addr)
    fresh = PopClient(addr)
    try:
        msgs = pop_eventually(fresh, "PopRestart", 60_000, "the un-acked message back after the restart")
        assert [(x["body"], x["reconsume"]) for x in msgs] == [(b"kept", 1)]
        assert fresh.ack("PopRestart", m)["code"] == NO_MESSAGE  # revived: the old handle is stale
        assert fresh.ack("PopRestart", msgs[0])["code"] == SUCCESS
    finally:
        fresh.close()
