"""The delay nemesis' moving parts on a test bed: for each delay a relay process inside the delayed
host (`relay`), and the host's nat table redirecting its ports to the relays (`delay_rules`).

    delays = Delays(hosts, apply)          # apply(host, script) loads an nft script inside a host
    r = delays.start(delay_spec(1, [9876], 50, hosts.count))
    delays.stop(r)                         # rule gone, then the relay stopped

Stopping removes the rule first (new connections go straight to the port), then stops the relay
with SIGTERM: what it holds is written at once and every connection made through it is closed (a
FIN both ways): a client sees its connection end, as in a network glitch, and reconnects directly.
"""

from __future__ import annotations

import logging
import select
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from clients.chaos.hosts.delay_rules import DelaySpec, check_free, clear_script, redirect_script, relay_argv
from clients.chaos.hosts.netns import Hosts
from clients.chaos.hosts.relay import STOP_GRACE_S, parse_ready

log = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[3]
"""The checkout the relay's module is run from."""
START_TIMEOUT_S = 20.0


@dataclass
class RunningRelay:
    """A delay in force: its spec, the relay process and which port goes to which relay port."""

    spec: DelaySpec
    proc: subprocess.Popen[Any]
    redirects: dict[int, int]
    errors: IO[bytes]
    """The relay's stderr (a temporary file), read when it fails."""

    def stderr(self) -> str:
        self.errors.seek(0)
        return self.errors.read().decode(errors="replace").strip()


class Delays:
    """The relays running on a test bed and their nat rules (see the module's docstring)."""

    def __init__(self, hosts: Hosts, apply: Callable[[int, str], None]) -> None:
        self.hosts = hosts
        self.apply = apply
        self.running: list[RunningRelay] = []

    def start(self, spec: DelaySpec) -> RunningRelay:
        """Start the relay inside `spec.host`, then redirect the host's ports to it."""
        check_free(spec, [r.spec for r in self.running])
        address = self.hosts.address(spec.host)
        errors = tempfile.TemporaryFile()
        proc = self.hosts.popen(spec.host, relay_argv(spec, address, sys.executable), cwd=ROOT,
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=errors, text=True)
        relay = RunningRelay(spec, proc, {}, errors)
        try:
            bound = parse_ready(self._ready_line(relay))
            relay.redirects = {f.port: f.listen for f in bound}
            self.running.append(relay)
            self._load(spec.host)
        except BaseException:
            if relay in self.running:
                self.running.remove(relay)
            self._end(relay)
            raise
        log.info("delay %s: relay pid %d, %s", spec.describe(), proc.pid, relay.redirects)
        return relay

    def _ready_line(self, relay: RunningRelay) -> str:
        out = relay.proc.stdout
        assert out is not None
        readable, _, _ = select.select([out], [], [], START_TIMEOUT_S)
        line = out.readline() if readable else ""
        if not line.startswith("ready"):
            relay.proc.kill()
            relay.proc.wait(10)
            raise RuntimeError(f"the relay in host {relay.spec.host} did not start "
                               f"(exit {relay.proc.returncode}): {relay.stderr() or line!r}")
        return line

    def _load(self, host: int) -> None:
        redirects = {p: to for r in self.running if r.spec.host == host for p, to in r.redirects.items()}
        self.apply(host, redirect_script(redirects))

    def stop(self, relay: RunningRelay) -> None:
        """Its rules gone (the host's other delays stay), then the relay stopped."""
        if relay in self.running:
            self.running.remove(relay)
            self._load(relay.spec.host)
        self._end(relay)

    def stop_all(self) -> None:
        """Every delay's rules gone, then every relay stopped."""
        relays, self.running = self.running, []
        for host in sorted({r.spec.host for r in relays}):
            self.apply(host, clear_script())
        for r in relays:
            self._end(r)

    def _end(self, relay: RunningRelay) -> None:
        """SIGTERM (the relay writes what it holds and closes its connections), SIGKILL past its grace."""
        proc = relay.proc
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(STOP_GRACE_S + 5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        if proc.returncode not in (0, -9):
            log.warning("the relay in host %d exited %s: %s", relay.spec.host, proc.returncode, relay.stderr())
        if proc.stdout is not None:
            proc.stdout.close()
        relay.errors.close()
