"""The delaying TCP relay (clients.chaos.hosts.relay) on loopback, as its own process, without the
test bed: an echo server in this process behind it. Round trips take at least both directions'
delays, bytes and order survive a large transfer, a sender that outruns its reader is held back
(bounded buffers), ends travel both ways, SIGTERM delivers what is held and closes. Its argument
checks are pure."""

from __future__ import annotations

import contextlib
import hashlib
import os
import random
import select
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from clients.chaos.hosts.relay import Forward, Holds, format_ready, parse_args, parse_forward, parse_ready
from namesrv.common.waiting import wait_until

ROOT = Path(__file__).resolve().parents[3]


class Echo:
    """A TCP echo server on 127.0.0.1 (a thread per connection) that notes when each chunk arrived
    and when a connection ended;
    `reply=False`: it reads and never answers; `hold=True`: it accepts and reads nothing."""

    def __init__(self, reply: bool = True, hold: bool = False) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.reply, self.hold = reply, hold
        self.arrivals: list[tuple[float, bytes]] = []
        self.ended = threading.Event()
        self.conns: list[socket.socket] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, _ = self.sock.accept()
                self.conns.append(conn)
                if not self.hold:
                    threading.Thread(target=self._echo, args=(conn,), daemon=True).start()

    def _echo(self, conn: socket.socket) -> None:
        try:
            with conn, contextlib.suppress(OSError):
                while data := conn.recv(1 << 16):
                    self.arrivals.append((time.monotonic(), data))
                    if self.reply:
                        conn.sendall(data)
        finally:  # the peer's FIN, or its reset
            self.ended.set()

    def close(self) -> None:
        self.sock.close()
        for c in self.conns:
            c.close()


@contextlib.contextmanager
def relay(port: int, *args: str) -> Iterator[tuple[subprocess.Popen[str], int]]:
    """The relay in front of 127.0.0.1:`port`, and the port it listens on."""
    proc = subprocess.Popen([sys.executable, "-m", "clients.chaos.hosts.relay", "--forward", f"0=127.0.0.1:{port}",
                             *args], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        readable, _, _ = select.select([proc.stdout], [], [], 20)
        line = proc.stdout.readline() if readable else ""
        assert line.startswith("ready"), f"no ready line: {line!r} {proc.stderr.read() if proc.stderr else ''}"
        (bound,) = parse_ready(line)
        yield proc, bound.listen
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)


@pytest.fixture
def echo() -> Iterator[Echo]:
    server = Echo()
    yield server
    server.close()


def round_trips(port: int, count: int, size: int = 32) -> list[float]:
    """`count` round trips of `size` bytes on one connection, in ms, each checked byte for byte."""
    out = []
    with socket.create_connection(("127.0.0.1", port), timeout=10) as c:
        for i in range(count):
            msg = bytes([i % 256]) * size
            start = time.monotonic()
            c.sendall(msg)
            got = b""
            while len(got) < size:
                chunk = c.recv(size - len(got))
                assert chunk, "the relay closed the connection"
                got += chunk
            out.append((time.monotonic() - start) * 1000)
            assert got == msg
    return out


def test_round_trips_take_both_delays(echo: Echo) -> None:
    direct = round_trips(echo.port, 10)
    with relay(echo.port, "--delay-ms", "60") as (_, port):
        delayed = round_trips(port, 10)
    print(f"\nround trip direct: median {statistics.median(direct):.2f} ms; through a 60 ms relay: "
          f"min {min(delayed):.1f}, median {statistics.median(delayed):.1f}, max {max(delayed):.1f} ms")
    assert min(delayed) >= 120, delayed
    assert statistics.median(direct) < 60, direct


def test_a_one_way_delay_holds_only_the_replies(echo: Echo) -> None:
    with relay(echo.port, "--delay-ms", "0", "--reply-delay-ms", "150") as (_, port), \
            socket.create_connection(("127.0.0.1", port), timeout=10) as c:
        there, back = [], []
        for i in range(5):
            start = time.monotonic()
            c.sendall(b"%d" % i)
            assert c.recv(16) == b"%d" % i
            arrived = echo.arrivals[-1][0]
            there.append((arrived - start) * 1000)
            back.append((time.monotonic() - arrived) * 1000)
    print(f"\none-way delay 0 / 150 ms: there median {statistics.median(there):.1f} ms, "
          f"back min {min(back):.1f} ms")
    assert min(back) >= 150, back
    assert statistics.median(there) < 75, there


def test_jitter_is_seeded_and_never_negative() -> None:
    a = Holds(10, 10, jitter_ms=30, seed=7).drawer()
    b = Holds(10, 10, jitter_ms=30, seed=7).drawer()
    holds = [a(10) for _ in range(200)]
    assert holds == [b(10) for _ in range(200)]
    assert min(holds) == 0 and max(holds) <= 0.040 and len(set(holds)) > 50
    assert Holds(5, 5).drawer()(5) == 0.005


