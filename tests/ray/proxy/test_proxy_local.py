"""RocketMQ 5's local mode (issue 35): a gRPC proxy inside each broker actor, on its remoting port + 2,
with the official 5.x Python client. Routes and assignments name each broker at its own proxy; the
client's sends, receives and acks reach the broker that holds the queue and are answered there in
process (no TCP request leaves a proxy for its own broker); transactions are decided and an orphan
checked back over the TCP channel the proxy's heartbeat opens; `namesrv status` lists the proxies;
a broker killed while the client sends loses nothing the client saw acknowledged, and its proxy
serves again on the same endpoint when the broker is started again. One deployment (two TCP brokers)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
import ray

from actors.deployment.launcher import Deployment
from actors.deployment.spec import BrokerSpec
from clients.admin.client import AdminClient
from namesrv.proxy.descriptors import SERVICE
from namesrv.proxy.route import GRPC_PORT_OFFSET
from tests.support.ray_cluster import mend, pull_all, registered_deployment
from tests.support.rmq5 import (
    P,
    code_name,
    require_client,
    run_client,
    sends_through_a_kill,
    transactions_with_an_orphan,
)


@pytest.fixture(scope="module")
def dep(ray_local: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    require_client()
    with registered_deployment(tmp_path_factory.mktemp("local"), prefix="local",
                               brokers=[BrokerSpec("broker-a"), BrokerSpec("broker-b")], namesrv_count=1,
                               broker_port=0, proxy_mode="local",
                               proxy_overrides={"min_invisible_time_ms_for_recv": 1_000,
                                                "consumer_min_long_polling_timeout_ms": 500},
                               broker_overrides={"transaction_timeout_ms": 1_000,
                                                 "transaction_check_interval_ms": 500}) as d:
        yield d


def endpoints(dep: Deployment) -> dict[str, str]:
    """Each broker's proxy endpoint, by broker name."""
    return {spec.broker_name: dep.proxy_endpoints[spec.actor_name] for spec in dep.broker_specs.values()}


def handle_of(dep: Deployment, broker_name: str) -> Any:
    return next(h for addr, h in dep.brokers.items() if dep.broker_specs[addr].broker_name == broker_name)


def call(endpoint: str, method: str, **fields: Any) -> Any:
    req, resp, _, _ = P.methods()[method]
    with grpc.insecure_channel(endpoint) as channel:
        rpc = channel.unary_unary(f"/{SERVICE}/{method}", request_serializer=req.SerializeToString,
                                  response_deserializer=resp.FromString)
        return rpc(P.new(f"{method}Request", **fields), timeout=10)


def topic_of(dep: Deployment, prefix: str) -> str:
    topic = f"{prefix}{uuid.uuid4().hex[:6]}"
    AdminClient(dep).create_topic(topic, read_queue_nums=2, write_queue_nums=2)
    return topic


def stored(dep: Deployment, topic: str) -> dict[bytes, str]:
    """Every message of `topic` by body: the broker it is on."""
    out = {}
    for addr, broker in dep.brokers.items():
        for q in range(2):
            for m in pull_all(broker, topic, q)["messages"]:
                out[m["body"]] = dep.broker_specs[addr].broker_name
    return out


def proxy_figures(dep: Deployment) -> dict[str, dict[str, Any]]:
    return {name: ray.get(handle_of(dep, name).proxy_status.remote()) for name in ("broker-a", "broker-b")}


def test_routes_name_each_broker_at_its_own_proxy(dep: Deployment) -> None:
    eps = endpoints(dep)
    for name, ep in eps.items():  # the proxy's port is its broker's remoting port + 2
        addr = next(a for a, s in dep.broker_specs.items() if s.broker_name == name)
        assert int(ep.rsplit(":", 1)[1]) == int(addr.rsplit(":", 1)[1]) + GRPC_PORT_OFFSET
    topic = topic_of(dep, "LocalRoute")
    for ep in eps.values():  # whichever proxy a client asks first, the same answer
        route = call(ep, "QueryRoute", topic={"name": topic})
        assert code_name(route.status) == "OK"
        at = {(q.broker.name, f"{a.host}:{a.port}") for q in route.message_queues for a in q.broker.endpoints.addresses}
        assert at == set(eps.items())
        assignment = call(ep, "QueryAssignment", topic={"name": topic}, group={"name": "GLocal"})
        assert {(a.message_queue.broker.name, f"{x.host}:{x.port}") for a in assignment.assignments
                for x in a.message_queue.broker.endpoints.addresses} == set(eps.items())
    proxies = AdminClient(dep).status()["proxies"]  # what `namesrv status` lists
    assert {p["endpoint"]: p["mode"] for p in proxies.values()} == {ep: "local" for ep in eps.values()}


