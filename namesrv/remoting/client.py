"""A RocketMQ remoting client over TCP (what mqadmin and the client libraries speak to a NameServer).

Synchronous and small: one connection per address, requests matched to answers by opaque, either
header serialization. Used by the admin verbs against `-n host:9876;host:9877`, the wire tests and
the benchmarks.
"""

from __future__ import annotations

import itertools
import socket
import threading
from typing import Any

from namesrv.remoting.codec import encode_command
from namesrv.remoting.config import host_port
from namesrv.remoting.frame_decoder import FrameDecoder
from namesrv.remoting.wire_command import CURRENT_VERSION, LanguageCode, RemotingCommand, SerializeType


class RemotingConnectError(ConnectionError):
    """The address cannot be reached (refused, unresolvable, timed out)."""


class RemotingTimeoutError(TimeoutError):
    """The server did not answer in time."""


def parse_namesrv_addr(addr: str) -> list[tuple[str, int]]:
    """`host:9876;host:9877` (RocketMQ's namesrvAddr) -> [(host, 9876), (host, 9877)]."""
    out = []
    for part in addr.replace(",", ";").split(";"):
        part = part.strip()
        if not part:
            continue
        split = host_port(part)
        if split is None:
            raise ValueError(f"bad NameServer address {part!r}: expected host:port")
        out.append(split)
    if not out:
        raise ValueError("no NameServer address given (expected host:port;host:port)")
    return out


class RemotingClient:
    """One TCP connection to one remoting server."""

    def __init__(self, host: str, port: int, timeout_s: float = 3.0,
                 serialize_type: SerializeType = SerializeType.JSON, language: int = LanguageCode.PYTHON,
                 version: int = CURRENT_VERSION) -> None:
        self.address = f"{host}:{port}"
        self.timeout_s = timeout_s
        self.serialize_type = serialize_type
        self.language = language
        self.version = version
        self._opaque = itertools.count(1)
        self._lock = threading.Lock()
        self._decoder = FrameDecoder()
        self._pending: dict[int, RemotingCommand] = {}
        self.server_requests: list[RemotingCommand] = []
        """Requests the server sent on this connection (a broker's rebalance notices), oldest first."""
        try:
            self._sock = socket.create_connection((host, port), timeout=timeout_s)
        except OSError as e:
            raise RemotingConnectError(f"cannot connect to {self.address}: {e.strerror or e}") from None
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def close(self) -> None:
        self._sock.close()

    def __enter__(self) -> RemotingClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def request(self, code: int, ext_fields: dict[str, Any] | None = None, body: bytes | None = None,
                oneway: bool = False) -> RemotingCommand:
        """A request command with the next opaque (ext values turned into strings)."""
        return RemotingCommand.request(code, next(self._opaque), ext_fields, body, 2 if oneway else 0, self.language,
                                       self.version, self.serialize_type)

    def send(self, cmd: RemotingCommand) -> None:
        try:
            self._sock.sendall(encode_command(cmd))
        except OSError as e:
            raise RemotingConnectError(f"lost connection to {self.address}: {e}") from None

    def receive(self, opaque: int) -> RemotingCommand:
        """Wait for the answer with `opaque` (answers to other requests are kept for their callers)."""
        with self._lock:
            while opaque not in self._pending:
                try:
                    data = self._sock.recv(1 << 20)
                except TimeoutError:
                    raise RemotingTimeoutError(f"{self.address} did not answer in {self.timeout_s} s") from None
                except OSError as e:
                    raise RemotingConnectError(f"lost connection to {self.address}: {e}") from None
                if not data:
                    raise RemotingConnectError(f"{self.address} closed the connection")
                for cmd in self._decoder.feed(data):
                    if cmd.is_response:  # a server's own request (NOTIFY_CONSUMER_IDS_CHANGED) is not an answer
                        self._pending[cmd.opaque] = cmd
                    else:
                        self.server_requests.append(cmd)
            return self._pending.pop(opaque)

    def server_requests_after(self, wait_s: float) -> list[RemotingCommand]:
        """The requests the server sent on this connection (a broker's rebalance notices and
        transaction check-backs), reading what arrives within `wait_s` first."""
        with self._lock:
            self._sock.settimeout(wait_s)
            try:
                data = self._sock.recv(1 << 20)
            except TimeoutError:
                data = None
            except OSError as e:
                raise RemotingConnectError(f"lost connection to {self.address}: {e}") from None
            finally:
                self._sock.settimeout(self.timeout_s)
            if data == b"":
                raise RemotingConnectError(f"{self.address} closed the connection")
            for cmd in self._decoder.feed(data or b""):
                if cmd.is_response:
                    self._pending[cmd.opaque] = cmd
                else:
                    self.server_requests.append(cmd)
            return list(self.server_requests)

    def invoke(self, code: int, ext_fields: dict[str, Any] | None = None, body: bytes | None = None) -> RemotingCommand:
        """Send one request and wait for its answer."""
        cmd = self.request(code, ext_fields, body)
        self.send(cmd)
        return self.receive(cmd.opaque)

    def invoke_oneway(self, code: int, ext_fields: dict[str, Any] | None = None, body: bytes | None = None) -> None:
        self.send(self.request(code, ext_fields, body, oneway=True))
