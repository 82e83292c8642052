"""Hosts as Linux network namespaces (design §11): `with Hosts(n) as hosts:` makes namespaces
`nsrv-h0..n-1`, each with loopback up and a veth to the bridge `nsrvbr0` (hosts at 10.77.0.2..,
the root namespace at 10.77.0.1 on the bridge, where the test driver reaches them), and removes all
of it on exit. A leftover of a killed run (processes in those namespaces, the namespaces, the
bridge) is removed first. `hosts.run(i, argv)` / `hosts.popen(i, argv)` run a command inside host i.

Each host's default route is via 10.77.0.1, as a machine's is via its gateway: a Ray node started
without `--node-ip-address` (`ray up`'s head) takes its address from the route towards 8.8.8.8, and
without a route takes 127.0.0.1. The root namespace sets up no forwarding or NAT for the bed: the
hosts reach each other and 10.77.0.1, nothing beyond.

Needs root and iproute2 (`ip`); the nemeses need nftables (`nft`): `require_host_tools` names what
is missing (run.sh's ensure_netns_tools installs both from Debian).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import shutil
import signal
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from clients.chaos.hosts.layout import BRIDGE, TEMP_ROOT, VETH_PREFIX, HostLayout, is_leftover_netns
from namesrv.common.waiting import WaitTimeout, wait_until

log = logging.getLogger(__name__)

TOOLS = ("ip", "nft")


class HostsUnavailable(RuntimeError):
    """This machine cannot make the test bed (not root, or a tool missing)."""


def missing_host_tools() -> list[str]:
    return [t for t in TOOLS if shutil.which(t) is None]


def require_host_tools() -> None:
    """Raise HostsUnavailable saying why the test bed cannot be made here."""
    if os.geteuid() != 0:
        raise HostsUnavailable("the multi-host test bed needs root (network namespaces, veth pairs, nftables)")
    missing = missing_host_tools()
    if missing:
        raise HostsUnavailable(f"the multi-host test bed needs {', '.join(missing)}: install Debian's iproute2 "
                               "and nftables (bash run.sh test does: ensure_netns_tools)")


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if check and done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)} failed: {done.stderr.strip() or done.stdout.strip()}")
    return done


def _running(pid: int) -> bool:
    """Whether `pid` still runs (a zombie, dead but not yet reaped by its parent, does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] not in ("Z", "X")


def _all_exited(pids: Sequence[int]) -> bool:
    return not any(_running(p) for p in pids)


