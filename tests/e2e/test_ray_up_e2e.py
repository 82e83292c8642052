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

Isolation, because others run Ray here too and `ray up`/`ray down` run `ray stop`, which stops every
Ray process its user can see: the sshd runs in its own PID and mount namespaces (`unshare`), so
everything started over ssh (Ray included) sees and can signal only that namespace's processes.
Inside it, a private directory is mounted over /root (the node's home: ~/ray-namesrv, the venv,
~/namesrv-data, ~/.bashrc) and over /tmp/ray (Ray's default temp dir, so `--address auto` finds
this cluster only). Killing the namespace's first process ends every
process in it, and the test checks that nothing is left.

Needs root (apt, sshd, namespaces); installs openssh-server and rsync with apt when missing.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest
import yaml

from namesrv.common.waiting import wait_until
from tests.support.ssh import remove_ssh_control_dir

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

REPO = Path(__file__).resolve().parents[2]
RAY = Path(sys.executable).parent / "ray"
SSHD = Path("/usr/sbin/sshd")
PACKAGES = {"openssh-server": SSHD, "rsync": Path("/usr/bin/rsync")}
RAY_PROCESS_NAMES = ("raylet", "gcs_server", "ray::", "default_worker", "dashboard", "monitor.py", "log_monitor")
TOPIC = "TopicE2E"


# ============================================================================ machine set-up
def ensure_packages() -> None:
    """apt-get update once, then install what is missing, without starting any system daemon."""
    missing = [pkg for pkg, path in PACKAGES.items() if not path.exists()]
    if not missing:
        return
    policy = Path("/usr/sbin/policy-rc.d")  # Debian's switch: exit 101 = don't start services
    created = not policy.exists()
    if created:
        policy.write_text("#!/bin/sh\nexit 101\n")
        policy.chmod(0o755)
    env = os.environ | {"DEBIAN_FRONTEND": "noninteractive"}
    lock = ["-o", "DPkg::Lock::Timeout=300"]
    try:
        subprocess.run(["apt-get", *lock, "update", "-q"], check=True, env=env, capture_output=True, timeout=600)
        subprocess.run(["apt-get", *lock, "install", "-y", "-q", "--no-install-recommends", *missing],
                       check=True, env=env, capture_output=True, timeout=900)
    finally:
        if created:
            policy.unlink()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]




