"""The consumption RPCs of `apache.rocketmq.v2.MessagingService` (ReceiveMessage, AckMessage,
ChangeInvisibleDuration, ForwardMessageToDeadLetterQueue) over the brokers' pop codes, mapped by
namesrv.proxy.consume. Stateless: a receipt handle names its broker, so any proxy acks it."""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import AsyncIterator
from typing import Any

from actors.proxy.brokers import BrokerLinks
from actors.proxy.calls import client_id_of
from actors.proxy.groups import GroupPolicies
from actors.proxy.renewals import Renewals
from actors.proxy.routes import RouteCache
from namesrv.common.clock import system_clock
from namesrv.protocol.codes import BrokerRequestCode, ResponseCode
from namesrv.protocol.message.decoder import decode_messages
from namesrv.protocol.types import InvalidInput
from namesrv.proxy import batch_ack as ba
from namesrv.proxy import consume as cm
from namesrv.proxy import route as routing
from namesrv.proxy import status as st
from namesrv.proxy.answers import Answers
from namesrv.proxy.descriptors import Protocol
from namesrv.proxy.send import check_topic
from namesrv.proxy.settings import ProxyConfig
from namesrv.proxy.status import ProxyError

log = logging.getLogger(__name__)


def _ms(duration: Any) -> int:
    return int(duration.seconds) * 1000 + int(duration.nanos) // 1_000_000


