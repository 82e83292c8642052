"""Requests a server sends a client over the client's own connection and the answers it awaits
(RocketMQ's NettyRemotingServer.invokeSync on a channel, with its responseTable).

A request gets an opaque of the server's own counter and a future; a RESPONSE frame the client
sends back with that opaque, on that connection, completes it. The caller awaits the future with
a timeout on the event loop (never blocking it): no answer in time raises ClientCallTimeout and the
entry is dropped, so a late answer is ignored; the connection closing raises ClientCallError at
once. A response frame nobody awaits (late, or an opaque this server never sent) is counted and
dropped, as RocketMQ logs "receive response, but not matched any request".

While a call to a client is in flight, that connection's decoder also lets a SUCCESS frame be
longer than the small-frame limit (a ConsumerRunningInfo of many queues is): the answer reserves
the server's pending-frame budget like any large frame, and the limit is back once no call waits.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Awaitable, Callable

from namesrv.protocol.codes import ResponseCode
from namesrv.remoting.frame_decoder import FrameDecoder
from namesrv.remoting.wire_command import RemotingCommand

log = logging.getLogger(__name__)

CallClient = Callable[[str, RemotingCommand, float], Awaitable[RemotingCommand]]
"""Send a client (by its connection's token) a request and await its answer, within the timeout
(RemotingServer.invoke; RocketMQ's Broker2Client.callClient)."""


class ClientCallError(Exception):
    """A request to a client could not be answered (its connection closed, or could not be sent)."""


class ClientCallTimeout(ClientCallError):
    """The client did not answer in time (RocketMQ's RemotingTimeoutException)."""


class PendingCalls:
    def __init__(self) -> None:
        self._opaque = itertools.count(1)
        self._waiting: dict[tuple[str, int], asyncio.Future[RemotingCommand]] = {}
        self._in_flight: dict[str, tuple[int, frozenset[int]]] = {}
        """Per connection: calls waiting on it, and its decoder's large codes before the first."""
        self.unmatched = 0
        """Response frames that matched no request in flight (late, or never asked)."""

    def __len__(self) -> int:
        return len(self._waiting)

    def next_opaque(self) -> int:
        return next(self._opaque) & 0x7FFFFFFF

    async def call(self, token: str, request: RemotingCommand, decoder: FrameDecoder | None,
                   timeout_s: float) -> RemotingCommand:
        """Await the answer to `request` (already given its opaque and sent) from the connection
        `token` whose frames `decoder` reads (None: it was not sent, the connection is closing)."""
        if decoder is None:
            raise ClientCallError(f"connection {token} is closed")
        key = (token, request.opaque)
        future: asyncio.Future[RemotingCommand] = asyncio.get_running_loop().create_future()
        self._waiting[key] = future
        self._widen(token, decoder, 1)
        try:
            return await asyncio.wait_for(future, timeout_s)
        except TimeoutError:
            raise ClientCallTimeout(f"wait response on the channel <{token}> timeout, {int(timeout_s * 1000)}(ms)") \
                from None
        finally:
            self._waiting.pop(key, None)
            self._widen(token, decoder, -1)

    def _widen(self, token: str, decoder: FrameDecoder, delta: int) -> None:
        count, base = self._in_flight.get(token, (0, decoder.large_codes))
        count += delta
        if count > 0:
            self._in_flight[token] = (count, base)
            decoder.large_codes = base | {ResponseCode.SUCCESS}
        else:
            self._in_flight.pop(token, None)
            decoder.large_codes = base

    def complete(self, token: str, response: RemotingCommand) -> bool:
        """A response frame arrived on connection `token`: True when it answered a request in flight."""
        future = self._waiting.pop((token, response.opaque), None)
        if future is None or future.done():
            self.unmatched += 1
            log.warning("response %d (opaque %d) from %s matches no request in flight", response.code,
                        response.opaque, token)
            return False
        future.set_result(response)
        return True

    def connection_closed(self, token: str, reason: str) -> None:
        """Every request in flight on that connection fails now."""
        for key in [k for k in self._waiting if k[0] == token]:
            future = self._waiting.pop(key)
            if not future.done():
                future.set_exception(ClientCallError(f"connection {token} closed: {reason}"))
