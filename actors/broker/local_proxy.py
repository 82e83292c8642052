"""A broker's own RocketMQ 5 gRPC proxy (local mode, RocketMQ's proxy running in the broker's process):
an actors.proxy ProxyServer on the broker's event loop, on its remoting port + GRPC_PORT_OFFSET, whose
requests to this broker go through the broker's request pipeline in process (actors.proxy.local)."""

from __future__ import annotations

import asyncio
from typing import Any

from actors.broker.lifecycle import BrokerController
from actors.proxy.local import LocalBroker
from actors.proxy.server import ProxyServer
from namesrv.proxy.route import local_endpoint
from namesrv.proxy.settings import ProxyConfig


class LocalProxy:
    def __init__(self, name: str, controller: BrokerController, config: ProxyConfig, namespace: str,
                 namesrv_names: list[str], listen_host: str) -> None:
        """Starts serving at once (on the controller's loop), on `listen_host` as the broker's TCP port."""
        addr = controller.identity.broker_addr
        host, port = local_endpoint(addr)
        self.endpoint = f"{host}:{port}"
        """Where clients reach it: the broker's advertised host, its port + GRPC_PORT_OFFSET."""
        local = LocalBroker(controller.identity.broker_name, addr, controller.pipeline, self.endpoint)
        self.server = ProxyServer(f"{name}-proxy", namespace, namesrv_names, config, local)
        self._up: asyncio.Task[str] = controller.loop.spawn(
            "grpc-proxy", self.server.start(listen_host, port, f"{controller.token}@proxy", host))

    async def serving(self) -> str:
        """The endpoint once the server serves; raises the OSError of a port it could not bind."""
        await asyncio.shield(self._up)
        return self.endpoint

    def status(self) -> dict[str, Any]:
        return self.server.status()

    async def stop(self) -> None:
        await self.server.stop()
