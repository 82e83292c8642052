"""What the real `ray up` tests share (tests/e2e/test_ray_up_e2e.py on loopback,
tests/e2e/test_ray_up_hosts.py across the multi-host test bed): a throwaway sshd per node, the `ray`
CLI with local state of its own, a copy of cluster.yaml, and the demo's checks through `ray exec`.

Isolation, because others run Ray here too and `ray up`/`ray down` run `ray stop`, which stops every
Ray process its user can see: each node's sshd runs in its own PID and mount namespaces (`unshare`),
so everything started over ssh (Ray included) sees and can signal only that namespace's processes.
Inside it, private directories are mounted over /root (the node's home: ~/ray-namesrv, the venv,
~/namesrv-data, ~/.bashrc), over /tmp/ray (Ray's default temp dir: `--address auto` finds this
node's cluster only, and a head's local-provider state file is its own) and over Ray's ssh control
directory (a head's ssh connections to its workers are its own). Killing the namespace's first
process ends every process in it.

Needs root (apt, sshd, namespaces): `skip_unless_root_namespaces`; `ensure_packages` installs
openssh-server and rsync with apt when missing.
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
import textwrap
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest
import yaml

from namesrv.common.waiting import WaitTimeout, wait_until
from tests.support.ssh import remove_ssh_control_dir, ssh_control_root

REPO = Path(__file__).resolve().parents[2]
RAY = Path(sys.executable).parent / "ray"
SSHD = Path("/usr/sbin/sshd")
PACKAGES = {"openssh-server": SSHD, "rsync": Path("/usr/bin/rsync")}
RAY_PROCESS_NAMES = ("raylet", "gcs_server", "ray::", "default_worker", "dashboard", "monitor.py", "log_monitor")


# ============================================================================ machine set-up
def skip_unless_root_namespaces() -> None:
    """pytest.skip, saying why, unless this process may make PID and mount namespaces (root)."""
    if os.geteuid() != 0:
        pytest.skip("needs root: apt, an sshd of its own and PID/mount namespaces")
    probe = subprocess.run(["unshare", "--pid", "--mount", "--fork", "--mount-proc", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"cannot create PID/mount namespaces here: {probe.stderr.decode().strip()}")


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


def make_key(path: Path, comment: str = "namesrv-e2e") -> Path:
    """A throwaway ed25519 key pair at `path` (and `path`.pub); returns `path`."""
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)], check=True)
    return path


# ============================================================================ processes
def pid_namespace(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return None


def processes_in(namespace: str) -> list[psutil.Process]:
    return [proc for proc in psutil.process_iter() if pid_namespace(proc.pid) == namespace]


def cmdlines(procs: list[psutil.Process]) -> list[str]:
    lines = []
    for p in procs:
        with contextlib.suppress(psutil.Error):
            lines.append(" ".join(p.cmdline()) or p.name())
    return lines


def ray_processes(namespace: str) -> list[str]:
    return [c for c in cmdlines(processes_in(namespace)) if any(n in c for n in RAY_PROCESS_NAMES)]


def client_leftovers(root: Path) -> list[str]:
    """The client side of a run whose files are under `root` (its ssh ControlMasters and proxies name
    them): waits for them to exit once the server side is gone, kills (and returns) what stays."""
    ours = str(root)

    def naming_root() -> list[psutil.Process]:
        return [p for p in psutil.process_iter() if any(ours in c for c in cmdlines([p]))]

    with contextlib.suppress(WaitTimeout):
        wait_until(lambda: not naming_root(), 30, "this run's ssh processes to exit", interval_s=0.5)
    left = naming_root()
    leftovers = cmdlines(left)
    for p in left:  # all started by this run
        with contextlib.suppress(psutil.Error):
            p.kill()
    return leftovers


# ============================================================================ a node: an sshd of its own
NAMESPACE_INIT = """\
set -e
mount --bind "$PRIVATE_HOME" /root
mkdir -p /tmp/ray "$SSH_CONTROL_ROOT" /run/sshd
mount --bind "$PRIVATE_RAY_TMP" /tmp/ray
mount --bind "$PRIVATE_SSH_CONTROL" "$SSH_CONTROL_ROOT"
exec {sshd} -D -e -f "$SSHD_CONFIG"
"""


@dataclass
class SshNode:
    """A throwaway sshd on address:port in its own PID + mount namespaces; its files under `root`."""

    root: Path
    address: str
    port: int
    process: subprocess.Popen[bytes]
    init_pid: int = 0
    namespace: str = ""

    @property
    def home(self) -> Path:
        return self.root / "home"

    @property
    def sshd_log(self) -> Path:
        return self.root / "sshd.log"

    def sshd_log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.sshd_log.read_text(errors="replace").splitlines()[-lines:])


def start_ssh_node(root: Path, address: str, port: int, authorized_key: Path, *, wrap: Sequence[str] = (),
                   home_files: Mapping[str, str] | None = None) -> SshNode:
    """An sshd for root with `authorized_key` (a .pub), its home a fresh account's (/etc/skel) plus
    `home_files` (path relative to the home -> text). `wrap` prefixes the command that starts it
    (e.g. `ip netns exec nsrv-h0`: the sshd then runs inside that network namespace)."""
    ssh_dir, home = root / "ssh", root / "home"
    for d in (ssh_dir, home / ".ssh", root / "ray-tmp", root / "ssh-control"):
        d.mkdir(parents=True, exist_ok=True)
    home.chmod(0o700)
    (home / ".ssh").chmod(0o700)
    for dotfile in (".bashrc", ".profile"):  # what a fresh account starts with
        if (Path("/etc/skel") / dotfile).exists():
            shutil.copy(Path("/etc/skel") / dotfile, home / dotfile)
    for relative, text in (home_files or {}).items():
        (home / relative).parent.mkdir(parents=True, exist_ok=True)
        (home / relative).write_text(text)
    shutil.copy(authorized_key, home / ".ssh" / "authorized_keys")
    (home / ".ssh" / "authorized_keys").chmod(0o600)
    host_key = make_key(ssh_dir / "host_ed25519")
    config = ssh_dir / "sshd_config"
    config.write_text(textwrap.dedent(f"""\
        Port {port}
        ListenAddress {address}
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
    env = os.environ | {"PRIVATE_HOME": str(home), "PRIVATE_RAY_TMP": str(root / "ray-tmp"),
                        "PRIVATE_SSH_CONTROL": str(root / "ssh-control"), "SSH_CONTROL_ROOT": str(ssh_control_root()),
                        "SSHD_CONFIG": str(config)}
    with (root / "sshd.log").open("wb") as log:
        process = subprocess.Popen(
            [*wrap, "unshare", "--pid", "--mount", "--fork", "--kill-child", "--mount-proc", "--propagation",
             "private", "sh", "-c", NAMESPACE_INIT.format(sshd=SSHD)],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True,
        )
    node = SshNode(root, address, port, process)

    def banner() -> bool:
        if process.poll() is not None:
            raise AssertionError(f"sshd exited with {process.returncode}:\n{node.sshd_log_tail()}")
        try:
            with socket.create_connection((address, port), timeout=1) as s:
                return s.recv(64).startswith(b"SSH-2.0-")
        except OSError:
            return False

    try:
        wait_until(banner, 30, f"sshd on {address}:{port}", interval_s=0.1)
    except BaseException:
        process.kill()
        process.wait(timeout=30)
        raise
    (init,) = psutil.Process(process.pid).children()
    node.init_pid = init.pid
    node.namespace = pid_namespace(init.pid) or ""
    assert node.namespace and node.namespace != pid_namespace(os.getpid())
    return node


