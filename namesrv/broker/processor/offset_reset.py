"""A consumer group's offsets moved by an operator (RocketMQ's AdminBrokerProcessor.resetOffset with
Broker2Client.resetOffset, and cloneGroupOffset): INVOKE_BROKER_TO_RESET_OFFSET (222, mqadmin
resetOffsetByTime and skipAccumulatedMessage) and CLONE_GROUP_OFFSET (314, cloneGroupOffset).

A reset finds, for each write queue of the topic, the first offset stored at or after the timestamp
(timestamp -1: the queue's max offset, skipping everything accumulated). Without `isForce` a queue
only moves back: one whose committed offset is already before that point keeps it. With `queueId`
(RocketMQ 5, mqadmin's -b/-q/-o) only that queue moves, to `offset` when one is given (it must lie
in the queue's [min, max]: RocketMQ 5.3 also takes max + 1, an offset no message has yet) or to the
timestamp's, forward or back. Then:

- the group has live members: each is sent RESET_CONSUMER_CLIENT_OFFSET (220, oneway, over its own
  connection; a C++ client gets ResetOffsetBodyForC, as RocketMQ sends a CPP caller) and jumps
  there itself, as RocketMQ 4.9 does;
- the group has no live member: RocketMQ answers CONSUMER_NOT_ONLINE and mqadmin falls back to
  committing the offsets itself queue by queue (resetOffsetByTimestampOld); here the broker
  commits them at once (RocketMQ 5's server-side reset), so a stopped group resumes there.

Either way the broker's committed offsets are set (a live member's next commit carries the new
position anyway), and the answer is the ResetOffsetBody. A topic this broker does not have is
TOPIC_NOT_EXIST; a stopped group that never committed an offset of the topic here is RocketMQ's
SYSTEM_ERROR "THe consumer group <g> not exist". Pure: telling the members is the broker's
`tell_members(channels, request)` (actors.broker.to_client).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from namesrv.broker.context import BrokerContext
from namesrv.protocol import fastjson
from namesrv.protocol.admin_bodies import ResetOffsetBody
from namesrv.protocol.broker_headers import CloneGroupOffsetRequestHeader, ResetOffsetRequestHeader, request_header
from namesrv.protocol.codes import BrokerRequestCode, ResponseCode
from namesrv.protocol.models import MessageQueue
from namesrv.remoting.command import MQServerError, RemotingRequest, RemotingResponse
from namesrv.remoting.pipeline import Answer, Handler, RequestContext
from namesrv.remoting.wire_command import LanguageCode, RemotingCommand

log = logging.getLogger(__name__)

TellMembers = Callable[[list[tuple[str, RemotingCommand]]], int]
"""Send each (channel, request) oneway over that client connection; returns how many were sent."""


def _tell_no_one(requests: list[tuple[str, RemotingCommand]]) -> int:
    return 0


class OffsetResetProcessor:
    def __init__(self, ctx: BrokerContext, tell_members: TellMembers = _tell_no_one) -> None:
        self.ctx = ctx
        self.tell_members = tell_members
        self.handlers: dict[int, Handler] = {
            BrokerRequestCode.INVOKE_BROKER_TO_RESET_OFFSET: self.reset_offset,
            BrokerRequestCode.CLONE_GROUP_OFFSET: self.clone_group_offset,
        }

    # ------------------------------------------------------------------ reset
    def reset_offset(self, request: RemotingRequest, client: RequestContext) -> Answer:
        h = request_header(request, ResetOffsetRequestHeader)
        tc = self.ctx.topics.topic_config_table.get(h.topic)
        if tc is None:
            raise MQServerError(ResponseCode.TOPIC_NOT_EXIST,
                                f"[reset-offset] reset offset failed, no topic in this broker. topic={h.topic}")
        log.info("[reset-offset] topic=%s group=%s timestamp=%d isForce=%s queueId=%d offset=%s by %s", h.topic,
                 h.group, h.timestamp, h.is_force, h.queue_id, h.offset, client.remote)
        queues = max(tc.read_queue_nums, tc.write_queue_nums)
        if h.queue_id >= queues:
            raise MQServerError(ResponseCode.SYSTEM_ERROR, f"[reset-offset] topic {h.topic} has no queue {h.queue_id} "
                                                           f"here (queues 0-{queues - 1})")
        if h.queue_id >= 0 and h.offset is not None and h.offset != -1:
            low, high = self.ctx.store.min_offset(h.topic, h.queue_id), self.ctx.store.max_offset(h.topic, h.queue_id)
            if not low <= h.offset <= high:
                raise MQServerError(ResponseCode.SYSTEM_ERROR,
                                    f"Target offset {h.offset} not in consume queue range [{low}-{high}]")
        return self._reset(h, [h.queue_id] if h.queue_id >= 0 else list(range(tc.write_queue_nums)))

    def _targets(self, topic: str, queues: list[int], timestamp: int) -> list[int]:
        """Each queue's offset for `timestamp` (blocking: reads the consume queues)."""
        store = self.ctx.store
        return [store.max_offset(topic, q) if timestamp == -1 else max(0, store.search_offset_by_timestamp(
            topic, q, timestamp)) for q in queues]

    async def _reset(self, h: ResetOffsetRequestHeader, queues: list[int]) -> RemotingResponse:
        """Reset `queues`: one queue to its offset (always, as RocketMQ 5's server-side reset of a
        queue), or each to the offset at the timestamp (back only, unless forced)."""
        ctx = self.ctx
        if h.queue_id >= 0 and h.offset is not None and h.offset != -1:
            targets, force = [h.offset], True
        else:
            targets = await asyncio.to_thread(self._targets, h.topic, queues, h.timestamp)
            force = h.is_force or h.queue_id >= 0
        committed = [ctx.offsets.query_offset(h.group, h.topic, q) for q in queues]
        members = ctx.consumers.groups.get(h.group)
        channels = list(members.channels.values()) if members is not None else []
        if not channels and all(c == -1 for c in committed):
            raise MQServerError(ResponseCode.SYSTEM_ERROR, f"THe consumer group <{h.group}> not exist")
        broker = ctx.identity.broker_name
        body = ResetOffsetBody({
            MessageQueue(h.topic, broker, q): target if force or mine == -1 or target < mine else mine
            for q, target, mine in zip(queues, targets, committed, strict=True)})
        for mq, offset in body.offset_table.items():
            ctx.offsets.commit_offset(h.group, mq.topic, mq.queue_id, offset)
        if channels:
            ext = {"topic": h.topic, "group": h.group, "timestamp": str(h.timestamp),
                   "isForce": str(h.is_force).lower()}
            wire, for_c = fastjson.dumps(body.to_wire()), fastjson.dumps(body.to_wire_for_c())
            told = self.tell_members([(c.channel, RemotingCommand(
                BrokerRequestCode.RESET_CONSUMER_CLIENT_OFFSET, ext_fields=dict(ext),
                body=for_c if c.language == LanguageCode.CPP else wire)) for c in channels])
            log.info("[reset-offset] group %s: %d of %d members told", h.group, told, len(channels))
        return RemotingResponse(ResponseCode.SUCCESS, None, {}, fastjson.dumps(body.to_wire()), body)

    # ------------------------------------------------------------------ clone
    def clone_group_offset(self, request: RemotingRequest, client: RequestContext) -> RemotingResponse:
        """srcGroup's offsets (of `topic`, or of every topic it committed on) to destGroup; without
        `offline`, only topics a live srcGroup subscribes to (as RocketMQ)."""
        ctx = self.ctx
        h = request_header(request, CloneGroupOffsetRequestHeader)
        topics = [h.topic] if h.topic else ctx.offsets.topics_of(h.src_group)
        src = ctx.consumers.groups.get(h.src_group)
        cloned = []
        for topic in topics:
            if topic not in ctx.topics.topic_config_table:
                continue
            if not h.offline and src is not None and src.subscriptions and topic not in src.subscriptions:
                continue
            if ctx.offsets.clone_offset(h.src_group, h.dest_group, topic):
                cloned.append(topic)
        log.info("offsets of %s cloned to %s by %s: %s", h.src_group, h.dest_group, client.remote, cloned)
        return RemotingResponse(payload={"cloned": cloned})