class ConsumerRpcs:
    def __init__(self, proto: Protocol, config: ProxyConfig, routes: RouteCache, brokers: BrokerLinks,
                 groups: GroupPolicies, answers: Answers) -> None:
        self.p = proto
        self.config = config
        self.routes = routes
        self.brokers = brokers
        self.groups = groups
        self.renewals = Renewals(config, brokers, self._master_of)
        self.answers = answers
        self._status = answers.status
        self._counter = itertools.count()
        self.received = 0
        self.acked = 0

    async def _master_of(self, topic: str, broker_name: str) -> str:
        addr = routing.master_addr(await self.routes.get(topic), broker_name)
        if addr is None:
            raise ProxyError("INVALID_RECEIPT_HANDLE", f"cannot find broker {broker_name}")
        return addr

    # ------------------------------------------------------------------ receive
    async def receive_message(self, request: Any, context: Any) -> AsyncIterator[Any]:
        resp = self.p.cls("ReceiveMessageResponse")
        try:
            answer, invisible_ms, fifo = await self._pop(request, context)
        except ProxyError as e:
            yield resp(status=self._status(e.code, e.message))
            return
        if answer.code == ResponseCode.POLLING_TIMEOUT:
            yield resp(status=self._status("MESSAGE_NOT_FOUND", "no new message"))
            return
        if answer.code != ResponseCode.SUCCESS:
            status = st.from_remoting(answer.code, answer.remark)
            if answer.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED:
                status = st.Status("ILLEGAL_FILTER_EXPRESSION", answer.remark or "illegal filter expression")
            yield resp(status=self._status(status.code, status.message))
            return
        try:
            found = decode_messages(answer.body or b"")
            if fifo:  # an orderly pop's message comes again from its queue: its attempts are the broker's count
                ext = {k: str(v) for k, v in (answer.ext_fields or {}).items()}
                for m, earlier in zip(found, cm.order_attempts(ext, found), strict=True):
                    m.reconsume_times = earlier
            converted = [self.answers.received(m, request.message_queue.topic, invisible_ms) for m in found]
        except (ValueError, ProxyError) as e:  # InvalidInput (a ValueError), or a value protobuf refuses
            log.warning("pop answer not converted: %s", e)
            yield resp(status=self._status("INTERNAL_SERVER_ERROR", f"pop answer not readable: {e}"))
            return
        if not converted:
            yield resp(status=self._status("MESSAGE_NOT_FOUND", "no match message"))
            return
        if request.auto_renew:  # held invisible while the client holds them (actors.proxy.renewals)
            client_id, topic = client_id_of(context), str(request.message_queue.topic.name)
            for r in converted:
                self.renewals.add(client_id, str(request.group.name), topic, r.message.system_properties.receipt_handle)
        yield resp(status=self.answers.ok)
        for r in converted:
            self.received += 1
            yield r
        done = resp()
        done.delivery_timestamp.FromMilliseconds(system_clock())
        yield done

    async def _pop(self, request: Any, context: Any) -> tuple[Any, int, bool]:
        topic = check_topic(str(request.message_queue.topic.name))
        group = cm.check_group(str(request.group.name))
        c = self.config
        remaining = context.time_remaining() if context is not None else None
        poll = cm.polling_ms(_ms(request.long_polling_timeout) if request.HasField("long_polling_timeout") else None,
                             None if remaining is None else int(remaining * 1000),
                             c.consumer_min_long_polling_timeout_ms, c.consumer_max_long_polling_timeout_ms)
        if request.auto_renew:  # a PushConsumer: the proxy's duration (ReceiveMessageActivity), renewed
            invisible = c.default_invisible_time_ms
        else:
            invisible = cm.check_invisible(_ms(request.invisible_duration), c.min_invisible_time_ms_for_recv,
                                           c.max_invisible_time_ms)
        fifo = (await self.groups.get(group, topic)).fifo
        header = cm.pop_header(group, topic, int(request.batch_size), invisible, poll,
                               int(request.filter_expression.type), str(request.filter_expression.expression),
                               system_clock(), fifo)
        route = await self.routes.get(topic)
        readers = routing.readable_masters(route)
        if not readers:
            raise ProxyError("FORBIDDEN", "no readable queue")
        _, addr = routing.select_reader(readers, str(request.message_queue.broker.name), next(self._counter))
        answer = await self.brokers.invoke(addr, BrokerRequestCode.POP_MESSAGE, header, extra_s=poll / 1000)
        return answer, invisible, fifo

    # ------------------------------------------------------------------ ack & co
    async def _call(self, topic: str, handle: cm.ReceiptHandle, code: int, header: dict[str, str]) -> Any:
        addr = await self._master_of(topic, handle.extra.broker_name)
        answer = await self.brokers.invoke(addr, code, header)
        if answer.code == ResponseCode.NO_MESSAGE:  # nothing in flight under this handle
            raise ProxyError("INVALID_RECEIPT_HANDLE", answer.remark or "receipt handle is invalid")
        if answer.code == ResponseCode.INVALID_PARAMETER:
            raise ProxyError("INVALID_RECEIPT_HANDLE", answer.remark or "receipt handle is invalid")
        if answer.code != ResponseCode.SUCCESS:
            s = st.from_remoting(answer.code, answer.remark)
            raise ProxyError(s.code, s.message)
        return answer

    async def ack_message(self, request: Any, context: Any) -> Any:
        """Each entry acked on the broker its handle names: with `batch_ack`, one BATCH_ACK_MESSAGE
        per broker (namesrv.proxy.batch_ack), brokers at once; each entry answered as ACK_MESSAGE
        would answer it."""
        topic = check_topic(str(request.topic.name))
        group = cm.check_group(str(request.group.name))
        results: dict[int, st.Status] = {}
        pending: list[ba.Pending] = []
        for i, e in enumerate(request.entries):
            try:
                pending.append(ba.Pending(i, cm.live_handle(await self.renewals.take(str(e.receipt_handle)),
                                                             system_clock())))
            except ProxyError as err:
                results[i] = st.Status(err.code, err.message)
        handles = {p.index: p.handle for p in pending}
        plans = ba.plan_acks(pending, self.config.batch_ack)
        for done in await asyncio.gather(*(self._ack_on(group, topic, plan, handles) for plan in plans)):
            results.update(done)
        entries, codes = [], []
        for i, e in enumerate(request.entries):
            status = results[i]
            self.acked += status.code == "OK"
            entries.append(self.answers.ack_entry(status, str(e.message_id), str(e.receipt_handle)))
            codes.append(status.code)
        total = st.overall(codes) if codes else st.Status("INTERNAL_SERVER_ERROR", "ack message result is empty")
        return self.p.cls("AckMessageResponse")(status=self.answers.of(total), entries=entries)

    async def _ack_on(self, group: str, topic: str, plan: ba.BrokerAcks,
                      handles: dict[int, cm.ReceiptHandle]) -> dict[int, st.Status]:
        """One broker's share: its batch, then what goes alone (and the batch's entries, one by one,
        when the broker refuses the batch: a refusal changed nothing)."""
        out: dict[int, st.Status] = {}
        alone = list(plan.alone)
        if plan.groups:
            try:
                addr = await self._master_of(topic, plan.broker_name)
                answer = await self.brokers.invoke(addr, BrokerRequestCode.BATCH_ACK_MESSAGE, {},
                                                   ba.batch_ack_request(group, topic, plan))
            except ProxyError as e:  # no broker, or no answer: whether it acked is not known
                out = {i: st.Status(e.code, e.message) for i in plan.batched}
            else:
                if answer.code == ResponseCode.SUCCESS:
                    try:
                        out = ba.batch_results(plan, answer.body)
                    except InvalidInput as e:
                        out = {i: st.Status("INTERNAL_SERVER_ERROR", str(e)) for i in plan.batched}
                else:
                    log.info("batch ack refused by %s (%s): acking its %d entries one by one", plan.broker_name,
                             answer.remark, len(plan.batched))
                    alone = sorted(alone + plan.batched)
        for i in alone:
            try:
                await self._call(topic, handles[i], BrokerRequestCode.ACK_MESSAGE,
                                 cm.ack_header(group, topic, handles[i]))
                out[i] = st.Status("OK", "OK")
            except ProxyError as err:
                out[i] = st.Status(err.code, err.message)
        return out

    async def change_invisible_duration(self, request: Any, context: Any) -> Any:
        topic = check_topic(str(request.topic.name))
        group = cm.check_group(str(request.group.name))
        invisible = cm.check_invisible(_ms(request.invisible_duration), 0, self.config.max_invisible_time_ms)
        handle = cm.live_handle(await self.renewals.take(str(request.receipt_handle)), system_clock())
        answer = await self._call(topic, handle, BrokerRequestCode.CHANGE_MESSAGE_INVISIBLETIME,
                                  cm.change_header(group, topic, handle, invisible))
        new = cm.changed_handle(handle, {k: str(v) for k, v in (answer.ext_fields or {}).items()})
        return self.p.cls("ChangeInvisibleDurationResponse")(status=self.answers.ok, receipt_handle=new.encode())

    async def forward_message_to_dead_letter_queue(self, request: Any, context: Any) -> Any:
        topic = check_topic(str(request.topic.name))
        group = cm.check_group(str(request.group.name))
        handle = cm.live_handle(await self.renewals.take(str(request.receipt_handle)), system_clock())
        header = cm.send_back_header(group, topic, handle, str(request.message_id))
        addr = await self._master_of(topic, handle.extra.broker_name)
        answer = await self.brokers.invoke(addr, BrokerRequestCode.CONSUMER_SEND_MSG_BACK, header)
        if answer.code == ResponseCode.SUCCESS:  # then acked, as ProducerProcessor does (its result ignored)
            try:
                await self._call(topic, handle, BrokerRequestCode.ACK_MESSAGE, cm.ack_header(group, topic, handle))
            except ProxyError as e:
                log.info("ack after the DLQ forward of %s: %s", request.message_id, e.message)
        s = st.from_remoting(answer.code, answer.remark)
        return self.p.cls("ForwardMessageToDeadLetterQueueResponse")(status=self.answers.of(s))
