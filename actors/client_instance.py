"""The client side over Ray (RocketMQ's MQClientInstance): NameServer choice, route cache, route
push, and the transport that calls broker actors.

One instance per client id (ip@instance) in a process, shared by every producer and consumer of
that id. Routes are cached per topic, refreshed every `poll_name_server_interval_ms` and, beyond
RocketMQ, replaced the moment a NameServer pushes a change through its long-poll. A route is
swapped in as one new object, so a send never sees half of one.
"""

from __future__ import annotations

import logging
import os
import random
import socket
import threading
import time
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, RayActorError

from namesrv.client.message import Message, MessageQueue, MQClientError
from namesrv.client.publish_info import TopicPublishInfo, topic_route_data_to_publish_info
from namesrv.client.send_engine import MQBrokerError, RemotingError, SendResult
from namesrv.constants import AUTO_CREATE_TOPIC_KEY_TOPIC, DEFAULT_TOPIC_QUEUE_NUMS, ResponseCode
from namesrv.models import TopicRouteData

log = logging.getLogger(__name__)


class NoNameServerAvailable(MQClientError):
    def __init__(self, detail: str) -> None:
        super().__init__(f"no name server available: {detail}")


class RayBrokerTransport:
    """Sends to broker actors found by name (a broker's address is its actor name)."""

    def __init__(self, namespace: str) -> None:
        self.namespace = namespace
        self._handles: dict[str, Any] = {}
        self._lock = threading.Lock()

    def handle(self, addr: str) -> Any:
        with self._lock:
            h = self._handles.get(addr)
        if h is None:
            try:
                h = ray.get_actor(addr, namespace=self.namespace)
            except ValueError as e:
                raise RemotingError(f"broker {addr} not found") from e
            with self._lock:
                self._handles[addr] = h
        return h

    def forget(self, addr: str) -> None:
        with self._lock:
            self._handles.pop(addr, None)

    def send(
        self, broker_addr: str, mq: MessageQueue, msg: Message, msg_id: str, timeout_ms: int,
        default_topic: str | None,
    ) -> SendResult:
        kwargs: dict[str, Any] = {"properties": msg.wire_properties(), "msg_id": msg_id}
        if default_topic is not None:
            kwargs["default_topic"] = default_topic
        ref = self.handle(broker_addr).send_message.remote(mq.topic, mq.queue_id, bytes(msg.body), **kwargs)
        try:
            resp = ray.get(ref, timeout=max(timeout_ms, 1) / 1000)
        except GetTimeoutError as e:
            ray.cancel(ref)
            raise RemotingError(f"send to {broker_addr} timed out after {timeout_ms} ms") from e
        except RayActorError as e:
            self.forget(broker_addr)  # a restarted broker is a new actor: look it up again
            raise RemotingError(f"broker {broker_addr} is unavailable: {type(e).__name__}") from e
        if not resp.ok:
            raise MQBrokerError(resp.code, resp.remark, mq.broker_name)
        f = resp.ext_fields
        return SendResult(f["status"], f["msgId"], f["offsetMsgId"], MessageQueue(mq.topic, mq.broker_name,
                          f["queueId"]), f["queueOffset"])

    def send_oneway(self, broker_addr: str, mq: MessageQueue, msg: Message, msg_id: str) -> None:
        self.handle(broker_addr).send_message.remote(
            mq.topic, mq.queue_id, bytes(msg.body), properties=msg.wire_properties(), msg_id=msg_id
        )