def pid_namespace(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return None


def processes_in(namespace: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter():
        if pid_namespace(proc.pid) == namespace:
            found.append(proc)
    return found


def cmdlines(procs: list[psutil.Process]) -> list[str]:
    lines = []
    for p in procs:
        with contextlib.suppress(psutil.Error):
            lines.append(" ".join(p.cmdline()) or p.name())
    return lines


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

NAMESPACE_INIT = """\
set -e
mount --bind "$PRIVATE_HOME" /root
mkdir -p /tmp/ray /run/sshd
mount --bind "$PRIVATE_RAY_TMP" /tmp/ray
exec {sshd} -D -e -f "$SSHD_CONFIG"
"""


@dataclass
class LoopbackNode:
    """A throwaway sshd on 127.0.0.1:port in its own PID + mount namespaces."""

    root: Path
    port: int
    key: Path
    proxy: Path
    process: subprocess.Popen[bytes]
    sshd_log: Path
    init_pid: int = 0
    namespace: str = ""
    cluster_names: list[str] = field(default_factory=list)

    def sshd_log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.sshd_log.read_text(errors="replace").splitlines()[-lines:])


def start_loopback_node(root: Path) -> LoopbackNode:
    ssh_dir, home, ray_tmp = root / "ssh", root / "home", root / "ray-tmp"
    for d in (ssh_dir, home / ".ssh", ray_tmp):
        d.mkdir(parents=True, exist_ok=True)
    home.chmod(0o700)
    (home / ".ssh").chmod(0o700)
    for dotfile in (".bashrc", ".profile"):  # what a fresh account starts with
        if (Path("/etc/skel") / dotfile).exists():
            shutil.copy(Path("/etc/skel") / dotfile, home / dotfile)
    host_key, key = ssh_dir / "host_ed25519", ssh_dir / "id_ed25519"
    for k in (host_key, key):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "namesrv-e2e", "-f", str(k)], check=True)
    shutil.copy(key.with_suffix(".pub"), home / ".ssh" / "authorized_keys")
    (home / ".ssh" / "authorized_keys").chmod(0o600)
    proxy = ssh_dir / "proxy.py"
    proxy.write_text(PROXY.format(python=sys.executable))
    proxy.chmod(0o755)

    port = free_port()
    config = ssh_dir / "sshd_config"
    config.write_text(textwrap.dedent(f"""\
        Port {port}
        ListenAddress 127.0.0.1
        HostKey {host_key}
        PidFile {ssh_dir / "sshd.pid"}
        AuthorizedKeysFile .ssh/authorized_keys
        PermitRootLogin prohibit-password
        PubkeyAuthentication yes
        PasswordAuthentication no
        KbdInteractiveAuthentication no
        UsePAM no
        PrintMotd no
        MaxSessions 64
        MaxStartups 64
        Subsystem sftp internal-sftp
        LogLevel VERBOSE
    """))
    sshd_log = root / "sshd.log"
    env = os.environ | {"PRIVATE_HOME": str(home), "PRIVATE_RAY_TMP": str(ray_tmp), "SSHD_CONFIG": str(config)}
    with sshd_log.open("wb") as log:
        process = subprocess.Popen(
            ["unshare", "--pid", "--mount", "--fork", "--kill-child", "--mount-proc", "--propagation", "private",
             "sh", "-c", NAMESPACE_INIT.format(sshd=SSHD)],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True,
        )
    node = LoopbackNode(root, port, key, proxy, process, sshd_log)

    def banner() -> bool:
        if process.poll() is not None:
            raise AssertionError(f"sshd exited with {process.returncode}:\n{node.sshd_log_tail()}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                return s.recv(64).startswith(b"SSH-2.0-")
        except OSError:
            return False

    wait_until(banner, 30, f"sshd on 127.0.0.1:{port}")
    (init,) = psutil.Process(process.pid).children()
    node.init_pid = init.pid
    node.namespace = pid_namespace(init.pid) or ""
    assert node.namespace and node.namespace != pid_namespace(os.getpid())
    return node


def stop_loopback_node(node: LoopbackNode) -> list[str]:
    """End the namespace (its first process, sshd, exits; the kernel kills the rest); returns leftovers."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(node.init_pid, signal.SIGTERM)  # `unshare --fork` itself ignores SIGTERM
    try:
        node.process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        node.process.kill()  # --kill-child: the namespace's first process gets SIGKILL
        node.process.wait(timeout=30)
    with contextlib.suppress(AssertionError):
        wait_until(lambda: not processes_in(node.namespace), 30, "the namespace to empty")
    left = processes_in(node.namespace)
    # Client side: ssh ControlMasters and proxies of this run exit once the server side is gone.
    ours = str(node.root)
    with contextlib.suppress(AssertionError):
        wait_until(lambda: not [c for c in cmdlines(list(psutil.process_iter())) if ours in c], 30,
                 "this run's ssh processes to exit")
    clients = [p for p in psutil.process_iter() if any(ours in c for c in cmdlines([p]))]
    leftovers = cmdlines(left + clients)
    for p in left + clients:  # all started by this test
        with contextlib.suppress(psutil.Error):
            p.kill()
    return leftovers


@pytest.fixture(scope="module")
def loopback_node() -> Iterator[LoopbackNode]:
    if os.geteuid() != 0:
        pytest.skip("needs root: apt, an sshd of its own and PID/mount namespaces")
    probe = subprocess.run(["unshare", "--pid", "--mount", "--fork", "--mount-proc", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"cannot create PID/mount namespaces here: {probe.stderr.decode().strip()}")
    ensure_packages()
    root = Path(tempfile.mkdtemp(prefix="nsrv-e2e-", dir="/tmp"))  # short: Ray's socket paths
    node = None
    try:
        node = start_loopback_node(root)
        yield node
    finally:
        leftovers = stop_loopback_node(node) if node is not None else []
        for name in node.cluster_names if node is not None else []:
            remove_ssh_control_dir(name)
        shutil.rmtree(root, ignore_errors=True)
        assert not leftovers, f"processes left running after the test: {leftovers}"


# ============================================================================ the cluster config
PORT_FLAGS = ("--port=6379", "--ray-client-server-port=10001", "--dashboard-port=8265",
              "--dashboard-agent-listen-port=52365")


def generated_cluster_yaml(node: LoopbackNode, path: Path) -> dict[str, object]:
    config = yaml.safe_load((REPO / "cluster.yaml").read_text())
    config["cluster_name"] = f"nsrv-e2e-{uuid.uuid4().hex[:8]}"
    node.cluster_names.append(config["cluster_name"])
    assert config["provider"]["head_ip"] == "127.0.0.1" and config["auth"]["ssh_user"] == "root"
    config["auth"]["ssh_private_key"] = str(node.key)
    config["auth"]["ssh_proxy_command"] = f"{node.proxy} %h {node.port}"
    ports = {flag: f"{flag.split('=')[0]}={free_port()}" for flag in PORT_FLAGS}
    head = config["head_start_ray_commands"]
    for i, cmd in enumerate(head):
        if cmd.startswith("ray start --head"):
            for flag, mine in ports.items():
                assert cmd.count(flag) == 1, f"{flag} not in cluster.yaml's head start command: {cmd}"
                cmd = cmd.replace(flag, mine)
            head[i] = cmd + " --min-worker-port=0 --max-worker-port=0"
    gcs_port = ports["--port=6379"].split("=")[1]
    config["worker_start_ray_commands"] = [
        c.replace("$RAY_HEAD_IP:6379", f"$RAY_HEAD_IP:{gcs_port}") for c in config["worker_start_ray_commands"]
    ]
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return config


def ray_cli(node: LoopbackNode, *args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    """The `ray` CLI from the repo root (file_mounts are relative to it), its local state private."""
    client_tmp = node.root / "client-tmp"
    client_tmp.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")} | {
        "RAY_TMPDIR": str(client_tmp),  # the local provider's cluster state file, not /tmp/ray's
        "RAY_USAGE_STATS_ENABLED": "0",
    }
    return subprocess.run(
        [str(RAY), *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
    )


def tail(text: str, lines: int = 60) -> str:
    return "\n".join(text.splitlines()[-lines:])


# namesrv  cluster  broker  id  address  last heartbeat  topics  watched
_WATCHED_ROW = re.compile(r"^(namesrv-\d+)\s+\S+\s+(\S+)\s+(\d+)\s+\S+:\d+\s.*\s(yes|no)$")


def namesrv_rows(status: str) -> dict[str, list[str]]:
    """`namesrv status`'s second table: NameServer -> `brokerName-brokerId` it lists as watched."""
    rows: dict[str, list[str]] = {}
    for line in status.replace("\r", "").splitlines():
        if (m := _WATCHED_ROW.match(line.strip())) and m.group(4) == "yes":
            rows.setdefault(m.group(1), []).append(f"{m.group(2)}-{m.group(3)}")
    return rows


# ============================================================================ the test
def test_ray_up_deploys_the_namesrv_cluster_and_ray_down_stops_it(loopback_node: LoopbackNode) -> None:
    node = loopback_node
    cluster_file = node.root / "cluster.yaml"
    config = generated_cluster_yaml(node, cluster_file)
    timings: dict[str, float] = {}

    started = time.monotonic()
    up = ray_cli(node, "up", "-y", "--no-config-cache", "--disable-usage-stats", "--log-style=record",
                 "--log-color=false", str(cluster_file), timeout=1200)
    timings["ray up"] = time.monotonic() - started
    assert up.returncode == 0, f"ray up failed:\n{tail(up.stdout + up.stderr)}\nsshd:\n{node.sshd_log_tail()}"
    assert "deployed 2 NameServers and 2 brokers" in up.stdout, tail(up.stdout)
    home = node.root / "home"
    assert (home / "ray-namesrv" / ".venv" / "bin" / "namesrv").exists()  # run.sh built the node's venv
    assert not (home / "ray-namesrv" / "tests").exists()  # only what file_mounts lists was synced
    in_namespace = cmdlines(processes_in(node.namespace))
    assert any("gcs_server" in c for c in in_namespace), in_namespace
    assert any("raylet" in c for c in in_namespace), in_namespace

    # Default profile: brokers first register after 10 s; a fresh NameServer answers routes after its
    # 30 s not-ready window. Wait for both, through `ray exec` each time.
    deadline = time.monotonic() + 180
    while True:
        t = time.monotonic()
        status = ray_cli(node, "exec", "--no-config-cache", "--log-style=record", str(cluster_file),
                         "namesrv status", timeout=180)
        timings.setdefault("one ray exec", time.monotonic() - t)
        out = status.stdout.replace("\r", "")
        assert status.returncode == 0, f"namesrv status failed:\n{tail(out + status.stderr)}"
        rows = namesrv_rows(out)
        registered = all(sorted(rows.get(n, [])) == ["broker-a-0", "broker-b-0"] for n in ("namesrv-0", "namesrv-1"))
        ready = all(re.search(rf"^{n}\s+ready\s", out, re.M) for n in ("namesrv-0", "namesrv-1"))
        if registered and ready:
            break
        assert time.monotonic() < deadline, f"brokers never registered everywhere, or not ready:\n{tail(out)}"
        time.sleep(2)
    timings["up to ready"] = time.monotonic() - started
    assert len(re.findall(r"^\S+:\d+\s+pid \d+", out, re.M)) == 2, out  # both brokers' processes, by address

    route = ray_cli(node, "exec", "--no-config-cache", "--log-style=record", str(cluster_file),
                    f"namesrv topic {TOPIC} --queues 4 && namesrv route {TOPIC}", timeout=180)
    assert route.returncode == 0, tail(route.stdout + route.stderr)
    assert re.search(r"created TopicE2E on broker-a-0 \(\S+:\d+\), broker-b-0 \(\S+:\d+\)", route.stdout), \
        tail(route.stdout)
    for name in ("namesrv-0", "namesrv-1"):
        section = route.stdout.replace("\r", "").split(f"-- {name}", 1)[1].split("-- namesrv-", 1)[0]
        assert re.search(rf"{TOPIC}\s+broker-a\s+0\s+\S+:\d+\s+4\s+4", section), section
        assert re.search(rf"{TOPIC}\s+broker-b\s+0\s+\S+:\d+\s+4\s+4", section), section

    t = time.monotonic()
    down = ray_cli(node, "down", "-y", "--log-style=record", str(cluster_file), timeout=300)
    timings["ray down"] = time.monotonic() - t
    assert down.returncode == 0, tail(down.stdout + down.stderr)
    # `ray down` ran `ray stop` on the head: no Ray process is left in the node's namespace.
    wait_until(lambda: not [c for c in cmdlines(processes_in(node.namespace))
                             if any(n in c for n in RAY_PROCESS_NAMES)],
               60, "Ray processes to stop after ray down")
    print(f"\ncluster {config['cluster_name']} timings: " + ", ".join(f"{k} {v:.0f} s" for k, v in timings.items()))
