"""A proxy's topic routes: read from the NameServer actors on first use, kept fresh by their
route-change long-poll (the push the Ray-native clients use) and, whatever it says, read again once
older than `ttl_s`. Sticky on one NameServer while it answers, the next one when it does not. With
ACL on, both are signed with the proxy's own account (`own`): a route is read once for every client
of the proxy, whose own right to it the proxy checks (namesrv.proxy.auth)."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from ray.exceptions import RayActorError

from actors.runtime.handles import ActorHandles
from namesrv.acl.plain_acl import SessionCredentials, credentials_only, long_poll_content, signed
from namesrv.protocol.codes import ResponseCode
from namesrv.protocol.models import TopicRouteData
from namesrv.proxy.status import ProxyError
from namesrv.remoting.command import MQServerError
from namesrv.routeinfo.long_poll import RouteChange

log = logging.getLogger(__name__)
LONG_POLL_S = 20.0
CALL_TIMEOUT_S = 5.0


class RouteCache:
    def __init__(self, namespace: str, namesrv_names: list[str], ttl_s: float,
                 own: SessionCredentials | None = None) -> None:
        if not namesrv_names:
            raise ValueError("a proxy needs at least one NameServer")
        self.namesrv_names = list(namesrv_names)
        self.own = own
        self.ttl_s = ttl_s
        self._handles = ActorHandles(namespace)
        self._index = 0
        self._routes: dict[str, tuple[TopicRouteData, int, float]] = {}
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.pushes = 0
        """Route changes the long-poll brought."""

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._listen())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()

    async def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        errors = []
        for _ in range(len(self.namesrv_names)):
            name = self.namesrv_names[self._index % len(self.namesrv_names)]
            try:
                handle = await self._handles.aget(name)
                resp = await asyncio.wait_for(getattr(handle, method).remote(*args, **kwargs),
                                              LONG_POLL_S + CALL_TIMEOUT_S if method == "listen_for_change"
                                              else CALL_TIMEOUT_S)
                if getattr(resp, "not_ready", False):
                    raise RuntimeError("not ready")
                return resp
            except (RayActorError, MQServerError, ValueError, TimeoutError, RuntimeError) as e:
                errors.append(f"{name}: {type(e).__name__} {e}")
                self._handles.forget(name)
                self._index += 1
        raise ProxyError("INTERNAL_SERVER_ERROR", "no NameServer answered: " + "; ".join(errors))

    async def get(self, topic: str) -> TopicRouteData:
        """The topic's route (TOPIC_NOT_FOUND when no NameServer has one)."""
        cached = self._routes.get(topic)
        if cached is not None and time.monotonic() - cached[2] < self.ttl_s:
            return cached[0]
        resp = await self._call("get_routeinfo_by_topic", **signed({"topic": topic}, None, self.own))
        if resp.code == ResponseCode.TOPIC_NOT_EXIST:
            self._routes.pop(topic, None)
            raise ProxyError("TOPIC_NOT_FOUND", resp.remark or f"No topic route info in name server for the topic: "
                                                              f"{topic}")
        if resp.code != ResponseCode.SUCCESS:
            raise ProxyError("INTERNAL_SERVER_ERROR", f"route query for {topic} failed: {resp.code} {resp.remark}")
        route: TopicRouteData = resp.payload
        first = topic not in self._routes
        self._routes[topic] = (route, int(resp.ext_fields.get("routeVersion", -1)), time.monotonic())
        if first:
            self._changed.set()  # the long-poll holds the new topic too
        return route

    async def _listen(self) -> None:
        while True:
            versions = {t: v for t, (_, v, _) in self._routes.items()}
            if not versions:
                self._changed.clear()
                await self._changed.wait()
                continue
            try:
                auth = credentials_only(signed(long_poll_content(versions), None, self.own)) if self.own else None
                changes: dict[str, RouteChange] = await self._call("listen_for_change", versions, LONG_POLL_S,
                                                                   auth=auth)
            except ProxyError as e:
                log.warning("route long-poll failed: %s", e.message)
                await asyncio.sleep(1.0)  # every NameServer is down: try again (production back-off, not a test wait)
                continue
            now = time.monotonic()
            for topic, change in changes.items():
                self.pushes += 1
                if change.route is None:
                    self._routes.pop(topic, None)
                else:
                    self._routes[topic] = (change.route, change.version, now)
