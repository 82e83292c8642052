"""The mqadmin verbs and `namesrv top` as a user runs them, against one deployment (two NameServers,
two brokers, all on free TCP ports on 127.0.0.1):

- over TCP (`-n "host:port;host:port"`): the installed `namesrv` entry point in a subprocess, which
  speaks RocketMQ's remoting protocol to the NameServers and brokers;
- over the Ray namespace: `clients.cli.main.main` in this driver (one run through a subprocess too);
- bad input: one line on stderr, a non-zero exit, no traceback, and the NameServers' tables as before;
- `namesrv top` under a pseudo-terminal, its screen read back.

Each test's state is checked through the actors or the wire, not through the verb under test.
"""

from __future__ import annotations

import json
import os
import re
import select
import struct
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import ray

from actors.deployment.launcher import Deployment
from actors.deployment.placement import free_port
from actors.deployment.spec import BrokerSpec
from clients.cli.main import main as namesrv_main
from namesrv.common.waiting import wait_until
from namesrv.protocol.codes import BrokerRequestCode, RequestCode, ResponseCode
from namesrv.remoting.client import RemotingClient, parse_namesrv_addr
from tests.support.mqadmin import NAMESRV, fails, ok, run, tcp, tcp_json
from tests.support.ray_cluster import registered_deployment, removals_of, stable_tables

pytestmark = pytest.mark.timeout(600)



