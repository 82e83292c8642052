"""A real `ray up` of cluster.yaml across three hosts of the multi-host test bed (issue 36, design
§11): head at 10.77.0.2, workers at 10.77.0.3 and 10.77.0.4, each a network namespace of
clients/chaos/hosts/netns.py. The multi-host version of tests/e2e/test_ray_up_e2e.py.

What runs for real: Ray's cluster launcher (`ray up`, `ray exec`, `ray submit`, `ray down` as
subprocesses in the root namespace, 10.77.0.1 on the bed's bridge), ssh and rsync, the head's
autoscaler (local provider) setting up both workers itself over ssh from inside host 0, the yaml's
setup commands (run.sh builds each node's venv), `ray start` on every host, and `namesrv up
--address auto --wait-nodes launcher --spread-namesrvs --pin-brokers` placing the NameServers and
brokers over the hosts. Then, through the launcher: `ray status` (3 nodes), `namesrv status`,
`namesrv topic` and `namesrv route` (the brokers at two hosts' addresses), a produce/consume round
trip on the head (tests/e2e/round_trip_on_head.py), and `ray down`.

The generated copy of cluster.yaml changes only head_ip and worker_ips, the cluster_name (unique)
and the key (a throwaway one). Every port stays the yaml's: each host has its own port space, and
each host's sshd listens on its address at port 22.

Each host runs an sshd in PID and mount namespaces of its own with a private home, /tmp/ray and ssh
control directory (tests/support/ray_up.py), so the `ray stop`s of `ray up`/`ray down` reach only
that host's processes, never another Ray on this machine.

The package registry: the hosts have no route out of the bed. Each host's pip is configured with an
HTTPS proxy (~/.config/pip/pip.conf: `proxy = http://10.77.0.1:PORT`, as on a site whose machines
reach PyPI through one; run.sh hands pip's proxy to uv), which this test runs in the root namespace
(tests/support/registry_proxy.py): it tunnels CONNECTs to pypi.org and files.pythonhosted.org on
443 and refuses anything else. Nothing but pip and uv is told of it; the system's own traffic (Ray,
NameServers, brokers, clients) stays between the hosts' addresses. The test checks that a host
cannot reach the registry directly, that setup went through the proxy, and that it refused nothing.

Needs root (namespaces, apt, sshd), iproute2 and nftables; installs openssh-server and rsync with
apt when missing.
"""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from clients.chaos.hosts.layout import is_leftover_netns
from clients.chaos.hosts.netns import Hosts, require_host_tools
from namesrv.common.waiting import wait_until
from tests.support.ray_up import (
    RayLauncher,
    SshNode,
    client_leftovers,
    cluster_config,
    cmdlines,
    ensure_packages,
    make_key,
    processes_in,
    ray_processes,
    route_rows,
    skip_unless_root_namespaces,
    ssh_run,
    start_ssh_node,
    stop_ssh_node,
    tail,
    wait_registered_and_ready,
)
from tests.support.registry_proxy import REGISTRY_HOSTS, RegistryProxy, registry_hosts

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

HOSTS = 3
SSH_PORT = 22
TOPIC = "TopicHosts"
NAMESRVS = ("namesrv-0", "namesrv-1")
BROKERS = ("broker-a-0", "broker-b-0")
ROUND_TRIP = Path(__file__).with_name("round_trip_on_head.py")
MESSAGES = 20


@dataclass
class Bed:
    hosts: Hosts
    nodes: list[SshNode]
    key: Path
    root: Path
    proxy: RegistryProxy
    launchers: list[RayLauncher] = field(default_factory=list)


