"""One client connection of a remoting server (namesrv.remoting.server): its reads into the server's
scratch buffer and frame decoder within the server's memory limits, the dispatch of each request to
the server's handler, and the answers written back (every answer of one read in one write; an
answer given later when it is ready). Oneway requests are never answered.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, cast

from namesrv.protocol.codes import ResponseCode
from namesrv.remoting.codec import EncodedFrame, encode_command_parts
from namesrv.remoting.frame_decoder import FrameDecoder
from namesrv.remoting.invoke import PendingCalls
from namesrv.remoting.limits import FrameBudget, HeapTrim, ServerLimits
from namesrv.remoting.wire_command import ONEWAY_FLAG, RESPONSE_FLAG, FrameError, RemotingCommand

log = logging.getLogger(__name__)

Answer = RemotingCommand | EncodedFrame | None
"""What a handler answers a request with: a command, an already encoded frame, or None (no answer)."""
Handler = Callable[["Connection", RemotingCommand], Answer | Awaitable[Answer]]
CloseHandler = Callable[["Connection", str], None]

_ids = itertools.count(1)
REFUSED = "too many connections"


class ConnectionHost(Protocol):
    """What a connection reads and counts on its server (namesrv.remoting.server.RemotingServer,
    which imports this module: named here by what it offers, not by its class)."""

    SPENT_TURN_READ: int
    name: str
    limits: ServerLimits
    handler: Handler
    on_close: CloseHandler
    spawn: Callable[[Any], object]
    idle_timeout_s: float
    connections: set[Connection]
    by_token: dict[str, Connection]
    pending: PendingCalls
    budget: FrameBudget
    budget_paused: list[Connection]
    heap_trim: HeapTrim
    buffered: int
    accepted: int
    requests: int
    bad_frames: int
    idle_closed: int
    refused_connections: int

    def turn_spent(self) -> bool: ...

    def over_read_budget(self, n: int) -> bool: ...

    def read_buffer(self, n: int) -> memoryview: ...


class Connection(asyncio.BufferedProtocol):
    def __init__(self, server: ConnectionHost) -> None:
        self.server = server
        limits = server.limits
        self.decoder = FrameDecoder()
        if limits.large_codes is not None:
            self.decoder = FrameDecoder(small_frame_limit=limits.small_frame_max_length, large_codes=limits.large_codes)
        self.buffered = 0
        """Bytes this connection's decoder holds (what it adds to `server.buffered`)."""
        self.reserved = 0
        """Budget reserved for the large frame being read (0: none)."""
        self.waiting_for_budget = False
        self.bulk = False
        """This client has sent a frame longer than the small-frame limit (a broker registering, a
        producer's big batch): in a loop turn whose read budget is spent it stops reading at once,
        before its read of the turn (`pause_for_turn`), and reads on in a later turn."""
        self.transport: asyncio.Transport | None = None
        self.peer = "?"
        self.token = ""
        self.last_read = time.monotonic()
        self.closed_reason: str | None = None
        self.write_paused = False
        self._idle: asyncio.TimerHandle | None = None
        self._out: list[bytes] | None = None
        """Answers encoded while this connection's read is being handled: written together, in one
        transport write, when it is done (None: not in a read, answers are written at once)."""
        self.context: Any = None
        """What the server's handler keeps for this connection (e.g. its request context)."""

    # ------------------------------------------------------------------ asyncio callbacks
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's TCP transport is a Transport in all but its class (not a subclass of asyncio's)
        transport = cast(asyncio.Transport, transport)
        self.transport = transport
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self.token = f"tcp:{self.peer}#{next(_ids)}"
        if len(self.server.connections) >= self.server.limits.max_connections:
            self.server.refused_connections += 1
            log.warning("%s: refusing %s: already %d connections", self.server.name, self.peer,
                        len(self.server.connections))
            self.closed_reason = REFUSED
            transport.abort()
            return
        self.server.connections.add(self)
        self.server.by_token[self.token] = self
        self.server.accepted += 1
        self._arm_idle(self.server.idle_timeout_s)

    def get_buffer(self, sizehint: int) -> memoryview:
        """Where the next read goes: the server's scratch buffer, sized so that this connection
        reads no further into a large frame than its reservation allows."""
        if self.reserved:
            allowance = self.reserved - self.decoder.pending_bytes
        else:
            allowance = self.server.limits.small_frame_max_length - self.decoder.pending_bytes
        if self.server.turn_spent():  # a small read only: a whole small request, or a large frame's head
            allowance = min(allowance, self.server.SPENT_TURN_READ)
        return self.server.read_buffer(max(allowance, 1))

    def buffer_updated(self, nbytes: int) -> None:
        self.data_received(self.server.read_buffer(nbytes))

    def data_received(self, data: bytes | memoryview) -> None:
        self.last_read = time.monotonic()
        over_budget = self.server.over_read_budget(len(data))
        completed = self.decoder.completed
        try:
            commands = self.decoder.feed(data)
        except FrameError as e:
            self.server.bad_frames += 1
            log.warning("%s: closing %s: %s", self.server.name, self.peer, e)
            self._release()
            self.close(f"bad frame: {e}")
            return
        self._account(completed)
        if (over_budget and self.decoder.pending_bytes and self.transport is not None and not self.waiting_for_budget
                and self.transport.is_reading()):
            self.transport.pause_reading()  # inside a frame: the rest in a later turn (READ_BUDGET)
            self.server.budget_paused.append(self)
        if not commands:
            return
        out: list[bytes] = []
        self._out = out
        try:
            server = self.server
            for cmd in commands:
                if cmd.flag & RESPONSE_FLAG:  # the answer to a request this server sent (invoke)
                    server.pending.complete(self.token, cmd)
                    continue
                server.requests += 1
                self._dispatch(cmd)
        finally:
            self._out = None
            if out and self.transport is not None and not self.transport.is_closing():
                self.transport.writelines(out)  # every answer of this read: one write (one send)

    def _account(self, completed_before: int) -> None:
        """After a read: the server's count of buffered bytes, this connection's reservation (a
        completed frame gives its own back; a large frame at the head needs one before more of it
        is read), and a pause when the budget is spent."""
        server = self.server
        server.buffered += self.decoder.pending_bytes - self.buffered
        self.buffered = self.decoder.pending_bytes
        if self.reserved and self.decoder.completed != completed_before:
            reserved, self.reserved = self.reserved, 0
            server.budget.release(reserved)
        size = self.decoder.head_frame_size
        if self.reserved or size <= server.limits.small_frame_max_length:
            return
        self.bulk = True
        if server.budget.reserve(size):
            self.reserved = size
        elif not self.waiting_for_budget and self.transport is not None:
            self.waiting_for_budget = True
            server.budget.wait(self)
            self.transport.pause_reading()

    def _release(self) -> None:
        """Give back this connection's buffer and reservation (it is closing)."""
        if self.buffered > self.server.limits.small_frame_max_length:
            self.server.heap_trim.soon()
        self.server.buffered -= self.buffered
        self.buffered = 0
        self.decoder.clear()
        if self.reserved:
            reserved, self.reserved = self.reserved, 0
            self.server.budget.release(reserved)

    def retry_budget(self) -> bool:
        """Budget was freed: reserve it and read on (False: still not enough)."""
        if self.transport is None or self.transport.is_closing():
            self.waiting_for_budget = False
            return True
        size = self.decoder.head_frame_size
        if not self.server.budget.reserve(size):
            return False
        self.reserved = size
        self.waiting_for_budget = False
        if not self.write_paused:
            self.transport.resume_reading()
        return True

    def connection_lost(self, exc: Exception | None) -> None:
        if self._idle is not None:
            self._idle.cancel()
        if self.closed_reason == REFUSED:
            return  # never counted as a connection
        self._release()
        self.server.connections.discard(self)
        self.server.by_token.pop(self.token, None)
        reason = self.closed_reason or (f"error: {exc}" if exc else "closed by peer")
        self.server.pending.connection_closed(self.token, reason)
        self.server.on_close(self, reason)

    def pause_writing(self) -> None:  # the peer does not read its answers: stop reading its requests
        self.write_paused = True
        if self.transport is not None:
            self.transport.pause_reading()

    def resume_writing(self) -> None:
        self.write_paused = False
        if self.transport is not None and not self.transport.is_closing() and not self.waiting_for_budget:
            self.transport.resume_reading()

    def pause_for_turn(self) -> bool:
        """Stop reading until a later turn (the turn's read budget is spent); False: not reading."""
        transport = self.transport
        if transport is None or transport.is_closing() or not transport.is_reading():
            return False
        transport.pause_reading()
        return True

    def resume_after_budget(self) -> None:
        if (self.transport is not None and not self.transport.is_closing() and not self.write_paused
                and not self.waiting_for_budget):
            self.transport.resume_reading()

    # ------------------------------------------------------------------ requests
    def _dispatch(self, cmd: RemotingCommand) -> None:
        try:
            answer = self.server.handler(self, cmd)
        except Exception as e:  # a bug: answer anyway, as RocketMQ's processRequestCommand does
            log.exception("%s: request %d from %s failed", self.server.name, cmd.code, self.peer)
            answer = cmd.response(ResponseCode.SYSTEM_ERROR, f"{type(e).__name__}: {e}")
        kind = type(answer)
        if kind is tuple or kind is RemotingCommand or answer is None or not inspect.isawaitable(answer):
            self.write(cmd, cast(Answer, answer))
        else:
            self.server.spawn(self._finish(cmd, answer))

    async def _finish(self, cmd: RemotingCommand, pending: Awaitable[Answer]) -> None:
        try:
            answer = await pending
        except Exception as e:
            log.exception("%s: request %d from %s failed", self.server.name, cmd.code, self.peer)
            answer = cmd.response(ResponseCode.SYSTEM_ERROR, f"{type(e).__name__}: {e}")
        self.write(cmd, answer)

    def write(self, request: RemotingCommand, answer: Answer) -> None:
        """Write the answer to `request` (none to a oneway request): inside a read, with the read's
        other answers (written once the read is handled, if the connection is still open)."""
        if answer is None or request.flag & ONEWAY_FLAG:
            return
        if type(answer) is tuple:  # encoded by the handler
            head, body = answer
        else:
            try:
                head, body = encode_command_parts(cast(RemotingCommand, answer))
            except FrameError as e:
                log.error("%s: answer to %d for %s too large: %s", self.server.name, request.code, self.peer, e)
                head, body = encode_command_parts(request.response(ResponseCode.SYSTEM_ERROR, str(e)))
        out = self._out
        if out is not None:
            out.append(head)
            if body:
                out.append(body)
            return
        if self.transport is None or self.transport.is_closing():
            return
        if body:
            self.transport.writelines((head, body))
        else:
            self.transport.write(head)

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
