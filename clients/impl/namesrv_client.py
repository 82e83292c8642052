"""Typed access to the NameServers of a Ray namespace: the one route fetcher the producer, the
consumer and admin share.

Sticky on one NameServer while it answers (random start, as RocketMQ's client), the next one when it
is dead, hung or 'not ready' after a restart. Answers are typed: a route lookup returns
`TopicRouteData` or raises `TopicNotFound`; with no NameServer answering it raises
`NoNameServerAvailable`.
"""

from __future__ import annotations

import random
import threading
import time
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, RayActorError

from actors.deployment.spec import NAMESRV_PREFIX
from actors.runtime.handles import ActorHandles
from namesrv.acl.plain_acl import SessionCredentials, long_poll_content, signed
from namesrv.client.errors import (
    MQClientError,
    NameServerLate,
    NameServerNotReady,
    NoNameServerAvailable,
    TopicNotFound,
)
from namesrv.protocol.codes import ResponseCode
from namesrv.protocol.models import ClusterInfo, TopicRouteData
from namesrv.remoting.command import RemotingResponse
from namesrv.routeinfo.long_poll import RouteChange

STOP_CHECK_S = 0.1
"""How often a held route long-poll looks whether its client is shutting down."""


def discover_namesrvs(namespace: str) -> list[str]:
    """NameServer actor names in a Ray namespace (namesrv-0, namesrv-1, ...)."""
    return sorted(
        a["name"]
        for a in ray.util.list_named_actors(all_namespaces=True)
        if a["namespace"] == namespace and a["name"].startswith(NAMESRV_PREFIX)
    )


