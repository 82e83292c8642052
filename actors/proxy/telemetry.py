"""The Telemetry stream of `apache.rocketmq.v2.MessagingService`: one session per client (by its
`x-mq-client-id`), whose Settings are answered at once with the server's (namesrv.proxy.settings,
its group's FIFO flag and attempts for a consumer), whose published topics make the proxy a
producer of them on their brokers, and through which a broker's transaction check-back reaches a
producer of its topic as a RecoverOrphanedTransactionCommand. With ACL on, the stream's opener is
authenticated and each Settings authorized (namesrv.proxy.auth) before anything of it is taken."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from google.protobuf import json_format

from actors.proxy.acl import ACTING_AS, ProxyAcl
from actors.proxy.brokers import BrokerLinks
from actors.proxy.calls import Undecodable, client_id_of
from actors.proxy.groups import GroupPolicies
from actors.proxy.routes import RouteCache
from namesrv.protocol.message.decoder import decode_messages
from namesrv.protocol.types import InvalidInput
from namesrv.proxy import route as routing
from namesrv.proxy import transaction as txn
from namesrv.proxy.auth import settings_needs
from namesrv.proxy.consume import GroupPolicy, check_group
from namesrv.proxy.descriptors import Protocol
from namesrv.proxy.send import check_topic
from namesrv.proxy.settings import ProxyConfig, server_settings
from namesrv.proxy.status import ProxyError
from namesrv.remoting.wire_command import RemotingCommand

StatusOf = Callable[[str, str], Any]

log = logging.getLogger(__name__)


@dataclass
class TelemetrySession:
    client_id: str
    outbox: asyncio.Queue[Any] = field(default_factory=asyncio.Queue)
    topics: set[str] = field(default_factory=set)
    client_type: str = ""
    access_key: str | None = None
    """With ACL on, the account that opened the stream (None: a white-listed address)."""
    context: Any = None


class TelemetryStreams:
    def __init__(self, proto: Protocol, config: ProxyConfig, routes: RouteCache, brokers: BrokerLinks,
                 groups: GroupPolicies, acl: ProxyAcl | None, status: StatusOf,
                 on_end: Callable[[str], None] = lambda client_id: None) -> None:
        self.p = proto
        self.config = config
        self.routes = routes
        self.brokers = brokers
        self.groups = groups
        self.acl = acl
        self._status = status
        self.on_end = on_end
        """Told of each client whose session ended (its stream closed or it said it terminates)."""
        self.sessions: dict[str, TelemetrySession] = {}
        self.check_backs = 0

    def end(self, client_id: str) -> None:
        """NotifyClientTermination: the client's session is dropped."""
        self.sessions.pop(client_id, None)
        self.on_end(client_id)

    async def telemetry(self, request_iterator: Any, context: Any) -> AsyncIterator[Any]:
        """The stream: the client's commands read as they come, answers and the brokers'
        check-backs written as they are put in its outbox; the session ends with the stream."""
        client_id = client_id_of(context)
        if not client_id:
            yield self.p.new("TelemetryCommand", status=self._status("CLIENT_ID_REQUIRED", "client id is required"))
            return
        session = TelemetrySession(client_id, context=context)
        if self.acl is not None:
            try:
                session.access_key = self.acl.authenticate(context)
            except ProxyError as e:
                yield self.p.new("TelemetryCommand", status=self._status(e.code, e.message))
                return
        self.sessions[client_id] = session
        reader = asyncio.ensure_future(self._read(session, request_iterator))
        try:
            while True:
                getter = asyncio.ensure_future(session.outbox.get())
                done, _ = await asyncio.wait({getter, reader}, return_when=asyncio.FIRST_COMPLETED)
                if getter in done:
                    yield getter.result()
                    continue
                getter.cancel()
                while not session.outbox.empty():
                    yield session.outbox.get_nowait()
                return
        finally:
            reader.cancel()
            if self.sessions.get(client_id) is session:
                del self.sessions[client_id]
                self.on_end(client_id)

    async def _read(self, session: TelemetrySession, request_iterator: Any) -> None:
        async for cmd in request_iterator:
            if isinstance(cmd, Undecodable):
                session.outbox.put_nowait(self.p.new("TelemetryCommand", status=self._status("BAD_REQUEST",
                                                                                             cmd.message)))
                continue
            kind = cmd.WhichOneof("command")
            if kind == "settings":
                if self.acl is not None:
                    try:
                        self.acl.authorize(session.access_key, session.context, settings_needs(cmd.settings))
                    except ProxyError as e:  # answered, and the stream ends: nothing of it is registered
                        session.outbox.put_nowait(self.p.new("TelemetryCommand",
                                                             status=self._status(e.code, e.message)))
                        return
                    ACTING_AS.set(self.acl.acting_as(session.access_key))
                await self._on_settings(session, cmd.settings)
            elif kind == "thread_stack_trace" or kind == "verify_message_result":
                log.info("client %s answered %s", session.client_id, kind)
            else:
                session.outbox.put_nowait(self.p.new("TelemetryCommand", status=self._status(
                    "UNRECOGNIZED_CLIENT_TYPE" if kind is None else "NOT_IMPLEMENTED",
                    f"telemetry command {kind} is not supported")))

    async def _on_settings(self, session: TelemetrySession, settings: Any) -> None:
        client = json_format.MessageToDict(settings, preserving_proto_field_name=True)
        session.client_type = str(client.get("client_type", ""))
        policy = await self._group_policy(settings)
        answer = self.p.new("Settings")
        json_format.ParseDict(server_settings(client, self.config, policy.fifo, policy.retry_max_times), answer)
        session.outbox.put_nowait(self.p.new("TelemetryCommand", status=self._status("OK", "OK"), settings=answer))
        if settings.HasField("publishing"):
            topics = {str(t.name) for t in settings.publishing.topics}
            session.topics = topics
            addrs: list[str] = []
            for topic in topics:
                try:
                    route = await self.routes.get(check_topic(topic))
                except ProxyError:
                    continue
                addrs.extend(q.broker_addr for q in routing.write_queues(route))
            await self.brokers.add_producer_groups(topics, sorted(set(addrs)))

    async def _group_policy(self, settings: Any) -> GroupPolicy:
        """A consumer's group policy for its Settings (the defaults for a producer, or when it cannot
        be read: the Settings are answered whatever happens, or the client never starts)."""
        if not settings.HasField("subscription") or not settings.subscription.subscriptions:
            return GroupPolicy()
        group = str(settings.subscription.group.name)
        try:
            return await self.groups.get(check_group(group), check_topic(str(settings.subscription.subscriptions[0]
                                                                              .topic.name)))
        except ProxyError as e:
            log.warning("settings of group %s answered with the defaults: %s", group, e.message)
            return GroupPolicy()

    def on_check(self, broker_addr: str, cmd: RemotingCommand) -> None:
        """A broker asks about a half of a topic our clients publish: to one of them, as a
        RecoverOrphanedTransactionCommand on its Telemetry stream."""
        ext = {k: str(v) for k, v in (cmd.ext_fields or {}).items()}
        topic = ext.get("topic", "")
        session = next((s for s in self.sessions.values() if topic in s.topics), None)
        if session is None:
            log.info("check-back of %s from %s: no producer of it is connected", topic, broker_addr)
            return
        try:
            halves = decode_messages(cmd.body or b"")
            if not halves:
                raise ProxyError("BAD_REQUEST", "check-back without a message")
            command = self.p.new("RecoverOrphanedTransactionCommand")
            json_format.ParseDict(txn.recover_command(ext, halves[0]), command)
        except (ProxyError, InvalidInput, ValueError, json_format.ParseError) as e:
            log.warning("check-back from %s not relayed: %s", broker_addr, e)
            return
        self.check_backs += 1
        session.outbox.put_nowait(self.p.new("TelemetryCommand", recover_orphaned_transaction_command=command))
