"""One RocketMQ 5 gRPC endpoint on the running event loop: the grpc.aio server, its MessagingService,
the route cache it reads, and the loops that keep the proxy's producer heartbeats and held receipts
alive. A proxy actor serves one in cluster mode (actors.proxy.actor); a broker actor serves one in
local mode (`local`: its own broker answered in process, each broker's queues answered at its own
proxy)."""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any

import grpc
import ray

from actors.proxy.local import LocalBroker
from actors.proxy.routes import RouteCache
from actors.proxy.service import MessagingService
from actors.runtime.ray_info import advertised_host
from namesrv.proxy.descriptors import SERVICE, load
from namesrv.proxy.settings import ProxyConfig

log = logging.getLogger(__name__)


class ProxyServer:
    def __init__(self, name: str, namespace: str, namesrv_names: list[str], config: ProxyConfig,
                 local: LocalBroker | None = None) -> None:
        self.name = name
        self.namespace = namespace
        self.namesrv_names = list(namesrv_names)
        self.config = config
        self.local = local
        self.endpoint = ""
        """`host:port` as clients dial it (the node's IP when it listens on every interface); "" until
        it serves."""
        self._server: Any = None
        self._routes: RouteCache | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self.service: MessagingService | None = None

    async def start(self, host: str, port: int, client_id: str, advertise: str | None = None) -> str:
        """Bind `host:port` (0: a free port), serve, and return the endpoint clients dial (on host
        `advertise` when given); OSError when the port cannot be bound (nothing is left running)."""
        routes = RouteCache(self.namespace, self.namesrv_names, self.config.route_cache_ttl_s, self.config.credentials)
        limit = self.config.max_message_size + (1 << 20)
        server = grpc.aio.server(options=[("grpc.max_receive_message_length", limit)])
        bound = server.add_insecure_port(f"{host}:{port}")
        if bound == 0:
            raise OSError(f"proxy {self.name} cannot listen on {host}:{port}")
        public = advertised_host(advertise or host)
        service = MessagingService(load(), self.config, routes, client_id, public, bound, self.local)
        server.add_registered_method_handlers(SERVICE, service.method_handlers())
        await server.start()
        routes.start()
        self.endpoint, self._server, self._routes, self.service = f"{public}:{bound}", server, routes, service
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(service.heartbeat_loop()), loop.create_task(service.consumer.renewals.run())]
        log.info("proxy %s serves apache.rocketmq.v2.MessagingService on %s (%s mode)", self.name, self.endpoint,
                 "local" if self.local is not None else "cluster")
        return self.endpoint

    def status(self) -> dict[str, Any]:
        service = self.service
        if service is None:
            return {"name": self.name, "endpoint": None}
        return {"name": self.name, "endpoint": self.endpoint, "mode": "local" if self.local is not None else "cluster",
                "calls": dict(service.calls), "sent": service.sent,
                "broker_requests": service.brokers.requests_by_name(), "in_process": service.brokers.in_process,
                "telemetry_sessions": len(service.telemetry.sessions),
                "check_backs": service.telemetry.check_backs, "received": service.consumer.received,
                "acked": service.consumer.acked, "renewed": service.consumer.renewals.renewed,
                "held_for_renewal": len(service.consumer.renewals.held),
                "acl_refused": service.acl.refused if service.acl else None,
                "route_pushes": self._routes.pushes if self._routes else 0, "pid": os.getpid(),
                "node_id": ray.get_runtime_context().get_node_id()}

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        if self._routes is not None:
            await self._routes.stop()
        if self.service is not None:
            await self.service.brokers.close()
        if self._server is not None:
            await self._server.stop(grace=0.5)
