"""A RocketMQ remoting server on the actor's own event loop (NettyRemotingServer's job).

Every request is handled in the loop turn that decoded it, like any actor method, so the tables
need no lock and no copy. A handler may also return an awaitable (work done off the loop); its
answer is written whenever it is ready, matched by opaque, so many requests can be in flight on one
connection. Oneway requests are never answered. `invoke` sends a client a request over its own
connection and awaits the answer frame (matched by opaque, namesrv.remoting.invoke).

A connection that sends a malformed frame is closed (and logged) without touching any other; a
connection idle for longer than `idle_timeout_s` is closed, as RocketMQ's idle handler does; both
close events reach `on_close`, where a NameServer drops the brokers registered through it.

Memory a client can make the server hold before any of its requests is authenticated (which
happens only once a whole frame is in) is bounded (`ServerLimits`, namesrv.remoting.limits): at
most `max_connections` connections; each reads at most `small_frame_max_length` bytes ahead into a
frame it has no reservation for; a frame longer than that must be of a code that carries big bodies (read from its
header before its body) and reserves its whole length from a server-wide budget of
`pending_frames_max_bytes` before more of it is read; a connection that finds the budget spent
stops reading (its bytes wait in the kernel) until a frame completes or a connection closes. A
closed connection's buffer is dropped at once.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Callable, Coroutine
from typing import Any

from namesrv.remoting.codec import encode_command
from namesrv.remoting.connection import CloseHandler, Connection, Handler
from namesrv.remoting.invoke import PendingCalls
from namesrv.remoting.limits import BudgetWaiter, FrameBudget, HeapTrim, ServerLimits, ServerStats
from namesrv.remoting.wire_command import RemotingCommand

log = logging.getLogger(__name__)


class RemotingServer:
    READ_CHUNK = 256 * 1024
    """At most this much is read from a socket at once (asyncio's own read size)."""
    READ_BUDGET = 1024 * 1024
    """Bytes read from all connections in one loop turn before the rest waits for the next turn:
    300 brokers sending 1.6 MB registrations at once would otherwise be read (and copied) in one
    turn of tens of ms while route queries wait (2 MiB still made turns of 10-14 ms of reads at
    the start of such a burst). Once it is spent, further reads in the turn are SPENT_TURN_READ
    bytes at most, a connection left inside a frame pauses (a route query never does), a client
    known to send big frames pauses before its read (`_pause_bulk`), and paused ones resume
    RESUME_PER_TURN a turn, in order."""
    SPENT_TURN_READ = 4096
    RESUME_PER_TURN = READ_BUDGET // READ_CHUNK

    def __init__(self, name: str, handler: Handler, on_close: CloseHandler, idle_timeout_s: float,
                 spawn: Callable[[Coroutine[Any, Any, None]], object], limits: ServerLimits | None = None) -> None:
        self.name = name
        self.limits = limits if limits is not None else ServerLimits()
        self.refused_connections = 0
        self.buffered = 0
        self.budget = FrameBudget(self.limits.pending_frames_max_bytes)
        """The pending-frame budget large partial frames reserve before more of them is read."""
        self.heap_trim = HeapTrim()
        self._scratch = bytearray(self.READ_CHUNK)
        self.handler = handler
        self.on_close = on_close
        self.idle_timeout_s = idle_timeout_s
        self.spawn = spawn
        self.connections: set[Connection] = set()
        self.by_token: dict[str, Connection] = {}
        self.pending = PendingCalls()
        self.accepted = 0
        self.requests = 0
        self.bad_frames = 0
        self.idle_closed = 0
        self.budget_pauses = 0
        self.budget_paused: list[Connection] = []
        self._turn_bytes = 0
        self._turn_reset_scheduled = False
        self._server: asyncio.Server | None = None
        self._sock: socket.socket | None = None
        self.host = ""
        self.port = 0

    def connection(self, token: str) -> Connection | None:
        """The open connection with this token (what a processor knows a client's channel by)."""
        return self.by_token.get(token)

    async def invoke(self, token: str, request: RemotingCommand, timeout_s: float) -> RemotingCommand:
        """Send `request` to the client on connection `token` and await its answer (invokeSync;
        namesrv.remoting.invoke): ClientCallError when it is not connected, ClientCallTimeout."""
        conn = self.by_token.get(token)
        request.opaque = self.pending.next_opaque()
        if conn is None or conn.transport is None or conn.transport.is_closing():
            return await self.pending.call(token, request, None, timeout_s)
        conn.transport.write(encode_command(request))
        return await self.pending.call(token, request, conn.decoder, timeout_s)

    def read_buffer(self, n: int) -> memoryview:
        """The first `n` bytes (at most READ_CHUNK) of the one scratch buffer every connection
        reads into: the loop reads one socket at a time and each read is fed to its decoder at
        once, so the server holds one read buffer, not one per connection."""
        return memoryview(self._scratch)[: min(n, self.READ_CHUNK)]

    @property
    def budget_waiters(self) -> list[BudgetWaiter]:
        """Connections that stopped reading until the pending-frame budget has room, in order."""
        return self.budget.waiters

    def over_read_budget(self, n: int) -> bool:
        """Count `n` bytes read in this loop turn; True once the turn's budget is spent."""
        if not self._turn_reset_scheduled:
            self._turn_reset_scheduled = True
            asyncio.get_event_loop().call_soon(self._next_turn)  # runs after this turn's reads
        spent_before = self._turn_bytes > self.READ_BUDGET
        self._turn_bytes += n
        if self._turn_bytes > self.READ_BUDGET:
            self.budget_pauses += 1
            if not spent_before:
                self._pause_bulk()
            return True
        return False

    def _pause_bulk(self) -> None:
        """The turn's budget is just spent: every client that sends big frames stops reading before
        the loop gets to its read in this turn (at a burst's start, 300 brokers' connections are
        ready at once: a small read, a decode and a pause each cost the turn ~10 ms); they resume
        RESUME_PER_TURN a turn with the others. Clients of small requests read on."""
        paused = self.budget_paused
        for conn in self.connections:
            if conn.bulk and conn.pause_for_turn():
                paused.append(conn)

    def turn_spent(self) -> bool:  # this loop turn has read its READ_BUDGET
        return self._turn_bytes > self.READ_BUDGET

    def _next_turn(self) -> None:
        self._turn_bytes = 0
        n, paused = self.RESUME_PER_TURN, self.budget_paused
        resumed, self.budget_paused = paused[:n], paused[n:]
        self._turn_reset_scheduled = bool(self.budget_paused)
        if self.budget_paused:  # the rest in the next turns, RESUME_PER_TURN each
            asyncio.get_event_loop().call_soon(self._next_turn)
        for conn in resumed:
            conn.resume_after_budget()

    def bind(self, host: str, port: int) -> int:
        """Bind host:port now (port 0: any free port), so a taken port fails the caller at once;
        returns the bound port. `serve()` then accepts connections."""
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
            sock.listen(1024)
        except OSError:
            sock.close()
            raise
        sock.setblocking(False)
        self._sock = sock
        self.host = host
        self.port = sock.getsockname()[1]
        return self.port

    async def serve(self) -> None:
        if self._sock is None:
            raise RuntimeError("bind() first")
        loop = asyncio.get_event_loop()
        self._server = await loop.create_server(lambda: Connection(self), sock=self._sock)
        log.info("%s: remoting server listening on %s:%d", self.name, self.host, self.port)

    async def stop(self) -> None:
        if self._server is None:
            if self._sock is not None:
                self._sock.close()
            return
        self._server.close()
        for conn in list(self.connections):
            conn.close("server shutting down")
        await self._server.wait_closed()
        self._server = None

    def stats(self) -> ServerStats:
        return ServerStats(len(self.connections), self.accepted, self.requests, self.bad_frames, self.idle_closed,
                           self.refused_connections, self.buffered, self.budget.reserved, self.budget.waits)
