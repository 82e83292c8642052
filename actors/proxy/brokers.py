"""A proxy's TCP connections to the brokers (one per address, opened on first use, opened again once
lost; a local-mode proxy's own broker is asked in process instead, actors.proxy.local), the producer
heartbeats that make the brokers send it check-backs of the topics its clients publish (producer
group = topic), and those check-backs handed to a callback. With ACL on, a
request is signed as the account the call acts as (actors.proxy.acl.ACTING_AS), a heartbeat as the
proxy's own."""

from __future__ import annotations

import asyncio
import json
import logging
from collections import Counter
from collections.abc import Callable
from typing import Any

from actors.proxy.acl import ACTING_AS
from actors.proxy.local import LocalBroker
from namesrv.acl.plain_acl import SessionCredentials, signed
from namesrv.protocol.codes import BrokerRequestCode
from namesrv.proxy.status import ProxyError
from namesrv.remoting.async_client import AsyncRemotingClient
from namesrv.remoting.client import RemotingConnectError, RemotingTimeoutError
from namesrv.remoting.config import host_port
from namesrv.remoting.wire_command import RemotingCommand

log = logging.getLogger(__name__)
CheckBack = Callable[[str, RemotingCommand], None]


def tcp_address(addr: str) -> tuple[str, int]:
    split = host_port(addr)
    if split is None:
        raise ProxyError("INTERNAL_SERVER_ERROR", f"broker {addr!r} serves no TCP port the proxy can reach")
    return split


class BrokerLinks:
    def __init__(self, client_id: str, timeout_s: float, on_check: CheckBack,
                 own: SessionCredentials | None = None, local: LocalBroker | None = None) -> None:
        self.client_id = client_id
        self.local = local
        """A local-mode proxy's own broker: its requests (heartbeats aside) never leave the process."""
        self.own = own
        self.timeout_s = timeout_s
        self._on_check = on_check
        self._conns: dict[str, AsyncRemotingClient] = {}
        self._opening: dict[str, asyncio.Lock] = {}
        self.producer_groups: set[str] = set()
        self.requests: Counter[int] = Counter()
        """Requests sent (heartbeats aside), by request code."""
        self.in_process = 0
        """Of those, the ones the local broker answered in process."""

    def _on_request(self, conn: AsyncRemotingClient, cmd: RemotingCommand) -> None:
        if cmd.code == BrokerRequestCode.CHECK_TRANSACTION_STATE:
            self._on_check(conn.address, cmd)

    async def conn(self, addr: str) -> AsyncRemotingClient:
        c = self._conns.get(addr)
        if c is not None and not c.closed:
            return c
        lock = self._opening.setdefault(addr, asyncio.Lock())
        async with lock:
            c = self._conns.get(addr)
            if c is None or c.closed:
                host, port = tcp_address(addr)
                try:
                    c = await AsyncRemotingClient.connect(host, port, self.timeout_s, self._on_request)
                except RemotingConnectError as e:
                    raise ProxyError("INTERNAL_SERVER_ERROR", str(e)) from None
                self._conns[addr] = c
                if self.producer_groups:
                    await self._heartbeat(c)
        return c

    def is_local(self, addr: str) -> bool:
        """Whether `addr` is the broker this (local-mode) proxy lives in."""
        return self.local is not None and addr == self.local.broker_addr

    async def invoke(self, addr: str, code: int, ext: dict[str, Any], body: bytes | None = None,
                     extra_s: float = 0.0) -> RemotingCommand:
        """One request to `addr`, awaited for the call timeout plus `extra_s` (a pop's long polling);
        in process when `addr` is the local broker's (its pipeline answers every request it takes)."""
        if self.is_local(addr):
            assert self.local is not None
            self.requests[code] += 1
            self.in_process += 1
            return await self.local.invoke(code, signed(ext, body, ACTING_AS.get() or self.own), body)
        c = await self.conn(addr)
        self.requests[code] += 1
        try:
            return await c.invoke(code, signed(ext, body, ACTING_AS.get() or self.own), body, self.timeout_s + extra_s)
        except RemotingTimeoutError as e:
            raise ProxyError("PROXY_TIMEOUT", str(e)) from None
        except RemotingConnectError as e:
            raise ProxyError("INTERNAL_SERVER_ERROR", str(e)) from None

    def requests_by_name(self) -> dict[str, int]:
        """`requests` under the codes' names (a code this project does not name: its number)."""
        names = {c.value: c.name for c in BrokerRequestCode}
        return {names.get(code, str(code)): n for code, n in sorted(self.requests.items())}

    def _heartbeat_body(self) -> bytes:
        return json.dumps({"clientID": self.client_id, "consumerDataSet": [],
                           "producerDataSet": [{"groupName": g} for g in sorted(self.producer_groups)]}).encode()

    async def _heartbeat(self, c: AsyncRemotingClient) -> None:
        try:
            body = self._heartbeat_body()
            await c.invoke(BrokerRequestCode.HEART_BEAT, signed({}, body, self.own), body, self.timeout_s)
        except (RemotingTimeoutError, RemotingConnectError) as e:
            log.info("heartbeat to %s failed: %s", c.address, e)

    async def add_producer_groups(self, groups: set[str], addrs: list[str]) -> None:
        """Register `groups` as producer groups on every broker in `addrs` (and on every open one)."""
        new = groups - self.producer_groups
        self.producer_groups |= groups
        targets = set(addrs) | (set(self._conns) if new else set())
        for addr in targets:
            try:
                await self._heartbeat(await self.conn(addr))
            except ProxyError as e:
                log.info("no heartbeat to %s: %s", addr, e.message)

    async def heartbeat_all(self) -> None:
        for c in list(self._conns.values()):
            if not c.closed and self.producer_groups:
                await self._heartbeat(c)

    async def close(self) -> None:
        for c in self._conns.values():
            await c.close()
        self._conns.clear()
