"""A Ray cluster across the test bed's hosts: `ray start --head` inside host 0 and `ray start
--address` inside hosts 1..N-1, each node at its host's address with a temp dir of its own, plus a
CPU-less node in the root namespace at the bridge's address for the test driver (a driver must run
on a node of the cluster: `ray.init` attaches to a raylet on its own address).

    with Hosts(3) as hosts, RayOnHosts(hosts) as cluster:
        cluster.connect(namespace="x")       # ray.init from this process, on the driver's node
        cluster.node_id(2)                   # the Ray node of host 2, for placement

Teardown stops only what it started: each `ray start --block` is a process group of its own
(SIGTERM, then SIGKILL), then every process left inside the hosts' namespaces or naming the bed's
temp root. Never `ray stop`, which stops every Ray on the machine.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import ray

from actors.deployment.placement import free_port
from clients.chaos.hosts.layout import TEMP_ROOT
from clients.chaos.hosts.netns import Hosts, _kill_pids, harness_pids, netns_pids
from namesrv.common.waiting import WaitTimeout, wait_until

log = logging.getLogger(__name__)

GCS_PORT = 6379
DRIVER_TEMP_DIR = f"{TEMP_ROOT}/driver"
JOIN_TIMEOUT_S = 90.0
NODE_START_TIMEOUT_S = 60.0
START_ATTEMPTS = 3
STOP_GRACE_S = 15.0
STARTED = b"Ray runtime started"
AGENT_PORT_FLAGS = ("--metrics-export-port", "--dashboard-agent-grpc-port", "--dashboard-agent-listen-port",
                    "--runtime-env-agent-port")
AGENT_PORTS = (8090, 8091, 52365, 8092)
"""The node agents' ports inside a host (each namespace has its own port space)."""


def ray_cli() -> str:
    """The `ray` script of this interpreter's environment."""
    script = Path(sys.executable).parent / "ray"
    return str(script) if script.exists() else (shutil.which("ray") or "ray")


AUTH_MODE_VAR = "RAY_AUTH_MODE"


