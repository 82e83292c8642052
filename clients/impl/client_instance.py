"""The client side over Ray (RocketMQ's MQClientInstance): route cache, route push, and the
transport that calls broker actors. Routes come from a `RouteSource` (a `NameServerClient` unless a
test passes its own).

One instance per client id (ip@instance) in a process, shared by every producer and consumer of
that id. Routes are cached per topic, refreshed every `poll_name_server_interval_ms` and, beyond
RocketMQ, replaced the moment a NameServer pushes a change through its long-poll. A route is
swapped in as one new object, so a send never sees half of one.
"""

from __future__ import annotations

import collections
import functools
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, RayActorError, RayError, RayTaskError

from actors.broker.actor import broker_actor_name
from actors.runtime.handles import ActorHandles
from clients.impl.namesrv_client import NameServerClient
from clients.impl.route_views import UNION_VERSION, RouteViews
from namesrv.acl.plain_acl import SessionCredentials, signature
from namesrv.client.errors import MQBrokerError, RemotingError, TopicNotFound
from namesrv.client.message import Message
from namesrv.client.publish_info import TopicPublishInfo, topic_route_data_to_publish_info
from namesrv.client.route_source import RouteSource
from namesrv.client.send_result import SendResult
from namesrv.protocol.codes import ResponseCode
from namesrv.protocol.constants import AUTO_CREATE_TOPIC_KEY_TOPIC, DEFAULT_TOPIC_QUEUE_NUMS, MASTER_ID
from namesrv.protocol.message.codec import ray_send_ext
from namesrv.protocol.models import MessageQueue, TopicRouteData

log = logging.getLogger(__name__)

ROUTE_LOG_KEPT = 10_000
"""Route changes remembered per client instance (oldest dropped first)."""
SHUTDOWN_JOIN_S = 5.0
"""How long `shutdown` waits for each route thread (a poll in flight answers within a call timeout)."""
UNION_RETRY_S = 0.5
"""With `route_union`, how long a NameServer whose long-poll failed rests before it is asked again."""


