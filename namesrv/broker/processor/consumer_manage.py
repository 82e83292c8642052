"""RocketMQ's ConsumerManageProcessor: GET_CONSUMER_LIST_BY_GROUP, QUERY_CONSUMER_OFFSET and
UPDATE_CONSUMER_OFFSET, with the queue offset queries a consumer makes (GET_MAX_OFFSET,
GET_MIN_OFFSET, GET_EARLIEST_MSG_STORETIME, SEARCH_OFFSET_BY_TIMESTAMP; AdminBrokerProcessor's in
RocketMQ).

Pure: no Ray, no sockets. Adding a consumer-side request code means writing its handler here and
adding one line to `handlers`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable

from namesrv.broker.context import BrokerContext
from namesrv.protocol import fastjson
from namesrv.protocol.broker_headers import (
    GetConsumerListByGroupRequestHeader,
    QueryConsumerOffsetRequestHeader,
    SearchOffsetRequestHeader,
    TopicQueueHeader,
    UpdateConsumerOffsetRequestHeader,
    request_header,
)
from namesrv.protocol.codes import BrokerRequestCode, ResponseCode
from namesrv.remoting.command import RemotingRequest, RemotingResponse
from namesrv.remoting.pipeline import Handler, RequestContext

QUERY_OFFSET_NOT_FOUND = "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first"


class ConsumerManageProcessor:
    def __init__(self, ctx: BrokerContext) -> None:
        self.ctx = ctx
        self.handlers: dict[int, Handler] = {
            BrokerRequestCode.GET_CONSUMER_LIST_BY_GROUP: self._get_consumer_list_by_group,
            BrokerRequestCode.QUERY_CONSUMER_OFFSET: self._query_consumer_offset,
            BrokerRequestCode.UPDATE_CONSUMER_OFFSET: self._update_consumer_offset,
            BrokerRequestCode.GET_MAX_OFFSET: self._get_max_offset,
            BrokerRequestCode.GET_MIN_OFFSET: self._get_min_offset,
            BrokerRequestCode.GET_EARLIEST_MSG_STORETIME: self._get_earliest_msg_storetime,
            BrokerRequestCode.SEARCH_OFFSET_BY_TIMESTAMP: self._search_offset_by_timestamp,
        }

    def _get_consumer_list_by_group(self, cmd: RemotingRequest, client: RequestContext) -> RemotingResponse:
        h = request_header(cmd, GetConsumerListByGroupRequestHeader)
        ids = self.ctx.consumers.consumer_ids(h.consumer_group)
        if not ids:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"no consumer for this group, {h.consumer_group}")
        return cmd.response(ResponseCode.SUCCESS, None, None, fastjson.dumps({"consumerIdList": ids}))

    def _query_consumer_offset(self, cmd: RemotingRequest, client: RequestContext) -> RemotingResponse:
        """RocketMQ's rule for a group without a stored offset: 0 while nothing of the queue was
        deleted and its first message is in memory (checkInMemByConsumeOffset), else QUERY_NOT_FOUND,
        on which a CONSUME_FROM_LAST_OFFSET client starts at the max offset. Where we differ from
        RocketMQ 5.3: "in memory" is the transfer caps' window from the log's end (RocketMQ 4's
        estimate), not the page cache's residency of that message."""
        h = request_header(cmd, QueryConsumerOffsetRequestHeader)
        offset = self.ctx.offsets.query_offset(h.consumer_group, h.topic, h.queue_id)
        if offset >= 0:
            return cmd.response(ResponseCode.SUCCESS, None, {"offset": str(offset)})
        if h.set_zero_if_not_found is False:
            return cmd.response(ResponseCode.QUERY_NOT_FOUND,
                                "Not found, do not set to zero, maybe this group boot first")
        store = self.ctx.store
        if store.min_offset(h.topic, h.queue_id) <= 0:
            first = store.get_message(h.topic, h.queue_id, 0, 1)
            window = self.ctx.config.transfer_caps().in_memory_window()
            if first and store.size_bytes() - first[0].commit_log_offset <= window:
                return cmd.response(ResponseCode.SUCCESS, None, {"offset": "0"})
        return cmd.response(ResponseCode.QUERY_NOT_FOUND, QUERY_OFFSET_NOT_FOUND)

    def _update_consumer_offset(self, cmd: RemotingRequest, client: RequestContext) -> RemotingResponse:
        h = request_header(cmd, UpdateConsumerOffsetRequestHeader)
        self.ctx.offsets.commit_offset(h.consumer_group, h.topic, h.queue_id, h.commit_offset)
        return cmd.response(ResponseCode.SUCCESS)

    def _get_max_offset(self, cmd: RemotingRequest, client: RequestContext) -> RemotingResponse:
        h = request_header(cmd, TopicQueueHeader)
        return cmd.response(ResponseCode.SUCCESS, None, {"offset": str(self.ctx.fence.max_offset(h.topic, h.queue_id))})

    def _get_min_offset(self, cmd: RemotingRequest, client: RequestContext) -> RemotingResponse:
        h = request_header(cmd, TopicQueueHeader)
        return cmd.response(ResponseCode.SUCCESS, None, {"offset": str(self.ctx.store.min_offset(h.topic, h.queue_id))})

    def _get_earliest_msg_storetime(self, cmd: RemotingRequest, client: RequestContext) -> Awaitable[RemotingResponse]:
        h = request_header(cmd, TopicQueueHeader)
        store = self.ctx.store

        async def answer() -> RemotingResponse:
            first = await asyncio.to_thread(store.get_message, h.topic, h.queue_id, 0, 1)
            return cmd.response(ResponseCode.SUCCESS, None,
                                {"timestamp": str(first[0].store_timestamp if first else 0)})
        return answer()

    def _search_offset_by_timestamp(self, cmd: RemotingRequest, client: RequestContext) -> RemotingResponse:
        h = request_header(cmd, SearchOffsetRequestHeader)
        offset = self.ctx.store.search_offset_by_timestamp(h.topic, h.queue_id, h.timestamp)
        return cmd.response(ResponseCode.SUCCESS, None, {"offset": str(offset)})