def test_the_official_client_is_served_in_process_by_each_queues_broker(dep: Deployment, tmp_path: Path) -> None:
    topic = topic_of(dep, "LocalSend")
    group = f"GLocal{uuid.uuid4().hex[:6]}"
    before = proxy_figures(dep)
    bodies = [f"n{i}" for i in range(8)]
    actions: list[dict[str, Any]] = [{"op": "send", "body": b} for b in bodies]
    actions += [{"op": "send", "body": f"f{i}", "group": "order-1"} for i in range(4)]
    actions += [{"op": "receive_until", "bodies": bodies, "invisible_s": 10, "ack": bodies}]
    results = run_client(dep, topic, actions, tmp_path, endpoint=endpoints(dep)["broker-a"],
                         consumer={"group": group, "await_s": 1})
    assert [r for r in results if not r["ok"]] == []
    on = stored(dep, topic)
    assert set(on) >= {b.encode() for b in bodies} and set(on.values()) == {"broker-a", "broker-b"}, \
        "sends spread over both brokers, each through the queue's own proxy"
    assert len({on[f"f{i}".encode()] for i in range(4)}) == 1, "a message group stays on one broker"
    after = proxy_figures(dep)
    for name in ("broker-a", "broker-b"):
        sent = after[name]["sent"] - before[name]["sent"]
        requests = sum(after[name]["broker_requests"].values()) - sum(before[name]["broker_requests"].values())
        in_process = after[name]["in_process"] - before[name]["in_process"]
        assert sent == sum(1 for b in on.values() if b == name), f"{name}'s proxy stored its broker's sends"
        assert requests == in_process > sent, f"{name}: every request (sends, pops, acks) answered in process"


def test_transactions_are_decided_and_an_orphan_checked_back(dep: Deployment, tmp_path: Path) -> None:
    topic = topic_of(dep, "LocalTx")  # through broker-b's own proxy
    transactions_with_an_orphan(endpoints(dep)["broker-b"], topic, tmp_path,
                                lambda: sorted(stored(dep, topic)) == [b"commit", b"orphan"])


def test_a_broker_killed_mid_stream_loses_nothing_acknowledged_and_its_proxy_returns(dep: Deployment,
                                                                                    tmp_path: Path) -> None:
    """ray.kill of broker-a, proxy and all, while the client streams sends from broker-b's proxy: the
    client retries on broker-b's queues, nothing it saw acknowledged is lost, and broker-a started
    again from its store serves gRPC on the same endpoint."""
    topic = topic_of(dep, "LocalKill")
    victim = handle_of(dep, "broker-a")
    old = endpoints(dep)["broker-a"]
    before = ray.get(victim.proxy_status.remote())["sent"]
    results = sends_through_a_kill(endpoints(dep)["broker-b"], topic, 300, tmp_path,
                                   lambda: ray.get(victim.proxy_status.remote())["sent"] - before >= 30,
                                   lambda: ray.kill(victim, no_restart=False))
    acked = {r["body"] for r in results if r["ok"]}
    assert results[-1]["ok"] and len(acked) >= len(results) // 2, "the stream went on past the kill"
    mend(dep)  # broker-a started again from its store
    assert acked <= {b.decode() for b in stored(dep, topic)}, "acknowledged sends lost"
    assert ray.get(handle_of(dep, "broker-a").proxy_endpoint.remote(), timeout=30) == old == endpoints(dep)["broker-a"]
    assert code_name(call(old, "QueryRoute", topic={"name": topic}).status) == "OK"
