"""RocketMQ 5's AckMessageProcessor and ChangeInvisibleTimeProcessor: ACK_MESSAGE (200051),
BATCH_ACK_MESSAGE (200151), CHANGE_MESSAGE_INVISIBLETIME (200053).

A request names a message by its queue (topic, queueId, offset) and its handle (extraInfo, see
namesrv.broker.pop.extra_info); the handle's retry flag says whether the message is in the topic
itself or its pop retry topic, and its pop time which delivery it is. Answers:

    SUCCESS            acked (never comes back) / hidden for the new invisibleTime from now; a
                       change answers the new popTime, invisibleTime and reviveQid (the new handle
                       is the old one with the new popTime and invisibleTime)
    INVALID_PARAMETER  the extraInfo does not parse (RocketMQ's ExtraInfoUtil would throw)
    TOPIC_NOT_EXIST    the (real) topic is unknown
    MESSAGE_ILLEGAL    the queue id is not one of the topic's, as RocketMQ
    SERVICE_NOT_AVAILABLE  the broker is not a master (pop state lives on masters)
    NO_MESSAGE         the offset is outside the queue ("offset is illegal, ..." as RocketMQ), or
                       the message is not in flight under that handle: acked already, revived
                       (its invisible time lapsed), or the handle is older than a change
                       (RocketMQ answers such an ack SUCCESS and does nothing; here it is said)

A refused request changes nothing. A batch ack acks each message of its entries that is in flight
under its handle and answers SUCCESS (as RocketMQ), with the count it could not ack in the remark
and, when there are any, which ones in the body (BatchAckAnswerBody: the BatchAck's index, the
offset, and the remark ACK_MESSAGE would have answered), so the gRPC proxy answers each entry.
An orderly pop's offset moves once its queue's messages are acked (to the lowest still in flight).
"""

from __future__ import annotations

from collections.abc import Awaitable

from namesrv.broker.context import BrokerContext, json_body
from namesrv.broker.pop.extra_info import ExtraInfo, decode_extra_info, real_topic
from namesrv.broker.pop.headers import (
    AckMessageRequestHeader,
    BatchAckAnswerBody,
    ChangeInvisibleTimeRequestHeader,
    NotInFlight,
    batch_ack_body,
)
from namesrv.broker.pop.inflight import InFlight, Key
from namesrv.broker.pop.journal import ack_record, change_record, pop_record
from namesrv.broker.pop.state import PopState
from namesrv.protocol.broker_headers import request_header
from namesrv.protocol.codes import BrokerRequestCode, ResponseCode
from namesrv.protocol.types import InvalidInput
from namesrv.remoting.command import MQServerError, RemotingRequest, RemotingResponse
from namesrv.remoting.pipeline import Handler, RequestContext

NOT_IN_FLIGHT = ("no message in flight at {key} under this handle (popTime {pop_time}): acked already, "
                 "revived after its invisible time, or the handle is older than a change of invisible time")