class MQClientInstance:
    def __init__(
        self,
        client_id: str,
        namesrv_names: list[str],
        namespace: str,
        poll_name_server_interval_ms: int = 30_000,
        route_push: bool = True,
        call_timeout_ms: int = 3_000,
        long_poll_timeout_s: float | None = None,
    ) -> None:
        if not namesrv_names:
            raise NoNameServerAvailable("the name server list is empty")
        self.client_id = client_id
        self.namesrv_names = list(namesrv_names)
        self.namespace = namespace
        self.poll_interval_s = poll_name_server_interval_ms / 1000
        self.route_push = route_push
        self.call_timeout_s = call_timeout_ms / 1000
        self.long_poll_timeout_s = long_poll_timeout_s
        self.transport = RayBrokerTransport(namespace)
        self._ns_index = random.randrange(len(self.namesrv_names))
        self._ns_handles: dict[str, Any] = {}
        self._lock = threading.RLock()
        self._publish_info: dict[str, TopicPublishInfo] = {}
        self._absent_versions: dict[str, int] = {}
        """Route version last seen for topics that have no route, so the long-poll holds it and waits."""
        self._topics: set[str] = set()
        self.route_updates: list[tuple[str, int, str]] = []
        """(topic, monotonic ns, source) per applied route change: for measuring propagation."""
        self.route_log: list[tuple[str, int, str, tuple[str, ...]]] = []
        """(topic, epoch ms, source, brokers the new publish info writes to) per applied change: says
        when a dead broker left this client's cache and when a revived one came back (chaos runs)."""
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.producer_groups: set[str] = set()

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        if self._threads:
            return
        for target, name in ((self._poll_loop, "route-poll"), (self._push_loop, "route-push")):
            if target == self._push_loop and not self.route_push:
                continue
            t = threading.Thread(target=target, name=f"{self.client_id}-{name}", daemon=True)
            t.start()
            self._threads.append(t)

    def shutdown(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=0.1)  # push thread may sit in a long-poll; it is a daemon and exits with us
        self._threads.clear()

    # ------------------------------------------------------------------ name servers
    def _namesrv(self, name: str) -> Any:
        h = self._ns_handles.get(name)
        if h is None:
            h = ray.get_actor(name, namespace=self.namespace)
            self._ns_handles[name] = h
        return h

    @property
    def current_namesrv(self) -> str:
        return self.namesrv_names[self._ns_index % len(self.namesrv_names)]

    def _call_namesrv(self, method: str, **kwargs: Any) -> Any:
        """Sticky on one NameServer while it answers; on failure move to the next, once round."""
        errors = []
        count = len(self.namesrv_names)
        start = self._ns_index
        for i in range(count):  # each NameServer once, whatever other threads do to the index
            index = (start + i) % count
            name = self.namesrv_names[index]
            try:
                resp = ray.get(getattr(self._namesrv(name), method).remote(**kwargs), timeout=self.call_timeout_s)
                if resp.code == ResponseCode.SYSTEM_ERROR and resp.remark and "not ready" in resp.remark:
                    raise RemotingError(resp.remark)
            except (RayActorError, GetTimeoutError, RemotingError, ValueError) as e:
                errors.append(f"{name}: {type(e).__name__} {e}")
                self._ns_handles.pop(name, None)
                self._move_off(name)
                continue
            with self._lock:
                self._ns_index = index  # sticky on the one that answered
            return resp
        raise NoNameServerAvailable("; ".join(errors))

    def _move_off(self, name: str) -> None:
        """Next NameServer, unless another thread already moved off `name` (never move back onto it)."""
        with self._lock:
            if self.current_namesrv == name:
                self._ns_index = (self._ns_index + 1) % len(self.namesrv_names)

    # ------------------------------------------------------------------ routes
    def get_topic_route(self, topic: str) -> tuple[TopicRouteData | None, int]:
        resp = self._call_namesrv("get_routeinfo_by_topic", topic=topic)
        if resp.code == ResponseCode.TOPIC_NOT_EXIST:
            return None, -1
        if not resp.ok:
            raise MQClientError(f"route query for {topic} failed: {resp.code} {resp.remark}")
        return TopicRouteData.from_wire(resp.decode_body()), resp.ext_fields.get("routeVersion", -1)

    def _apply(self, topic: str, route: TopicRouteData | None, version: int, source: str) -> None:
        with self._lock:
            if route is None:
                self._publish_info.pop(topic, None)
                self._absent_versions[topic] = version
            else:
                self._publish_info[topic] = topic_route_data_to_publish_info(topic, route, version)
                self._absent_versions.pop(topic, None)
            self.route_updates.append((topic, _now_ns(), source))
            info = self._publish_info.get(topic)
            self.route_log.append((topic, time.time_ns() // 1_000_000, source,
                                   tuple(info.broker_names()) if info is not None else ()))

    def update_topic_route_info_from_name_server(self, topic: str) -> bool:
        route, version = self.get_topic_route(topic)
        with self._lock:
            old = self._publish_info.get(topic)
            changed = (old.route if old is not None else None) != route
        if changed:
            self._apply(topic, route, version, "poll")
        return route is not None

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
        raise MQClientError(f"No route info of this topic: {topic}")

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

    def _push_loop(self) -> None:
        """Hold a long-poll on the current NameServer with the route versions we have."""
        held_on: str | None = None
        while not self._stop.is_set():
            name = self.current_namesrv
            with self._lock:
                versions = {t: (self._held_version(t) if name == held_on else -1) for t in self._topics}
            if not versions:
                self._stop.wait(0.05)
                continue
            try:
                timeout = self.long_poll_timeout_s
                # Bounded: a hung (not dead) NameServer must not hold the push thread forever; it
                # answers within its long-poll timeout (at most 60 s by default) when healthy.
                wait_s = (timeout if timeout is not None else 60.0) + self.call_timeout_s
                changes = ray.get(self._namesrv(name).listen_for_change.remote(versions, timeout), timeout=wait_s)
            except Exception as e:
                log.info("route long-poll on %s failed (%s): next name server", name, type(e).__name__)
                self._ns_handles.pop(name, None)
                self._move_off(name)
                held_on = None
                self._stop.wait(0.05)
                continue
            held_on = name
            for topic, change in changes.items():
                route = TopicRouteData.from_wire(change["route"]) if change["route"] else None
                self._apply(topic, route, change["version"], "push")


def _now_ns() -> int:
    import time

    return time.monotonic_ns()


_INSTANCES: dict[str, MQClientInstance] = {}
_INSTANCES_LOCK = threading.Lock()


def build_client_id(instance_name: str | None = None) -> str:
    """ip@instance, instance = pid unless set (RocketMQ's buildMQClientId)."""
    try:
        ip = socket.gethostbyname(socket.gethostname())
    except OSError:
        ip = "127.0.0.1"
    return f"{ip}@{instance_name or os.getpid()}"


def get_or_create_instance(client_id: str, **kwargs: Any) -> MQClientInstance:
    """One MQClientInstance per client id in this process (RocketMQ's MQClientManager)."""
    with _INSTANCES_LOCK:
        inst = _INSTANCES.get(client_id)
        if inst is None or inst._stop.is_set():
            inst = MQClientInstance(client_id, **kwargs)
            _INSTANCES[client_id] = inst
        return inst


def release_instance(inst: MQClientInstance) -> None:
    with _INSTANCES_LOCK:
        if not inst.producer_groups:
            inst.shutdown()
            if _INSTANCES.get(inst.client_id) is inst:
                del _INSTANCES[inst.client_id]
