"""The console as an async Ray actor, `console` in the deployment's namespace: it owns the one
collector and the aiohttp server, listening on 127.0.0.1 (or the host given) at a free or
configured port. `start_console` starts it (or finds the running one) and answers its URL."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import ray
from aiohttp import web

from actors.console import CONSOLE_NAME
from actors.console.collector import Collector, CollectorPeriods
from actors.console.web import ConsoleApp
from namesrv.remoting.config import LOOPBACK

log = logging.getLogger(__name__)

START_TIMEOUT_S = 30.0
SHUTDOWN_STEP_S = 5.0


class ConsoleActor:
    def __init__(self, namespace: str, namesrv_names: list[str], acl: bool = False, host: str = LOOPBACK,
                 port: int = 0, periods: CollectorPeriods | None = None) -> None:
        self.namespace = namespace
        self.host = host
        self.port = port
        self.collector = Collector(namespace, namesrv_names, periods)
        self.web = ConsoleApp(self.collector, acl=acl)
        self._runner: web.AppRunner | None = None
        self.url: str | None = None

    async def start(self) -> str:
        """Start collecting and serving (once); the URL to open."""
        if self._runner is not None and self.url is not None:
            return self.url
        self.collector.start()
        runner = web.AppRunner(self.web.app, access_log=None, shutdown_timeout=1.0)
        await runner.setup()
        site = web.TCPSite(runner, self.host, self.port)
        await site.start()
        self._runner = runner
        port = runner.addresses[0][1] if runner.addresses else self.port
        self.url = f"http://{self.host}:{port}/"
        log.info("console of namespace %s at %s", self.namespace, self.url)
        return self.url

    async def get_url(self) -> str | None:
        return self.url

    async def stats(self) -> dict[str, Any]:
        """What the collector has asked so far (per kind of server), its ticks and the pages rendered."""
        c = self.collector
        return {"calls": dict(c.servers.counts), "by_origin": dict(c.servers.by_origin), "ticks": dict(c.ticks),
                "max_broker_calls_per_tick": c.max_broker_calls_per_tick, "version": c.state.version,
                "renders": self.web.renders, "url": self.url}

    async def shutdown(self) -> None:
        """Stop collecting and serving (each step bounded: open event streams are cut)."""
        try:
            await asyncio.wait_for(self.collector.stop(), SHUTDOWN_STEP_S)
        except TimeoutError:
            log.warning("console collector did not stop in %g s", SHUTDOWN_STEP_S)
        if self._runner is not None:
            runner, self._runner = self._runner, None
            try:
                await asyncio.wait_for(runner.cleanup(), SHUTDOWN_STEP_S)
            except TimeoutError:
                log.warning("console web server did not stop in %g s", SHUTDOWN_STEP_S)

    async def ping(self) -> str:
        return CONSOLE_NAME


def start_console(namespace: str, namesrv_names: list[str], *, acl: bool = False, port: int = 0, host: str = LOOPBACK,
                  detached: bool = False, periods: CollectorPeriods | None = None,
                  node_id: str | None = None) -> tuple[Any, str]:
    """The namespace's console actor (started here, or the one already running) and its URL.
    `node_id`: the node whose 127.0.0.1 it listens on (softly; the head node for `namesrv up`)."""
    options: dict[str, Any] = {"name": CONSOLE_NAME, "namespace": namespace, "num_cpus": 0, "get_if_exists": True,
                               "lifetime": "detached" if detached else None}
    if node_id is not None:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(node_id, soft=True)
        options["memory"] = 1024 * 1024  # a soft affinity is honoured only for a request of some resource
    handle: Any = ray.remote(ConsoleActor).options(**options).remote(namespace, namesrv_names, acl, host, port, periods)
    url: str = ray.get(handle.start.remote(), timeout=START_TIMEOUT_S)
    return handle, url


def find_console(namespace: str) -> tuple[Any, str | None] | None:
    """The namespace's running console and its URL, or None."""
    try:
        handle: Any = ray.get_actor(CONSOLE_NAME, namespace=namespace)
    except ValueError:
        return None
    url: str | None = ray.get(handle.get_url.remote(), timeout=10)
    return handle, url