@pytest.fixture(scope="module")
def dep(ray_local: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    with registered_deployment(tmp_path_factory.mktemp("mqadmin"),
                               brokers=[BrokerSpec("broker-a"), BrokerSpec("broker-b")], namesrv_count=2,
                               broker_port=0) as d:
        yield d


@pytest.fixture(scope="module")
def addr(dep: Deployment) -> str:
    return dep.namesrv_addr()


# ---------------------------------------------------------------------------- running the command










def over_ray(dep: Deployment, capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """The command in this driver (already connected to the test's Ray), as `namesrv ... --namespace NS`."""
    capsys.readouterr()
    code = namesrv_main([*argv, "--namespace", dep.spec.namespace])
    out, err = capsys.readouterr()
    assert "Traceback" not in err, err
    return code, out, err


def ray_json(dep: Deployment, capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    code, out, err = over_ray(dep, capsys, *argv, "--json")
    assert code == 0, (out, err)
    return json.loads(out)


# ---------------------------------------------------------------------------- the state, seen directly
def routes(dep: Deployment, topic: str) -> dict[str, dict[str, Any] | None]:
    """Each NameServer's route for `topic` as RocketMQ's JSON model (None: no route)."""
    out = {}
    for name, ns in dep.namesrvs.items():
        resp = ray.get(ns.get_routeinfo_by_topic.remote(topic=topic), timeout=10)
        out[name] = resp.wire_body() if resp.ok else None
    return out


def queues(route: dict[str, Any] | None) -> dict[str, tuple[int, int, int]]:
    return {q["brokerName"]: (q["readQueueNums"], q["writeQueueNums"], q["perm"]) for q in (route or {}).get(
        "queueDatas", [])}


def kv_everywhere(dep: Deployment, namespace: str, key: str) -> dict[str, str | None]:
    out = {}
    for name, ns in dep.namesrvs.items():
        resp = ray.get(ns.get_kv_config.remote(namespace=namespace, key=key), timeout=10)
        out[name] = resp.ext_fields.get("value") if resp.ok else None
    return out


def broker_topics(dep: Deployment) -> dict[str, set[str]]:
    return {a: set(ray.get(b.get_topic_config_table.remote(), timeout=10)) for a, b in dep.brokers.items()}


def fingerprint(dep: Deployment) -> Any:
    return ({n: stable_tables(ns) for n, ns in dep.namesrvs.items()}, broker_topics(dep),
            {n: ray.get(ns.get_kvlist_by_namespace.remote(namespace="mqadmin-test"), timeout=10).code
             for n, ns in dep.namesrvs.items()})


# ---------------------------------------------------------------------------- over TCP
def test_cluster_and_topic_lists_over_tcp(dep: Deployment, addr: str) -> None:
    rows = tcp_json(addr, "clusterList", "-c", "DefaultCluster")
    assert {(r["brokerName"], r["brokerId"], r["brokerAddr"]) for r in rows} == {
        (s.broker_name, 0, a) for a, s in dep.broker_specs.items()}
    # Each broker's GET_BROKER_RUNTIME_INFO over TCP, as mqadmin clusterList asks for it.
    assert {r["runtimeInfo"]["brokerVersionDesc"] for r in rows} == {"V5_3_3"}
    assert all(int(r["runtimeInfo"]["bootTimestamp"]) > 0 and r["runtimeInfo"]["brokerActive"] == "true" for r in rows)
    text = ok(tcp(addr, "clusterList"))
    head, *lines = text.splitlines()
    assert head.split()[:6] == ["#Cluster", "Name", "#Broker", "Name", "#BID", "#Addr"]
    assert head.split()[6:] == ["#Version", "#InTPS(LOAD)", "#OutTPS(LOAD)", "#Timer(Progress)", "#PCWait(ms)",
                                "#Hour", "#SPACE", "#ACTIVATED"]
    brokers = [line.split() for line in lines if "broker-" in line]
    assert {b[1] for b in brokers} == {"broker-a", "broker-b"}
    assert all(b[4] == "V5_3_3" and b[-1] == "true" and 0 < float(b[-2]) < 1 for b in brokers), brokers
    assert "TBW102" in tcp_json(addr, "topicList")["topicList"]
    assert "TBW102" in ok(tcp(addr, "topicList")).split()
    assert any(r["topic"] == "TBW102" and r["cluster"] == "DefaultCluster" for r in tcp_json(addr, "topicList", "-c"))


def test_broker_status_over_tcp(dep: Deployment, addr: str) -> None:
    broker = sorted(dep.brokers)[0]
    lines = ok(tcp(addr, "brokerStatus", "-b", broker)).splitlines()
    pairs = [tuple(part.strip() for part in line.split(":", 1)) for line in lines]
    assert [k for k, _ in pairs] == sorted(k for k, _ in pairs), "keys sorted, as mqadmin's TreeMap"
    assert ("brokerVersionDesc", "V5_3_3") in pairs and ("brokerActive", "true") in pairs
    assert lines[0].index(":") == 32, "key padded to 32 columns, as mqadmin prints it"
    by_cluster = ok(tcp(addr, "brokerStatus", "-c", "DefaultCluster")).splitlines()
    assert {line.split()[0] for line in by_cluster} == set(dep.brokers)
    assert set(tcp_json(addr, "brokerStatus", "-c", "DefaultCluster")) == set(dep.brokers)
    fails(tcp(addr, "brokerStatus", "-b", "127.0.0.1:1"), 1, "no broker at '127.0.0.1:1'")
    fails(tcp(addr, "brokerStatus", "-c", "NoSuchCluster"), 1, "no cluster 'NoSuchCluster'")
    fails(tcp(addr, "brokerStatus"), 2, "one of the arguments -b/--brokerAddr -c/--clusterName is required")


def test_update_route_and_delete_topic_over_tcp(dep: Deployment, addr: str) -> None:
    out = ok(tcp(addr, "updateTopic", "-t", "MqaTcpTopic", "-c", "DefaultCluster", "-r", "4", "-w", "3", "-p", "6"))
    assert out.count("create topic to ") == 2 and "TopicConfig [topicName=MqaTcpTopic" in out
    # the broker answered after registering: every NameServer has the route at once
    for name, route in routes(dep, "MqaTcpTopic").items():
        assert queues(route) == {"broker-a": (4, 3, 6), "broker-b": (4, 3, 6)}, name
    shown = tcp_json(addr, "topicRoute", "-t", "MqaTcpTopic")
    assert queues(shown) == {"broker-a": (4, 3, 6), "broker-b": (4, 3, 6)}
    table = ok(tcp(addr, "topicRoute", "-t", "MqaTcpTopic", "-l"))
    assert table.splitlines()[-1].split()[:4] == ["Total:", "2", "8", "6"]

    one = next(a for a, s in dep.broker_specs.items() if s.broker_name == "broker-a")
    created = tcp_json(addr, "updateTopic", "-t", "MqaOneBroker", "-b", one, "-p", "4")
    assert created["brokers"] == [one] and created["topicConfig"]["perm"] == 4
    assert queues(routes(dep, "MqaOneBroker")["namesrv-0"]) == {"broker-a": (8, 8, 4)}

    out = ok(tcp(addr, "deleteTopic", "-t", "MqaTcpTopic", "-c", "DefaultCluster"))
    assert "delete topic [MqaTcpTopic] from NameServer success." in out
    assert routes(dep, "MqaTcpTopic") == {"namesrv-0": None, "namesrv-1": None}
    assert all("MqaTcpTopic" not in topics for topics in broker_topics(dep).values())
    fails(tcp(addr, "topicRoute", "-t", "MqaTcpTopic"), 1, "MqaTcpTopic", "does not exist")


def test_kv_config_over_tcp(dep: Deployment, addr: str) -> None:
    assert "success" in ok(tcp(addr, "updateKvConfig", "-s", "mqadmin-kv", "-k", "k1", "-v", "v1"))
    assert kv_everywhere(dep, "mqadmin-kv", "k1") == {"namesrv-0": "v1", "namesrv-1": "v1"}
    with RemotingClient(*parse_namesrv_addr(addr)[1]) as c:  # and RocketMQ's own query reads it back
        assert c.invoke(RequestCode.GET_KV_CONFIG, {"namespace": "mqadmin-kv", "key": "k1"}).ext_fields == {
            "value": "v1"}
    assert tcp_json(addr, "deleteKvConfig", "-s", "mqadmin-kv", "-k", "k1")["namesrvs"] == sorted(addr.split(";"))
    assert kv_everywhere(dep, "mqadmin-kv", "k1") == {"namesrv-0": None, "namesrv-1": None}
    fails(tcp(addr, "deleteKvConfig", "-s", "mqadmin-kv", "-k", "k1"), 1, "no KV config mqadmin-kv/k1")


def test_namesrv_config_over_tcp(dep: Deployment, addr: str) -> None:
    configs = tcp_json(addr, "getNamesrvConfig")
    assert set(configs) == set(addr.split(";"))
    assert all(c["orderMessageEnable"].lower() == "false" for c in configs.values())
    text = ok(tcp(addr, "getNamesrvConfig"))
    assert f"============{addr.split(';')[0]}============" in text
    try:
        assert "orderMessageEnable : true" in ok(tcp(addr, "updateNamesrvConfig", "-k", "orderMessageEnable", "-v",
                                                     "true"))
        assert all(c["orderMessageEnable"].lower() == "true" for c in tcp_json(addr, "getNamesrvConfig").values())
    finally:
        ok(tcp(addr, "updateNamesrvConfig", "-k", "orderMessageEnable", "-v", "false"))


def test_write_perm_over_tcp(dep: Deployment, addr: str) -> None:
    wiped = tcp_json(addr, "wipeWritePerm", "-b", "broker-a")
    assert set(wiped["wipeTopicCount"]) == set(addr.split(";")) and min(wiped["wipeTopicCount"].values()) >= 1
    try:
        for route in routes(dep, "TBW102").values():
            perms = {b: p for b, (_, _, p) in queues(route).items()}
            assert perms["broker-a"] & 2 == 0 and perms["broker-b"] & 2, perms
    finally:
        out = ok(tcp(addr, "addWritePerm", "-b", "broker-a"))
    assert out.count("add write perm of broker[broker-a] in name server[") == 2 and "OK" in out
    for route in routes(dep, "TBW102").values():
        assert all(p & 2 for _, _, p in queues(route).values())


def test_update_broker_config_over_tcp_and_ray(dep: Deployment, addr: str, capsys: pytest.CaptureFixture[str]) -> None:
    """updateBrokerConfig of the retention settings on the running brokers: taken (over TCP on one
    broker, over Ray on a cluster's masters), shown by getBrokerConfig, kept in each broker's config
    file; a bad value or a key a running broker cannot take is the broker's one-line reason and
    changes nothing."""
    a = dep.addr_of("broker-a-0")
    try:
        assert "update broker config success" in ok(tcp(addr, "updateBrokerConfig", "-b", a, "-k",
                                                         "fileReservedTime", "-v", "48"))
        assert tcp_json(addr, "getBrokerConfig", "-b", a)[a]["fileReservedTime"] == "48"
        assert set(ray_json(dep, capsys, "updateBrokerConfig", "-c", "DefaultCluster", "-k", "deleteWhen", "-v",
                            "01;13")) == set(dep.brokers)
        every = ray_json(dep, capsys, "getBrokerConfig", "-c", "DefaultCluster")
        assert {c["deleteWhen"] for c in every.values()} == {"01;13"}
        for broker in dep.brokers.values():
            kept = Path(ray.get(broker.get_runtime_info.remote(), timeout=60)["store_dir"]) / "config"
            assert "deleteWhen=01;13" in (kept / "broker.properties").read_text()
        before = tcp_json(addr, "getBrokerConfig", "-b", a)
        fails(tcp(addr, "updateBrokerConfig", "-b", a, "-k", "diskMaxUsedSpaceRatio", "-v", "99"), 1,
              "SYSTEM_ERROR", "diskMaxUsedSpaceRatio")
        fails(tcp(addr, "updateBrokerConfig", "-b", a, "-k", "flushDiskType", "-v", "ASYNC_FLUSH"), 1,
              "INVALID_PARAMETER", "read only at start")
        code, _, err = over_ray(dep, capsys, "updateBrokerConfig", "-b", a, "-k", "deleteWhen", "-v", "24")
        assert code == 1 and "0..23" in err
        assert tcp_json(addr, "getBrokerConfig", "-b", a) == before
    finally:
        for key, value in (("fileReservedTime", "72"), ("deleteWhen", "04")):
            ok(tcp(addr, "updateBrokerConfig", "-c", "DefaultCluster", "-k", key, "-v", value))


def test_bad_input_is_one_line_and_changes_nothing(dep: Deployment, addr: str) -> None:
    closed = f"127.0.0.1:{free_port()}"
    cases: list[tuple[list[str], int, list[str]]] = [
        (["topicList", "-n", "nohost"], 2, ["bad NameServer address 'nohost'"]),
        (["topicList", "-n", closed], 1, [closed, "refused"]),
        (["updateTopic", "-t", "T1", "-c", "DefaultCluster", "-n", closed], 1, ["refused"]),
        (["topicRoute", "-t", "NoSuchTopic", "-n", addr], 1, ["NoSuchTopic", "does not exist"]),
        (["updateTopic", "-t", "bad topic!", "-c", "DefaultCluster", "-n", addr], 2, ["-t/--topic"]),
        (["updateTopic", "-t", "T1", "-c", "DefaultCluster", "-p", "3", "-n", addr], 2, ["not a topic permission"]),
        (["updateTopic", "-t", "T1", "-c", "DefaultCluster", "-r", "0", "-n", addr], 2, ["-r/--readQueueNums"]),
        (["updateTopic", "-t", "T1", "-n", addr], 2, ["-b/--brokerAddr", "-c/--clusterName"]),
        (["updateTopic", "-t", "T1", "-c", "NoCluster", "-n", addr], 1, ["no cluster 'NoCluster'"]),
        (["updateTopic", "-t", "T1", "-b", "127.0.0.1:1", "-n", addr], 1, ["no broker at '127.0.0.1:1'"]),
        (["updateTopic", "-t", "TBW102", "-c", "DefaultCluster", "-n", addr], 2, ["system topic"]),
        (["deleteTopic", "-t", "NoSuchTopic", "-c", "DefaultCluster", "-n", addr], 1, ["does not exist"]),
        (["wipeWritePerm", "-b", "no-broker", "-n", addr], 1, ["no broker named 'no-broker'"]),
        (["updateNamesrvConfig", "-k", "noSuchKey", "-v", "1", "-n", addr], 1, ["unknown NameServer config key"]),
        (["updateNamesrvConfig", "-k", "configStorePath", "-v", "/tmp/x", "-n", addr], 1, ["black list"]),
        (["updateKvConfig", "-s", "mqadmin-test", "-k", "", "-v", "v", "-n", addr], 1, ["invalid KV config"]),
        (["updateKvConfig", "-s", "bad ns!", "-k", "k", "-v", "v", "-n", addr], 1, ["invalid KV config"]),
    ]
    before = fingerprint(dep)
    for argv, code, words in cases:
        fails(run(*argv, timeout=60), code, *words)  # a hang would fail here
    assert fingerprint(dep) == before


def test_brokers_refuse_bad_topics_over_the_wire(dep: Deployment) -> None:
    """What mqadmin would meet without the CLI's own checks: the broker's INVALID_PARAMETER."""
    broker = next(iter(dep.broker_specs))
    before = broker_topics(dep)
    with RemotingClient(*parse_namesrv_addr(broker)[0]) as c:
        base = {"defaultTopic": "TBW102", "readQueueNums": "8", "writeQueueNums": "8", "perm": "6"}
        for topic in ("TBW102", "bad topic!", ""):
            answer = c.invoke(BrokerRequestCode.UPDATE_AND_CREATE_TOPIC, base | {"topic": topic})
            assert answer.code == ResponseCode.INVALID_PARAMETER, (topic, answer.remark)
        assert c.invoke(BrokerRequestCode.UPDATE_AND_CREATE_TOPIC, base | {"topic": "T", "perm": "99"}).code == (
            ResponseCode.INVALID_PARAMETER)
        assert c.invoke(BrokerRequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "TBW102"}).code == (
            ResponseCode.INVALID_PARAMETER)
    assert broker_topics(dep) == before


# ---------------------------------------------------------------------------- over the Ray namespace
def test_every_verb_over_the_ray_namespace(dep: Deployment, capsys: pytest.CaptureFixture[str]) -> None:
    rows = ray_json(dep, capsys, "clusterList")
    assert {r["brokerAddr"] for r in rows} == set(dep.brokers)
    assert all(r["runtimeInfo"]["msgPutTotalTodayNow"].isdigit() for r in rows)
    assert "TBW102" in ray_json(dep, capsys, "topicList")["topicList"]

    assert ray_json(dep, capsys, "updateTopic", "-t", "MqaRayTopic", "-c", "DefaultCluster", "-r", "2", "-w",
                    "2")["brokers"] == sorted(dep.brokers)
    for route in routes(dep, "MqaRayTopic").values():
        assert queues(route) == {"broker-a": (2, 2, 6), "broker-b": (2, 2, 6)}
    assert queues(ray_json(dep, capsys, "topicRoute", "-t", "MqaRayTopic")) == queues(
        routes(dep, "MqaRayTopic")["namesrv-0"])

    ray_json(dep, capsys, "wipeWritePerm", "-b", "broker-b")
    assert all(queues(r)["broker-b"][2] & 2 == 0 for r in routes(dep, "MqaRayTopic").values())
    ray_json(dep, capsys, "addWritePerm", "-b", "broker-b")
    assert all(queues(r)["broker-b"][2] & 2 for r in routes(dep, "MqaRayTopic").values())

    ray_json(dep, capsys, "updateKvConfig", "-s", "mqadmin-ray", "-k", "k", "-v", "v2")
    assert kv_everywhere(dep, "mqadmin-ray", "k") == {"namesrv-0": "v2", "namesrv-1": "v2"}
    ray_json(dep, capsys, "deleteKvConfig", "-s", "mqadmin-ray", "-k", "k")
    assert kv_everywhere(dep, "mqadmin-ray", "k") == {"namesrv-0": None, "namesrv-1": None}

    configs = ray_json(dep, capsys, "getNamesrvConfig")
    assert set(configs) == {"namesrv-0", "namesrv-1"} and "brokerChannelExpiredTimeMs" in configs["namesrv-0"]
    ray_json(dep, capsys, "updateNamesrvConfig", "-k", "orderMessageEnable", "-v", "true")
    try:
        assert all(c["orderMessageEnable"].lower() == "true" for c in ray_json(dep, capsys,
                                                                              "getNamesrvConfig").values())
    finally:
        ray_json(dep, capsys, "updateNamesrvConfig", "-k", "orderMessageEnable", "-v", "false")

    ray_json(dep, capsys, "deleteTopic", "-t", "MqaRayTopic", "-c", "DefaultCluster")
    assert routes(dep, "MqaRayTopic") == {"namesrv-0": None, "namesrv-1": None}
    code, _, err = over_ray(dep, capsys, "topicRoute", "-t", "MqaRayTopic")
    assert code == 1 and "does not exist" in err and len(err.strip().splitlines()) == 1


def test_one_admin_client_over_either_transport(dep: Deployment, addr: str) -> None:
    """The Python API the verbs use: one DefaultMQAdminExt, over TCP and over Ray, gives RocketMQ's
    typed models, the same ones either way; AdminClient is that client over the deployment."""
    from clients.admin.brokers import MQAdminError
    from clients.admin.client import AdminClient, DefaultMQAdminExt
    from namesrv.protocol.models import ClusterInfo, TopicRouteData

    with DefaultMQAdminExt.over_tcp(addr) as by_tcp, DefaultMQAdminExt.over_ray(dep) as by_ray:
        created = by_tcp.create_topic("MqaBothWays", cluster="DefaultCluster", read_queue_nums=3, write_queue_nums=3)
        assert sorted(created) == sorted(dep.brokers)
        route = by_ray.examine_topic_route_info("MqaBothWays")
        assert isinstance(route, TopicRouteData)
        assert {q.broker_name: q.write_queue_nums for q in route.queue_datas} == {"broker-a": 3, "broker-b": 3}
        assert by_tcp.examine_topic_route_info("MqaBothWays").to_wire() == route.to_wire()
        info = by_ray.examine_broker_cluster_info()
        assert isinstance(info, ClusterInfo) and info.to_wire() == by_tcp.examine_broker_cluster_info().to_wire()
        assert AdminClient(dep).route("MqaBothWays") == route
        wiped = by_tcp.wipe_write_perm_of_broker("broker-b")
        assert set(wiped) == set(by_tcp.transport.namesrvs()) and all(n >= 1 for n in wiped.values()), wiped
        assert all(queues(r)["broker-b"][2] & 2 == 0 for r in routes(dep, "MqaBothWays").values())
        assert set(by_ray.add_write_perm_of_broker("broker-b")) == {"namesrv-0", "namesrv-1"}
        assert all(queues(r)["broker-b"][2] & 2 for r in routes(dep, "MqaBothWays").values())
        by_ray.delete_topic("MqaBothWays", cluster="DefaultCluster")
        assert routes(dep, "MqaBothWays") == {"namesrv-0": None, "namesrv-1": None}
        assert by_tcp.routes_everywhere("MqaBothWays") == dict.fromkeys(by_tcp.transport.namesrvs())
        with pytest.raises(MQAdminError, match="does not exist"):
            by_tcp.examine_topic_route_info("MqaBothWays")


def test_ray_namespace_errors(dep: Deployment, capsys: pytest.CaptureFixture[str]) -> None:
    before = fingerprint(dep)
    for argv, words in [(["wipeWritePerm", "-b", "no-broker"], "no broker named"),
                        (["deleteTopic", "-t", "NoSuchTopic", "-c", "DefaultCluster"], "does not exist"),
                        (["updateTopic", "-t", "T1", "-c", "NoCluster"], "no cluster")]:
        code, _, err = over_ray(dep, capsys, *argv)
        assert code == 1 and words in err and len(err.strip().splitlines()) == 1, err
    capsys.readouterr()
    assert namesrv_main(["clusterList", "--namespace", "mqadmin-nothing-here"]) == 1
    assert "no NameServer in Ray namespace 'mqadmin-nothing-here'" in capsys.readouterr().err
    assert fingerprint(dep) == before


def test_a_separate_process_reaches_the_namespace(dep: Deployment) -> None:
    gcs = ray.get_runtime_context().gcs_address
    rows = json.loads(ok(run("clusterList", "--json", "--namespace", dep.spec.namespace, "--address", gcs)))
    assert {r["brokerAddr"] for r in rows} == set(dep.brokers)


# ---------------------------------------------------------------------------- namesrv top
def run_in_pty(argv: list[str], cols: int = 200, rows: int = 60, timeout: float = 120) -> tuple[int, str]:
    """Run `argv` with a pseudo-terminal as its stdin/stdout/stderr; returns its exit code and
    everything it wrote to the terminal."""
    import fcntl
    import termios

    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
    env = dict(os.environ, TERM="xterm-256color", COLUMNS=str(cols), LINES=str(rows))
    proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env=env, close_fds=True)
    os.close(slave)
    screen = bytearray()
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 1.0)
            if ready:
                try:
                    data = os.read(master, 1 << 16)
                except OSError:  # EIO: the child closed the terminal
                    break
                if not data:
                    break
                screen += data
            elif proc.poll() is not None:
                break
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
    return proc.wait(timeout=10), screen.decode(errors="replace")


ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def register_fake_broker(client: RemotingClient, name: str, addr: str, topic: str) -> None:
    body = json.dumps({"topicConfigSerializeWrapper": {
        "dataVersion": {"counter": 1, "stateVersion": 0, "timestamp": 1},
        "topicConfigTable": {topic: {"topicName": topic, "readQueueNums": 1, "writeQueueNums": 1, "perm": 6}}},
        "filterServerList": []}).encode()
    answer = client.invoke(RequestCode.REGISTER_BROKER, {
        "brokerAddr": addr, "brokerId": "0", "brokerName": name, "clusterName": "TopCluster",
        "haServerAddr": addr, "heartbeatTimeoutMillis": "120000"}, body)
    assert answer.code == ResponseCode.SUCCESS, answer.remark


