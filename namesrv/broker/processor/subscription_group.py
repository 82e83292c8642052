"""The consumer-group admin codes of RocketMQ's AdminBrokerProcessor: UPDATE_AND_CREATE_SUBSCRIPTIONGROUP
(200), GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201), DELETE_SUBSCRIPTIONGROUP (207) and
GET_SUBSCRIPTIONGROUP_CONFIG (352: one group, as RocketMQ 5's proxy reads a consumer's FIFO flag and
retry times), wired by the broker controller beside the topic codes (they persist).

A change is answered once it is on disk (a failed write is rolled back and answered SYSTEM_ERROR).
A bad group name or setting (RocketMQ's TopicValidator.validateGroup, the settings' ranges) and the
deletion of a system group are INVALID_PARAMETER and change nothing. Adding a group admin code means
writing its handler here and adding one line to `handlers`.
"""

from __future__ import annotations

import logging
from typing import TypeVar

from pydantic import ValidationError

from namesrv.broker.client.consumer_offsets import ConsumerOffsetManager
from namesrv.broker.context import json_body
from namesrv.broker.subscription.config import SubscriptionGroupError, parse_group_config
from namesrv.broker.subscription.manager import SubscriptionGroupManager
from namesrv.common.persist import BackgroundWriter
from namesrv.protocol import fastjson
from namesrv.protocol.broker_headers import (
    DeleteSubscriptionGroupRequestHeader,
    GetSubscriptionGroupConfigRequestHeader,
    request_header,
)
from namesrv.protocol.codes import BrokerRequestCode, ResponseCode
from namesrv.protocol.headers import Header
from namesrv.protocol.types import InvalidInput, describe_errors
from namesrv.remoting.command import MQServerError, RemotingRequest, RemotingResponse, error
from namesrv.remoting.pipeline import Answer, Handler, RequestContext

log = logging.getLogger(__name__)
H = TypeVar("H", bound=Header)


def _header(request: RemotingRequest, model: type[H]) -> H | RemotingResponse:
    """The request's header, or INVALID_PARAMETER saying what is wrong with it."""
    try:
        return request_header(request, model)
    except (ValidationError, InvalidInput) as e:
        why = describe_errors(e) if isinstance(e, ValidationError) else str(e)
        return error(ResponseCode.INVALID_PARAMETER, f"invalid request: {why}")


class SubscriptionGroupProcessor:
    def __init__(self, groups: SubscriptionGroupManager, offsets: ConsumerOffsetManager,
                 writer: BackgroundWriter) -> None:
        self.groups = groups
        self.offsets = offsets
        self.writer = writer
        self.handlers: dict[int, Handler] = {
            BrokerRequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: self.update_and_create_subscription_group,
            BrokerRequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: self.get_all_subscription_group,
            BrokerRequestCode.DELETE_SUBSCRIPTIONGROUP: self.delete_subscription_group,
            BrokerRequestCode.GET_SUBSCRIPTIONGROUP_CONFIG: self.get_subscription_group,
        }

    def update_and_create_subscription_group(self, request: RemotingRequest, ctx: RequestContext) -> Answer:
        try:
            config = parse_group_config(json_body(request.body, "subscription group config"))
        except SubscriptionGroupError as e:
            return error(ResponseCode.INVALID_PARAMETER, str(e))
        except MQServerError as e:  # no body, or not a JSON object
            return error(ResponseCode.INVALID_PARAMETER, str(e.remark))
        log.info("subscription group %s updated by %s: %s", config.group_name, ctx.remote, config)
        before = self.writer.submitted
        changed = self.groups.update(config)
        return self._answer(before, {"changed": changed})

    def get_all_subscription_group(self, request: RemotingRequest, ctx: RequestContext) -> RemotingResponse:
        table = self.groups.wire_table()
        return RemotingResponse(ResponseCode.SUCCESS, None, {}, fastjson.dumps(table), table)

    def get_subscription_group(self, request: RemotingRequest, ctx: RequestContext) -> RemotingResponse:
        """The group's config (SubscriptionGroupConfig JSON); a group not there yet is created with
        the defaults when auto-creation is on (RocketMQ's findSubscriptionGroupConfig), else
        SUBSCRIPTION_GROUP_NOT_EXIST."""
        h = _header(request, GetSubscriptionGroupConfigRequestHeader)
        if isinstance(h, RemotingResponse):
            return h
        config = self.groups.find(h.group)
        if config is None:
            return error(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, "No group in this broker")
        wire = config.to_wire()
        return RemotingResponse(ResponseCode.SUCCESS, None, {}, fastjson.dumps(wire), wire)

    def delete_subscription_group(self, request: RemotingRequest, ctx: RequestContext) -> Answer:
        h = _header(request, DeleteSubscriptionGroupRequestHeader)
        if isinstance(h, RemotingResponse):
            return h
        before = self.writer.submitted
        try:
            deleted = self.groups.delete(h.group_name)
        except SubscriptionGroupError as e:
            return error(ResponseCode.INVALID_PARAMETER, str(e))
        removed = self.offsets.remove_group(h.group_name) if h.clean_offset else 0
        log.info("subscription group %s deleted by %s (%s; %d offsets removed)", h.group_name, ctx.remote,
                 "it existed" if deleted else "it did not exist", removed)
        return self._answer(before, {"deleted": deleted, "offsetsRemoved": removed})

    async def _answer(self, before: int, payload: dict[str, object]) -> RemotingResponse:
        failed = await self.writer.written(before)
        if failed is not None:  # not on disk: rolled back
            return error(ResponseCode.SYSTEM_ERROR, failed)
        return RemotingResponse(payload=payload)
