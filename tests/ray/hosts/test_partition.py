"""The first measured partition on the multi-host test bed (issue 36, design §11): three hosts as
network namespaces, a Ray node in each, NameServer-0 and broker-b on host 0, NameServer-1 on host
1, broker-a on host 2, all listening on their host's address. The kernel cuts broker-a's host
from NameServer-1's host only: NameServer-1 expires broker-a while NameServer-0 keeps it, a
producer that asks NameServer-0 still writes to broker-a, and after the heal NameServer-1 has
broker-a again within a bound. The times are measured and printed.

One test bed and one deployment for the module. Needs root (namespaces, nftables)."""

from __future__ import annotations

import collections
import contextlib
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
import ray

from actors.deployment.launcher import Deployment
from actors.deployment.profiles import get_profile
from actors.deployment.spec import BrokerSpec, ClusterSpec
from clients.admin.client import AdminClient
from clients.chaos.hosts.netns import Hosts, netns_pids, remove_leftovers
from clients.chaos.hosts.ray_nodes import RayOnHosts
from clients.consumer.push_consumer import ConsumeConcurrentlyStatus, PushConsumer
from clients.producer.producer import Message, Producer
from namesrv.common.waiting import wait_until
from namesrv.protocol.models import MessageQueue
from namesrv.remoting.config import ALL_INTERFACES
from tests.support.ray_cluster import (
    broker_names,
    route_of,
    wait_for_route_everywhere,
    wait_registered_everywhere,
)
from tests.support.test_bed import Bed, deployed_bed, require_test_bed

require_test_bed()

HOSTS = 3
NS0_HOST, NS1_HOST, BROKER_A_HOST = 0, 1, 2
EXPIRY_MS = 3_000
"""NameServer's brokerChannelExpiredTime here (RocketMQ: 120 s); the brokers heartbeat every 0.5 s
(the `fast` profile)."""
HEARTBEAT_MS = get_profile("fast").broker.register_name_server_period_ms
TOPIC = "TopicPartition"
EVERY = {"broker-a", "broker-b"}
EXPIRE_BOUND_S = 30.0
"""How long NameServer-1 may take to drop broker-a after the cut: the expiry plus its scan period
and the load of a shared 2-core machine."""
CONVERGE_BOUND_S = 60.0
"""How long NameServer-1 may take to have broker-a again after the heal: a register period, plus the
stalled TCP connection's retransmission back-off (it doubles while the cut lasts)."""


@pytest.fixture(scope="module")
def bed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bed]:
    data = tmp_path_factory.mktemp("hosts") / "data"

    def spec(cluster: RayOnHosts, namespace: str) -> ClusterSpec:
        made = ClusterSpec(
            namesrv_count=2,
            brokers=[BrokerSpec("broker-a", node_id=cluster.node_id(BROKER_A_HOST)),
                     BrokerSpec("broker-b", node_id=cluster.node_id(NS0_HOST))],
            profile="fast", namespace=namespace, data_dir=str(data),
            namesrv_overrides={"broker_channel_expired_time_ms": EXPIRY_MS},
            namesrv_port=0, broker_port=0, listen_host=ALL_INTERFACES,
        )
        made.namesrv_node_ids = [cluster.node_id(NS0_HOST), cluster.node_id(NS1_HOST)]
        return made

    with deployed_bed(HOSTS, spec, "hosts") as bed:
        dep = bed.dep
        AdminClient(dep).create_topic(TOPIC, read_queue_nums=4, write_queue_nums=4)
        wait_registered_everywhere(dep, timeout=60)
        wait_for_route_everywhere(dep, TOPIC, lambda r: broker_names(r) == EVERY, timeout=60, what="with both")
        yield bed


def names_on(dep: Deployment, namesrv: str) -> set[str]:
    resp = route_of(dep.namesrvs[namesrv], TOPIC)
    return broker_names(resp.wire_body()) if resp.ok else set()


REACH = """
import socket, sys
from concurrent.futures import ThreadPoolExecutor
def ok(addr):
    host, port = addr.rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout=2).close()
        return "1"
    except OSError:
        return "0"
with ThreadPoolExecutor(len(sys.argv) - 1) as pool:
    print("".join(pool.map(ok, sys.argv[1:])))
"""


