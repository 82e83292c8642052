"""A RocketMQ remoting server on the actor's own event loop (NettyRemotingServer's job).

Every request is handled in the loop turn that decoded it, like any actor method, so the tables
need no lock and no copy. A handler may also return an awaitable (work done off the loop); its
answer is written whenever it is ready, matched by opaque, so many requests can be in flight on one
connection. Oneway requests are never answered.

A connection that sends a malformed frame is closed (and logged) without touching any other; a
connection idle for longer than `idle_timeout_s` is closed, as RocketMQ's idle handler does; both
close events reach `on_close`, where a NameServer drops the brokers registered through it.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import logging
import socket
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from namesrv.protocol.codes import ResponseCode
from namesrv.remoting.codec import FrameDecoder, FrameError, RemotingCommand, encode_command

log = logging.getLogger(__name__)

Handler = Callable[["Connection", RemotingCommand], RemotingCommand | Awaitable[RemotingCommand | None] | None]
CloseHandler = Callable[["Connection", str], None]

_ids = itertools.count(1)


@dataclass(frozen=True, slots=True)
class ServerStats:
    connections: int
    accepted: int
    requests: int
    bad_frames: int
    idle_closed: int


class Connection(asyncio.Protocol):
    def __init__(self, server: RemotingServer) -> None:
        self.server = server
        self.decoder = FrameDecoder()
        self.transport: asyncio.Transport | None = None
        self.peer = "?"
        self.token = ""
        self.last_read = time.monotonic()
        self.closed_reason: str | None = None
        self.write_paused = False
        self._idle: asyncio.TimerHandle | None = None

    # ------------------------------------------------------------------ asyncio callbacks
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self.token = f"tcp:{self.peer}#{next(_ids)}"
        self.server.connections.add(self)
        self.server.by_token[self.token] = self
        self.server.accepted += 1
        self._arm_idle(self.server.idle_timeout_s)

    def data_received(self, data: bytes) -> None:
        self.last_read = time.monotonic()
        if self.server.over_read_budget(len(data)) and self.transport is not None:
            self.transport.pause_reading()  # the rest next loop turn (RemotingServer.READ_BUDGET)
            self.server.budget_paused.append(self)
        try:
            commands = self.decoder.feed(data)
        except FrameError as e:
            self.server.bad_frames += 1
            log.warning("%s: closing %s: %s", self.server.name, self.peer, e)
            self.close(f"bad frame: {e}")
            return
        for cmd in commands:
            if cmd.is_response:
                continue  # this server sends no requests, so no response can be awaited
            self.server.requests += 1
            self._dispatch(cmd)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._idle is not None:
            self._idle.cancel()
        self.server.connections.discard(self)
        self.server.by_token.pop(self.token, None)
        reason = self.closed_reason or (f"error: {exc}" if exc else "closed by peer")
        self.server.on_close(self, reason)

    def pause_writing(self) -> None:  # the peer does not read its answers: stop reading its requests
        self.write_paused = True
        if self.transport is not None:
            self.transport.pause_reading()

    def resume_writing(self) -> None:
        self.write_paused = False
        if self.transport is not None and not self.transport.is_closing():
            self.transport.resume_reading()

    def resume_after_budget(self) -> None:
        if self.transport is not None and not self.transport.is_closing() and not self.write_paused:
            self.transport.resume_reading()

    # ------------------------------------------------------------------ requests
    def _dispatch(self, cmd: RemotingCommand) -> None:
        try:
            answer = self.server.handler(self, cmd)
        except Exception as e:  # a bug: answer anyway, as RocketMQ's processRequestCommand does
            log.exception("%s: request %d from %s failed", self.server.name, cmd.code, self.peer)
            answer = cmd.response(ResponseCode.SYSTEM_ERROR, f"{type(e).__name__}: {e}")
        if inspect.isawaitable(answer):
            self.server.spawn(self._finish(cmd, answer))
        else:
            self.write(cmd, answer)

    async def _finish(self, cmd: RemotingCommand, pending: Awaitable[RemotingCommand | None]) -> None:
        try:
            answer = await pending
        except Exception as e:
            log.exception("%s: request %d from %s failed", self.server.name, cmd.code, self.peer)
            answer = cmd.response(ResponseCode.SYSTEM_ERROR, f"{type(e).__name__}: {e}")
        self.write(cmd, answer)

    def write(self, request: RemotingCommand, answer: RemotingCommand | None) -> None:
        if answer is None or request.is_oneway or self.transport is None or self.transport.is_closing():
            return
        try:
            frame = encode_command(answer)
        except FrameError as e:
            log.error("%s: answer to %d for %s too large: %s", self.server.name, request.code, self.peer, e)
            frame = encode_command(request.response(ResponseCode.SYSTEM_ERROR, str(e)))
        self.transport.write(frame)

    # ------------------------------------------------------------------ lifecycle
    def _arm_idle(self, delay: float) -> None:
        if delay > 0:
            self._idle = asyncio.get_event_loop().call_later(delay, self._check_idle)

    def _check_idle(self) -> None:
        idle = time.monotonic() - self.last_read
        timeout = self.server.idle_timeout_s
        if idle >= timeout:
            self.server.idle_closed += 1
            log.info("%s: closing %s, idle for %.0f s", self.server.name, self.peer, idle)
            self.close(f"idle for {idle:.0f} s")
        else:
            self._arm_idle(timeout - idle)

    def close(self, reason: str) -> None:
        if self.closed_reason is None:
            self.closed_reason = reason
        if self.transport is not None:
            self.transport.close()


class RemotingServer:
    READ_BUDGET = 2 * 1024 * 1024
    """Bytes read from all connections in one loop turn before the rest waits for the next turn:
    300 brokers sending 1.6 MB registrations at once would otherwise be read (and copied) in one
    turn of tens of milliseconds while route queries wait."""

    def __init__(self, name: str, handler: Handler, on_close: CloseHandler, idle_timeout_s: float,
                 spawn: Callable[[Coroutine[Any, Any, None]], object]) -> None:
        self.name = name
        self.handler = handler
        self.on_close = on_close
        self.idle_timeout_s = idle_timeout_s
        self.spawn = spawn
        self.connections: set[Connection] = set()
        self.by_token: dict[str, Connection] = {}
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

    def over_read_budget(self, n: int) -> bool:
        """Count `n` bytes read in this loop turn; True once the turn's budget is spent."""
        if not self._turn_reset_scheduled:
            self._turn_reset_scheduled = True
            asyncio.get_event_loop().call_soon(self._next_turn)  # runs after this turn's reads
        self._turn_bytes += n
        if self._turn_bytes > self.READ_BUDGET:
            self.budget_pauses += 1
            return True
        return False

    def _next_turn(self) -> None:
        self._turn_reset_scheduled = False
        self._turn_bytes = 0
        paused, self.budget_paused = self.budget_paused, []
        for conn in paused:
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
        return ServerStats(len(self.connections), self.accepted, self.requests, self.bad_frames, self.idle_closed)