class RayBrokerTransport:
    """Sends to broker actors over Ray; a route's broker is found by its address: a Ray-only
    broker's address is its actor name; a TCP broker's actor is looked up once by its address
    (`ActorHandles.broker_actor`), since after a failover brokerId 0 of set X is whichever replica
    the controller chose, not `broker_actor_name(X, 0)`."""

    def __init__(self, namespace: str, credentials: SessionCredentials | None = None) -> None:
        self.namespace = namespace
        self.credentials = credentials
        self._handles = ActorHandles(namespace)

    def _auth(self, mq: MessageQueue, msg: Message, msg_id: str, default_topic: str | None) -> dict[str, str] | None:
        """AccessKey and Signature over exactly the request the broker's `send_message` builds."""
        if self.credentials is None:
            return None
        ext = ray_send_ext(mq.topic, mq.queue_id, msg.wire_properties(), msg_id,
                           default_topic if default_topic is not None else AUTO_CREATE_TOPIC_KEY_TOPIC)
        return signature(ext, bytes(msg.body), self.credentials)

    def handle(self, actor_name: str) -> Any:
        try:
            return self._handles.get(actor_name)
        except ValueError as e:
            raise RemotingError(f"broker {actor_name} not found") from e

    def actor_of(self, broker_name: str, broker_addr: str) -> str:
        """The actor behind a route's `broker_addr` (falls back to `broker_actor_name(X, 0)` when no
        live actor serves that TCP address: the send then fails as unavailable and is retried)."""
        try:
            return self._handles.broker_actor(broker_name, broker_addr)
        except (ValueError, RayError):
            return broker_actor_name(broker_name, MASTER_ID)

    def forget(self, actor_name: str) -> None:
        self._handles.forget(actor_name)

    def send(
        self, broker_addr: str, mq: MessageQueue, msg: Message, msg_id: str, timeout_ms: int,
        default_topic: str | None,
    ) -> SendResult:
        kwargs: dict[str, Any] = {"properties": msg.wire_properties(), "msg_id": msg_id,
                                  "auth": self._auth(mq, msg, msg_id, default_topic)}
        if default_topic is not None:
            kwargs["default_topic"] = default_topic
        name = self.actor_of(mq.broker_name, broker_addr)
        deadline = time.monotonic() + max(timeout_ms, 1) / 1000
        handle = self.handle(name)
        while True:
            try:
                resp = self._call_send(handle, broker_addr, mq, msg, kwargs, deadline, timeout_ms)
                break
            except RayActorError as e:
                self.forget(name)  # a restarted broker is a new actor: look it up again
                handle = self._restarted(name, handle)
                if handle is None:
                    raise RemotingError(f"broker {broker_addr} is unavailable: {type(e).__name__}") from e
                log.info("broker %s was restarted: the send goes to its new actor", broker_addr)
        if not resp.ok:
            raise MQBrokerError(resp.code, resp.remark, mq.broker_name)
        f = resp.ext_fields
        return SendResult(f["status"], f["msgId"], f["offsetMsgId"], MessageQueue(mq.topic, mq.broker_name,
                          f["queueId"]), f["queueOffset"])

    def _call_send(self, handle: Any, broker_addr: str, mq: MessageQueue, msg: Message, kwargs: dict[str, Any],
                   deadline: float, timeout_ms: int) -> Any:
        """One send_message call, answered by `deadline`; RayActorError (the actor is dead) is
        left to the caller, every other failure raised as the engine's errors."""
        try:
            ref = handle.send_message.remote(mq.topic, mq.queue_id, bytes(msg.body), **kwargs)
        except RayError as e:  # refused at submission (e.g. too many pending calls)
            raise RemotingError(f"send to {broker_addr} not submitted: {type(e).__name__}: {e}") from e
        try:
            return ray.get(ref, timeout=max(deadline - time.monotonic(), 0.001))
        except GetTimeoutError as e:
            ray.cancel(ref)
            raise RemotingError(f"send to {broker_addr} timed out after {timeout_ms} ms") from e
        except RayActorError:
            raise
        except RayTaskError as e:  # the broker raised: what RocketMQ's broker answers as SYSTEM_ERROR
            raise MQBrokerError(ResponseCode.SYSTEM_ERROR, f"broker {broker_addr} failed: {_cause(e)}",
                                mq.broker_name) from e
        except RayError as e:  # lost, cancelled, out of memory...: no answer
            raise RemotingError(f"send to {broker_addr} failed in Ray: {type(e).__name__}: {e}") from e

    def _restarted(self, name: str, dead: Any) -> Any | None:
        """The handle of a new actor now serving `name` (the broker was restarted while this client
        held the old one), or None: none lives yet, or it is the same dead one. A client that kept
        a handle across the restart would otherwise fail its first send there, as a TCP client
        whose connection the restart closed does, and move the message to another broker."""
        try:
            fresh = self._handles.get(name)
        except ValueError:
            return None
        if fresh == dead:
            self.forget(name)
            return None
        return fresh

    def send_oneway(self, broker_addr: str, mq: MessageQueue, msg: Message, msg_id: str) -> None:
        self.handle(self.actor_of(mq.broker_name, broker_addr)).send_message.remote(
            mq.topic, mq.queue_id, bytes(msg.body), properties=msg.wire_properties(), msg_id=msg_id,
            auth=self._auth(mq, msg, msg_id, None),
        )


def _cause(e: RayTaskError) -> str:
    """The broker's own error (type and message), without Ray's traceback."""
    cause = e.cause if isinstance(getattr(e, "cause", None), BaseException) else None
    if cause is not None:
        return f"{type(cause).__name__}: {cause}"
    lines = [ln for ln in str(e).splitlines() if ln.strip()]
    return lines[-1] if lines else type(e).__name__


