"""An HTTPS proxy that reaches the package registries and nothing else, for hosts of the multi-host
test bed (they have no route out): `pip install` inside a host, configured with `proxy = <url>`,
tunnels through it to PyPI (and any https index pip is configured with here: `registry_hosts`).
Only CONNECT to an allowed host on port 443 is served; any other request is answered 403 and
recorded in `refused`. The tunnels are opaque TLS (the client checks the registry's certificate
itself).

    with RegistryProxy("10.77.0.1") as proxy:
        ...  # pip.conf in a host: [global] proxy = {proxy.url}
        proxy.tunnels   # ["pypi.org:443", "files.pythonhosted.org:443", ...]
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import socketserver
import subprocess
import sys
import threading
import urllib.parse
from typing import Any

REGISTRY_HOSTS = ("pypi.org", "files.pythonhosted.org")
"""pip's and uv's default index and the host of its files."""


def registry_hosts() -> tuple[str, ...]:
    """REGISTRY_HOSTS and the host of every https index pip is configured with on this machine
    (`pip config list`): what pip and uv on a host of the bed may ask for."""
    listed = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True,
                            check=False).stdout
    hosts = list(REGISTRY_HOSTS)
    for line in listed.splitlines():
        key, _, value = line.partition("=")
        if key.rsplit(".", 1)[-1] not in ("index-url", "extra-index-url"):
            continue
        for url in value.strip("'\"").split():
            parts = urllib.parse.urlsplit(url)
            if parts.scheme == "https" and parts.hostname and parts.hostname not in hosts:
                hosts.append(parts.hostname)
    return tuple(hosts)
CONNECT_TIMEOUT_S = 30.0
HEAD_LIMIT = 16384


class _Handler(socketserver.BaseRequestHandler):
    server: _Server

    def handle(self) -> None:
        client: socket.socket = self.request
        head = b""
        while b"\r\n\r\n" not in head and len(head) < HEAD_LIMIT:
            chunk = client.recv(4096)
            if not chunk:
                return
            head += chunk
        request_line = head.split(b"\r\n", 1)[0].decode("latin-1")
        parts = request_line.split()
        target = parts[1] if len(parts) == 3 and parts[0] == "CONNECT" else ""
        host, _, port = target.rpartition(":")
        if host not in self.server.allowed or port != "443":
            self.server.record(self.server.refused, request_line)
            client.sendall(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            return
        try:
            upstream = socket.create_connection((host, 443), timeout=CONNECT_TIMEOUT_S)
        except OSError as e:
            client.sendall(f"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nX-Error: {e}\r\n\r\n".encode())
            return
        self.server.record(self.server.tunnels, target)
        with upstream:
            upstream.settimeout(None)
            client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            rest = head.split(b"\r\n\r\n", 1)[1]
            if rest:
                upstream.sendall(rest)
            _relay(client, upstream)


def _relay(a: socket.socket, b: socket.socket) -> None:
    """Copy both ways until both sides have closed (a half-close is passed on)."""
    peer = {a: b, b: a}
    with selectors.DefaultSelector() as sel:
        sel.register(a, selectors.EVENT_READ)
        sel.register(b, selectors.EVENT_READ)
        open_ends = 2
        while open_ends:
            for key, _ in sel.select():
                src: socket.socket = key.fileobj  # type: ignore[assignment]
                try:
                    data = src.recv(65536)
                except OSError:
                    return
                if not data:
                    sel.unregister(src)
                    open_ends -= 1
                    with contextlib.suppress(OSError):
                        peer[src].shutdown(socket.SHUT_WR)
                    continue
                try:
                    peer[src].sendall(data)
                except OSError:
                    return


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], allowed: tuple[str, ...]) -> None:
        super().__init__(address, _Handler)
        self.allowed = allowed
        self.tunnels: list[str] = []
        self.refused: list[str] = []
        self._lock = threading.Lock()

    def record(self, into: list[str], what: str) -> None:
        with self._lock:
            into.append(what)


class RegistryProxy:
    """The proxy on `address` (a free port), serving from a thread of this process."""

    def __init__(self, address: str, allowed: tuple[str, ...] = REGISTRY_HOSTS) -> None:
        self.address = address
        self.allowed = allowed
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    def __enter__(self) -> RegistryProxy:
        self._server = _Server((self.address, 0), self.allowed)
        self._thread = threading.Thread(target=self._server.serve_forever, name="registry-proxy", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=10)

    @property
    def url(self) -> str:
        assert self._server is not None, "not started"
        return f"http://{self.address}:{self._server.server_address[1]}"

    @property
    def tunnels(self) -> list[str]:
        """host:port of every tunnel opened, in order."""
        return list(self._server.tunnels) if self._server else []

    @property
    def refused(self) -> list[str]:
        """The request line of every request refused."""
        return list(self._server.refused) if self._server else []