def test_top_shows_brokers_ages_disagreements_and_removals(dep: Deployment, addr: str) -> None:
    ns0 = dep.namesrvs["namesrv-0"]
    first = parse_namesrv_addr(addr)[0]
    # A broker that registered on namesrv-0 and left (its connection closed): a removal.
    with RemotingClient(*first) as gone:
        register_fake_broker(gone, "top-gone", "127.0.0.1:30921", "TopGoneTopic")
    wait_until(lambda: removals_of(ns0, "127.0.0.1:30921"), 15, "the closed broker's removal on namesrv-0")
    # A broker only namesrv-0 knows, for as long as its connection stays open: a disagreement.
    with RemotingClient(*first) as held:
        register_fake_broker(held, "top-lonely", "127.0.0.1:30931", "TopLonelyTopic")
        code, screen = run_in_pty([NAMESRV, "top", "--namespace", dep.spec.namespace, "--address",
                                   ray.get_runtime_context().gcs_address, "--iterations", "2", "--interval", "0.2"])
    wait_until(lambda: removals_of(ns0, "127.0.0.1:30931"), 15, "the lonely broker's removal")
    text = ANSI.sub("", screen)
    assert code == 0, text[-3000:]
    assert "Traceback" not in text, text[-3000:]
    assert "\x1b[1A" in screen, "not refreshed in place"
    assert "refresh 2" in text
    for broker in ("broker-a", "broker-b", "top-lonely"):
        assert broker in text, broker
    last = text[text.rindex("refresh 2"):]
    ages = re.findall(r"(broker-[ab]) .*?│ (\d+ ms|\d+\.\d\d s) +│ (\d+ ms|\d+\.\d\d s) +│", last)
    assert {b for b, _, _ in ages} == {"broker-a", "broker-b"}, last
    lonely = next(line for line in last.splitlines() if "top-lonely" in line)
    assert "missing" in lonely and re.search(r"\d+ ms|\d+\.\d\d s", lonely), lonely
    assert "brokers on namesrv-0, not on namesrv-1: 127.0.0.1:30931" in last
    assert "topics on namesrv-0, not on namesrv-1: TopLonelyTopic" in last
    removal = next(line for line in last.splitlines() if "127.0.0.1:30921" in line)
    assert "namesrv-0" in removal and "channel" in removal, removal


