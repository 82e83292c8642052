"""Binding a server's port: a taken port fails the start at once, unless the server is given time
for a previous incarnation (a killed actor whose process has not exited yet) to let go of it."""

from __future__ import annotations

import asyncio
import errno
import socket
import threading
import time

import pytest

from namesrv.remoting.server import RemotingServer


def server() -> RemotingServer:
    return RemotingServer("t", lambda conn, cmd: None, lambda conn, why: None, 0,
                          lambda coro: asyncio.ensure_future(coro))


def holder() -> tuple[socket.socket, int]:
    """A listening socket on a free loopback port, as the previous incarnation's."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    return sock, sock.getsockname()[1]


def test_a_taken_port_fails_at_once_without_a_wait() -> None:
    sock, port = holder()
    try:
        started = time.monotonic()
        with pytest.raises(OSError) as taken:
            server().bind("127.0.0.1", port)
        assert taken.value.errno == errno.EADDRINUSE and time.monotonic() - started < 1.0
        with pytest.raises(OSError):  # still taken when the wait runs out
            server().bind("127.0.0.1", port, wait_s=0.2)
    finally:
        sock.close()


def test_a_port_released_within_the_wait_is_bound() -> None:
    sock, port = holder()
    released = threading.Event()

    def release() -> None:
        time.sleep(0.3)
        sock.close()
        released.set()

    threading.Thread(target=release, daemon=True).start()
    s = server()
    assert s.bind("127.0.0.1", port, wait_s=10.0) == port
    assert released.is_set(), "bound only once the holder let go"
    asyncio.run(s.stop())
