"""Requests a server sends a client over the client's own connection and the answers it awaits
(RocketMQ's NettyRemotingServer.invokeSync on a channel, with its responseTable).

A request gets an opaque of the server's own counter and a future; a RESPONSE frame the client
sends back with that opaque, on that connection, completes it. The caller awaits the future with
a timeout on the event loop (never blocking it): no answer in time raises ClientCallTimeout and the
entry is dropped, so a late answer is ignored; the connection closing raises ClientCallError at
once. A response frame nobody awaits (late, or an opaque this server never sent) is counted and
dropped, as RocketMQ logs "receive response, but not matched any request".
"""

from __future__ import annotations

import asyncio
import itertools
import logging

from namesrv.remoting.codec import RemotingCommand

log = logging.getLogger(__name__)


class ClientCallError(Exception):
    """A request to a client could not be answered (its connection closed, or could not be sent)."""


class ClientCallTimeout(ClientCallError):
    """The client did not answer in time (RocketMQ's RemotingTimeoutException)."""


class PendingCalls:
    def __init__(self) -> None:
        self._opaque = itertools.count(1)
        self._waiting: dict[tuple[str, int], asyncio.Future[RemotingCommand]] = {}
        self.unmatched = 0
        """Response frames that matched no request in flight (late, or never asked)."""

    def __len__(self) -> int:
        return len(self._waiting)

    def next_opaque(self) -> int:
        return next(self._opaque) & 0x7FFFFFFF

    async def call(self, token: str, request: RemotingCommand, send: bool, timeout_s: float) -> RemotingCommand:
        """Await the answer to `request` (already given its opaque) from the connection `token`;
        `send` says whether it went out (False: the connection is closing)."""
        if not send:
            raise ClientCallError(f"connection {token} is closed")
        key = (token, request.opaque)
        future: asyncio.Future[RemotingCommand] = asyncio.get_running_loop().create_future()
        self._waiting[key] = future
        try:
            return await asyncio.wait_for(future, timeout_s)
        except TimeoutError:
            raise ClientCallTimeout(f"wait response on the channel <{token}> timeout, {int(timeout_s * 1000)}(ms)") \
                from None
        finally:
            self._waiting.pop(key, None)

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