def reaches(hosts: Hosts, host: int, addrs: list[str]) -> list[bool]:
    """Whether a TCP connection from inside `host` to each of `addrs` (host:port) opens within 2 s
    (one Python process, the connections in parallel)."""
    out = hosts.run(host, [sys.executable, "-c", REACH, *addrs], timeout=60).stdout.strip()
    return [c == "1" for c in out]


def tcp_reaches(hosts: Hosts, host: int, addr: str) -> bool:
    return reaches(hosts, host, [addr])[0]


def test_leftovers_of_a_killed_run_are_removed() -> None:
    """A bed's names are recognised by their prefix: a namespace (with a process inside) left by a
    killed run is removed by the next bed. First in the module: before the module's bed exists."""
    subprocess.run(["ip", "netns", "add", "nsrv-h31"], check=True)
    orphan = subprocess.Popen(["ip", "netns", "exec", "nsrv-h31", "sleep", "600"], start_new_session=True)
    try:
        wait_until(lambda: netns_pids("nsrv-h31"), 10, "the orphan inside nsrv-h31")
        assert "nsrv-h31" in remove_leftovers()
        assert orphan.wait(timeout=10) != 0
        assert "nsrv-h31" not in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    finally:
        if orphan.poll() is None:
            orphan.kill()
        subprocess.run(["ip", "netns", "delete", "nsrv-h31"], capture_output=True)


def test_servers_listen_on_their_hosts(bed: Bed) -> None:
    """Each server is where it was placed and serves TCP on its host's address, reachable from the
    other hosts: the bed's network really carries the system."""
    addrs = bed.dep.namesrv_addr().split(";")
    assert [a.rsplit(":", 1)[0] for a in addrs] == [bed.hosts.address(NS0_HOST), bed.hosts.address(NS1_HOST)]
    a = bed.dep.broker_specs[next(k for k, s in bed.dep.broker_specs.items() if s.broker_name == "broker-a")]
    assert a.host == bed.hosts.address(BROKER_A_HOST)
    assert tcp_reaches(bed.hosts, BROKER_A_HOST, addrs[1])
    assert tcp_reaches(bed.hosts, NS1_HOST, a.addr)


