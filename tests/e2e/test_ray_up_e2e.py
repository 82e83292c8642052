"""A real `ray up` of cluster.yaml on this machine: the head is 127.0.0.1, reached over ssh.

What runs for real: Ray's cluster launcher (`ray up`, `ray exec`, `ray down` as subprocesses, from
the repo root), ssh and rsync, the yaml's setup commands (run.sh builds the node's venv from PyPI),
`ray start --head`, and `namesrv up` deploying detached NameServers and brokers; then `namesrv
status`, `namesrv topic` and `namesrv route` through `ray exec`; then `ray down`.

What the test changes in a generated copy of cluster.yaml, and why:
- a unique cluster_name, a throwaway key, and an `ssh_proxy_command` to reach the throwaway sshd's
  port (Ray's auth config has no ssh port option);
- the ports of `ray start --head` (explicit in the yaml: 6379, 10001, 8265, 52365) and random worker
  ports, so nothing collides with other Ray instances on this machine.

The node is an sshd in PID and mount namespaces of its own, with a private home and /tmp/ray
(tests/support/ray_up.py says how that keeps `ray stop` from touching other Ray processes here); the
test checks that nothing is left. The multi-host version is tests/e2e/test_ray_up_hosts.py.

Needs root (apt, sshd, namespaces); installs openssh-server and rsync with apt when missing.
"""

from __future__ import annotations

import re
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from actors.deployment.placement import free_port
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
    start_ssh_node,
    stop_ssh_node,
    tail,
    wait_registered_and_ready,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

TOPIC = "TopicE2E"
NAMESRVS = ("namesrv-0", "namesrv-1")
BROKERS = ("broker-a-0", "broker-b-0")

PROXY = """\
#!{python}
# ssh ProxyCommand: relay stdin/stdout to HOST PORT (Ray's auth config cannot set an ssh port).
import os, selectors, socket, sys
sock = socket.create_connection((sys.argv[1], int(sys.argv[2])))
sel = selectors.DefaultSelector()
sel.register(0, selectors.EVENT_READ)
sel.register(sock, selectors.EVENT_READ)
while True:
    for key, _ in sel.select():
        if key.fileobj == 0:
            data = os.read(0, 65536)
            if not data:
                sel.unregister(0)
                sock.shutdown(socket.SHUT_WR)
                continue
            sock.sendall(data)
        else:
            data = sock.recv(65536)
            if not data:
                sys.exit(0)
            view = memoryview(data)
            while view:
                view = view[os.write(1, view):]
"""


@dataclass
class LoopbackNode:
    """The node on 127.0.0.1, the key it accepts and the ssh ProxyCommand that reaches its port."""

    node: SshNode
    key: Path
    proxy: Path
    launchers: list[RayLauncher] = field(default_factory=list)

    @property
    def root(self) -> Path:
        return self.node.root.parent


@pytest.fixture(scope="module")
def loopback_node() -> Iterator[LoopbackNode]:
    skip_unless_root_namespaces()
    ensure_packages()
    root = Path(tempfile.mkdtemp(prefix="nsrv-e2e-", dir="/tmp"))  # short: Ray's socket paths
    loop = None
    try:
        key = make_key(root / "id_ed25519")
        proxy = root / "proxy.py"
        proxy.write_text(PROXY.format(python=sys.executable))
        proxy.chmod(0o755)
        node = start_ssh_node(root / "node", "127.0.0.1", free_port(), key.with_suffix(".pub"))
        loop = LoopbackNode(node, key, proxy)
        yield loop
    finally:
        leftovers = stop_ssh_node(loop.node) if loop is not None else []
        leftovers += client_leftovers(root)
        for launcher in loop.launchers if loop is not None else []:
            launcher.forget()
        shutil.rmtree(root, ignore_errors=True)
        assert not leftovers, f"processes left running after the test: {leftovers}"


# ============================================================================ the cluster config
PORT_FLAGS = ("--port=6379", "--ray-client-server-port=10001", "--dashboard-port=8265",
              "--dashboard-agent-listen-port=52365")


def loopback_config(loop: LoopbackNode) -> dict[str, object]:
    config = cluster_config("nsrv-e2e", loop.key)
    config["auth"]["ssh_proxy_command"] = f"{loop.proxy} %h {loop.node.port}"
    ports = {flag: f"{flag.split('=')[0]}={free_port('0.0.0.0')}" for flag in PORT_FLAGS}
    head = config["head_start_ray_commands"]
    for i, cmd in enumerate(head):
        if "ray start --head" in cmd:
            for flag, mine in ports.items():
                assert cmd.count(flag) == 1, f"{flag} not in cluster.yaml's head start command: {cmd}"
                cmd = cmd.replace(flag, mine)
            head[i] = cmd + " --min-worker-port=0 --max-worker-port=0"
    gcs_port = ports["--port=6379"].split("=")[1]
    config["worker_start_ray_commands"] = [
        c.replace("$RAY_HEAD_IP:6379", f"$RAY_HEAD_IP:{gcs_port}") for c in config["worker_start_ray_commands"]
    ]
    return config


# ============================================================================ the test
def test_ray_up_deploys_the_namesrv_cluster_and_ray_down_stops_it(loopback_node: LoopbackNode) -> None:
    loop, node = loopback_node, loopback_node.node
    ray = RayLauncher(loop.root / "cluster.yaml", loopback_config(loop), loop.root / "client-tmp")
    loop.launchers.append(ray)
    timings: dict[str, float] = {}
    started = time.monotonic()
    up = ray.up()
    timings["ray up"] = time.monotonic() - started
    assert up.returncode == 0, f"ray up failed:\n{tail(up.stdout + up.stderr)}\nsshd:\n{node.sshd_log_tail()}"
    assert "deployed 2 NameServers and 2 brokers" in up.stdout, tail(up.stdout)
    assert re.search(r"proxy-0: RocketMQ 5 gRPC endpoint \S+:8081\b", up.stdout), tail(up.stdout)  # one per node
    assert (node.home / "ray-namesrv" / ".venv" / "bin" / "namesrv").exists()  # run.sh built the node's venv
    assert not (node.home / "ray-namesrv" / "tests").exists()  # only what file_mounts lists was synced
    in_namespace = cmdlines(processes_in(node.namespace))
    assert any("gcs_server" in c for c in in_namespace), in_namespace
    assert any("raylet" in c for c in in_namespace), in_namespace

    out = wait_registered_and_ready(ray, NAMESRVS, BROKERS)
    timings["up to ready"] = time.monotonic() - started
    assert len(re.findall(r"^\S+:\d+\s+pid \d+", out, re.M)) == 2, out  # both brokers' processes, by address

    route = ray.exec(f"namesrv topic {TOPIC} --queues 4 && namesrv route {TOPIC}")
    assert re.search(r"created TopicE2E on broker-a-0 \(\S+:\d+\), broker-b-0 \(\S+:\d+\)", route), tail(route)
    for name in NAMESRVS:
        rows = route_rows(route, name, TOPIC)
        assert sorted(rows) == ["broker-a", "broker-b"], route
        assert all((r, w) == (4, 4) for _, r, w in rows.values()), route

    t = time.monotonic()
    down = ray.down()
    timings["ray down"] = time.monotonic() - t
    assert down.returncode == 0, tail(down.stdout + down.stderr)
    # `ray down` ran `ray stop` on the head: no Ray process is left in the node's namespace.
    wait_until(lambda: not ray_processes(node.namespace), 60, "Ray processes to stop after ray down")
    print(f"\ncluster {ray.name} timings: " + ", ".join(f"{k} {v:.0f} s" for k, v in timings.items()))
