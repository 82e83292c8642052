"""The admin client's way in over TCP: RocketMQ's remoting protocol to each NameServer of a
namesrvAddr (`127.0.0.1:9876;127.0.0.1:9877`) and to the brokers' addresses from the cluster info.

One connection per server, opened on first use with a short timeout, so a refused or silent address
is one clear `ServerUnreachable` in seconds, never a hang.
"""

from __future__ import annotations

from typing import Any

from clients.admin.transport import ServerUnreachable, typed
from namesrv.acl.plain_acl import SessionCredentials, signed
from namesrv.protocol.bodies import format_properties
from namesrv.remoting.client import RemotingClient, RemotingConnectError, RemotingTimeoutError, parse_namesrv_addr
from namesrv.remoting.command import RemotingResponse


class TcpTransport:
    def __init__(self, namesrv_addr: str, timeout_s: float = 3.0,
                 credentials: SessionCredentials | None = None) -> None:
        """`namesrv_addr`: RocketMQ's form; a malformed one raises ValueError before anything connects.
        `credentials`: requests are signed with this account (for servers with ACL on)."""
        self.credentials = credentials
        self._namesrvs = [f"{host}:{port}" for host, port in parse_namesrv_addr(namesrv_addr)]
        self.timeout_s = timeout_s
        self.where = f"namesrvAddr {';'.join(self._namesrvs)}"
        self._clients: dict[str, RemotingClient] = {}

    def namesrvs(self) -> list[str]:
        return list(self._namesrvs)

    def _client(self, addr: str) -> RemotingClient:
        client = self._clients.get(addr)
        if client is None:
            try:
                host, port = parse_namesrv_addr(addr)[0]
            except ValueError:
                raise ServerUnreachable(f"{addr} is not a host:port address (a Ray-only broker?)") from None
            try:
                client = RemotingClient(host, port, timeout_s=self.timeout_s)
            except RemotingConnectError as e:
                raise ServerUnreachable(str(e)) from None
            self._clients[addr] = client
        return client

    def _call(self, addr: str, code: int, ext: dict[str, Any], body: bytes | None = None) -> RemotingResponse:
        try:
            answer = self._client(addr).invoke(code, signed(ext, body, self.credentials), body)
        except (RemotingConnectError, RemotingTimeoutError) as e:
            self._drop(addr)
            raise ServerUnreachable(str(e)) from None
        return typed(code, RemotingResponse(answer.code, answer.remark, dict(answer.ext_fields or {}), answer.body))

    def _drop(self, addr: str) -> None:
        client = self._clients.pop(addr, None)
        if client is not None:
            client.close()

    def call_namesrv(self, namesrv: str, code: int, ext: dict[str, Any] | None = None,
                     props: dict[str, str] | None = None) -> RemotingResponse:
        body = format_properties(props) if props is not None else None
        return self._call(namesrv, code, ext or {}, body)

    def call_broker(self, broker_addr: str, code: int, ext: dict[str, Any] | None = None,
                    props: dict[str, str] | None = None, body: bytes | None = None) -> RemotingResponse:
        return self._call(broker_addr, code, ext or {}, format_properties(props) if props is not None else body)

    def close(self) -> None:
        for addr in list(self._clients):
            self._drop(addr)
