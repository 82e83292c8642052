"""A RocketMQ 5 gRPC proxy as a Ray actor: stateless (routes come from the NameServers, sends go to
the brokers' TCP ports, a transaction id says where its half is), so any number of them serve the
same cluster and a restarted one needs nothing from its predecessor. Its grpc.aio server
(actors.proxy.server) runs on the actor's event loop, started by the constructor."""

from __future__ import annotations

import gc
import os
import socket
from typing import Any

from actors.proxy.server import ProxyServer
from namesrv.proxy.settings import ProxyConfig

PROXY_PREFIX = "proxy-"


def proxy_actor_name(index: int) -> str:
    return f"{PROXY_PREFIX}{index}"


class ProxyActor:
    async def __init__(self, name: str, namespace: str, namesrv_names: list[str], host: str,  # type: ignore[misc]
                       port: int, config: dict[str, Any] | None = None) -> None:
        """Ray runs an async actor's constructor on its event loop: the server is up (and a proxy Ray
        restarts serves again) before the first call."""
        self.server = ProxyServer(name, namespace, namesrv_names, ProxyConfig(**(config or {})))
        await self.server.start(host, port, f"{socket.gethostname()}@{os.getpid()}@{name}")
        gc.freeze()  # Ray's worker, the imports and the protocol's classes: never walked by a full collection

    async def endpoint(self) -> str:
        """`host:port` the proxy serves gRPC on."""
        return self.server.endpoint

    async def ping(self) -> str:
        return "pong"

    async def get_status(self) -> dict[str, Any]:
        return self.server.status()

    async def shutdown(self) -> None:
        await self.server.stop()
