"""The console's one way to ask a server: every request its collector's parts and its forms make
goes through `ServerCalls`, which finds the actors (NameServers, brokers), signs the request with an
account, bounds the wait, and counts it per kind of server and per origin (`ORIGIN`), so a test can
check that page views ask nothing."""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Awaitable
from typing import Any

import ray

from actors.console.model import ConsoleState
from namesrv.acl.plain_acl import SessionCredentials, signed
from namesrv.remoting.command import RemotingRequest, RemotingResponse

CALL_TIMEOUT_S = 5.0
ORIGIN: contextvars.ContextVar[str] = contextvars.ContextVar("console_call_origin", default="view")
"""Who asks a server: the collector's own tasks set "collector", a form's action "action"; anything
else (a page view) is counted as "view", which must stay at zero."""


class ServerCalls:
    def __init__(self, namespace: str, state: ConsoleState) -> None:
        self.namespace = namespace
        self.state = state
        """Read for the actor name of a broker address (the broker stats fill it)."""
        self.credentials: SessionCredentials | None = None
        """The account requests are signed with unless a form names its session's."""
        self.counts = {"namesrv": 0, "broker": 0, "controller": 0}
        self.by_origin = {"collector": 0, "action": 0, "view": 0}
        self._namesrvs: dict[str, Any] = {}
        self._brokers: dict[str, Any] = {}
        """actor name -> handle."""

    def count(self, kind: str, n: int = 1) -> None:
        self.counts[kind] += n
        self.by_origin[ORIGIN.get()] += n

    async def ask(self, ref: Awaitable[Any]) -> Any:
        return await asyncio.wait_for(ref, CALL_TIMEOUT_S)

    def request(self, code: int, ext: dict[str, Any] | None = None, body: bytes | None = None,
                credentials: SessionCredentials | None = None) -> RemotingRequest:
        return RemotingRequest(code, signed(ext or {}, body, credentials or self.credentials), body)

    async def lookup(self, name: str) -> Any:
        """The named actor's handle, looked up off the event loop (the GCS may be slow to answer)."""
        return await asyncio.wait_for(asyncio.to_thread(ray.get_actor, name, namespace=self.namespace),
                                      CALL_TIMEOUT_S)

    # ------------------------------------------------------------------ NameServers
    async def namesrv(self, name: str) -> Any:
        if name not in self._namesrvs:
            self._namesrvs[name] = await self.lookup(name)
        return self._namesrvs[name]

    def forget_namesrv(self, name: str) -> None:
        self._namesrvs.pop(name, None)

    async def call_namesrv(self, name: str, request: RemotingRequest) -> RemotingResponse:
        self.count("namesrv")
        resp: RemotingResponse = await self.ask((await self.namesrv(name)).process.remote(request))
        return resp

    # ------------------------------------------------------------------ brokers
    async def broker(self, actor_name: str) -> Any:
        if actor_name not in self._brokers:
            self._brokers[actor_name] = await self.lookup(actor_name)
        return self._brokers[actor_name]

    def forget_broker(self, actor_name: str) -> None:
        self._brokers.pop(actor_name, None)

    def known_brokers(self) -> list[str]:
        return sorted(self._brokers)

    def broker_handle(self, addr: str) -> Any:
        """The handle of the broker that routes name `addr` (its TCP address or actor name), or None."""
        view = self.state.brokers.get(addr)
        name = view.actor_name if view is not None and view.actor_name else addr
        return self._brokers.get(name)

    async def call_broker(self, addr: str, request: RemotingRequest) -> RemotingResponse:
        """One request to the broker that routes name `addr`."""
        handle = self.broker_handle(addr)
        if handle is None:
            raise LookupError(f"no live broker at {addr}")
        self.count("broker")
        resp: RemotingResponse = await self.ask(handle.process.remote(request))
        return resp
