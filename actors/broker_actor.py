"""A broker as an async Ray actor: topic config, message store, and registration with every NameServer.

Registration (RocketMQ's registerBrokerAll) goes to every NameServer in parallel, each call with
its own timeout, so one dead or hung NameServer never delays the others. Beyond RocketMQ: once a
NameServer has acknowledged the current DataVersion, the broker sends it a lite heartbeat without
the topic table; a NameServer that answers "unknown broker" (it restarted) gets the full body.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
import uuid
import zlib
from pathlib import Path
from typing import Any

import ray
from ray.exceptions import RayActorError

from actors.namesrv_actor import BrokerChannel
from namesrv.broker_config import BrokerConfig
from namesrv.clock import system_clock
from namesrv.codec import RemotingResponse, encode_body
from namesrv.constants import (
    AUTO_CREATE_TOPIC_KEY_TOPIC,
    DEFAULT_TOPIC_QUEUE_NUMS,
    MASTER_ID,
    Perm,
    ResponseCode,
    is_writeable,
)
from namesrv.models import DataVersion, TopicConfig
from namesrv.store import CommitLog
from namesrv.topic_config_manager import TopicConfigManager
from namesrv.validation import InvalidInput, check_name, check_topic

log = logging.getLogger(__name__)


def _error(code: int, remark: str) -> RemotingResponse:
    return RemotingResponse(code=code, remark=remark)


class BrokerActor:
    def __init__(
        self,
        cluster_name: str,
        broker_name: str,
        broker_id: int,
        store_root: str,
        namesrv_names: list[str],
        namespace: str,
        config: dict[str, Any] | None = None,
        broker_addr: str | None = None,
    ) -> None:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        self.cluster_name = check_name(cluster_name, "clusterName")
        self.broker_name = check_name(broker_name, "brokerName")
        self.broker_id = broker_id
        self.broker_addr = check_name(broker_addr or ray.get_runtime_context().get_actor_name(), "brokerAddr")
        self.ha_server_addr = f"{self.broker_addr}:ha"
        self.config = BrokerConfig(**(config or {}))
        self.namespace = namespace
        self.namesrv_names = list(namesrv_names)
        self.incarnation = uuid.uuid4().hex[:12]
        self.token = f"{self.broker_addr}#{self.incarnation}"
        self.store_dir = Path(store_root).expanduser() / self.broker_addr
        started = time.perf_counter()
        self.topic_config_manager = TopicConfigManager(
            self.store_dir / "config" / "topics.json",
            system_clock,
            self.config.auto_create_topic_enable,
            self.config.default_topic_queue_nums,
        )
        self.commit_log = CommitLog(self.store_dir / "store", broker_name, self.config.flush_disk_type)
        self.recovery_ms = (time.perf_counter() - started) * 1000
        self._closed = asyncio.Event()
        self._closing = False
        """Set when shutdown starts: no full registration may follow the unregister."""
        self._channel = BrokerChannel(ray.get_runtime_context().current_actor, self.token)
        self._handles: dict[str, Any] = {}
        self._acked_version: dict[str, DataVersion] = {}
        self.master_addr: str | None = None
        self.stats = {"full_registrations": 0, "lite_heartbeats": 0, "register_failures": 0, "last_body_bytes": 0}
        loop = asyncio.get_event_loop()
        self._tasks = [loop.create_task(self._register_loop())]
        if self.config.flush_disk_type.value == "ASYNC_FLUSH":
            self._tasks.append(loop.create_task(self._flush_loop()))
        log.info(
            "broker %s[%d] %s up (incarnation %s), recovered %d messages in %.1f ms%s",
            broker_name, broker_id, self.broker_addr, self.incarnation, self.commit_log.recovery.records,
            self.recovery_ms,
            f", truncated {self.commit_log.recovery.truncated_bytes} torn bytes"
            if self.commit_log.recovery.truncated_bytes else "",
        )

    # ------------------------------------------------------------------ registration
    async def _register_loop(self) -> None:
        await asyncio.sleep(self.config.register_initial_delay_ms / 1000)
        period = self.config.effective_register_period_ms() / 1000
        while not self._closed.is_set():
            try:
                await self.register_broker_all()
            except Exception:
                log.exception("registerBrokerAll failed")
            await asyncio.sleep(period)

    async def _flush_loop(self) -> None:
        while not self._closed.is_set():
            await asyncio.sleep(self.config.flush_interval_ms / 1000)
            await asyncio.to_thread(self.commit_log.flush)

    def _identity(self) -> dict[str, Any]:
        return {
            "clusterName": self.cluster_name,
            "brokerAddr": self.broker_addr,
            "brokerName": self.broker_name,
            "brokerId": self.broker_id,
        }

    async def _handle(self, name: str) -> Any:
        handle = self._handles.get(name)
        if handle is None:
            handle = await asyncio.to_thread(ray.get_actor, name, namespace=self.namespace)
            self._handles[name] = handle
        return handle

    async def register_broker_all(self, force_full: bool = False) -> dict[str, str]:
        """Register with every NameServer at once; returns {namesrv: outcome} for each."""
        wrapper = self.topic_config_manager.build_serialize_wrapper(self.config.broker_permission)
        body = encode_body(
            {
                "topicConfigSerializeWrapper": {
                    "topicConfigTable": {n: tc.to_wire() for n, tc in wrapper.topic_config_table.items()},
                    "dataVersion": wrapper.data_version.to_wire(),
                },
                "filterServerList": [],
            }
        )
        timeout = self.config.register_broker_timeout_ms / 1000
        names = list(self.namesrv_names)
        outcomes = await asyncio.gather(
            *(
                asyncio.wait_for(self._register_one(n, wrapper.data_version, body, force_full), timeout)
                for n in names
            ),
            return_exceptions=True,
        )
        result: dict[str, str] = {}
        for name, outcome in zip(names, outcomes, strict=True):
            if isinstance(outcome, BaseException):
                self.stats["register_failures"] += 1
                if isinstance(outcome, RayActorError):
                    self._handles.pop(name, None)  # a re-created NameServer needs a fresh handle
                kind = "timeout" if isinstance(outcome, TimeoutError) else type(outcome).__name__
                log.warning("register to %s failed: %s %s", name, kind, outcome)
                result[name] = f"failed: {kind}"
            else:
                result[name] = outcome
        return result

    async def _register_one(self, name: str, version: DataVersion, body: bytes, force_full: bool) -> str:
        handle = await self._handle(name)
        ident = self._identity()
        # A slave that has not learnt its master yet (it registered first) keeps registering in full:
        # only a full registration's answer carries masterAddr.
        knows_master = self.broker_id == MASTER_ID or self.master_addr is not None
        if not force_full and self.config.lite_heartbeat and knows_master and self._acked_version.get(name) == version:
            resp = await handle.broker_heartbeat.remote(**ident)
            if resp.ok and resp.ext_fields.get("known"):
                self.stats["lite_heartbeats"] += 1
                if self.broker_id != MASTER_ID and resp.ext_fields.get("masterAddr"):
                    self.master_addr = resp.ext_fields["masterAddr"]
                return "heartbeat"
        elif not force_full and not self.config.force_register:
            resp = await handle.query_data_version.remote(body=encode_body(version.to_wire()), **ident)
            if resp.ok and not resp.ext_fields.get("changed"):
                return "unchanged"
        extra: dict[str, Any] = {"haServerAddr": self.ha_server_addr, "bodyCrc32": zlib.crc32(body)}
        if self.config.heartbeat_timeout_ms is not None:
            extra["heartbeatTimeoutMillis"] = self.config.heartbeat_timeout_ms
        if self._closing:  # checked right before submitting, so no registration trails the unregister
            return "closing"
        resp = await handle.register_broker.remote(body, channel=self._channel, **ident, **extra)
        if not resp.ok:
            raise RuntimeError(f"register refused: {resp.code} {resp.remark}")
        self._acked_version[name] = version
        self.stats["full_registrations"] += 1
        self.stats["last_body_bytes"] = len(body)
        if self.broker_id != MASTER_ID and resp.ext_fields.get("masterAddr"):
            self.master_addr = resp.ext_fields["masterAddr"]
        return "registered"

    # ------------------------------------------------------------------ topics
    async def create_topic(
        self,
        topic: str,
        read_queue_nums: int = 8,
        write_queue_nums: int = 8,
        perm: int = int(Perm.READ | Perm.WRITE),
        order: bool = False,
    ) -> RemotingResponse:
        """Create or update a topic, persist it, then register with every NameServer before answering."""
        try:
            tc = TopicConfig(
                topic_name=topic, read_queue_nums=read_queue_nums, write_queue_nums=write_queue_nums,
                perm=perm, order=order,
            )
        except Exception as e:
            return _error(ResponseCode.SYSTEM_ERROR, f"invalid topic config: {e}")
        changed = self.topic_config_manager.update_topic_config(tc)
        outcomes = await self.register_broker_all() if changed else {}
        return RemotingResponse(ext_fields={"changed": changed, "registered": outcomes})

    async def delete_topic(self, topic: str) -> RemotingResponse:
        try:
            check_topic(topic)
        except InvalidInput as e:
            return _error(ResponseCode.SYSTEM_ERROR, str(e))
        deleted = self.topic_config_manager.delete_topic_config(topic)
        outcomes = await self.register_broker_all() if deleted else {}
        return RemotingResponse(ext_fields={"deleted": deleted, "registered": outcomes})

    async def update_broker_permission(self, perm: int) -> RemotingResponse:
        if not isinstance(perm, int) or isinstance(perm, bool) or perm & ~7:
            return _error(ResponseCode.SYSTEM_ERROR, f"invalid broker permission {perm!r}")
        self.config.broker_permission = perm
        self.topic_config_manager.next_version()
        outcomes = await self.register_broker_all()
        return RemotingResponse(ext_fields={"registered": outcomes})

    async def get_topic_config_table(self) -> dict[str, dict[str, Any]]:
        return {n: tc.to_wire() for n, tc in self.topic_config_manager.topic_config_table.items()}

    # ------------------------------------------------------------------ messages
    async def send_message(
        self,
        topic: str,
        queue_id: int,
        body: bytes,
        properties: dict[str, str] | None = None,
        msg_id: str | None = None,
        default_topic: str = AUTO_CREATE_TOPIC_KEY_TOPIC,
        default_topic_queue_nums: int = DEFAULT_TOPIC_QUEUE_NUMS,
    ) -> RemotingResponse:
        """Store one message; SUCCESS only once it is written (and fsynced with SYNC_FLUSH)."""
        if self._closed.is_set():
            return _error(ResponseCode.SERVICE_NOT_AVAILABLE, f"broker {self.broker_addr} is shutting down")
        if not is_writeable(self.config.broker_permission):
            return _error(ResponseCode.NO_PERMISSION, f"the broker[{self.broker_addr}] sending message is forbidden")
        try:
            check_topic(topic)
        except InvalidInput as e:
            return _error(ResponseCode.MESSAGE_ILLEGAL, str(e))
        if not isinstance(body, bytes) or not body:
            return _error(ResponseCode.MESSAGE_ILLEGAL, "message body must be non-empty bytes")
        if len(body) > self.config.max_message_size:
            return _error(
                ResponseCode.MESSAGE_ILLEGAL,
                f"message body of {len(body)} bytes exceeds {self.config.max_message_size}",
            )
        if properties is not None and not (
            isinstance(properties, dict)
            and all(isinstance(k, str) and isinstance(v, str) for k, v in properties.items())
        ):
            return _error(ResponseCode.MESSAGE_ILLEGAL, "properties must map strings to strings")
        tc = self.topic_config_manager.topic_config_table.get(topic)
        if tc is None:
            # Refuse a request that would fail anyway before auto-creating (and registering) a topic.
            if not isinstance(default_topic_queue_nums, int) or isinstance(default_topic_queue_nums, bool):
                return _error(ResponseCode.MESSAGE_ILLEGAL, "defaultTopicQueueNums must be an integer")
            default_tc = self.topic_config_manager.topic_config_table.get(default_topic)
            cap = min(default_topic_queue_nums, default_tc.write_queue_nums) if default_tc else default_topic_queue_nums
            if not isinstance(queue_id, int) or isinstance(queue_id, bool) or not 0 <= queue_id < cap:
                return _error(
                    ResponseCode.SYSTEM_ERROR,
                    f"request queueId[{queue_id}] is illegal, topic[{topic}] would get {cap} queues",
                )
            try:
                tc = self.topic_config_manager.create_topic_in_send_message_method(
                    topic, default_topic, default_topic_queue_nums
                )
            except InvalidInput as e:
                return _error(ResponseCode.MESSAGE_ILLEGAL, str(e))
            if tc is None:
                return _error(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist, apply first please!")
            self._tasks = [t for t in self._tasks if not t.done()]
            self._tasks.append(asyncio.get_event_loop().create_task(self.register_broker_all()))
        if not is_writeable(tc.perm):
            return _error(ResponseCode.NO_PERMISSION, f"the topic[{topic}] sending message is forbidden")
        if not isinstance(queue_id, int) or isinstance(queue_id, bool) or not 0 <= queue_id < tc.write_queue_nums:
            return _error(
                ResponseCode.SYSTEM_ERROR,
                f"request queueId[{queue_id}] is illegal, {tc} Producer: {self.broker_addr}",
            )
        result = await asyncio.to_thread(self.commit_log.append, topic, queue_id, body, properties, msg_id)
        return RemotingResponse(
            ext_fields={
                "status": result.status.value,
                "msgId": result.msg_id,
                "offsetMsgId": result.offset_msg_id,
                "topic": topic,
                "brokerName": self.broker_name,
                "queueId": result.queue_id,
                "queueOffset": result.queue_offset,
            }
        )

    async def pull_message(self, topic: str, queue_id: int, offset: int, max_nums: int = 32) -> dict[str, Any]:
        """Messages of one queue from `offset`; `next_begin_offset` is where the next pull starts."""
        if not isinstance(offset, int) or offset < 0 or not isinstance(max_nums, int) or max_nums <= 0:
            raise ValueError("offset must be >= 0 and max_nums > 0")
        msgs = await asyncio.to_thread(self.commit_log.get_message, topic, queue_id, offset, max_nums)
        return {
            "messages": [
                {"queue_offset": m.queue_offset, "msg_id": m.msg_id, "properties": m.properties,
                 "body": m.body, "store_timestamp": m.store_timestamp}
                for m in msgs
            ],
            "next_begin_offset": offset + len(msgs),
            "max_offset": self.commit_log.max_offset(topic, queue_id),
        }

    async def get_max_offset(self, topic: str, queue_id: int) -> int:
        return self.commit_log.max_offset(topic, queue_id)

    # ------------------------------------------------------------------ lifecycle
    async def wait_closed(self) -> str:
        """Pends until graceful shutdown; a NameServer's channel watch. Fails at once if we die."""
        await self._closed.wait()
        return self.token

    async def shutdown(self) -> dict[str, str]:
        """Graceful: unregister from every NameServer (in parallel), close the store."""
        self._closing = True
        timeout = self.config.register_broker_timeout_ms / 1000

        async def unregister(name: str) -> str:
            handle = await self._handle(name)
            resp = await handle.unregister_broker.remote(channel=self._channel, **self._identity())
            return "unregistered" if resp.ok else f"failed: {resp.remark}"

        outcomes = await asyncio.gather(
            *(asyncio.wait_for(unregister(n), timeout) for n in self.namesrv_names), return_exceptions=True
        )
        self._closed.set()
        for task in self._tasks:
            task.cancel()
        await asyncio.to_thread(self.commit_log.close)
        return {n: o if isinstance(o, str) else f"failed: {type(o).__name__}" for n, o in
                zip(self.namesrv_names, outcomes, strict=True)}

    async def get_runtime_info(self) -> dict[str, Any]:
        rec = self.commit_log.recovery
        return {
            "broker_addr": self.broker_addr,
            "broker_name": self.broker_name,
            "broker_id": self.broker_id,
            "cluster": self.cluster_name,
            "incarnation": self.incarnation,
            "token": self.token,
            "pid": os.getpid(),
            "node_id": ray.get_runtime_context().get_node_id(),
            "store_dir": str(self.store_dir),
            "data_version": self.topic_config_manager.data_version.to_wire(),
            "topics": len(self.topic_config_manager.topic_config_table),
            "master_addr": self.master_addr,
            "permission": self.config.broker_permission,
            "recovered_messages": rec.records,
            "truncated_bytes": rec.truncated_bytes,
            "recovery_ms": self.recovery_ms,
            "stats": dict(self.stats),
            "queues": {f"{t}:{q}": n for (t, q), n in self.commit_log.queues().items()},
        }

    async def ping(self) -> str:
        return self.broker_addr
