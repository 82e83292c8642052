"""A RocketMQ 5 gRPC proxy as a Ray actor: stateless (routes come from the NameServers, sends go to
the brokers' TCP ports, a transaction id says where its half is), so any number of them serve the
same cluster and a restarted one needs nothing from its predecessor. Its grpc.aio server runs on
the actor's event loop; it starts with the first call (`endpoint`), which the launcher makes."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from typing import Any

import grpc

from actors.proxy.routes import RouteCache
from actors.proxy.service import MessagingService
from namesrv.proxy.descriptors import SERVICE, load
from namesrv.proxy.settings import ProxyConfig

log = logging.getLogger(__name__)
PROXY_PREFIX = "proxy-"


def proxy_actor_name(index: int) -> str:
    return f"{PROXY_PREFIX}{index}"


class ProxyActor:
    async def __init__(self, name: str, namespace: str, namesrv_names: list[str], host: str,  # type: ignore[misc]
                       port: int, config: dict[str, Any] | None = None) -> None:
        """Ray runs an async actor's constructor on its event loop: the server is up (and a proxy Ray
        restarts serves again) before the first call."""
        self.name = name
        self.namespace = namespace
        self.namesrv_names = list(namesrv_names)
        self.host = host
        self.port = port
        self.config = ProxyConfig(**(config or {}))
        self._server: Any = None
        self._service: MessagingService | None = None
        self._routes: RouteCache | None = None
        self._heartbeats: asyncio.Task[None] | None = None
        self._renewing: asyncio.Task[None] | None = None
        self._lock: asyncio.Lock | None = None
        await self._ensure_started()

    async def _ensure_started(self) -> MessagingService:
        if self._service is not None:
            return self._service
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self._service is None:
                proto = load()
                routes = RouteCache(self.namespace, self.namesrv_names, self.config.route_cache_ttl_s,
                                    self.config.credentials)
                server = grpc.aio.server(options=[("grpc.max_receive_message_length",
                                                   self.config.max_message_size + (1 << 20))])
                bound = server.add_insecure_port(f"{self.host}:{self.port}")
                if bound == 0:
                    raise OSError(f"proxy {self.name} cannot listen on {self.host}:{self.port}")
                client_id = f"{socket.gethostname()}@{os.getpid()}@{self.name}"
                service = MessagingService(proto, self.config, routes, client_id, self.host, bound)
                server.add_registered_method_handlers(SERVICE, service.method_handlers())
                await server.start()
                routes.start()
                self.port, self._server, self._routes = bound, server, routes
                loop = asyncio.get_running_loop()
                self._heartbeats = loop.create_task(service.heartbeat_loop())
                self._renewing = loop.create_task(service.consumer.renewals.run())
                self._service = service
                log.info("proxy %s serves apache.rocketmq.v2.MessagingService on %s:%d", self.name, self.host, bound)
        return self._service

    async def endpoint(self) -> str:
        """`host:port` the proxy serves gRPC on (starting it on the first call)."""
        await self._ensure_started()
        return f"{self.host}:{self.port}"

    async def ping(self) -> str:
        await self._ensure_started()
        return "pong"

    async def get_status(self) -> dict[str, Any]:
        service = await self._ensure_started()
        return {"name": self.name, "endpoint": f"{self.host}:{self.port}", "calls": dict(service.calls),
                "sent": service.sent, "broker_requests": service.brokers.requests_by_name(),
                "telemetry_sessions": len(service.telemetry.sessions),
                "check_backs": service.telemetry.check_backs, "received": service.consumer.received,
                "acked": service.consumer.acked, "renewed": service.consumer.renewals.renewed,
                "held_for_renewal": len(service.consumer.renewals.held),
                "acl_refused": service.acl.refused if service.acl else None,
                "route_pushes": self._routes.pushes if self._routes else 0, "pid": os.getpid()}

    async def shutdown(self) -> None:
        for task in (self._heartbeats, self._renewing):
            if task is not None:
                task.cancel()
        if self._routes is not None:
            await self._routes.stop()
        if self._service is not None:
            await self._service.brokers.close()
        if self._server is not None:
            await self._server.stop(grace=0.5)
