"""Topic administration on a broker (RocketMQ's AdminBrokerProcessor, its topic codes).

UPDATE_AND_CREATE_TOPIC and DELETE_TOPIC_IN_BROKER, from mqadmin over TCP or a Ray caller alike:
the change is persisted first (a failed write is rolled back and answered SYSTEM_ERROR), then
registered with every NameServer, and only then answered, so a route query right after the answer
already sees it. An invalid or system topic is INVALID_PARAMETER and changes nothing. What the
registration did travels as the answer's payload (for Ray callers); the wire answer is the code and
remark, as RocketMQ's.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from pydantic import ValidationError

from namesrv.broker.topic_config_manager import TopicConfigManager
from namesrv.persist import BackgroundWriter, DurableWriteError
from namesrv.protocol.broker_headers import CreateTopicRequestHeader, DeleteTopicRequestHeader
from namesrv.protocol.codes import BrokerRequestCode, ResponseCode
from namesrv.protocol.constants import SYSTEM_TOPICS
from namesrv.protocol.models import TopicConfig
from namesrv.protocol.types import describe_errors
from namesrv.remoting.command import RemotingRequest, RemotingResponse, error
from namesrv.remoting.pipeline import Answer, Handler, RequestContext

log = logging.getLogger(__name__)

Registered = dict[str, str]
"""{NameServer: outcome} of a registration round."""


class AdminBrokerProcessor:
    def __init__(self, topics: TopicConfigManager, writer: BackgroundWriter,
                 register_topic: Callable[[TopicConfig], Awaitable[Registered]],
                 register_all: Callable[[], Awaitable[Registered]]) -> None:
        """`writer` persists the topic table; `register_topic(tc)` tells every NameServer of one
        topic, `register_all()` of the whole table."""
        self.topics = topics
        self.writer = writer
        self.register_topic = register_topic
        self.register_all = register_all
        self.handlers: dict[int, Handler] = {
            BrokerRequestCode.UPDATE_AND_CREATE_TOPIC: self.update_and_create_topic,
            BrokerRequestCode.DELETE_TOPIC_IN_BROKER: self.delete_topic,
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
        try:
            await self.writer.drained(before)
        except DurableWriteError as e:  # not on disk: rolled back, nothing registered
            return error(ResponseCode.SYSTEM_ERROR, str(e))
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
        try:
            await self.writer.drained(before)
        except DurableWriteError as e:  # not on disk: the topic is back, nothing registered
            return error(ResponseCode.SYSTEM_ERROR, str(e))
        registered = await self.register_all() if deleted else {}
        return RemotingResponse(payload={"deleted": deleted, "registered": registered})