def test_partition_broker_from_one_namesrv(bed: Bed, capsys: pytest.CaptureFixture[str]) -> None:
    """The kernel cuts broker-a's host from NameServer-1's only. NameServer-1 expires broker-a and
    NameServer-0 keeps it; a producer asking NameServer-0 still writes to broker-a, one asking
    NameServer-1 stops writing to it although it reaches broker-a itself (what issue 36's client
    fix is for); Ray declares no node dead. After the heal both agree again within a bound."""
    dep, nemesis, hosts = bed.dep, bed.nemesis, bed.hosts
    ns1_addr = dep.namesrv_addr().split(";")[1]
    options: dict[str, Any] = {"namespace": dep.spec.namespace, "poll_name_server_interval_ms": 1_000}
    with Producer("PartitionVia0", namesrv=["namesrv-0"], instance_name="via-namesrv-0", **options) as via0, \
            Producer("PartitionVia1", namesrv=["namesrv-1"], instance_name="via-namesrv-1", **options) as via1:
        for producer in (via0, via1):
            assert producer.send(Message(TOPIC, b"before")).send_status == "SEND_OK"
            assert _brokers_of(producer) == EVERY

        window = nemesis.partition([[BROKER_A_HOST], [NS1_HOST]])
        cut_at = time.monotonic()
        try:
            wait_until(lambda: "broker-a" not in names_on(dep, "namesrv-1"), EXPIRE_BOUND_S,
                       "NameServer-1 to expire broker-a", interval_s=0.1)
            expired_at = time.monotonic()
            assert names_on(dep, "namesrv-1") == {"broker-b"}
            assert names_on(dep, "namesrv-0") == EVERY, "NameServer-0 still reaches broker-a and must keep it"

            # the producer asking NameServer-1 drops broker-a, which it could still reach
            wait_until(lambda: _brokers_of(via1) == {"broker-b"}, 30, "the producer via NameServer-1 to drop broker-a",
                       interval_s=0.05)
            via1_dropped_at = time.monotonic()
            assert {via1.send(Message(TOPIC, b"via1")).message_queue.broker_name for _ in range(8)} == {"broker-b"}

            # the producer asking NameServer-0 still writes to broker-a, across the bed's network
            landed = wait_until(lambda: _sent_to(via0, "broker-a"), 30, "a send that lands on broker-a",
                                interval_s=0.01)
            assert landed.send_status == "SEND_OK"
            assert names_on(dep, "namesrv-0") == EVERY and _brokers_of(via0) == EVERY

            # the kernel's cut, and only that one: broker-a's host cannot reach NameServer-1's, host 0 can;
            # every Ray node still reaches the head, so Ray declares none dead
            assert not tcp_reaches(hosts, BROKER_A_HOST, ns1_addr)
            assert tcp_reaches(hosts, NS0_HOST, ns1_addr)
            assert set(hosts.addresses) <= {n["NodeManagerAddress"] for n in ray.nodes() if n["Alive"]}
        finally:
            nemesis.heal()
        healed_at = time.monotonic()

        wait_until(lambda: names_on(dep, "namesrv-1") == EVERY, CONVERGE_BOUND_S,
                   "NameServer-1 to have broker-a again after the heal", interval_s=0.1)
        converged_at = time.monotonic()
        wait_until(lambda: _brokers_of(via1) == EVERY, 30, "the producer via NameServer-1 to have broker-a again",
                   interval_s=0.05)
        via1_back_at = time.monotonic()
    assert tcp_reaches(hosts, BROKER_A_HOST, ns1_addr)
    assert window.end_ms is not None and window.kind == "partition"
    assert window.hosts == (BROKER_A_HOST, NS1_HOST)

    figures = {
        "cut to NameServer-1 expiring broker-a": expired_at - cut_at,
        "NameServer-1's expiry to its producer dropping broker-a": via1_dropped_at - expired_at,
        "NameServers disagreed for": converged_at - expired_at,
        "heal to NameServer-1 having broker-a again": converged_at - healed_at,
        "heal to its producer having broker-a again": via1_back_at - healed_at,
        "partition window": (window.end_ms - window.start_ms) / 1000,
    }
    with capsys.disabled():
        print("\n[partition broker-a | NameServer-1] " + "; ".join(f"{k}: {v:.2f} s" for k, v in figures.items()))
    # not before the expiry: the last heartbeat NameServer-1 had came at most one period before the cut
    assert figures["cut to NameServer-1 expiring broker-a"] >= (EXPIRY_MS - HEARTBEAT_MS) / 1000 - 0.1


