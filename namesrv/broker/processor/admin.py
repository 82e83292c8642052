"""Broker administration (RocketMQ's AdminBrokerProcessor), in two processors.

`AdminBrokerProcessor`: the topic codes and the broker's config (its permission, its retention
settings: UPDATE_BROKER_CONFIG, see namesrv.broker.config_update), wired by the broker controller
(they persist and re-register). UPDATE_AND_CREATE_TOPIC and DELETE_TOPIC_IN_BROKER, from mqadmin
over TCP or a Ray caller alike: the change is persisted first (a failed write is rolled back and
answered SYSTEM_ERROR), held by the replicas (a SYNC_MASTER waits for its slaves to hold the
change's record in the log, namesrv.broker.metadata_log), then registered with every NameServer,
and only then answered, so a route query right after the answer already sees it. An invalid or
system topic is INVALID_PARAMETER and changes nothing. What the registration did travels as the
answer's payload (for Ray callers); the wire answer is the code and remark, as RocketMQ's.

`AdminRuntimeProcessor`: the codes on the broker's runtime state only (the orderly consumers'
queue locks, LOCK_BATCH_MQ/UNLOCK_BATCH_MQ, GET_BROKER_RUNTIME_INFO, VIEW_BROKER_STATS_DATA, and
GET_BROKER_EPOCH_CACHE for mqadmin getBrokerEpoch), served through
`namesrv.broker.processor.dispatcher.BrokerProcessor` with the other broker processors.

Adding an admin request code means writing its handler in one of the two and adding one line to
its `handlers`.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from pydantic import ValidationError

from namesrv.broker.config import BrokerConfig
from namesrv.broker.config_update import BrokerConfigFile, ConfigUpdateError, as_properties, validate_update
from namesrv.broker.context import BrokerContext, json_body
from namesrv.broker.topic_config_manager import TopicConfigManager
from namesrv.common.persist import BackgroundWriter
from namesrv.controller.codes import ControllerRequestCode
from namesrv.protocol import fastjson
from namesrv.protocol.bodies import parse_properties
from namesrv.protocol.broker_headers import (
    CreateTopicRequestHeader,
    DeleteTopicRequestHeader,
    ViewBrokerStatsDataRequestHeader,
)
from namesrv.protocol.codes import BrokerRequestCode, ResponseCode
from namesrv.protocol.constants import MASTER_ID, SYSTEM_TOPICS
from namesrv.protocol.models import TopicConfig
from namesrv.protocol.types import InvalidInput, describe_errors
from namesrv.remoting.command import RemotingRequest, RemotingResponse, error
from namesrv.remoting.pipeline import Answer, Handler, RequestContext

log = logging.getLogger(__name__)

Registered = dict[str, str]
"""{NameServer: outcome} of a registration round."""


class AdminBrokerProcessor:
    def __init__(self, topics: TopicConfigManager, writer: BackgroundWriter,
                 register_topic: Callable[[TopicConfig], Awaitable[Registered]],
                 register_all: Callable[[], Awaitable[Registered]], config: BrokerConfig,
                 config_file: BrokerConfigFile, replicated: Callable[[], Awaitable[object]]) -> None:
        """`writer` persists the topic table and the config file; `register_topic(tc)` tells every
        NameServer of one topic, `register_all()` of the whole table; `config` is the broker's own,
        `config_file` where its runtime changes are kept."""
        self.topics = topics
        self.writer = writer
        self.config = config
        self.config_file = config_file
        self.register_topic = register_topic
        self.register_all = register_all
        self.replicated = replicated
        """Waits until the topic changes made so far are held by the replicas (their records in the
        log: namesrv.broker.metadata_log), before they are registered and answered."""
        self.handlers: dict[int, Handler] = {
            BrokerRequestCode.UPDATE_AND_CREATE_TOPIC: self.update_and_create_topic,
            BrokerRequestCode.DELETE_TOPIC_IN_BROKER: self.delete_topic,
            BrokerRequestCode.UPDATE_BROKER_CONFIG: self.update_broker_config,
        }

    def update_and_create_topic(self, request: RemotingRequest, ctx: RequestContext) -> Answer:
        try:
            h = CreateTopicRequestHeader.model_validate(request.ext_fields, strict=False)
            tc = TopicConfig(topic_name=h.topic, read_queue_nums=h.read_queue_nums, write_queue_nums=h.write_queue_nums,
                             perm=h.perm, topic_filter_type=h.topic_filter_type, topic_sys_flag=h.topic_sys_flag,
                             order=h.order)
        except ValidationError as e:
            return error(ResponseCode.INVALID_PARAMETER, f"invalid request: {describe_errors(e)}")
        if tc.topic_name in SYSTEM_TOPICS:
            return error(ResponseCode.INVALID_PARAMETER, f"The topic[{tc.topic_name}] is conflict with system topic.")
        log.info("topic %s updated by %s: %s", tc.topic_name, ctx.remote, tc)
        return self._update(tc)

    async def _update(self, tc: TopicConfig) -> RemotingResponse:
        before = self.writer.submitted
        changed = self.topics.update_topic_config(tc)
        failed = await self.writer.written(before)
        if failed is not None:  # not on disk: rolled back, nothing registered
            return error(ResponseCode.SYSTEM_ERROR, failed)
        if changed:
            await self.replicated()
        registered = await self.register_topic(tc) if changed else {}
        return RemotingResponse(payload={"changed": changed, "registered": registered})

    def delete_topic(self, request: RemotingRequest, ctx: RequestContext) -> Answer:
        """DELETE_TOPIC_IN_BROKER, deleteTopic's first step (the NameServers are told next)."""
        try:
            topic = DeleteTopicRequestHeader.model_validate(request.ext_fields, strict=False).topic
        except ValidationError as e:
            return error(ResponseCode.INVALID_PARAMETER, f"invalid request: {describe_errors(e)}")
        if topic in SYSTEM_TOPICS:
            return error(ResponseCode.INVALID_PARAMETER, f"The topic[{topic}] is conflict with system topic.")
        return self._delete(topic)

    async def _delete(self, topic: str) -> RemotingResponse:
        before = self.writer.submitted
        deleted = self.topics.delete_topic_config(topic)
        failed = await self.writer.written(before)
        if failed is not None:  # not on disk: the topic is back, nothing registered
            return error(ResponseCode.SYSTEM_ERROR, failed)
        if deleted:
            await self.replicated()
        registered = await self.register_all() if deleted else {}
        return RemotingResponse(payload={"deleted": deleted, "registered": registered})

    def update_broker_config(self, request: RemotingRequest, ctx: RequestContext) -> Answer:
        """UPDATE_BROKER_CONFIG with a properties body (mqadmin updateBrokerConfig -k KEY -v VALUE):
        the keys of `namesrv.broker.config_update.LIVE_KEYS`, every one checked before any is
        set. Refused (nothing changed): any other key (INVALID_PARAMETER), a bad value
        (SYSTEM_ERROR), RocketMQ's black-listed keys (NO_PERMISSION)."""
        try:
            props = parse_properties(request.body or b"")
        except InvalidInput as e:
            return error(ResponseCode.SYSTEM_ERROR, f"string2Properties error: {e}")
        try:
            changes = validate_update(self.config, props)
        except ConfigUpdateError as e:
            return error(e.code, str(e))
        log.info("broker config %s set by %s", as_properties(changes), ctx.remote)
        return self._update_config(changes)

    async def _update_config(self, changes: dict[str, Any]) -> RemotingResponse:
        """Set `changes`, write the config file, and answer once it is on disk; a new permission
        also takes a new DataVersion and is registered with every NameServer (topic perms are masked
        by it). A failed write puts everything back and is answered SYSTEM_ERROR."""
        config, file = self.config, self.config_file
        previous = {f: getattr(config, f) for f in changes}
        previous_values = dict(file.values)
        perm_changed = "broker_permission" in changes and changes["broker_permission"] != config.broker_permission

        def undo() -> None:
            for f, v in previous.items():
                setattr(config, f, v)
            file.values = previous_values

        for f, v in changes.items():
            setattr(config, f, v)
        file.values = previous_values | as_properties(changes)
        before = self.writer.submitted
        self.writer.write(file.path, file.image(), undo)
        failed = await self.writer.written(before)
        if failed is not None:  # not on disk: the writer ran `undo`
            return error(ResponseCode.SYSTEM_ERROR, failed)
        if not perm_changed:
            return RemotingResponse(payload={"registered": {}})
        before = self.writer.submitted
        self.topics.next_version()
        failed = await self.writer.written(before)
        if failed is not None:  # the new version is not on disk: the old permission back, on disk too
            undo()
            self.writer.write(file.path, file.image())
            await self.writer.written(self.writer.submitted - 1)
            return error(ResponseCode.SYSTEM_ERROR, failed)
        return RemotingResponse(payload={"registered": await self.register_all()})