def _kill_pids(pids: Sequence[int], grace_s: float = 5.0) -> None:
    """SIGTERM, then SIGKILL what is still there after `grace_s`."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        alive = []
        for pid in pids:
            try:
                os.kill(pid, sig)
                alive.append(pid)
            except ProcessLookupError:
                pass
        if not alive or sig == signal.SIGKILL:
            return
        with contextlib.suppress(WaitTimeout):  # past the grace: SIGKILL
            wait_until(functools.partial(_all_exited, tuple(alive)), grace_s, "the processes to exit", interval_s=0.1)
        pids = [p for p in alive if _running(p)]


def netns_pids(name: str) -> list[int]:
    done = _ip("netns", "pids", name, check=False)
    return [int(p) for p in done.stdout.split() if p.isdigit()]


def harness_pids() -> list[int]:
    """Processes of the harness outside the namespaces: those whose command line names its temp
    root (a Ray node of the test bed in the root namespace, e.g. the driver's)."""
    out = []
    me = os.getpid()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if TEMP_ROOT.encode() + b"/" in cmdline:
            out.append(int(entry.name))
    return out


def remove_leftovers() -> list[str]:
    """Remove whatever a killed run left: processes inside `nsrv-h*` namespaces and those naming the
    harness's temp root, the namespaces, the bridge and any root-side veth. Returns what it removed."""
    removed = []
    names = [line.split()[0] for line in _ip("netns", "list", check=False).stdout.splitlines() if line.strip()]
    leftovers = [n for n in names if is_leftover_netns(n)]
    pids = [p for n in leftovers for p in netns_pids(n)] + harness_pids()
    if pids:
        _kill_pids(pids)
        removed.append(f"{len(pids)} processes")
    for n in leftovers:
        _ip("netns", "delete", n, check=False)
        removed.append(n)
    links = _ip("-o", "link", "show", check=False).stdout.splitlines()
    for line in links:
        name = line.split(":")[1].strip().split("@")[0] if ":" in line else ""
        if name == BRIDGE or (name.startswith(VETH_PREFIX) and name[len(VETH_PREFIX):].isdigit()):
            _ip("link", "delete", name, check=False)
            removed.append(name)
    return removed


class Hosts:
    """N hosts as network namespaces on one bridge (see the module's docstring)."""

    def __init__(self, count: int) -> None:
        self.layout = HostLayout(count)
        self.count = count
        self._up = False

    # ------------------------------------------------------------------ lifecycle
    def __enter__(self) -> Hosts:
        self.create()
        return self

    def __exit__(self, *exc: object) -> None:
        self.destroy()

    def create(self) -> None:
        require_host_tools()
        removed = remove_leftovers()
        if removed:
            log.warning("removed a previous test bed's leftovers: %s", ", ".join(removed))
        lay = self.layout
        self._up = True
        try:
            _ip("link", "add", BRIDGE, "type", "bridge")
            _ip("addr", "add", f"{lay.driver_address}/{lay.prefix_len}", "dev", BRIDGE)
            _ip("link", "set", BRIDGE, "up")
            for i in range(self.count):
                ns, veth = lay.netns(i), lay.veth(i)
                _ip("netns", "add", ns)
                _ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
                _ip("link", "set", veth, "master", BRIDGE)
                _ip("link", "set", veth, "up")
                _ip("-n", ns, "link", "set", "lo", "up")
                _ip("-n", ns, "addr", "add", f"{lay.address(i)}/{lay.prefix_len}", "dev", "eth0")
                _ip("-n", ns, "link", "set", "eth0", "up")
                _ip("-n", ns, "route", "add", "default", "via", lay.driver_address)
        except BaseException:
            self.destroy()
            raise
        self._bridge_filtering_off()

    def _bridge_filtering_off(self) -> None:
        """With br_netfilter loaded, frames crossing a bridge also pass the root namespace's
        iptables FORWARD chain, whose policy may drop them: the bed's bridge must only switch."""
        path = Path(f"/sys/class/net/{BRIDGE}/bridge/nf_call_iptables")
        if path.exists():
            path.write_text("0")

    def destroy(self) -> None:
        """Stop every process inside the hosts, delete the namespaces and the bridge."""
        if not self._up:
            return
        for i in range(self.count):
            pids = netns_pids(self.layout.netns(i))
            if pids:
                _kill_pids(pids)
        for i in range(self.count):
            _ip("netns", "delete", self.layout.netns(i), check=False)
        _ip("link", "delete", BRIDGE, check=False)
        self._up = False

    # ------------------------------------------------------------------ commands inside a host
    def address(self, i: int) -> str:
        return self.layout.address(i)

    @property
    def addresses(self) -> list[str]:
        return self.layout.addresses

    @property
    def driver_address(self) -> str:
        return self.layout.driver_address

    def argv(self, i: int, argv: Sequence[str]) -> list[str]:
        return ["ip", "netns", "exec", self.layout.netns(i), *argv]

    def run(self, i: int, argv: Sequence[str], *, check: bool = True, timeout: float | None = 60,
            input: str | None = None, **kwargs: Any) -> subprocess.CompletedProcess[str]:
        """Run `argv` inside host i and wait (its output captured as text); `check`: a non-zero exit
        raises CalledProcessError with its stderr."""
        done = subprocess.run(self.argv(i, argv), capture_output=True, text=True, timeout=timeout, input=input,
                              check=False, **kwargs)
        if check and done.returncode != 0:
            raise subprocess.CalledProcessError(done.returncode, done.args, done.stdout, done.stderr)
        return done

    def popen(self, i: int, argv: Sequence[str], **kwargs: Any) -> subprocess.Popen[Any]:
        """Start `argv` inside host i, in a process group of its own (kill it with os.killpg)."""
        kwargs.setdefault("start_new_session", True)
        return subprocess.Popen(self.argv(i, argv), **kwargs)