def test_a_jittered_large_transfer_keeps_every_byte_in_order(echo: Echo) -> None:
    data = random.Random(1).randbytes(32 << 20)
    with relay(echo.port, "--delay-ms", "20", "--jitter-ms", "15", "--seed", "3") as (_, port), \
            socket.create_connection(("127.0.0.1", port), timeout=30) as c:
        start = time.monotonic()

        def send() -> None:
            for i in range(0, len(data), 1 << 20):
                c.sendall(data[i:i + (1 << 20)])
            c.shutdown(socket.SHUT_WR)
        sender = threading.Thread(target=send)
        sender.start()
        back = hashlib.sha256()
        n = 0
        while chunk := c.recv(1 << 20):
            back.update(chunk)
            n += len(chunk)
        took = time.monotonic() - start
        sender.join(10)
    print(f"\n32 MiB echoed through a 20 ± 15 ms relay in {took:.2f} s ({2 * n / took / 1e6:.0f} MB/s both ways)")
    assert n == len(data) and back.digest() == hashlib.sha256(data).digest()


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_a_sender_that_outruns_its_reader_is_held_back() -> None:
    """The server reads nothing: the relay holds at most its buffer (1 MiB here) and the kernels'
    socket buffers fill, so the sender blocks after a bounded amount, and the relay's memory stays."""
    stalled = Echo(hold=True)
    try:
        with relay(stalled.port, "--delay-ms", "1", "--buffer-kib", "1024") as (proc, port), \
                socket.create_connection(("127.0.0.1", port)) as c:
            before = _rss_kib(proc.pid)
            c.settimeout(2)  # a send that blocks 2 s: the relay has stopped reading
            sent = 0
            block = b"x" * (1 << 16)
            with contextlib.suppress(TimeoutError):
                while sent < 512 << 20:
                    sent += c.send(block)
            grown = _rss_kib(proc.pid) - before
    finally:
        stalled.close()
    print(f"\nthe sender blocked after {sent / 2**20:.1f} MiB; the relay grew {grown / 1024:.1f} MiB")
    assert sent < 64 << 20, "the relay kept reading what it could not write"
    assert grown < 16 << 10, f"the relay grew {grown} KiB"


def test_ends_travel_both_ways(echo: Echo) -> None:
    with relay(echo.port, "--delay-ms", "30") as (_, port):
        with socket.create_connection(("127.0.0.1", port), timeout=10) as c:  # the client ends first
            c.sendall(b"last words")
            c.shutdown(socket.SHUT_WR)
            got = b""
            while chunk := c.recv(64):
                got += chunk
            assert got == b"last words", "the data before the FIN arrives, then the server's FIN"
            assert echo.ended.wait(5)
        mute = Echo(reply=False)  # the server ends first: it closes after the first chunk
        try:
            with relay(mute.port, "--delay-ms", "30") as (_, port2), \
                    socket.create_connection(("127.0.0.1", port2), timeout=10) as c:
                c.sendall(b"hello")
                wait_until(lambda: mute.arrivals, 5, "the server to get the bytes")
                mute.conns[0].shutdown(socket.SHUT_RDWR)
                assert c.recv(64) == b"", "the server's end reaches the client"
        finally:
            mute.close()


def test_an_unreachable_target_resets_the_client() -> None:
    free = socket.create_server(("127.0.0.1", 0))
    port = free.getsockname()[1]
    free.close()
    with relay(port, "--delay-ms", "10") as (_, rport), socket.create_connection(("127.0.0.1", rport), timeout=10) as c:
        with contextlib.suppress(ConnectionResetError):
            assert c.recv(16) == b""


def _queues(local_port: int, remote_port: int) -> tuple[int, int] | None:
    """The send and receive queues (bytes) of the loopback TCP socket between those ports, from
    /proc/net/tcp; None when there is none."""
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if int(fields[1].split(":")[1], 16) == local_port and int(fields[2].split(":")[1], 16) == remote_port:
            tx, rx = fields[4].split(":")
            return int(tx, 16), int(rx, 16)
    return None


def test_sigterm_delivers_what_is_held_and_closes(echo: Echo) -> None:
    with relay(echo.port, "--delay-ms", "5000") as (proc, port), \
            socket.create_connection(("127.0.0.1", port), timeout=10) as c:
        c.sendall(b"held")
        mine = c.getsockname()[1]
        wait_until(lambda: _queues(mine, port) == (0, 0) and _queues(port, mine) == (0, 0), 5,
                   "the relay to have read the bytes (held for 5 s)")
        start = time.monotonic()
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(10) == 0
        took = time.monotonic() - start
        wait_until(lambda: echo.arrivals, 5, "the held bytes to go out at once")
        assert echo.arrivals[0][1] == b"held"
        with contextlib.suppress(ConnectionResetError):
            assert c.recv(16) == b"", "the client's connection is closed"
        assert echo.ended.wait(5), "the server's connection is closed"
    assert took < 3, f"stopping took {took:.1f} s, not the 5 s hold"


def test_arguments_are_checked() -> None:
    assert parse_forward("0=127.0.0.1:9876") == Forward(0, "127.0.0.1", 9876)
    assert parse_ready(format_ready([Forward(40001, "10.78.0.3", 9876)])) == [Forward(40001, "10.78.0.3", 9876)]
    for bad, why in (("9876", "LISTEN=HOST:PORT"), ("0=127.0.0.1:0", "target port"),
                     ("70000=127.0.0.1:1", "listening port"), ("0=:1", "LISTEN=HOST:PORT")):
        with pytest.raises(ValueError, match=why):
            parse_forward(bad)
    with pytest.raises(ValueError, match="delay_ms must be 0 or more"):
        Holds(-1, 0)
    with pytest.raises(ValueError, match="jitter_ms must be 0 or more"):
        Holds(1, 1, jitter_ms=float("nan"))
    args = parse_args(["--forward", "0=h:1", "--delay-ms", "5"])
    assert args.reply_delay_ms is None and args.jitter_ms == 0
    with pytest.raises(SystemExit):
        parse_args(["--forward", "0=h:1", "--delay-ms", "-5"])
