"""A RocketMQ remoting client whose frames are built by hand (length-prefixed JSON header + body),
not by this project's codec: tests that must not trust our own encoder speak to brokers with it."""

from __future__ import annotations

import itertools
import json
import socket
import struct
from typing import Any


class RawClient:
    """One TCP connection speaking RocketMQ remoting frames, encoded and decoded right here."""

    def __init__(self, addr: str, timeout_s: float = 10) -> None:
        host, port = addr.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout_s)
        self.opaque = itertools.count(1)

    def call(self, code: int, ext: dict[str, Any] | None = None, body: bytes = b"") -> tuple[dict[str, Any], bytes]:
        """One request; its answer's header and body (requests the broker sends meanwhile, such as
        NOTIFY_CONSUMER_IDS_CHANGED, are skipped)."""
        opaque = next(self.opaque)
        header = json.dumps({"code": code, "language": "JAVA", "version": 453, "opaque": opaque, "flag": 0,
                             "extFields": {k: str(v) for k, v in (ext or {}).items()},
                             "serializeTypeCurrentRPC": "JSON"}).encode()
        self.sock.sendall(struct.pack(">ii", 4 + len(header) + len(body), len(header)) + header + body)
        while True:
            length, header_len = struct.unpack(">ii", self._read(8))
            rest = self._read(length - 4)
            answer = json.loads(rest[: header_len & 0xFFFFFF])
            if answer["flag"] & 1 and answer["opaque"] == opaque:
                return answer, rest[header_len & 0xFFFFFF:]

    def _read(self, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            assert chunk, "the broker closed the connection"
            data += chunk
        return data

    def close(self) -> None:
        self.sock.close()