class NameServerClient:
    def __init__(self, namesrv_names: list[str], namespace: str, call_timeout_ms: int = 3_000,
                 credentials: SessionCredentials | None = None) -> None:
        """`credentials` sign every request (NameServers with ACL on refuse unsigned ones)."""
        if not namesrv_names:
            raise NoNameServerAvailable("the name server list is empty")
        self.namesrv_names = list(namesrv_names)
        self.namespace = namespace
        self.credentials = credentials
        self.call_timeout_s = call_timeout_ms / 1000
        self._index = random.randrange(len(self.namesrv_names))
        self._handles = ActorHandles(namespace)
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ NameServer choice
    def handle(self, name: str) -> Any:
        return self._handles.get(name)

    @property
    def current(self) -> str:
        return self.namesrv_names[self._index % len(self.namesrv_names)]

    def move_off(self, name: str) -> None:
        """Next NameServer, unless another thread already moved off `name` (never move back onto it)."""
        self._handles.forget(name)
        with self._lock:
            if self.current == name:
                self._index = (self._index + 1) % len(self.namesrv_names)

    def _submit(self, name: str, method: str, **kwargs: Any) -> Any:
        """One signed request to NameServer `name`, submitted (ValueError: no such actor)."""
        body = kwargs.get("body")
        return getattr(self.handle(name), method).remote(
            **signed(kwargs, body if isinstance(body, bytes) else None, self.credentials))

    @staticmethod
    def _answer(ref: Any, timeout_s: float) -> RemotingResponse:
        """A submitted request's answer; raises RayActorError / GetTimeoutError when it has none in
        time, NameServerNotReady when its NameServer is still in its window."""
        resp: RemotingResponse = ray.get(ref, timeout=timeout_s)
        if resp.not_ready:
            raise NameServerNotReady(resp.remark or "name server not ready")
        return resp

    def call_on(self, name: str, method: str, **kwargs: Any) -> RemotingResponse:
        """One request to one NameServer; raises RayActorError / GetTimeoutError / ValueError (no
        such actor) when it cannot answer, NameServerNotReady when it is still in its window."""
        return self._answer(self._submit(name, method, **kwargs), self.call_timeout_s)

    def call(self, method: str, **kwargs: Any) -> RemotingResponse:
        """Sticky on one NameServer while it answers; on failure move to the next, once round."""
        errors = []
        count = len(self.namesrv_names)
        start = self._index
        for i in range(count):  # each NameServer once, whatever other threads do to the index
            name = self.namesrv_names[(start + i) % count]
            try:
                resp = self.call_on(name, method, **kwargs)
            except (RayActorError, GetTimeoutError, NameServerNotReady, ValueError) as e:
                errors.append(f"{name}: {type(e).__name__} {e}")
                self.move_off(name)
                continue
            with self._lock:
                self._index = (start + i) % count  # sticky on the one that answered
            return resp
        raise NoNameServerAvailable("; ".join(errors))

    # ------------------------------------------------------------------ typed queries
    @staticmethod
    def _route(topic: str, resp: RemotingResponse) -> tuple[TopicRouteData, int]:
        if resp.code == ResponseCode.TOPIC_NOT_EXIST:
            raise TopicNotFound(topic)
        if not resp.ok:
            raise MQClientError(f"route query for {topic} failed: {resp.code} {resp.remark}")
        return resp.payload, int(resp.ext_fields.get("routeVersion", -1))

    def get_topic_route(self, topic: str) -> tuple[TopicRouteData, int]:
        """The topic's route and version from the current NameServer (failing over)."""
        return self._route(topic, self.call("get_routeinfo_by_topic", topic=topic))

    def get_topic_route_everywhere(self, topic: str, grace_s: float | None = None,
                                   ) -> dict[str, tuple[TopicRouteData | None, int] | Exception]:
        """Every NameServer's route and version for `topic` (None, -1: it has none), asked all at
        once, or what it failed with (Ray's errors, NameServerNotReady, MQClientError). With
        `grace_s`, once one has answered the others have that much longer, and one that has not
        answered by then is `NameServerLate` (a restarting or busy NameServer then does not hold
        the caller for the whole call time-out)."""
        refs: dict[str, Any] = {}
        answers: dict[str, tuple[TopicRouteData | None, int] | Exception] = {}
        for name in self.namesrv_names:
            try:
                refs[name] = self._submit(name, "get_routeinfo_by_topic", topic=topic)
            except ValueError as e:  # no such actor
                answers[name] = e
        deadline = time.monotonic() + self.call_timeout_s
        graced = False
        if grace_s is not None and len(refs) > 1:
            first, _ = ray.wait(list(refs.values()), num_returns=1, timeout=self.call_timeout_s)
            if first:
                deadline, graced = min(deadline, time.monotonic() + grace_s), True
        for name, ref in refs.items():
            try:
                resp = self._answer(ref, max(deadline - time.monotonic(), 0.001))
                absent = resp.code == ResponseCode.TOPIC_NOT_EXIST
                answers[name] = (None, int(resp.ext_fields.get("routeVersion", -1))) if absent else \
                    self._route(topic, resp)
            except (RayActorError, GetTimeoutError, NameServerNotReady, MQClientError) as e:
                if isinstance(e, GetTimeoutError):
                    ray.cancel(ref)
                    if graced:
                        e = NameServerLate(f"{name} did not answer within {grace_s} s of the first answer")
                answers[name] = e
        return answers

    def get_topic_route_on(self, name: str, topic: str) -> TopicRouteData | None:
        """The topic's route as one particular NameServer sees it; None when it has none."""
        try:
            return self._route(topic, self.call_on(name, "get_routeinfo_by_topic", topic=topic))[0]
        except TopicNotFound:
            return None

    def get_cluster_info(self, name: str | None = None) -> ClusterInfo:
        resp = self.call_on(name, "get_broker_cluster_info") if name else self.call("get_broker_cluster_info")
        if not resp.ok:
            raise MQClientError(f"cluster info failed: {resp.code} {resp.remark}")
        info: ClusterInfo = resp.payload
        return info

    def listen_for_change(self, name: str, versions: dict[str, int], timeout_s: float | None,
                          wait_s: float, stop: threading.Event | None = None) -> dict[str, RouteChange]:
        """Hold a long-poll on NameServer `name` for at most `wait_s`; raises what Ray raises when it
        cannot answer (GetTimeoutError past `wait_s`), and MQServerError (code and remark:
        NO_PERMISSION from the ACL) when it refuses. Once `stop` is set the poll is cancelled and
        answers no change within STOP_CHECK_S: a client's shutdown never leaves a thread inside a Ray
        call that the end of its process would then break."""
        auth = signed(long_poll_content(versions), None, self.credentials)
        ref = self.handle(name).listen_for_change.remote(versions, timeout_s, auth)
        deadline = time.monotonic() + wait_s
        while True:
            left = deadline - time.monotonic()
            ready, _ = ray.wait([ref], timeout=max(min(STOP_CHECK_S, left), 0))
            if ready:
                changes: dict[str, RouteChange] = ray.get(ref)
                return changes
            if (stop is not None and stop.is_set()) or left <= 0:
                ray.cancel(ref)
                if left <= 0:
                    raise GetTimeoutError(f"{name} held the route long-poll past {wait_s:.1f} s")
                return {}