def test_union_of_views_keeps_what_clients_reach(bed: Bed, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 36's client fix, before and after in one cut of broker-a's host from NameServer-1's.

    Before (RocketMQ's clients: one NameServer at a time): a producer asking NameServer-1 stops writing
    to broker-a, and a group whose two members ask different NameServers allocates from two queue
    lists: queues owned by nobody or by both. After (`route_union`, clients given both NameServers):
    the producer keeps broker-a's share, and the group owns every queue exactly once all through the
    cut, rebalancing as usual."""
    dep, nemesis = bed.dep, bed.nemesis
    options: dict[str, Any] = {"namespace": dep.spec.namespace, "poll_name_server_interval_ms": 1_000}
    group_options: dict[str, Any] = {"namespace": dep.spec.namespace, "rebalance_interval_ms": 300}
    queues = {MessageQueue(TOPIC, b, q) for b in EVERY for q in range(4)}
    one_view = [PushConsumer("GroupOneView", namesrv=[ns], instance_name=f"one-view-{ns}", route_union=False,
                             **group_options) for ns in ("namesrv-0", "namesrv-1")]
    union = [PushConsumer("GroupUnion", namesrv=["namesrv-0", "namesrv-1"], instance_name=f"union-{i}",
                          **group_options) for i in range(2)]
    with Producer("PartitionUnion", namesrv=["namesrv-1", "namesrv-0"], instance_name="union", **options) as both, \
            Producer("PartitionOneView", namesrv=["namesrv-1"], instance_name="one-view", route_union=False,
                     **options) as via1, contextlib.ExitStack() as stack:
        for consumer in one_view + union:
            consumer.subscribe(TOPIC, "*")
            consumer.register_message_listener(lambda msgs, ctx: ConsumeConcurrentlyStatus.CONSUME_SUCCESS)
            consumer.start()
            stack.callback(consumer.shutdown)
        for group in (one_view, union):
            wait_until(lambda g=group: not _ownership_defects(g, queues), 60, "each group to own every queue once")
        for producer in (both, via1):
            assert producer.send(Message(TOPIC, b"before")).send_status == "SEND_OK"
        assert _brokers_of(both) == _brokers_of(via1) == EVERY

        nemesis.partition([[BROKER_A_HOST], [NS1_HOST]])
        cut_at = time.monotonic()
        union_defects: list[dict[MessageQueue, int]] = []

        def one_view_split() -> dict[MessageQueue, int]:
            union_defects.append(_ownership_defects(union, queues))
            return _ownership_defects(one_view, queues)

        try:
            wait_until(lambda: "broker-a" not in names_on(dep, "namesrv-1"), EXPIRE_BOUND_S,
                       "NameServer-1 to expire broker-a", interval_s=0.1)
            wait_until(lambda: _brokers_of(via1) == {"broker-b"}, 30, "the one-view producer to drop broker-a",
                       interval_s=0.05)
            split = wait_until(one_view_split, 30, "the one-view group to allocate from two queue lists",
                               interval_s=0.05)
            split_at = time.monotonic()
            rebalances = [c.core.rebalances for c in union]

            def union_rebalanced_thrice() -> bool:
                union_defects.append(_ownership_defects(union, queues))
                return all(c.core.rebalances >= r + 3 for c, r in zip(union, rebalances, strict=True))

            wait_until(union_rebalanced_thrice, 30, "three more rebalances of each union member", interval_s=0.05)
            assert _brokers_of(both) == EVERY
            landed = wait_until(lambda: _sent_to(both, "broker-a"), 30, "a union send that lands on broker-a",
                                interval_s=0.01)
            assert landed.send_status == "SEND_OK"
        finally:
            nemesis.heal()
        healed_at = time.monotonic()
        wait_until(lambda: not _ownership_defects(one_view, queues), CONVERGE_BOUND_S,
                   "the one-view group to own every queue once again after the heal", interval_s=0.1)
        mended_at = time.monotonic()
    assert not any(union_defects), f"the union group's ownership broke: {[d for d in union_defects if d]}"
    unowned = sorted(f"{mq.broker_name}:{mq.queue_id}" for mq, n in split.items() if n == 0)
    doubled = sorted(f"{mq.broker_name}:{mq.queue_id}" for mq, n in split.items() if n > 1)
    with capsys.disabled():
        print(f"\n[union of views | broker-a cut from NameServer-1] one view per client: producer dropped broker-a, "
              f"group split {split_at - cut_at:.2f} s after the cut for {mended_at - split_at:.2f} s "
              f"(until {mended_at - healed_at:.2f} s after the heal), unowned {unowned}, owned twice {doubled}; "
              f"union: producer kept broker-a, group owned all {len(queues)} queues once in "
              f"{len(union_defects)} samples")


def _ownership_defects(members: list[PushConsumer], queues: set[MessageQueue]) -> dict[MessageQueue, int]:
    """Each queue of `queues` that is not owned by exactly one member, with its number of owners."""
    owners = collections.Counter(mq for m in members for mq in m.assignment() if mq in queues)
    return {mq: owners[mq] for mq in queues if owners[mq] != 1}


def _brokers_of(producer: Producer) -> set[str]:
    info = producer.publish_info(TOPIC)
    return set(info.broker_names()) if info is not None else set()


def test_every_nemesis_kind_cuts_what_it_says(bed: Bed) -> None:
    """Each nemesis, as the kernel applies it, between the servers' ports on the three hosts (a
    NameServer on hosts 0 and 1, broker-a on host 2): who reaches whom, then the heal."""
    ns0, ns1 = bed.dep.namesrv_addr().split(";")
    a = next(s.addr for s in bed.dep.broker_specs.values() if s.broker_name == "broker-a")
    server_on = {0: ns0, 1: ns1, 2: a}

    def matrix() -> dict[tuple[int, int], bool]:
        """(from host, to host) -> reached, probed from every host at once."""
        dsts = {src: [d for d in range(HOSTS) if d != src] for src in range(HOSTS)}
        probes = {src: bed.hosts.popen(src, [sys.executable, "-c", REACH, *(server_on[d] for d in ds)],
                                       stdout=subprocess.PIPE, text=True)
                  for src, ds in dsts.items()}
        out = {}
        for src, probe in probes.items():
            got, _ = probe.communicate(timeout=60)
            out.update({(src, d): c == "1" for d, c in zip(dsts[src], got.strip(), strict=True)})
        return out

    every = {(s, d): True for s in range(HOSTS) for d in range(HOSTS) if s != d}
    nemesis = bed.nemesis
    try:
        nemesis.isolate(2)
        assert matrix() == every | {(2, 0): False, (2, 1): False, (0, 2): False, (1, 2): False}
        nemesis.heal()
        nemesis.bridge([1], [2], via=0)  # host 0 sees both sides
        assert matrix() == every | {(1, 2): False, (2, 1): False}
        nemesis.heal()
        nemesis.one_way(2, 0)  # TCP needs both ways: a connection either way stalls, others pass
        assert matrix() == every | {(2, 0): False, (0, 2): False}
        rules_0 = bed.hosts.run(0, ["nft", "list", "ruleset"]).stdout
        assert f"ip saddr {bed.hosts.address(2)} drop" in rules_0 and "daddr" not in rules_0.split("chain output")[1]
    finally:
        nemesis.heal()
    assert matrix() == every
    kinds = [w.kind for w in nemesis.timeline.windows[-3:]]
    assert kinds == ["isolate", "bridge", "one_way"] and all(w.end_ms for w in nemesis.timeline.windows)


RECEIVE = """
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 22)
s.bind((sys.argv[1], int(sys.argv[2])))
print("ready", flush=True)
s.settimeout(30)
n = 0
while True:
    try:
        data, _ = s.recvfrom(64)
    except socket.timeout:
        break
    if data == b"end":
        break
    n += 1
    s.settimeout(5)
