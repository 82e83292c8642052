"""`apache.rocketmq.v2.MessagingService` on grpc.aio, with generic handlers built from the descriptor
set (namesrv.proxy.descriptors): each RPC maps onto the NameServers (routes) and brokers (TCP
remoting) through namesrv.proxy's pure mapping. A refused request is answered with its v2 status
and sends nothing on; an RPC the service does not have gets gRPC's UNIMPLEMENTED; the pop
consumption RPCs are actors.proxy.consumer's, the Telemetry stream actors.proxy.telemetry's, the
pull/offset ones answer NOT_IMPLEMENTED. With ACL on, every call is admitted first (actors.proxy.acl).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc

from actors.proxy.acl import ACTING_AS, ProxyAcl
from actors.proxy.brokers import BrokerLinks
from actors.proxy.calls import Undecodable, client_id_of, decoder
from actors.proxy.consumer import ConsumerRpcs
from actors.proxy.groups import GroupPolicies
from actors.proxy.local import LocalBroker
from actors.proxy.routes import RouteCache
from actors.proxy.telemetry import TelemetryStreams
from namesrv.protocol.codes import BrokerRequestCode, ResponseCode
from namesrv.protocol.message.codec import decode_offset_msg_id
from namesrv.protocol.message.recall import RecallHandle, RecallHandleInvalid
from namesrv.protocol.models import TopicRouteData
from namesrv.proxy import route as routing
from namesrv.proxy import status as st
from namesrv.proxy import transaction as txn
from namesrv.proxy.answers import Answers
from namesrv.proxy.consume import check_group
from namesrv.proxy.descriptors import Protocol
from namesrv.proxy.send import check_topic, plan_send
from namesrv.proxy.settings import ProxyConfig
from namesrv.proxy.status import ProxyError

log = logging.getLogger(__name__)
POP_MISSING = "this proxy serves pop consumption only (ReceiveMessage): consume by offset with a remoting client"
NOT_BUILT = ("PullMessage", "UpdateOffset", "GetOffset", "QueryOffset", "SyncLiteSubscription")
CONSUMER_RPCS = ("AckMessage", "ChangeInvisibleDuration", "ForwardMessageToDeadLetterQueue")
HEARTBEAT_S = 30.0


class MessagingService:
    def __init__(self, proto: Protocol, config: ProxyConfig, routes: RouteCache, client_id: str,
                 host: str, port: int, local: LocalBroker | None = None) -> None:
        """`local`: the broker this proxy lives in (local mode), asked in process; its topics' sends
        go to its own queues, and routes name each broker at its own proxy."""
        self.p = proto
        self.config = config
        self.routes = routes
        self.answers = Answers(proto, host, port, local=local is not None)
        self.local_broker = local.broker_name if local is not None else None
        self.acl = ProxyAcl(config.acl_file or "", config.credentials) if config.acl_enable else None
        """None without ACL: every call is served and nothing is signed."""
        self.brokers = BrokerLinks(client_id, config.broker_call_timeout_s,
                                   lambda addr, cmd: self.telemetry.on_check(addr, cmd), config.credentials, local)
        self.groups = GroupPolicies(routes, self.brokers, config.route_cache_ttl_s)
        self.telemetry = TelemetryStreams(proto, config, routes, self.brokers, self.groups, self.acl, self._status,
                                          lambda client_id: self.consumer.renewals.drop_client(client_id))
        self.consumer = ConsumerRpcs(proto, config, routes, self.brokers, self.groups, self.answers)
        self._counter = itertools.count()
        self._writable: dict[str, tuple[TopicRouteData, list[routing.WriteQueue]]] = {}
        """A topic's write queues, by the route they were read from (made again when it changes)."""
        self.calls: dict[str, int] = {}
        self.sent = 0

    # ------------------------------------------------------------------ plumbing
    def method_handlers(self) -> dict[str, grpc.RpcMethodHandler]:
        """The service's methods by name, for `add_registered_method_handlers`: registered with the
        gRPC core, a call finds its handler there rather than through a generic handler's lookup."""
        handlers: dict[str, grpc.RpcMethodHandler] = {}
        for name, (req_cls, resp_cls, client_stream, server_stream) in self.p.methods().items():
            behaviour = self._behaviour(name, resp_cls)
            kwargs = {"request_deserializer": decoder(req_cls), "response_serializer": resp_cls.SerializeToString}
            if client_stream and server_stream:
                handlers[name] = grpc.stream_stream_rpc_method_handler(behaviour, **kwargs)
            elif server_stream:
                handlers[name] = grpc.unary_stream_rpc_method_handler(behaviour, **kwargs)
            else:
                handlers[name] = grpc.unary_unary_rpc_method_handler(behaviour, **kwargs)
        return handlers

    def _status(self, code: str, message: str) -> Any:
        return self.answers.status(code, message)

    def _behaviour(self, name: str, resp_cls: Any) -> Callable[..., Any]:
        if name == "Telemetry":
            async def telemetry(request_iterator: Any, context: Any) -> AsyncIterator[Any]:
                self._count(name)
                async for command in self.telemetry.telemetry(request_iterator, context):
                    yield command
            return telemetry
        if name == "ReceiveMessage":
            async def receive(request: Any, context: Any) -> AsyncIterator[Any]:
                self._count(name)
                if isinstance(request, Undecodable):
                    yield resp_cls(status=self._status("BAD_REQUEST", request.message))
                    return
                try:
                    self._admit(name, request, context)
                    async for r in self.consumer.receive_message(request, context):
                        yield r
                except ProxyError as e:
                    yield resp_cls(status=self._status(e.code, e.message))
                except Exception as e:
                    log.exception("ReceiveMessage failed")
                    yield resp_cls(status=self._status("INTERNAL_SERVER_ERROR", f"{type(e).__name__}: {e}"))
            return receive
        if name == "PullMessage":
            async def not_built_stream(request: Any, context: Any) -> AsyncIterator[Any]:
                self._count(name)
                yield resp_cls(status=self._status("NOT_IMPLEMENTED", POP_MISSING))
            return not_built_stream
        owner = self.consumer if name in CONSUMER_RPCS else self
        method: Callable[[Any, Any], Awaitable[Any]] | None = getattr(owner, _snake(name), None)

        async def unary(request: Any, context: Any) -> Any:
            self._count(name)
            if method is None:
                return resp_cls(status=self._status("NOT_IMPLEMENTED", POP_MISSING if name in NOT_BUILT
                                                    else f"{name} is not implemented by this proxy"))
            if isinstance(request, Undecodable):
                return resp_cls(status=self._status("BAD_REQUEST", request.message))
            try:
                self._admit(name, request, context)
                return await method(request, context)
            except ProxyError as e:
                return resp_cls(status=self._status(e.code, e.message))
            except Exception as e:
                log.exception("%s failed", name)
                return resp_cls(status=self._status("INTERNAL_SERVER_ERROR", f"{type(e).__name__}: {e}"))
        return unary

    def _admit(self, name: str, request: Any, context: Any) -> None:
        """With ACL on, UNAUTHORIZED unless the caller signed the call and may do what it asks; the
        rest of the call (its task) then acts as the caller's account (actors.proxy.acl)."""
        if self.acl is not None:
            client_type = self.p.enum_name("ClientType", request.client_type) if name == "Heartbeat" else ""
            ACTING_AS.set(self.acl.admit(name, request, context, client_type))

    def _count(self, name: str) -> None:
        self.calls[name] = self.calls.get(name, 0) + 1

    async def heartbeat_loop(self) -> None:
        """Keep the proxy's producer registrations alive on the brokers (their channel expiry)."""
        while True:
            await asyncio.sleep(HEARTBEAT_S)
            await self.brokers.heartbeat_all()

    def _ok(self, resp: str, **fields: Any) -> Any:
        return self.p.cls(resp)(status=self.answers.ok, **fields)

    @staticmethod
    def _master(route: TopicRouteData, broker_name: str) -> str:
        addr = routing.master_addr(route, broker_name)
        if addr is None:
            raise ProxyError("INTERNAL_SERVER_ERROR", f"broker {broker_name} has no master in the route")
        return addr

    # ------------------------------------------------------------------ routes
    async def query_route(self, request: Any, context: Any) -> Any:
        topic = check_topic(str(request.topic.name))
        route = await self.routes.get(topic)
        return self._ok("QueryRouteResponse",
                        message_queues=self.answers.message_queues(request.topic, routing.message_queues(route),
                                                                   request.endpoints))

    async def query_assignment(self, request: Any, context: Any) -> Any:
        topic = check_topic(str(request.topic.name))
        group = check_group(str(request.group.name))
        fifo = (await self.groups.get(group, topic)).fifo
        route = await self.routes.get(topic)
        queues = routing.assignments(route, fifo=fifo)
        if not queues:
            raise ProxyError("FORBIDDEN", "no readable queue")
        return self._ok("QueryAssignmentResponse",
                        assignments=self.answers.assignments(request.topic, queues, request.endpoints))

    async def heartbeat(self, request: Any, context: Any) -> Any:
        return self._ok("HeartbeatResponse")

    async def notify_client_termination(self, request: Any, context: Any) -> Any:
        self.telemetry.end(client_id_of(context))
        return self._ok("NotifyClientTerminationResponse")

    # ------------------------------------------------------------------ sending
    def _write_queues(self, topic: str, route: TopicRouteData) -> list[routing.WriteQueue]:
        cached = self._writable.get(topic)
        if cached is None or cached[0] is not route:
            cached = self._writable[topic] = (route, routing.local_first(routing.write_queues(route),
                                                                         self.local_broker))
        return cached[1]

    async def send_message(self, request: Any, context: Any) -> Any:
        plan = plan_send(list(request.messages), self.config, int(time.time() * 1000))
        queues = self._write_queues(plan.topic, await self.routes.get(plan.topic))
        if not queues:
            raise ProxyError("FORBIDDEN", f"no writable queue for topic {plan.topic}")
        queue = routing.select_queue(queues, plan.sharding_key, next(self._counter))
        if any(m.transactional for m in plan.messages) and plan.topic not in self.brokers.producer_groups:
            await self.brokers.add_producer_groups({plan.topic}, [queue.broker_addr])  # check-backs reach us
        entries, codes = [], []
        for msg in plan.messages:
            answer = await self.brokers.invoke(queue.broker_addr, BrokerRequestCode.SEND_MESSAGE_V2,
                                               msg.header(queue.queue_id), msg.body)
            status = st.from_send_answer(answer.code, answer.remark)
            if answer.code == ResponseCode.SUCCESS:
                self.sent += 1
                f = answer.ext_fields or {}
                offset = int(f.get("queueOffset", "0"))
                transaction_id = ""
                if msg.transactional:
                    _, clo = decode_offset_msg_id(str(f.get("msgId", "")).split(",")[0])
                    transaction_id = txn.HalfLocation(queue.broker_name, clo, offset).encode()
                # a timed message's recallHandle: what RecallMessage takes to cancel it
                entries.append(self.answers.send_entry(status, msg.message_id, offset, str(f.get("recallHandle") or ""),
                                                       transaction_id))
            else:
                entries.append(self.answers.send_entry(status))
            codes.append(status.code)
        return self.p.cls("SendMessageResponse")(status=self.answers.of(st.overall(codes)), entries=entries)

    async def recall_message(self, request: Any, context: Any) -> Any:
        """RECALL_MESSAGE to the master of the broker the handle names (ProducerProcessor.recallMessage):
        a handle that does not decode is INTERNAL_SERVER_ERROR, a broker's refusal its remark."""
        topic = check_topic(str(request.topic.name))
        try:
            handle = RecallHandle.decode(str(request.recall_handle))
        except RecallHandleInvalid as e:
            raise ProxyError("INTERNAL_SERVER_ERROR", str(e)) from None
        addr = self._master(await self.routes.get(topic), handle.broker_name)
        answer = await self.brokers.invoke(addr, BrokerRequestCode.RECALL_MESSAGE,
                                           {"topic": topic, "recallHandle": str(request.recall_handle)})
        if answer.code != ResponseCode.SUCCESS:
            status = st.from_remoting(answer.code, answer.remark)
            raise ProxyError(status.code, status.message)
        message_id = str((answer.ext_fields or {}).get("msgId", handle.message_id))
        return self._ok("RecallMessageResponse", message_id=message_id)

    async def end_transaction(self, request: Any, context: Any) -> Any:
        topic = check_topic(str(request.topic.name))
        half = txn.decode_transaction_id(str(request.transaction_id))
        route = await self.routes.get(topic)
        addr = self._master(route, half.broker_name)
        header = txn.end_transaction_header(topic, half, str(request.message_id), int(request.resolution),
                                            int(request.source) == txn.SOURCE_SERVER_CHECK)
        answer = await self.brokers.invoke(addr, BrokerRequestCode.END_TRANSACTION, header)
        if answer.code != ResponseCode.SUCCESS:
            status = st.from_remoting(answer.code, answer.remark)
            raise ProxyError(status.code, status.message)
        return self._ok("EndTransactionResponse")


def _snake(name: str) -> str:
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in name).lstrip("_")