class AckMessageProcessor:
    def __init__(self, ctx: BrokerContext, state: PopState) -> None:
        self.ctx = ctx
        self.state = state
        self.handlers: dict[int, Handler] = {
            BrokerRequestCode.ACK_MESSAGE: self._ack_message,
            BrokerRequestCode.BATCH_ACK_MESSAGE: self._batch_ack,
            BrokerRequestCode.CHANGE_MESSAGE_INVISIBLETIME: self._change_invisible_time,
        }

    # ------------------------------------------------------------------ checks
    def _writable(self) -> None:
        """Only a master holds pop state (a slave's index is empty: it would answer NO_MESSAGE)."""
        if not self.ctx.guard.writable:
            raise MQServerError(ResponseCode.SERVICE_NOT_AVAILABLE,
                                f"the broker[{self.ctx.identity.broker_addr}] is not a master: no ack")

    def _handle(self, h: AckMessageRequestHeader) -> tuple[ExtraInfo, Key]:
        """The handle and the message it names; MQServerError when either is not valid."""
        self._writable()
        try:
            info = decode_extra_info(h.extra_info)
        except InvalidInput as e:
            raise MQServerError(ResponseCode.INVALID_PARAMETER, str(e)) from None
        topic = real_topic(h.topic, h.consumer_group, info.retry)
        self._check_queue(topic, h.queue_id, h.offset)
        return info, (h.consumer_group, topic, h.queue_id, h.offset)

    def _check_queue(self, topic: str, queue_id: int, offset: int) -> None:
        ctx = self.ctx
        tc = ctx.topics.topic_config_table.get(topic)
        if tc is None:
            raise MQServerError(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist, apply first please!")
        if queue_id >= tc.read_queue_nums:
            raise MQServerError(ResponseCode.MESSAGE_ILLEGAL,
                                f"queueId[{queue_id}] is illegal, topic:[{topic}] topicConfig.readQueueNums:"
                                f"[{tc.read_queue_nums}]")
        min_offset, max_offset = ctx.store.min_offset(topic, queue_id), ctx.fence.max_offset(topic, queue_id)
        if not min_offset <= offset < max_offset:
            raise MQServerError(ResponseCode.NO_MESSAGE, f"offset is illegal, key:{topic}@{queue_id}, "
                                                         f"commit:{offset}, store:{min_offset}~{max_offset}")

    # ------------------------------------------------------------------ ack
    def _ack_message(self, cmd: RemotingRequest, client: RequestContext) -> Awaitable[RemotingResponse]:
        h = request_header(cmd, AckMessageRequestHeader)
        info, key = self._handle(h)
        entry = self.state.index.ack(key, info.pop_time)
        if entry is None:
            raise MQServerError(ResponseCode.NO_MESSAGE, NOT_IN_FLIGHT.format(key=key, pop_time=info.pop_time))
        return self._acked(cmd, [entry], "")

    def _batch_ack(self, cmd: RemotingRequest, client: RequestContext) -> Awaitable[RemotingResponse]:
        self._writable()
        body = batch_ack_body(json_body(cmd.body, "batch ack"))
        wanted: list[tuple[int, Key, int]] = []
        for i, a in enumerate(body.acks):  # every entry checked before anything changes
            topic = real_topic(a.topic, a.consumer_group, a.retry)
            for bit in a.bit_set:
                self._check_queue(topic, a.queue_id, a.start_offset + bit)
                wanted.append((i, (a.consumer_group, topic, a.queue_id, a.start_offset + bit), a.pop_time))
        acked: list[InFlight] = []
        missed: list[NotInFlight] = []
        for i, key, pop_time in wanted:
            entry = self.state.index.ack(key, pop_time)
            if entry is not None:
                acked.append(entry)
            else:
                remark = NOT_IN_FLIGHT.format(key=key, pop_time=pop_time)
                missed.append(NotInFlight(ack=i, offset=key[3], remark=remark))
        if not missed:
            return self._acked(cmd, acked, "")
        return self._acked(cmd, acked, f"{len(missed)} of {len(wanted)} not in flight under their handles",
                           BatchAckAnswerBody(not_in_flight=missed).encode())

    async def _acked(self, cmd: RemotingRequest, entries: list[InFlight], remark: str,
                     body: bytes | None = None) -> RemotingResponse:
        records = [ack_record(e) for e in entries] + self._order_offsets(entries)
        await self.state.record(*records)
        self.ctx.stats[("pop_acks", "")] += len(entries)
        return cmd.response(ResponseCode.SUCCESS, remark or None, body=body)

    def _order_offsets(self, entries: list[InFlight]) -> list[dict[str, object]]:
        """An orderly pop's queue moves on as its messages are acked: to its lowest offset still in
        flight, or past the highest acked (the journal records the move)."""
        ctx, index = self.ctx, self.state.index
        out: list[dict[str, object]] = []
        for q in {(e.group, e.topic, e.queue_id) for e in entries if e.order}:
            lowest = index.lowest_in_flight(*q)
            nxt = lowest if lowest is not None else max(e.offset for e in entries if e.key[:3] == q) + 1
            if nxt > ctx.offsets.query_offset(*q):
                ctx.offsets.commit_offset(*q, nxt)
                out.append(pop_record([], (*q, nxt)))
            if lowest is None:  # the queue is free again: a held orderly pop may take it
                ctx.hold.notify(entries[0].origin_topic, q[2])
        return out

    # ------------------------------------------------------------------ change invisible time
    def _change_invisible_time(self, cmd: RemotingRequest, client: RequestContext) -> Awaitable[RemotingResponse]:
        h = request_header(cmd, ChangeInvisibleTimeRequestHeader)
        info, key = self._handle(h)
        old = self.state.index.find(key, info.pop_time)
        changed = self.state.index.change(key, info.pop_time, h.invisible_time)
        if old is None or changed is None:
            raise MQServerError(ResponseCode.NO_MESSAGE, NOT_IN_FLIGHT.format(key=key, pop_time=info.pop_time))
        self.state.on_added()
        return self._changed(cmd, old, changed, info)

    async def _changed(self, cmd: RemotingRequest, old: InFlight, new: InFlight, info: ExtraInfo) -> RemotingResponse:
        await self.state.record(change_record(old, new))
        self.ctx.stats[("pop_changes", "")] += 1
        return cmd.response(ResponseCode.SUCCESS, None, {"popTime": str(new.pop_time),
                                                         "invisibleTime": str(new.invisible_time),
                                                         "reviveQid": str(info.revive_qid)})
