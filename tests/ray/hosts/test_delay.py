"""The delay nemesis on the test bed (issue 36, item 3): two hosts, no Ray. A TCP echo server in
host 1; from host 0, round trips to it on connections opened before, during and after a delay in
front of its port. Connections opened while the delay is in force take at least twice the delay
(through the relay, both ways); one opened before it is not redirected (the nat rule is decided at
a connection's first packet) and stays fast; the heal closes the relayed connection (its client
reads the end, or a reset when it writes first) and the next connection is fast again. The
driver's own connections (from the bridge) are delayed as well. Prints what it measured.

Needs root (namespaces, nftables)."""

from __future__ import annotations

import select
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from clients.chaos.hosts.delay_rules import TABLE
from clients.chaos.hosts.nemesis import Nemesis
from clients.chaos.hosts.netns import Hosts
from tests.support.test_bed import require_test_bed

require_test_bed()

PORT = 47_100
DELAY_MS = 60
ROUND_TRIPS = 20

ECHO = """
import socket, sys, threading
server = socket.create_server((sys.argv[1], int(sys.argv[2])))
print("ready", flush=True)
def echo(conn):
    with conn:
        try:
            while data := conn.recv(65536):
                conn.sendall(data)
        except OSError:
            pass
while True:
    conn, _ = server.accept()
    threading.Thread(target=echo, args=(conn,), daemon=True).start()
"""

CLIENT = """
import socket, statistics, sys, time
host, port = sys.argv[1], int(sys.argv[2])
conns = {}
for line in sys.stdin:
    cmd, name, *rest = line.split()
    try:
        if cmd == "open":
            conns[name] = socket.create_connection((host, port), timeout=10)
            print("open", flush=True)
        elif cmd == "rtt":
            c, out = conns[name], []
            for i in range(int(rest[0])):
                msg = b"%08d" % i
                start = time.monotonic()
                c.sendall(msg)
                got = b""
                while len(got) < len(msg):
                    chunk = c.recv(64)
                    if not chunk:
                        raise EOFError("the connection was closed")
                    got += chunk
                out.append((time.monotonic() - start) * 1000)
                if got != msg:
                    raise SystemExit(f"sent {msg!r}, got {got!r} back")
            print("rtt", min(out), statistics.median(out), max(out), flush=True)
    except (OSError, EOFError) as e:
        print("closed", type(e).__name__, flush=True)
"""


class Client:
    """A client process in one host, holding named connections to host:port, asked line by line."""

    def __init__(self, hosts: Hosts, host: int, to: str, port: int) -> None:
        self.proc = hosts.popen(host, [sys.executable, "-c", CLIENT, to, str(port)], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True)

    def ask(self, line: str, timeout_s: float = 30) -> list[str]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        readable, _, _ = select.select([self.proc.stdout], [], [], timeout_s)
        answer = self.proc.stdout.readline().split() if readable else []
        assert answer, f"no answer to {line!r} in {timeout_s} s"
        return answer

    def open(self, name: str) -> None:
        assert self.ask(f"open {name}") == ["open"]

    def rtt(self, name: str, count: int = ROUND_TRIPS) -> tuple[float, float, float] | str:
        """(min, median, max) ms of `count` round trips on connection `name`, or how it was closed."""
        answer = self.ask(f"rtt {name} {count}")
        if answer[0] == "closed":
            return answer[1]
        assert answer[0] == "rtt", answer
        lo, mid, hi = map(float, answer[1:])
        return lo, mid, hi


@pytest.fixture(scope="module")
def bed() -> Iterator[tuple[Hosts, Client]]:
    with Hosts(2) as hosts:
        echo = hosts.popen(1, [sys.executable, "-c", ECHO, hosts.address(1), str(PORT)], stdout=subprocess.PIPE,
                           text=True)
        assert echo.stdout is not None and echo.stdout.readline().strip() == "ready"
        client = Client(hosts, 0, hosts.address(1), PORT)
        yield hosts, client
        for proc in (client.proc, echo):
            proc.kill()
            proc.wait(10)


def _driver_rtt_ms(address: str) -> float:
    """One round trip from the test driver (the root namespace, on the bridge)."""
    with socket.create_connection((address, PORT), timeout=10) as c:
        start = time.monotonic()
        c.sendall(b"driver")
        got = b""
        while len(got) < 6:
            chunk = c.recv(16)
            assert chunk
            got += chunk
        return (time.monotonic() - start) * 1000


def _fmt(rtt: tuple[float, float, float] | str) -> str:
    return rtt if isinstance(rtt, str) else f"min {rtt[0]:.1f} / median {rtt[1]:.1f} / max {rtt[2]:.1f} ms"


def test_a_delay_in_front_of_a_port_and_its_heal(bed: tuple[Hosts, Client]) -> None:
    hosts, client = bed
    nemesis = Nemesis(hosts)
    client.open("before")
    before = client.rtt("before")

    window = nemesis.delay(1, [PORT], DELAY_MS)
    try:
        (relay,) = nemesis.delays.running
        assert f"tcp dport {PORT} tcp flags" in hosts.run(1, ["nft", "list", "table", "inet", TABLE]).stdout
        client.open("during")
        during = client.rtt("during")
        old_during = client.rtt("before")
        driver_during = _driver_rtt_ms(hosts.address(1))
    finally:
        nemesis.heal()

    relayed_after = client.rtt("during", 1)
    client.open("after")
    after = client.rtt("after")
    old_after = client.rtt("before")
    print(f"\nround trips from host 0 to host 1:{PORT} (a {DELAY_MS} ms delay each way), {ROUND_TRIPS} each:"
          f"\n  before the delay:                     {_fmt(before)}"
          f"\n  opened during the delay:              {_fmt(during)}"
          f"\n  opened before, during the delay:      {_fmt(old_during)}"
          f"\n  from the driver, during the delay:    {driver_during:.1f} ms"
          f"\n  the relayed connection after the heal: {_fmt(relayed_after)}"
          f"\n  opened after the heal:                {_fmt(after)}"
          f"\n  opened before, after the heal:        {_fmt(old_after)}")

    assert isinstance(before, tuple) and before[1] < DELAY_MS
    assert isinstance(during, tuple) and during[0] >= 2 * DELAY_MS, "every round trip through the relay"
    assert driver_during >= 2 * DELAY_MS, "the driver's connections go through the relay too"
    assert isinstance(old_during, tuple) and old_during[1] < DELAY_MS, "a connection from before is not redirected"
    assert relayed_after in ("EOFError", "ConnectionResetError", "BrokenPipeError"), \
        f"the heal closes what went through the relay, got {relayed_after}"
    assert isinstance(after, tuple) and after[1] < DELAY_MS, "a new connection is fast again"
    assert isinstance(old_after, tuple) and old_after[1] < DELAY_MS
    assert relay.proc.returncode == 0 and not nemesis.delays.running
    assert TABLE not in hosts.run(1, ["nft", "list", "tables"]).stdout
    assert window.kind == "delay" and window.end_ms is not None and window.hosts == (1,)
    assert window.detail == f"host 1 :{PORT} {DELAY_MS} ms"