def netns_names() -> list[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


@pytest.fixture(scope="module")
def bed() -> Iterator[Bed]:
    skip_unless_root_namespaces()
    require_host_tools()
    ensure_packages()
    root = Path(tempfile.mkdtemp(prefix="nsrv-up-", dir="/tmp"))
    leftovers: list[str] = []
    try:
        key = make_key(root / "id_ed25519")
        with Hosts(HOSTS) as hosts, RegistryProxy(hosts.driver_address, registry_hosts()) as proxy:
            pip_conf = {".config/pip/pip.conf": f"[global]\nproxy = {proxy.url}\n"}
            bed = Bed(hosts, [], key, root, proxy)
            try:
                for i in range(HOSTS):
                    bed.nodes.append(start_ssh_node(root / f"h{i}", hosts.address(i), SSH_PORT,
                                                    key.with_suffix(".pub"), wrap=hosts.argv(i, []),
                                                    home_files=pip_conf))
                yield bed
            finally:
                for node in bed.nodes:
                    leftovers += stop_ssh_node(node)
                leftovers += client_leftovers(root)
                for launcher in bed.launchers:
                    launcher.forget()
        left_netns = [n for n in netns_names() if is_leftover_netns(n)]
    finally:
        shutil.rmtree(root, ignore_errors=True)
    assert not leftovers, f"processes left running after the test: {leftovers}"
    assert not left_netns, f"network namespaces left after the test: {left_netns}"


def reaches(hosts: Hosts, host: int, address: str, port: int) -> bool:
    """Whether a TCP connection from inside `host` to address:port opens within 3 s."""
    probe = f"import socket; socket.create_connection(({address!r}, {port}), timeout=3).close()"
    return hosts.run(host, [sys.executable, "-c", probe], check=False, timeout=30).returncode == 0


def host_of(address: str) -> str:
    return address.rsplit(":", 1)[0]


def test_ray_up_spreads_the_namesrv_cluster_over_three_hosts_and_ray_down_stops_it(bed: Bed) -> None:
    hosts = bed.hosts
    registry = socket.gethostbyname(REGISTRY_HOSTS[0])
    assert not reaches(hosts, 0, registry, 443), "a host reaches the package registry without the proxy"

    config = cluster_config("nsrv-hosts", bed.key)
    config["provider"]["head_ip"] = hosts.address(0)
    config["provider"]["worker_ips"] = hosts.addresses[1:]
    ray = RayLauncher(bed.root / "cluster.yaml", config, bed.root / "client-tmp")
    bed.launchers.append(ray)
    timings: dict[str, float] = {}

    started = time.monotonic()
    up = ray.up()
    timings["ray up"] = time.monotonic() - started
    sshd_logs = "\n".join(f"sshd {n.address}:\n{n.sshd_log_tail(15)}" for n in bed.nodes)
    assert up.returncode == 0, f"ray up failed:\n{tail(up.stdout + up.stderr)}\n{sshd_logs}"
    assert "deployed 2 NameServers and 2 brokers" in up.stdout, tail(up.stdout)
    assert "uv could not install" not in up.stdout, tail(up.stdout)  # uv, given pip's proxy, built the venv
    for node in bed.nodes:  # the head set itself up; its autoscaler set up the workers
        assert (node.home / "ray-namesrv" / ".venv" / "bin" / "namesrv").exists(), node.address
        raylets = [c for c in cmdlines(processes_in(node.namespace)) if "/raylet " in c]
        assert len(raylets) == 1 and f"--node_ip_address={node.address} " in raylets[0], (node.address, raylets)
    assert bed.proxy.tunnels and not bed.proxy.refused, (bed.proxy.tunnels[:5], bed.proxy.refused)

    ray_status = ray.exec("ray status")
    active = ray_status.split("Active:", 1)[1].split("Pending:", 1)[0]
    assert sum(int(n) for n in re.findall(r"^\s*(\d+) \S+", active, re.M)) == HOSTS, ray_status

    status = wait_registered_and_ready(ray, NAMESRVS, BROKERS)
    timings["up to ready"] = time.monotonic() - started
    namesrv_addrs = dict(re.findall(r"^(namesrv-\d+)\s+ready\s.*\s(\S+:\d+)\s*$", status, re.M))
    assert sorted(namesrv_addrs) == list(NAMESRVS), status
    namesrv_hosts = {host_of(a) for a in namesrv_addrs.values()}
    assert len(namesrv_hosts) == 2 and namesrv_hosts <= set(hosts.addresses), status  # spread
    proxies = dict(re.findall(r"^(proxy-\d+)\s+(\S+:\d+)\s+pid \d+", status, re.M))
    assert sorted(proxies) == [f"proxy-{i}" for i in range(HOSTS)], status  # a RocketMQ 5 proxy per node
    assert {host_of(a) for a in proxies.values()} == set(hosts.addresses), status  # at its node's IP, not 0.0.0.0

    route = ray.exec(f"namesrv topic {TOPIC} --queues 4 && namesrv route {TOPIC}")
    rows = {name: route_rows(route, name, TOPIC) for name in NAMESRVS}
    assert rows["namesrv-0"] == rows["namesrv-1"], route  # both NameServers give the same route
    assert sorted(rows["namesrv-0"]) == ["broker-a", "broker-b"], route
    broker_hosts = {host_of(addr) for addr, _, _ in rows["namesrv-0"].values()}
    # pinned round-robin over the nodes, workers first: one broker on each worker
    assert broker_hosts == set(hosts.addresses[1:]), route

    t = time.monotonic()
    result = json.loads(ray.submit(ROUND_TRIP, TOPIC, str(MESSAGES)).strip().splitlines()[-1])
    timings["round trip"] = time.monotonic() - t
    assert {s["status"] for s in result["sends"]} == {"SEND_OK"}, result
    assert {s["broker"] for s in result["sends"]} == {"broker-a", "broker-b"}, result  # across both workers
    assert result["read"] == sorted(f"round-trip-{i}" for i in range(MESSAGES)), result

    t = time.monotonic()
    down = ray.down()
    timings["ray down"] = time.monotonic() - t
    assert down.returncode == 0, tail(down.stdout + down.stderr)
    head, workers = bed.nodes[0], bed.nodes[1:]
    wait_until(lambda: not ray_processes(head.namespace), 60, "Ray on the head to stop after ray down (`ray stop`)")
    # With the local provider `ray down` runs `ray stop` on the head only: it marks the workers
    # terminated in its state file and leaves their Ray running (the raylet ends a minute after losing
    # the head's GCS, its agents stay). Stop each worker's Ray as docs/testbed.md tells an operator to.
    for node in workers:
        assert ray_processes(node.namespace), f"ray down stopped Ray on worker {node.address}: update the docs"
    with ThreadPoolExecutor(len(workers)) as pool:
        list(pool.map(lambda n: ssh_run(n.address, bed.key, "~/ray-namesrv/.venv/bin/ray stop"), workers))
    wait_until(lambda: not any(ray_processes(n.namespace) for n in workers), 60, "Ray on the workers to stop")
    timings["ray down and the workers' ray stop"] = time.monotonic() - t
    print(f"\ncluster {ray.name} timings: " + ", ".join(f"{k} {v:.0f} s" for k, v in timings.items())
          + f"; {len(bed.proxy.tunnels)} tunnels to the registry")