class AdminRuntimeProcessor:
    def __init__(self, ctx: BrokerContext) -> None:
        self.ctx = ctx
        self.locks: dict[tuple[str, str, int], tuple[str, int]] = {}
        """(group, topic, queue) -> (client id, locked at) for orderly consumers (LOCK_BATCH_MQ)."""
        self.handlers: dict[int, Handler] = {
            BrokerRequestCode.LOCK_BATCH_MQ: self._lock_batch_mq,
            BrokerRequestCode.UNLOCK_BATCH_MQ: self._unlock_batch_mq,
            BrokerRequestCode.GET_BROKER_RUNTIME_INFO: self._get_broker_runtime_info,
            BrokerRequestCode.VIEW_BROKER_STATS_DATA: self._view_broker_stats_data,
            ControllerRequestCode.GET_BROKER_EPOCH_CACHE: self._get_broker_epoch_cache,
        }

    def runtime_info(self) -> dict[str, str]:
        """GET_BROKER_RUNTIME_INFO's table (see namesrv.broker.stats)."""
        ctx = self.ctx
        return ctx.broker_stats.runtime_info(
            broker_active=ctx.identity.broker_id == MASTER_ID, store_dir=ctx.store.dir,
            commit_log_max_offset=ctx.store.size_bytes(), earliest_message_ms=ctx.store.earliest_store_time(),
            sends_waiting=ctx.sends_waiting, pulls_held=ctx.hold.held,
            commit_log_min_offset=ctx.store.min_physical_offset())

    def _get_broker_runtime_info(self, cmd: RemotingRequest, client: RequestContext) -> RemotingResponse:
        return cmd.response(ResponseCode.SUCCESS, None, None, fastjson.dumps({"table": self.runtime_info()}))

    def _view_broker_stats_data(self, cmd: RemotingRequest, client: RequestContext) -> RemotingResponse:
        """VIEW_BROKER_STATS_DATA: one stats item's minute, hour and day figures (BrokerStatsData),
        or SYSTEM_ERROR when the broker never counted that key (as RocketMQ answers)."""
        h = ViewBrokerStatsDataRequestHeader.from_ext(cmd.ext_fields or {}, wire=True)
        data = self.ctx.stats_items.data(h.stats_name, h.stats_key)
        if data is None:
            return error(ResponseCode.SYSTEM_ERROR, f"The stats <{h.stats_name}> <{h.stats_key}> not exist")
        return cmd.response(ResponseCode.SUCCESS, None, None, fastjson.dumps(data))
    def _get_broker_epoch_cache(self, cmd: RemotingRequest, client: RequestContext) -> RemotingResponse:
        """GET_BROKER_EPOCH_CACHE (1007): the epoch entries (the last one ending at the commit log's
        max offset) as RocketMQ's EpochEntryCache; outside controller mode (no epoch file) RocketMQ's
        SYSTEM_ERROR."""
        ctx = self.ctx
        if ctx.epochs is None:
            return cmd.response(ResponseCode.SYSTEM_ERROR, "this request only for controllerMode ")
        ident = ctx.identity
        body = ctx.epochs.to_wire(ident.cluster_name, ident.broker_name, ident.broker_id, ctx.store.size_bytes())
        return cmd.response(ResponseCode.SUCCESS, None, None, fastjson.dumps(body))

    def _lock_batch_mq(self, cmd: RemotingRequest, client: RequestContext) -> RemotingResponse:
        data = json_body(cmd.body, "lock request")
        group, client_id = str(data.get("consumerGroup") or ""), str(data.get("clientId") or "")
        now = self.ctx.clock()
        locked = []
        for mq in data.get("mqSet") or []:
            key = (group, str(mq.get("topic")), int(mq.get("queueId", -1)))
            holder = self.locks.get(key)
            if holder is None or holder[0] == client_id or now - holder[1] > 60_000:
                self.locks[key] = (client_id, now)
                locked.append(mq)
        return cmd.response(ResponseCode.SUCCESS, None, None, fastjson.dumps({"lockOKMQSet": locked}))

    def _unlock_batch_mq(self, cmd: RemotingRequest, client: RequestContext) -> RemotingResponse:
        data = json_body(cmd.body, "unlock request")
        group, client_id = str(data.get("consumerGroup") or ""), str(data.get("clientId") or "")
        for mq in data.get("mqSet") or []:
            key = (group, str(mq.get("topic")), int(mq.get("queueId", -1)))
            if self.locks.get(key, ("",))[0] == client_id:
                del self.locks[key]
        return cmd.response(ResponseCode.SUCCESS)