class MQClientInstance:
    def __init__(
        self,
        client_id: str,
        namesrv: NameServerClient,
        poll_name_server_interval_ms: int = 30_000,
        route_push: bool = True,
        long_poll_timeout_s: float | None = None,
        route_source: RouteSource | None = None,
        route_union: bool = False,
    ) -> None:
        """`route_union`: routes are the union of every NameServer's (RouteViews), each NameServer's
        changes pushed by a long-poll of its own; else RocketMQ's one NameServer at a time."""
        self.client_id = client_id
        self.namesrv = namesrv
        self.views = RouteViews(namesrv) if route_union and route_source is None else None
        self.route_source: RouteSource = route_source or self.views or namesrv
        self.namespace = namesrv.namespace
        self.poll_interval_s = poll_name_server_interval_ms / 1000
        self.route_push = route_push
        self.long_poll_timeout_s = long_poll_timeout_s
        self.transport = RayBrokerTransport(namesrv.namespace, namesrv.credentials)
        self._lock = threading.RLock()
        self._publish_info: dict[str, TopicPublishInfo] = {}
        self._absent_versions: dict[str, int] = {}
        """Route version last seen for topics that have no route, so the long-poll holds it and waits."""
        self._topics: set[str] = set()
        self.route_updates: collections.deque[tuple[str, int, str]] = collections.deque(maxlen=ROUTE_LOG_KEPT)
        """(topic, monotonic ns, source) per applied route change: for measuring propagation."""
        self.route_log: collections.deque[tuple[str, int, str, tuple[str, ...]]] = collections.deque(
            maxlen=ROUTE_LOG_KEPT)
        """(topic, epoch ms, source, brokers the new publish info writes to) per applied change: says
        when a dead broker left this client's cache and when a revived one came back (chaos runs)."""
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.producer_groups: set[str] = set()

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        if self._threads:
            return
        loops: list[tuple[Callable[[], None], str]] = [(self._poll_loop, "route-poll")]
        if self.route_push and self.views is not None:
            loops += [(functools.partial(self._union_push_loop, self.views, n), f"route-push-{n}")
                      for n in self.views.names]
        elif self.route_push:
            loops.append((self._push_loop, "route-push"))
        for target, name in loops:
            t = threading.Thread(target=target, name=f"{self.client_id}-{name}", daemon=True)
            t.start()
            self._threads.append(t)

    def shutdown(self) -> None:
        """Stop the route threads and wait for them: a push thread cancels its long-poll within
        STOP_CHECK_S, so none is left inside a Ray call when the process ends."""
        self._stop.set()
        for t in self._threads:
            t.join(timeout=SHUTDOWN_JOIN_S)
            if t.is_alive():
                log.warning("%s did not stop within %.1f s", t.name, SHUTDOWN_JOIN_S)
        self._threads.clear()

    # ------------------------------------------------------------------ routes
    def get_topic_route(self, topic: str) -> tuple[TopicRouteData | None, int]:
        try:
            return self.route_source.get_topic_route(topic)
        except TopicNotFound:
            return None, -1

    def _apply(self, topic: str, route: TopicRouteData | None, version: int, source: str) -> None:
        with self._lock:
            if route is None:
                self._publish_info.pop(topic, None)
                self._absent_versions[topic] = version
            else:
                self._publish_info[topic] = topic_route_data_to_publish_info(topic, route, version)
                self._absent_versions.pop(topic, None)
            self.route_updates.append((topic, time.monotonic_ns(), source))
            info = self._publish_info.get(topic)
            self.route_log.append((topic, time.time_ns() // 1_000_000, source,
                                   tuple(info.broker_names()) if info is not None else ()))

    def find_broker_address_in_publish(self, broker_name: str) -> str | None:
        """The master address (brokerId 0) of `broker_name` in any cached route (RocketMQ's
        findBrokerAddressInPublish); None when no cached route names it."""
        with self._lock:
            for info in self._publish_info.values():
                for bd in info.route.broker_datas if info.route is not None else []:
                    if bd.broker_name == broker_name and MASTER_ID in bd.broker_addrs:
                        return bd.broker_addrs[MASTER_ID]
        return None

    def update_topic_route_info_from_name_server(self, topic: str) -> bool:
        route, version = self.get_topic_route(topic)
        self._apply_if_changed(topic, route, version, "poll")
        return route is not None

    def _apply_if_changed(self, topic: str, route: TopicRouteData | None, version: int, source: str) -> None:
        with self._lock:
            old = self._publish_info.get(topic)
            changed = (old.route if old is not None else None) != route
        if changed:
            self._apply(topic, route, version, source)

    def find_publish_info(
        self, topic: str, auto_create: bool = True, default_topic_queue_nums: int = DEFAULT_TOPIC_QUEUE_NUMS
    ) -> tuple[TopicPublishInfo, str | None]:
        """The topic's publish info and the default topic to name when sending (TBW102 fallback)."""
        with self._lock:
            self._topics.add(topic)
            info = self._publish_info.get(topic)
        if info is not None and info.ok:
            return info, None
        if self.update_topic_route_info_from_name_server(topic):
            with self._lock:
                info = self._publish_info.get(topic)
            if info is not None and info.ok:
                return info, None
        if auto_create:
            route, version = self.get_topic_route(AUTO_CREATE_TOPIC_KEY_TOPIC)
            if route is not None:
                info = topic_route_data_to_publish_info(topic, route, version, queue_limit=default_topic_queue_nums)
                if info.ok:
                    return info, AUTO_CREATE_TOPIC_KEY_TOPIC
        raise TopicNotFound(topic)

    def publish_info(self, topic: str) -> TopicPublishInfo | None:
        with self._lock:
            return self._publish_info.get(topic)

    def _held_version(self, topic: str) -> int:
        """The route version we hold for `topic` (call with the lock held); -1 when unknown."""
        info = self._publish_info.get(topic)
        return info.route_version if info is not None else self._absent_versions.get(topic, -1)

    def _poll_loop(self) -> None:
        while not self._stop.wait(self.poll_interval_s):
            with self._lock:
                topics = list(self._topics)
            for topic in topics:
                try:
                    self.update_topic_route_info_from_name_server(topic)
                except Exception as e:
                    log.warning("route poll for %s failed: %s", topic, e)

    def _long_poll_wait_s(self) -> float:
        """How long a push thread waits for its long-poll's answer. Bounded: a hung (not dead)
        NameServer must not hold the thread forever; it answers within its long-poll timeout (at
        most 60 s by default) when healthy."""
        timeout = self.long_poll_timeout_s
        return (timeout if timeout is not None else 60.0) + self.namesrv.call_timeout_s

    def _push_loop(self) -> None:
        """Hold a long-poll on the current NameServer with the route versions we have."""
        held_on: str | None = None
        while not self._stop.is_set():
            name = self.namesrv.current
            with self._lock:
                versions = {t: (self._held_version(t) if name == held_on else -1) for t in self._topics}
            if not versions:
                self._stop.wait(0.05)
                continue
            try:
                changes = self.namesrv.listen_for_change(name, versions, self.long_poll_timeout_s,
                                                         self._long_poll_wait_s(), self._stop)
            except Exception as e:
                log.info("route long-poll on %s failed (%s): next name server", name, type(e).__name__)
                self.namesrv.move_off(name)
                held_on = None
                self._stop.wait(0.05)
                continue
            held_on = name
            for topic, change in changes.items():
                self._apply(topic, change.route, change.version, "push")

    def _union_push_loop(self, views: RouteViews, name: str) -> None:
        """Hold a long-poll on NameServer `name` with the versions it last told; each change it pushes
        updates its view and the union is applied. A NameServer that fails loses its views (the
        union is applied without them) and is asked again after a pause."""
        while not self._stop.is_set():
            with self._lock:
                topics = set(self._topics)
            if not topics:
                self._stop.wait(0.05)
                continue
            try:
                changes = self.namesrv.listen_for_change(name, views.held_versions(name, topics),
                                                         self.long_poll_timeout_s, self._long_poll_wait_s(), self._stop)
            except Exception as e:
                log.info("route long-poll on %s failed (%s): its views are dropped", name, type(e).__name__)
                for topic in views.lost(name):
                    self._apply_if_changed(topic, views.union(topic), UNION_VERSION, "push")
                self._stop.wait(UNION_RETRY_S)
                continue
            for topic, change in changes.items():
                self._apply_if_changed(topic, views.changed(name, topic, change.route, change.version),
                                       UNION_VERSION, "push")


_INSTANCES: dict[str, MQClientInstance] = {}
_INSTANCES_LOCK = threading.Lock()


def build_client_id(instance_name: str | None = None) -> str:
    """ip@instance, instance = pid unless set (RocketMQ's buildMQClientId)."""
    try:
        ip = socket.gethostbyname(socket.gethostname())
    except OSError:
        ip = "127.0.0.1"
    return f"{ip}@{instance_name or os.getpid()}"


def get_or_create_instance(client_id: str, namesrv: NameServerClient, **kwargs: Any) -> MQClientInstance:
    """One MQClientInstance per client id in this process (RocketMQ's MQClientManager)."""
    with _INSTANCES_LOCK:
        inst = _INSTANCES.get(client_id)
        if inst is None or inst._stop.is_set():
            inst = MQClientInstance(client_id, namesrv, **kwargs)
            _INSTANCES[client_id] = inst
        return inst


def release_instance(inst: MQClientInstance) -> None:
    with _INSTANCES_LOCK:
        if not inst.producer_groups:
            inst.shutdown()
            if _INSTANCES.get(inst.client_id) is inst:
                del _INSTANCES[inst.client_id]