def test_the_query_verbs_over_tcp_and_ray(dep: Deployment, addr: str, capsys: pytest.CaptureFixture[str]) -> None:
    """topicStatus, topicClusterList, consumerProgress, consumerConnection and getBrokerConfig: what
    each broker reports, the same over TCP and over Ray; checked against the store and offsets."""
    from clients.admin.client import AdminClient
    from tests.support.broker import heartbeat

    AdminClient(dep).create_topic("StatsTopic", read_queue_nums=2, write_queue_nums=2)
    wait_until(lambda: all(routes(dep, "StatsTopic").values()), 15, "the route of StatsTopic")
    a = dep.addr_of("broker-a-0")
    assert all(r.ok for r in ray.get([dep.brokers[a].send_message.remote("StatsTopic", 0, f"m{i}".encode())
                                      for i in range(5)], timeout=60))
    with RemotingClient(*parse_namesrv_addr(a)[0]) as c:  # a consumer online while the verbs ask
        assert c.invoke(BrokerRequestCode.HEART_BEAT, {}, heartbeat("c-stats", "StatsGroup", "StatsTopic")).code == 0
        assert c.invoke(BrokerRequestCode.UPDATE_CONSUMER_OFFSET, {"consumerGroup": "StatsGroup", "topic": "StatsTopic",
                                                                   "queueId": "0", "commitOffset": "2"}).code == 0
        wait_until(lambda: routes(dep, "%RETRY%StatsGroup")["namesrv-0"] is not None, 40, "the group's retry topic")
        for ask in (lambda *argv: tcp_json(addr, *argv), lambda *argv: ray_json(dep, capsys, *argv)):
            status = {(q["brokerName"], q["queueId"]): q for q in ask("topicStatus", "-t", "StatsTopic")}
            assert set(status) == {(b, q) for b in ("broker-a", "broker-b") for q in (0, 1)}
            assert (status[("broker-a", 0)]["maxOffset"], status[("broker-a", 0)]["minOffset"]) == (5, 0)
            assert status[("broker-a", 0)]["lastUpdateTimestamp"] > 0 and status[("broker-b", 0)]["maxOffset"] == 0
            assert ask("topicClusterList", "-t", "StatsTopic") == {"clusters": ["DefaultCluster"]}
            progress = ask("consumerProgress", "-g", "StatsGroup")
            assert progress["diffTotal"] == 3
            [q0] = [q for q in progress["queues"] if (q["brokerName"], q["queueId"]) == ("broker-a", 0)]
            assert (q0["brokerOffset"], q0["consumerOffset"], q0["diff"]) == (5, 2, 3)
            conn = ask("consumerConnection", "-g", "StatsGroup")
            assert [c["clientId"] for c in conn["connectionSet"]] == ["c-stats"]
            assert set(conn["subscriptionTable"]) == {"StatsTopic"}
            config = ask("getBrokerConfig", "-b", a)[a]
            assert config["brokerName"] == "broker-a" and config["flushDiskType"] == "SYNC_FLUSH"
            every = ask("getBrokerConfig", "-c", "DefaultCluster")
            assert set(every) == set(dep.brokers) and every[a]["brokerName"] == "broker-a"
            overview = {r["group"]: r for r in ask("consumerProgress")}
            assert (overview["StatsGroup"]["count"], overview["StatsGroup"]["diffTotal"]) == (1, 3)
            assert overview["StatsGroup"]["type"] in ("PUSH", "PULL") and overview["StatsGroup"]["version"] != "OFFLINE"
        text = ok(tcp(addr, "consumerProgress", "-g", "StatsGroup"))
        assert "Diff Total: 3" in text and "#Consumer Offset" in text
        text = ok(tcp(addr, "consumerProgress"))
        assert text.split()[:7] == ["#Group", "#Count", "#Version", "#Type", "#Model", "#TPS", "#Diff"]
        assert "StatsGroup" in text
    fails(tcp(addr, "consumerConnection", "-g", "NoSuchGroup"), 1, "NoSuchGroup")
    fails(tcp(addr, "topicStatus", "-t", "NoSuchTopic"), 1, "NoSuchTopic")


