"""A broker's registration with every NameServer (RocketMQ's BrokerOuterAPI.registerBrokerAll).

Every NameServer in parallel, each call with its own timeout, so one dead or hung NameServer never
delays the others. Beyond RocketMQ: once a NameServer has acknowledged the current DataVersion, the
broker sends it a lite heartbeat without the topic table; a NameServer that answers "unknown broker"
(it restarted) or "topics missing" (it deleted a topic this broker still holds) gets the full body.
A NameServer watches the broker through `channel`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from ray.exceptions import RayActorError

from actors.namesrv.housekeeping import BrokerChannel
from actors.runtime.handles import ActorHandles
from namesrv.acl.plain_acl import signed
from namesrv.broker.config import BrokerConfig
from namesrv.broker.topic_config_manager import registered_config
from namesrv.protocol.bodies import body_crc32
from namesrv.protocol.constants import MASTER_ID
from namesrv.protocol.models import DataVersion, QueueData, TopicConfig, TopicConfigSerializeWrapper
from namesrv.protocol.msgpack_codec import encode_body

log = logging.getLogger(__name__)


class NamesrvRegistrar:
    def __init__(self, identity: dict[str, Any], ha_server_addr: str, namesrv_names: list[str], namespace: str,
                 config: BrokerConfig, channel: BrokerChannel,
                 wrapper: Callable[[], TopicConfigSerializeWrapper],
                 data_version: Callable[[], DataVersion]) -> None:
        self.identity = identity
        """clusterName, brokerAddr, brokerName, brokerId: the header every request carries."""
        self.ha_server_addr = ha_server_addr
        self.namesrv_names = list(namesrv_names)
        self.namespace = namespace
        self.config = config
        self.channel = channel
        self.wrapper = wrapper
        """The topic table to register in full: O(topics), built only when a NameServer needs it."""
        self.data_version = data_version
        self._handles = ActorHandles(namespace)
        self._acked_version: dict[str, DataVersion] = {}
        self.master_addr: str | None = None
        self.closing = False
        """Set when shutdown starts: no full registration may follow the unregister."""
        self.stats = {"full_registrations": 0, "lite_heartbeats": 0, "register_failures": 0, "last_body_bytes": 0,
                      "bodies_encoded": 0, "single_topic_registrations": 0}

    def _signed(self, ext: dict[str, Any], body: bytes | None) -> dict[str, Any]:
        return signed(ext, body, self.config.credentials)

    def set_broker_id(self, broker_id: int) -> None:
        """Controller mode: the id this broker registers under changed (0 as master, its controller
        id as a slave); the next registration is a full one."""
        self.identity["brokerId"] = broker_id
        self._acked_version.clear()
        self.master_addr = None

    @property
    def broker_id(self) -> int:
        return int(self.identity["brokerId"])

    async def _handle(self, name: str) -> Any:
        return await self._handles.aget(name)

    async def register_broker_all(self, force_full: bool = False) -> dict[str, str]:
        """Register with every NameServer at once; returns {namesrv: outcome} for each. The topic
        table is encoded (once) only if some NameServer needs a full registration, so a round of
        lite heartbeats costs the same for 10 topics as for 10,000."""
        version = self.data_version()
        encoded: list[tuple[bytes, DataVersion]] = []

        def full_body() -> tuple[bytes, DataVersion]:
            if not encoded:
                wrapper = self.wrapper()
                encoded.append((encode_body({
                    "topicConfigSerializeWrapper": {
                        "topicConfigTable": {n: tc.to_wire() for n, tc in wrapper.topic_config_table.items()},
                        "dataVersion": wrapper.data_version.to_wire(),
                    },
                    "filterServerList": [],
                }), wrapper.data_version))
                self.stats["bodies_encoded"] += 1
            return encoded[0]

        return await self._each_namesrv(lambda n: self._register_one(n, version, full_body, force_full), "register")

    async def register_single_topic_all(self, tc: TopicConfig) -> dict[str, str]:
        """REGISTER_TOPIC_IN_NAMESRV to every NameServer (RocketMQ 5's registerSingleTopicAll, with
        enableSingleTopicRegister): one topic's queue data instead of the whole table. The DataVersion
        still moved, so the next periodic round registers in full, as RocketMQ's does."""
        tc = registered_config(tc, self.config.broker_permission)
        queue_data = QueueData(self.identity["brokerName"], tc.read_queue_nums, tc.write_queue_nums, tc.perm,
                               tc.topic_sys_flag)
        body = encode_body({"queueDatas": [queue_data.to_wire()]})
        ext = self._signed({"topic": tc.topic_name}, body)

        async def register(name: str) -> str:
            handle = await self._handle(name)
            resp = await handle.register_topic_in_namesrv.remote(body, **ext)
            if not resp.ok:
                raise RuntimeError(f"register topic refused: {resp.code} {resp.remark}")
            self.stats["single_topic_registrations"] += 1
            return "registered" if resp.remark is None else f"ignored: {resp.remark}"

        return await self._each_namesrv(register, "register topic")

    async def _each_namesrv(self, call: Callable[[str], Awaitable[str]], what: str) -> dict[str, str]:
        """`call` on every NameServer in parallel, each with its own timeout: {namesrv: outcome}."""
        timeout = self.config.register_broker_timeout_ms / 1000
        names = list(self.namesrv_names)
        outcomes = await asyncio.gather(*(asyncio.wait_for(call(n), timeout) for n in names), return_exceptions=True)
        result: dict[str, str] = {}
        for name, outcome in zip(names, outcomes, strict=True):
            if isinstance(outcome, BaseException):
                self.stats["register_failures"] += 1
                if isinstance(outcome, RayActorError):
                    self._handles.forget(name)  # a re-created NameServer needs a fresh handle
                kind = "timeout" if isinstance(outcome, TimeoutError) else type(outcome).__name__
                log.warning("%s to %s failed: %s %s", what, name, kind, outcome)
                result[name] = f"failed: {kind}"
            else:
                result[name] = outcome
        return result

    async def _register_one(self, name: str, version: DataVersion,
                            full_body: Callable[[], tuple[bytes, DataVersion]], force_full: bool) -> str:
        handle = await self._handle(name)
        ident = self.identity
        # A slave that has not learnt its master yet (it registered first) keeps registering in full:
        # only a full registration's answer carries masterAddr.
        knows_master = self.broker_id == MASTER_ID or self.master_addr is not None
        if not force_full and self.config.lite_heartbeat and knows_master and self._acked_version.get(name) == version:
            resp = await handle.broker_heartbeat.remote(**self._signed(ident, None))
            # "topicsMissing": the NameServer deleted topics this broker may still hold; only a full
            # registration can bring them back (as RocketMQ's every-30-s full registration does).
            if resp.ok and resp.ext_fields.get("known") and not resp.ext_fields.get("topicsMissing"):
                self.stats["lite_heartbeats"] += 1
                if self.broker_id != MASTER_ID and resp.ext_fields.get("masterAddr"):
                    self.master_addr = resp.ext_fields["masterAddr"]
                return "heartbeat"
        elif not force_full and not self.config.force_register:
            version_body = encode_body(version.to_wire())
            resp = await handle.query_data_version.remote(body=version_body, **self._signed(ident, version_body))
            if resp.ok and not resp.ext_fields.get("changed"):
                return "unchanged"
        body, body_version = full_body()
        extra: dict[str, Any] = {"haServerAddr": self.ha_server_addr, "bodyCrc32": body_crc32(body)}
        if self.config.heartbeat_timeout_ms is not None:
            extra["heartbeatTimeoutMillis"] = self.config.heartbeat_timeout_ms
        if self.closing:  # checked right before submitting, so no registration trails the unregister
            return "closing"
        resp = await handle.register_broker.remote(body, channel=self.channel, **self._signed(ident | extra, body))
        if not resp.ok:
            raise RuntimeError(f"register refused: {resp.code} {resp.remark}")
        self._acked_version[name] = body_version
        self.stats["full_registrations"] += 1
        self.stats["last_body_bytes"] = len(body)
        if self.broker_id != MASTER_ID and resp.ext_fields.get("masterAddr"):
            self.master_addr = resp.ext_fields["masterAddr"]
        return "registered"

    async def unregister_broker_all(self) -> dict[str, str]:
        """Graceful shutdown: UNREGISTER_BROKER to every NameServer in parallel."""
        self.closing = True
        timeout = self.config.register_broker_timeout_ms / 1000

        async def unregister(name: str) -> str:
            handle = await self._handle(name)
            resp = await handle.unregister_broker.remote(channel=self.channel, **self._signed(self.identity, None))
            return "unregistered" if resp.ok else f"failed: {resp.remark}"

        outcomes = await asyncio.gather(*(asyncio.wait_for(unregister(n), timeout) for n in self.namesrv_names),
                                        return_exceptions=True)
        return {n: o if isinstance(o, str) else f"failed: {type(o).__name__}"
                for n, o in zip(self.namesrv_names, outcomes, strict=True)}