def stop_ssh_node(node: SshNode) -> list[str]:
    """End the node's namespace (its first process, sshd, exits; the kernel kills the rest); returns
    what was still running in it (killed)."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(node.init_pid, signal.SIGTERM)  # `unshare --fork` itself ignores SIGTERM
    try:
        node.process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        node.process.kill()  # --kill-child: the namespace's first process gets SIGKILL
        node.process.wait(timeout=30)
    with contextlib.suppress(WaitTimeout):
        wait_until(lambda: not processes_in(node.namespace), 30, "the namespace to empty", interval_s=0.2)
    left = processes_in(node.namespace)
    leftovers = cmdlines(left)
    for p in left:  # all started by this test
        with contextlib.suppress(psutil.Error):
            p.kill()
    return leftovers


def ssh_run(address: str, key: Path, command: str, port: int = 22, timeout: float = 120) -> str:
    """`command` on root@address over ssh with `key`; its output, or AssertionError when it fails."""
    done = subprocess.run(
        ["ssh", "-i", str(key), "-p", str(port), "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no",
         "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR", f"root@{address}", command],
        capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, f"ssh {address} {command!r} failed ({done.returncode}):\n{done.stdout}{done.stderr}"
    return done.stdout


# ============================================================================ the cluster launcher
def cluster_config(prefix: str, key: Path) -> dict[str, Any]:
    """The repository's cluster.yaml with a unique cluster_name and this run's key."""
    config: dict[str, Any] = yaml.safe_load((REPO / "cluster.yaml").read_text())
    config["cluster_name"] = f"{prefix}-{uuid.uuid4().hex[:8]}"
    assert config["provider"]["head_ip"] == "127.0.0.1" and config["auth"]["ssh_user"] == "root"
    config["auth"]["ssh_private_key"] = str(key)
    return config


def tail(text: str, lines: int = 60) -> str:
    return "\n".join(text.splitlines()[-lines:])


class RayLauncher:
    """The `ray` CLI on one cluster file, from the repo root (file_mounts are relative to it), its
    local state (the local provider's cluster state file) in a directory of its own."""

    def __init__(self, cluster_file: Path, config: Mapping[str, Any], state_dir: Path) -> None:
        self.cluster_file = cluster_file
        self.name = str(config["cluster_name"])
        cluster_file.write_text(yaml.safe_dump(dict(config), sort_keys=False))
        state_dir.mkdir(exist_ok=True)
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")} | {
            "RAY_TMPDIR": str(state_dir), "RAY_USAGE_STATS_ENABLED": "0",
        }

    def run(self, *args: str, timeout: float) -> subprocess.CompletedProcess[str]:
        done = subprocess.run([str(RAY), *args], cwd=REPO, env=self.env, capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL)
        done.stdout = done.stdout.replace("\r", "")
        return done

    def up(self, timeout: float = 1200) -> subprocess.CompletedProcess[str]:
        return self.run("up", "-y", "--no-config-cache", "--disable-usage-stats", "--log-style=record",
                        "--log-color=false", str(self.cluster_file), timeout=timeout)

    def exec(self, command: str, timeout: float = 180) -> str:
        """`ray exec` on the head; its output, or AssertionError when it fails."""
        done = self.run("exec", "--no-config-cache", "--log-style=record", str(self.cluster_file), command,
                        timeout=timeout)
        assert done.returncode == 0, f"`ray exec {command}` failed:\n{tail(done.stdout + done.stderr)}"
        return done.stdout

    def submit(self, script: Path, *args: str, timeout: float = 300) -> str:
        """`ray submit`: `script` synced to the head's home and run there with `python`; its output."""
        done = self.run("submit", "--no-config-cache", "--log-style=record", str(self.cluster_file), str(script),
                        *args, timeout=timeout)
        assert done.returncode == 0, f"`ray submit {script.name}` failed:\n{tail(done.stdout + done.stderr)}"
        return done.stdout

    def down(self, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        return self.run("down", "-y", "--log-style=record", str(self.cluster_file), timeout=timeout)

    def forget(self) -> None:
        """Remove what the ssh runner left on this machine for the cluster (its control directory)."""
        remove_ssh_control_dir(self.name)


# ============================================================================ the demo's checks
# namesrv  cluster  broker  id  address  last heartbeat  topics  watched
_WATCHED_ROW = re.compile(r"^(namesrv-\d+)\s+\S+\s+(\S+)\s+(\d+)\s+\S+:\d+\s.*\s(yes|no)$")


def namesrv_rows(status: str) -> dict[str, list[str]]:
    """`namesrv status`'s second table: NameServer -> `brokerName-brokerId` it lists as watched."""
    rows: dict[str, list[str]] = {}
    for line in status.splitlines():
        if (m := _WATCHED_ROW.match(line.strip())) and m.group(4) == "yes":
            rows.setdefault(m.group(1), []).append(f"{m.group(2)}-{m.group(3)}")
    return rows


def wait_registered_and_ready(launcher: RayLauncher, namesrvs: Sequence[str], brokers: Sequence[str],
                              timeout_s: float = 180) -> str:
    """`namesrv status` through `ray exec` until every NameServer is ready and lists every broker
    (`brokerName-brokerId`) as watched; returns that status. Default profile: brokers first register
    after 10 s; a fresh NameServer answers routes after its 30 s not-ready window."""

    def registered_and_ready() -> str:
        out = launcher.exec("namesrv status")
        rows = namesrv_rows(out)
        registered = all(sorted(rows.get(n, [])) == sorted(brokers) for n in namesrvs)
        ready = all(re.search(rf"^{n}\s+ready\s", out, re.M) for n in namesrvs)
        return out if registered and ready else ""

    return wait_until(registered_and_ready, timeout_s, "every broker registered with every ready NameServer",
                      interval_s=2)


def route_rows(route: str, namesrv: str, topic: str) -> dict[str, tuple[str, int, int]]:
    """One NameServer's section of `namesrv route`: broker name -> (address, read queues, write queues)
    of its master."""
    section = route.split(f"-- {namesrv}", 1)[1].split("-- namesrv-", 1)[0]
    rows = re.findall(rf"^\s*{topic}\s+(\S+)\s+0\s+(\S+:\d+)\s+(\d+)\s+(\d+)", section, re.M)
    return {broker: (addr, int(r), int(w)) for broker, addr, r, w in rows}