print(n, flush=True)
"""
SEND = """
import socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
to = (sys.argv[1], int(sys.argv[2]))
for i in range(int(sys.argv[3])):
    s.sendto(b"%d" % i, to)
    if i % 100 == 99:
        time.sleep(0.005)
for _ in range(200):  # the end marker crosses the lossy link too
    s.sendto(b"end", to)
"""
DATAGRAMS = 2_000


def datagrams_through(hosts: Hosts, src: int, dst: int, port: int) -> int:
    """How many of DATAGRAMS UDP datagrams sent from host `src` arrive at host `dst`."""
    receiver = hosts.popen(dst, [sys.executable, "-c", RECEIVE, hosts.address(dst), str(port)],
                           stdout=subprocess.PIPE, text=True)
    try:
        assert receiver.stdout is not None and receiver.stdout.readline().strip() == "ready"
        hosts.run(src, [sys.executable, "-c", SEND, hosts.address(dst), str(port), str(DATAGRAMS)], timeout=60)
        out, _ = receiver.communicate(timeout=60)
    finally:
        if receiver.poll() is None:
            receiver.kill()
    return int(out.strip())


def test_a_lossy_link_drops_its_share_one_way(bed: Bed) -> None:
    """nftables' random drop as a nemesis: 40 % of the packets from host 0 to host 1 are lost (of
    2,000 datagrams, 60 % ± 10 points arrive: ±9 standard deviations), the way back loses none,
    and the heal restores the link."""
    nemesis, hosts = bed.nemesis, bed.hosts
    window = nemesis.lossy([0], [1], 40, both_ways=False)
    try:
        through = datagrams_through(hosts, 0, 1, 47_001)
        back = datagrams_through(hosts, 1, 0, 47_002)
    finally:
        nemesis.heal()
    assert 0.5 * DATAGRAMS <= through <= 0.7 * DATAGRAMS, f"{through} of {DATAGRAMS} arrived through a 40 % loss"
    assert back >= 0.98 * DATAGRAMS, f"only {back} of {DATAGRAMS} came back over the unaffected direction"
    assert window.kind == "loss" and window.end_ms is not None and window.as_record()["cuts"] == [[0, 1, 40]]
    assert datagrams_through(hosts, 0, 1, 47_003) >= 0.98 * DATAGRAMS


def _sent_to(producer: Producer, broker: str) -> Any:
    result = producer.send(Message(TOPIC, b"during"))
    return result if result.message_queue.broker_name == broker else None
