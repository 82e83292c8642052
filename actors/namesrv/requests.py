"""The NameServer's own stage of its request pipeline (after the ACL hook, before the metrics and
wire-log hooks): DefaultRequestProcessor run to its answer, a big body in slices between which the
loop answers other requests, the bookkeeping after each request, and an answer that waits until
what its request changed in a persisted table is on disk.
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Callable
from dataclasses import dataclass, field

from actors.namesrv.housekeeping import BrokerChannel, BrokerHousekeepingService
from actors.runtime.metrics import Metrics
from namesrv.common.persist import BackgroundWriter
from namesrv.common.slices import drive_steps
from namesrv.protocol.codes import RequestCode, ResponseCode
from namesrv.remoting.command import RemotingRequest, RemotingResponse, error
from namesrv.remoting.pipeline import Answer, RequestContext
from namesrv.routeinfo.config_store import ConfigStore
from namesrv.routeinfo.processor import DefaultRequestProcessor

FREEZE_AFTER_BYTES = 256 * 1024
"""After a registration body this big, the tables it grew are moved out of the garbage collector's
sight (`gc.freeze`): a full collection walks every tracked object, which with 10,000s of topics
stalls the loop for tens of milliseconds (hundreds at 300 brokers). The tables are acyclic, so
reference counting still frees what they drop."""

SLICED_BODY_BYTES = 64 * 1024
"""A request body at least this big (a registration of some 500 topics or more) is processed in
slices; smaller ones are answered within one loop turn."""

SLICED_IN_FLIGHT = 1
"""Sliced requests processed at once; later ones wait their turn. One: a route query then waits for
at most one slice, however many brokers register together (every slice of every registration in
flight runs in one loop turn), and only one decoded topic table is held at a time."""


_REGISTER_BROKER = int(RequestCode.REGISTER_BROKER)
_UPDATE_CONFIG = int(RequestCode.UPDATE_NAMESRV_CONFIG)
_ROUTE_QUERY = int(RequestCode.GET_ROUTEINFO_BY_TOPIC)


def _token(channel: object) -> object:
    """What the tables remember a registration's channel by: a Ray channel's token, or a TCP
    connection's token as it is."""
    return channel.token if isinstance(channel, BrokerChannel) else channel


@dataclass(eq=False)
class NamesrvRequests:
    processor: DefaultRequestProcessor
    writer: BackgroundWriter
    config_store: ConfigStore
    housekeeping: BrokerHousekeepingService
    metrics: Metrics
    after_change: Callable[[], None]
    """Acts on what the tables say changed (the controller's)."""
    _sliced_slots: asyncio.Semaphore = field(init=False, default_factory=lambda: asyncio.Semaphore(SLICED_IN_FLIGHT))

    def serve(self, request: RemotingRequest, ctx: RequestContext) -> Answer:
        """The NameServer's processor behind its pipeline (after the ACL hook, before the metrics and
        wire-log hooks): a big body (a registration of 100s of topics) in slices, between which the
        loop answers other requests; anything else within this loop turn, so it is atomic without a
        lock. An answer whose request changed a persisted table (KV, config, a new broker) waits
        until that is on disk."""
        body = request.body
        if body is not None and isinstance(body, (bytes, bytearray)) and len(body) >= SLICED_BODY_BYTES:
            return self._serve_sliced(request, ctx)
        writer = self.writer
        before = writer.submitted
        if request.code == _UPDATE_CONFIG:  # what a failed write puts back
            self.config_store.before_update()
        channel = ctx.channel
        response = self.processor.process_checked(request, _token(channel))
        self.done(request, channel, response)
        if writer.submitted != before:
            return self._when_durable(response, before)
        return response

    def route_query(self, request: RemotingRequest, ctx: RequestContext) -> RemotingResponse:
        """GET_ROUTEINFO_BY_TOPIC, registered in the pipeline on its own: `serve` without what a
        route query never needs (it reads the tables and ignores its body, so it is neither sliced
        nor waits for a write). Of the bookkeeping only `after_change` applies to it: it wakes the
        long-poll waiters once the 'not ready' window is over."""
        response = self.processor.process_checked(request, ctx.channel)
        self.after_change()
        return response

    def handlers(self) -> dict[int, Callable[[RemotingRequest, RequestContext], Answer]]:
        """The codes the pipeline dispatches here on their own; every other code goes to `serve`."""
        return {_ROUTE_QUERY: self.route_query}

    async def _serve_sliced(self, request: RemotingRequest, ctx: RequestContext) -> RemotingResponse:
        async with self._sliced_slots:
            # Yield once first: a burst of registrations whose frames arrived together would
            # otherwise each run its first (for an unchanged one: only) slice in the same loop turn.
            await asyncio.sleep(0)
            before = self.writer.submitted
            # between slices: wake the waiters of the routes written so far
            response: RemotingResponse = await drive_steps(
                self.processor.process_steps(request, _token(ctx.channel)), self.after_change)
            self.done(request, ctx.channel, response)
        return await self._when_durable(response, before)

    async def _when_durable(self, response: RemotingResponse, since: int) -> RemotingResponse:
        failed = await self.writer.written(since)  # not on disk: rolled back, and the caller is told
        return error(ResponseCode.SYSTEM_ERROR, failed) if failed is not None else response

    def done(self, request: RemotingRequest, channel: object, response: RemotingResponse) -> None:
        """Bookkeeping after a request; reads nothing of the request but its code and body size (the
        header was parsed, once, by the processor: a new broker shows in the drained changes)."""
        code = request.code
        if code == _REGISTER_BROKER:
            body = request.body
            if isinstance(body, (bytes, bytearray)) and body:
                self.metrics.inc("registration_bytes", len(body))
                if len(body) >= FREEZE_AFTER_BYTES:
                    gc.freeze()  # see FREEZE_AFTER_BYTES
            if response.ok and isinstance(channel, BrokerChannel):
                self.housekeeping.watch(channel)
        elif code == _UPDATE_CONFIG and response.ok:
            self.config_store.persist()  # the answer waits for it (and is an error if it fails)
        self.after_change()

