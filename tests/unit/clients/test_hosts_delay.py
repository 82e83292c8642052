"""The delay nemesis without the test bed: its checks and nftables script (clients.chaos.hosts.
delay_rules, pure), and `Nemesis.delay` on a stand-in bed whose hosts are this machine's loopback
(the relay runs as a plain process; the nft scripts are recorded, not loaded). No root."""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from clients.chaos.hosts.delay_rules import (
    SYN,
    TABLE,
    DelaySpec,
    check_free,
    clear_script,
    delay_spec,
    redirect_script,
    relay_argv,
)
from clients.chaos.hosts.nemesis import Nemesis
from clients.chaos.hosts.relay import parse_args
from clients.chaos.hosts.rules import TABLE as CUTS_TABLE


def test_a_delay_is_checked() -> None:
    spec = delay_spec(1, [9876, 10911], 50, 3, jitter_ms=5)
    assert spec == DelaySpec(1, (9876, 10911), 50.0, 50.0, 5.0, 0)
    assert delay_spec(0, 9876, 0, 1, reply_delay_ms=80).reply_delay_ms == 80, "one way, one port"
    for kwargs, why in (
        ({"host": 3}, r"no host 3: the test bed has hosts 0\.\.2"),
        ({"host": True}, "no host True"),
        ({"ports": []}, "at least one port"),
        ({"ports": [0]}, r"a port is 1\.\.65535, got 0"),
        ({"ports": [70000]}, "got 70000"),
        ({"ports": [True]}, "got True"),
        ({"ports": "9876"}, "ports are ints"),
        ({"ports": [1, 2, 1]}, "named twice"),
        ({"delay_ms": -1}, "the delay must be a number of ms, 0 or more, got -1"),
        ({"delay_ms": float("nan")}, "the delay must be"),
        ({"delay_ms": "50"}, "the delay must be"),
        ({"jitter_ms": -2}, "the jitter must be"),
        ({"reply_delay_ms": -3}, "the replies' delay must be"),
        ({"delay_ms": 0}, "0 ms both ways delays nothing"),
        ({"seed": 1.5}, "seed is an int"),
    ):
        args: dict[str, Any] = {"host": 1, "ports": [9876], "delay_ms": 50, "count": 3} | kwargs
        with pytest.raises(ValueError, match=why):
            delay_spec(**args)


def test_one_relay_per_port_of_a_host() -> None:
    running = [delay_spec(1, [9876], 50, 3)]
    check_free(delay_spec(1, [10911], 50, 3), running)
    check_free(delay_spec(2, [9876], 50, 3), running)
    with pytest.raises(ValueError, match=r"port\(s\) \[9876\] of host 1 are delayed already"):
        check_free(delay_spec(1, [10911, 9876], 5, 3), running)


def test_the_relays_command_line_is_one_it_accepts() -> None:
    spec = delay_spec(1, [9876, 10911], 50, 3, jitter_ms=2.5, reply_delay_ms=0, seed=7)
    argv = relay_argv(spec, "10.78.0.3", "/usr/bin/python3")
    assert argv[:3] == ["/usr/bin/python3", "-m", "clients.chaos.hosts.relay"]
    args = parse_args(argv[3:])
    assert [str(f) for f in args.forward] == ["0=10.78.0.3:9876", "0=10.78.0.3:10911"]
    assert (args.bind, args.delay_ms, args.reply_delay_ms, args.jitter_ms, args.seed) == ("10.78.0.3", 50, 0, 2.5, 7)
    assert spec.describe() == "host 1 :9876,10911 50 ms ± 2.5 (replies 0 ms)"
    assert delay_spec(0, [1], 20, 1).describe() == "host 0 :1 20 ms"


def test_the_redirect_script() -> None:
    assert redirect_script({10911: 40002, 9876: 40001}) == f"""add table inet {TABLE}
delete table inet {TABLE}
table inet {TABLE} {{
  chain prerouting {{
    type nat hook prerouting priority dstnat; policy accept;
    iifname != "lo" tcp dport 9876 tcp flags & (syn | ack) == syn redirect to :40001
    iifname != "lo" tcp dport 10911 tcp flags & (syn | ack) == syn redirect to :40002
  }}
}}
"""
    assert clear_script() == redirect_script({}) == f"add table inet {TABLE}\ndelete table inet {TABLE}\n"
    assert TABLE != CUTS_TABLE, "delays and cuts heal apart"


class LoopbackHosts:
    """Stands in for `netns.Hosts`: every host is this machine at 127.0.0.1; commands run here,
    except nft, whose scripts are recorded."""

    count = 2
    addresses = ["127.0.0.1", "127.0.0.1"]
    driver_address = "127.0.0.1"

    def __init__(self) -> None:
        self.scripts: list[tuple[int, str]] = []

    def address(self, i: int) -> str:
        return self.addresses[i]

    def run(self, i: int, argv: Sequence[str], *, input: str | None = None,
            **kwargs: Any) -> subprocess.CompletedProcess[str]:
        assert list(argv) == ["nft", "-f", "-"] and input is not None
        self.scripts.append((i, input))
        return subprocess.CompletedProcess(list(argv), 0, "", "")

    def popen(self, i: int, argv: Sequence[str], **kwargs: Any) -> subprocess.Popen[Any]:
        return subprocess.Popen(list(argv), **kwargs)


@pytest.fixture
def echo_port() -> Iterator[int]:
    import threading

    server = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                while data := conn.recv(4096):
                    conn.sendall(data)
    threading.Thread(target=serve, daemon=True).start()
    yield server.getsockname()[1]
    server.close()


def _round_trip_ms(port: int) -> float:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as c:
        start = time.monotonic()
        c.sendall(b"ping")
        assert c.recv(16) == b"ping"
        return (time.monotonic() - start) * 1000


def test_the_nemesis_runs_a_relay_per_delay_and_ends_it(echo_port: int) -> None:
    hosts = LoopbackHosts()
    nemesis = Nemesis(hosts, clock=lambda: 1000)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="no host 2"):
        nemesis.delay(2, [echo_port], 50)
    assert not hosts.scripts and not nemesis.timeline.windows, "nothing started for a bad delay"
    w = nemesis.delay(1, [echo_port], 40, reply_delay_ms=10)
    (relay,) = nemesis.delays.running
    (host, script), = hosts.scripts
    to = relay.redirects[echo_port]
    assert host == 1 and f"tcp dport {echo_port} {SYN} redirect to :{to}" in script
    assert _round_trip_ms(to) >= 50, "the relay's port holds 40 ms there, 10 back"
    with pytest.raises(ValueError, match="delayed already"):
        nemesis.delay(1, [echo_port], 5)
    assert (w.kind, w.hosts, w.end_ms, w.detail) == ("delay", (1,), None, f"host 1 :{echo_port} 40 ms (replies 10 ms)")
    nemesis.end(w)
    assert w.end_ms is not None and relay.proc.returncode == 0 and not nemesis.delays.running
    assert hosts.scripts[-1] == (1, clear_script())
    w2 = nemesis.delay(0, echo_port, 30)
    relay2 = nemesis.delays.running[0]
    assert nemesis.heal() == [w2] and relay2.proc.returncode == 0
    assert (0, clear_script()) in hosts.scripts[-3:], "the heal removed the delays' table"
    assert w2.as_record()["cuts"] == [] and w2.as_record()["kind"] == "delay"