def _env() -> dict[str, str]:
    """The nodes' environment: no RAY_ADDRESS of anyone else's, and the driver's own authentication
    mode, stated. Unstated, `ray start --head` turns token authentication on when ~/.ray/auth_token
    exists (another Ray on this machine made one), while `ray start --address` and a driver given
    an address do not: the workers could not join. This process's mode is kept (disabled unless an
    earlier local Ray here turned tokens on, with the same token file every node reads)."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["RAY_USAGE_STATS_ENABLED"] = "0"
    env[AUTH_MODE_VAR] = os.environ.get(AUTH_MODE_VAR) or "disabled"
    # on SIGTERM `ray start` first drains its node through the GCS (up to 30 s; the head's drain
    # never finishes, its raylet waits on the GCS it serves): the bed's nodes have nothing to hand over
    env.setdefault("RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S", "0")
    return env


class RayOnHosts:
    """A Ray node per host (head in host 0) plus the driver's node; see the module's docstring."""

    def __init__(self, hosts: Hosts, num_cpus: int = 1, ray_env: dict[str, str] | None = None) -> None:
        """`ray_env`: more environment for every node's `ray start`, e.g. Ray's own settings
        (`RAY_health_check_period_ms`: how soon the GCS declares a silent node dead)."""
        self.hosts = hosts
        self.num_cpus = num_cpus
        self.ray_env = dict(ray_env or {})
        self.procs: list[subprocess.Popen[Any]] = []
        self._logs: list[Any] = []

    @property
    def gcs_address(self) -> str:
        return f"{self.hosts.address(0)}:{GCS_PORT}"

    def __enter__(self) -> RayOnHosts:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _common(self, address: str, temp_dir: str, num_cpus: int) -> list[str]:
        """The `ray start` arguments every node takes. The node agents' ports are given: inside a
        host fixed ones (the host's own port space); in the root namespace, shared with every other
        Ray on this machine, free ones (the defaults, e.g. the dashboard agent's 52365, would collide).
        The raylet still waits up to a fixed 15 s for its dashboard agent's port file, hence the
        retries in `_spawn`."""
        Path(temp_dir).mkdir(parents=True, exist_ok=True)
        ports: list[int] = []
        if address == self.hosts.driver_address:
            while len(ports) < len(AGENT_PORT_FLAGS):
                if (port := free_port(address)) not in ports:
                    ports.append(port)
        else:
            ports = list(AGENT_PORTS)
        return [ray_cli(), "start", "--block", f"--node-ip-address={address}", f"--temp-dir={temp_dir}",
                f"--num-cpus={num_cpus}", "--disable-usage-stats", "--include-log-monitor=false",
                *(f"{flag}={port}" for flag, port in zip(AGENT_PORT_FLAGS, ports, strict=True))]

    def _spawn(self, argv: list[str], host: int | None, name: str) -> None:
        """Start one node and wait until its `ray start` says it runs; one that did not (`ray start`
        gives its raylet 30 s to register, which a loaded 2-core machine can miss) is started again,
        up to START_ATTEMPTS times. Nodes start one at a time, not to load the machine all at once."""
        log_path = Path(TEMP_ROOT) / f"{name}.log"
        for attempt in range(1, START_ATTEMPTS + 1):
            out = open(log_path, "ab")  # every attempt's output, for the error below
            self._logs.append(out)
            since = out.tell()
            kwargs: dict[str, Any] = {"stdout": out, "stderr": subprocess.STDOUT, "env": _env() | self.ray_env,
                                      "start_new_session": True}
            proc = subprocess.Popen(argv, **kwargs) if host is None else self.hosts.popen(host, argv, **kwargs)
            self.procs.append(proc)

            def started(proc: subprocess.Popen[Any] = proc, since: int = since) -> bool:
                return proc.poll() is None and STARTED in log_path.read_bytes()[since:]

            with contextlib.suppress(WaitTimeout):
                wait_until(lambda: proc.poll() is not None or started(), timeout_s=NODE_START_TIMEOUT_S,  # noqa: B023
                           interval_s=0.2, what=f"Ray node {name} to start")
            if started():
                return
            self.procs.remove(proc)
            self._stop_group(proc)
            tail = log_path.read_text(errors="replace").strip().splitlines()[-1:]
            log.warning("Ray node %s did not start (attempt %d): %s", name, attempt, tail)
        raise RuntimeError(f"Ray node {name} did not start in {START_ATTEMPTS} attempts: see {log_path}")

    def start(self) -> None:
        lay = self.hosts.layout
        Path(TEMP_ROOT).mkdir(parents=True, exist_ok=True)
        for old in Path(TEMP_ROOT).glob("*.log"):  # a previous bed's
            old.unlink()
        try:
            head = self._common(lay.address(0), lay.temp_dir(0), self.num_cpus)
            # no dashboard and no autoscaler monitor: fewer processes importing beside the head's
            # dashboard agent, which must write its port file within 15 s
            self._spawn([*head, "--head", f"--port={GCS_PORT}", "--include-dashboard=false", "--no-monitor"],
                        0, "h0")
            for i in range(1, self.hosts.count):
                argv = self._common(lay.address(i), lay.temp_dir(i), self.num_cpus)
                self._spawn([*argv, f"--address={self.gcs_address}"], i, f"h{i}")
            driver = self._common(lay.driver_address, DRIVER_TEMP_DIR, 0)
            self._spawn([*driver, f"--address={self.gcs_address}"], None, "driver")
        except BaseException:
            self.stop()
            raise

    def connect(self, namespace: str) -> None:
        """ray.init from this process on the driver's node; waits until every node has joined."""
        if ray.is_initialized():
            ray.shutdown()
        deadline = time.monotonic() + JOIN_TIMEOUT_S
        while True:  # until the head's GCS answers and the driver's raylet is registered
            try:
                ray.init(address=self.gcs_address, _node_ip_address=self.hosts.driver_address, namespace=namespace,
                         log_to_driver=False)
                break
            except (ConnectionError, RuntimeError) as e:
                self._check_alive()
                if time.monotonic() > deadline:
                    raise TimeoutError(f"no Ray cluster at {self.gcs_address} after {JOIN_TIMEOUT_S:.0f} s: {e}") from e
                time.sleep(1.0)
        want = set(self.hosts.addresses) | {self.hosts.driver_address}
        wait_until(lambda: self._check_alive() or want <= {n["NodeManagerAddress"] for n in ray.nodes() if n["Alive"]},
                   timeout_s=JOIN_TIMEOUT_S, interval_s=0.5, what=f"Ray nodes at {sorted(want)}")

    def _check_alive(self) -> bool:
        for p in self.procs:
            if p.poll() is not None:
                raise RuntimeError(f"`{p.args!r}` exited with {p.returncode} "
                                   f"(see {TEMP_ROOT}/*.log)")
        return False

    def node_id(self, host: int) -> str:
        """The Ray node id of host `host`."""
        return self._node_at(self.hosts.address(host))

    @property
    def driver_node_id(self) -> str:
        return self._node_at(self.hosts.driver_address)

    def _node_at(self, address: str) -> str:
        for n in ray.nodes():
            if n["Alive"] and n["NodeManagerAddress"] == address:
                return str(n["NodeID"])
        raise LookupError(f"no alive Ray node at {address}")

    @staticmethod
    def _stop_group(*procs: subprocess.Popen[Any]) -> None:
        """SIGTERM to the process groups of these `ray start`s (each drains and stops its node),
        SIGKILL to any still there after STOP_GRACE_S."""
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for p in procs:
                if p.poll() is None:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(p.pid, sig)
            deadline = time.monotonic() + (STOP_GRACE_S if sig == signal.SIGTERM else 5.0)
            for p in procs:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    p.wait(timeout=max(0.1, deadline - time.monotonic()))

    def stop(self) -> None:
        """Stop the nodes this object started (never `ray stop`): the driver leaves, each `ray start`
        process group gets SIGTERM then SIGKILL, then whatever is left in the hosts or names the temp root."""
        if ray.is_initialized():
            ray.shutdown()
        # the other nodes first: a node drains through the head's GCS on SIGTERM, and waits out its
        # grace period when the GCS is already gone
        self._stop_group(*self.procs[1:])
        self._stop_group(*self.procs[:1])
        left = harness_pids() + [pid for i in range(self.hosts.count) for pid in netns_pids(self.hosts.layout.netns(i))]
        if left:
            log.info("stopping %d processes the Ray nodes left", len(left))
            _kill_pids(left)
        self.procs.clear()
        for f in self._logs:
            f.close()
        self._logs.clear()
