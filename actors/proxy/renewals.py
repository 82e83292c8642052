"""Invisible time renewed while a client holds a message (RocketMQ's proxy ReceiptHandleProcessor).

A receive with `auto_renew` (a PushConsumer's) is popped for `default_invisible_time_ms`; the proxy
then keeps each message it delivered invisible while the client still holds it: once less than
`renew_ahead_ms` remain, CHANGE_MESSAGE_INVISIBLETIME gives it `default_invisible_time_ms` more, as
the account of the receive (actors.proxy.acl.ACTING_AS). The client knows only the handle it was
given: its ack, change or forward of that handle is made with the latest one (`take`), and renewal
stops. It stops too when the client's Telemetry stream ends (`drop_client`: a client that is gone
holds nothing, its messages come back after their invisible time) and after `renew_max_ms` (the
message comes back; a listener that never returns does not hold it for ever)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from actors.proxy.acl import ACTING_AS
from actors.proxy.brokers import BrokerLinks
from namesrv.acl.plain_acl import SessionCredentials
from namesrv.common.clock import system_clock
from namesrv.protocol.codes import BrokerRequestCode, ResponseCode
from namesrv.proxy import consume as cm
from namesrv.proxy.settings import ProxyConfig
from namesrv.proxy.status import ProxyError

log = logging.getLogger(__name__)
MasterOf = Callable[[str, str], Awaitable[str]]


@dataclass
class Renewal:
    client_id: str
    group: str
    topic: str
    handle: cm.ReceiptHandle
    """The latest handle (the one the broker knows)."""
    acting_as: SessionCredentials | None
    started_ms: int
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    """Held while a renewal is under way: the client's ack waits for the handle it makes."""


class Renewals:
    def __init__(self, config: ProxyConfig, brokers: BrokerLinks, master_of: MasterOf) -> None:
        self.config = config
        self.brokers = brokers
        self.master_of = master_of
        self.held: dict[str, Renewal] = {}
        """The handle the client was given -> its renewal."""
        self.renewed = 0

    def add(self, client_id: str, group: str, topic: str, handle_text: str) -> None:
        handle = cm.decode_receipt_handle(handle_text)
        self.held[handle_text] = Renewal(client_id, group, topic, handle, ACTING_AS.get(), system_clock())

    async def take(self, handle_text: str) -> str:
        """The handle to act on for the one the client sent (its latest renewal, if it was renewed,
        after one under way); renewal of it stops."""
        renewal = self.held.pop(handle_text, None)
        if renewal is None:
            return handle_text
        async with renewal.lock:
            return renewal.handle.encode()

    def drop_client(self, client_id: str) -> None:
        for text in [t for t, r in self.held.items() if r.client_id == client_id]:
            del self.held[text]

    async def run(self) -> None:
        """Renew what falls due, a fraction of `renew_ahead_ms` at a time (production pacing)."""
        while True:
            await asyncio.sleep(max(0.05, self.config.renew_ahead_ms / 4000))
            await self.renew_due(system_clock())

    async def renew_due(self, now_ms: int) -> None:
        for text, r in list(self.held.items()):
            if r.handle.next_visible_ms - now_ms > self.config.renew_ahead_ms:
                continue
            if now_ms - r.started_ms >= self.config.renew_max_ms:
                log.info("%s held by %s past renew_max_ms: no longer renewed", text, r.client_id)
                self.held.pop(text, None)
                continue
            try:
                async with r.lock:
                    if text in self.held:  # not taken while this waited
                        await self._renew(r)
            except ProxyError as e:  # acked meanwhile, revived, or its broker gone: nothing to hold
                log.info("renewal of %s stopped: %s", text, e.message)
                self.held.pop(text, None)

    async def _renew(self, r: Renewal) -> None:
        token = ACTING_AS.set(r.acting_as)
        try:
            addr = await self.master_of(r.topic, r.handle.extra.broker_name)
            answer = await self.brokers.invoke(addr, BrokerRequestCode.CHANGE_MESSAGE_INVISIBLETIME,
                                               cm.change_header(r.group, r.topic, r.handle,
                                                                self.config.default_invisible_time_ms))
        finally:
            ACTING_AS.reset(token)
        if answer.code != ResponseCode.SUCCESS:
            raise ProxyError("INVALID_RECEIPT_HANDLE", answer.remark or str(answer.code))
        r.handle = cm.changed_handle(r.handle, {k: str(v) for k, v in (answer.ext_fields or {}).items()})
        self.renewed += 1