def test_message_and_stats_verbs_over_tcp_and_ray(dep: Deployment, addr: str,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """queryMsgByKey, queryMsgById, queryMsgByUniqueKey and statsAll on both brokers, the same over
    TCP and over Ray, checked against what the sends answered; bad ids are one line and exit 1."""
    from clients.admin.client import AdminClient
    from namesrv.protocol.message.codec import offset_msg_id

    AdminClient(dep).create_topic("MsgTopic", read_queue_nums=2, write_queue_nums=2)
    wait_until(lambda: all(routes(dep, "MsgTopic").values()), 15, "the route of MsgTopic")
    a, b = dep.addr_of("broker-a-0"), dep.addr_of("broker-b-0")
    sent = ray.get([dep.brokers[a].send_message.remote("MsgTopic", 0, f"a{i}".encode(),
                                                       {"KEYS": f"order-{i % 2} shared"}, f"UA{i}") for i in range(4)]
                   + [dep.brokers[b].send_message.remote("MsgTopic", 1, b"b0", {"KEYS": "shared"}, "UB0")], timeout=60)
    assert all(r.ok for r in sent)
    offset_ids = [r.ext_fields["offsetMsgId"] for r in sent]
    # the four sends to broker-a run concurrently on its actor: the store order, not the call order, is newest-first
    newest_odd = max(("a1", "a3"), key=lambda body: int(sent[int(body[1])].ext_fields["queueOffset"]))
    for ask in (lambda *argv: tcp_json(addr, *argv), lambda *argv: ray_json(dep, capsys, *argv)):
        shared = ask("queryMsgByKey", "-t", "MsgTopic", "-k", "shared")["messages"]
        assert sorted(m["body"] for m in shared) == ["a0", "a1", "a2", "a3", "b0"]
        assert {m["offsetMsgId"] for m in shared} == set(offset_ids)
        odd = ask("queryMsgByKey", "-t", "MsgTopic", "-k", "order-1", "-m", "1")["messages"]
        assert [m["body"] for m in odd] == [newest_odd]  # the newest first, maxNum per broker
        assert ask("queryMsgByKey", "-t", "MsgTopic", "-k", "nothing")["messages"] == []
        [by_id] = ask("queryMsgById", "-i", offset_ids[2])
        assert (by_id["body"], by_id["uniqueKey"], by_id["storeHost"], by_id["queueId"]) == ("a2", "UA2", a, 0)
        [by_client_id] = ask("queryMsgById", "-i", "UA1", "-t", "MsgTopic")
        assert (by_client_id["body"], by_client_id["offsetMsgId"]) == ("a1", offset_ids[1])
        [by_uniq] = ask("queryMsgByUniqueKey", "-t", "MsgTopic", "-i", "UB0")
        assert (by_uniq["body"], by_uniq["offsetMsgId"]) == ("b0", offset_ids[4])
        [row] = ask("statsAll", "-t", "MsgTopic")
        assert (row["topic"], row["group"], row["inMsg24Hour"], row["outMsg24Hour"]) == ("MsgTopic", None, 5, None)
        assert row["inTps"] > 0
        assert ask("topicClusterList", "-t", "MsgTopic") == {"clusters": ["DefaultCluster"]}
    text = ok(tcp(addr, "queryMsgByKey", "-t", "MsgTopic", "-k", "order-0"))
    assert text.split()[:3] == ["#Message", "ID", "#QID"] and offset_ids[0] in text and offset_ids[2] in text
    shown = ok(tcp(addr, "queryMsgById", "-i", offset_ids[0]))
    assert f"{'OffsetID:':<20} {offset_ids[0]}" in shown and "Message Body:        a0" in shown
    assert "MsgTopic" in ok(tcp(addr, "statsAll"))
    fails(tcp(addr, "queryMsgById", "-i", "not-an-id"), 1, "32 hex")
    fails(tcp(addr, "queryMsgById", "-i", "not-an-id", "-t", "MsgTopic"), 1, "not-an-id")
    fails(tcp(addr, "queryMsgById", "-i", offset_msg_id(a, 10**9)), 1, "can not find message by the offset")
    fails(tcp(addr, "queryMsgByUniqueKey", "-t", "MsgTopic", "-i", "NoSuchId"), 1, "NoSuchId")


def test_consumer_status_of_a_ray_native_consumer_over_tcp_and_ray(dep: Deployment, addr: str,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """consumerStatus through the brokers: a Ray-native consumer is answered for from its latest
    heartbeat (its offsets and last pulls, nothing it does not have); an unknown client is one line."""
    from clients.admin.client import AdminClient
    from clients.consumer.pull_consumer import PullConsumer

    AdminClient(dep).create_topic("StatusTopic", read_queue_nums=2, write_queue_nums=2)
    wait_until(lambda: all(routes(dep, "StatusTopic").values()), 15, "the route of StatusTopic")
    a = dep.addr_of("broker-a-0")
    assert all(r.ok for r in ray.get([dep.brokers[a].send_message.remote("StatusTopic", 0, f"m{i}".encode())
                                      for i in range(3)], timeout=60))
    consumer = PullConsumer(dep.spec.namespace, list(dep.namesrvs), consumer_group="StatusGroup")
    assert len(consumer.consume_all("StatusTopic")) == 3
    consumer.heartbeat(["StatusTopic"])
    wait_until(lambda: routes(dep, "%RETRY%StatusGroup")["namesrv-0"] is not None, 40, "the group's retry topic")
    cid = consumer.client_id
    for ask in (lambda *argv: tcp_json(addr, *argv), lambda *argv: ray_json(dep, capsys, *argv)):
        info = ask("consumerStatus", "-g", "StatusGroup")[cid]
        assert info["properties"]["PROP_CONSUME_TYPE"] == "CONSUME_ACTIVELY"
        assert [s["topic"] for s in info["subscriptionSet"]] == ["StatusTopic"]
        queues = {(q["messageQueue"]["brokerName"], q["messageQueue"]["queueId"]): q["processQueueInfo"]
                  for q in info["mqTable"]}
        assert set(queues) == {(b, q) for b in ("broker-a", "broker-b") for q in (0, 1)}
        assert queues[("broker-a", 0)]["commitOffset"] == 3 and queues[("broker-b", 1)]["commitOffset"] == 0
        assert all(set(pq) == {"commitOffset", "lastPullTimestamp"} for pq in queues.values()), "nothing made up"
        assert ask("consumerStatus", "-g", "StatusGroup", "-i", cid)["properties"] == info["properties"]
    text = ok(tcp(addr, "consumerStatus", "-g", "StatusGroup", "-i", cid))
    assert "#Consumer Properties#" in text and "001 Topic: StatusTopic" in text
    listing = ok(tcp(addr, "consumerStatus", "-g", "StatusGroup"))
    assert cid in listing and "Same subscription in the same group of consumer" in listing
    fails(tcp(addr, "consumerStatus", "-g", "StatusGroup", "-i", "nobody"), 1,
          "The Consumer <StatusGroup> <nobody> not online")
