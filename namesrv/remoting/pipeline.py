"""One request pipeline for every server: RocketMQ's `NettyRemotingAbstract.processRequestCommand`
with its RPC hooks.

    TCP bytes -> FrameDecoder -> RemotingCommand -> to_request -> RemotingRequest --+
    a Ray call ------------------------------------------------> RemotingRequest --+
        -> each hook's `before` (the ACL: may refuse, and then nothing else runs)
        -> the handler registered for the code (else the server's default processor)
        -> each hook's `after` (metrics, the wire log), with the answer
        -> RemotingResponse -> (TCP only) the server's encoder -> RemotingCommand -> bytes

Both transports of both servers enter here with the same neutral request, so they pass the same
checks. A handler answers at once (a RemotingResponse) or later (an awaitable of one). A handler
that raises is answered by `refusal_of`, the same whether it raised at once or later: an
`MQServerError` with its own code and remark, a request that fails validation SYSTEM_ERROR
"invalid request: ...", anything else (a bug) SYSTEM_ERROR with its description, logged with its
stack, as RocketMQ's processRequestCommand answers a processor's exception. Adding a request code to
a server means writing its handler and adding one line to that server's handler table.
"""

from __future__ import annotations

import inspect
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from namesrv.protocol.codes import ResponseCode
from namesrv.protocol.msgpack_codec import CodecError
from namesrv.protocol.types import InvalidInput, describe_errors
from namesrv.remoting.codec import EncodedFrame
from namesrv.remoting.command import MQServerError, RemotingRequest, RemotingResponse, error
from namesrv.remoting.wire_command import RemotingCommand

log = logging.getLogger(__name__)

RAY_REMOTE = "ray"
"""`RequestContext.remote` of a request that came as a Ray call."""


@dataclass(frozen=True, slots=True)
class RequestContext:
    """Who sent a request, however it travelled."""

    channel: Any = None
    """What it came through: a TCP connection's token, or what a Ray caller asks to be watched by."""
    remote: str = RAY_REMOTE
    """The peer's host:port over TCP; "ray" for a Ray call."""

    @property
    def transport(self) -> str:
        return "ray" if self.remote == RAY_REMOTE else "tcp"

    def address_or(self, fallback: str) -> str:
        """The peer's host:port over TCP, `fallback` for a Ray call (which has no socket): what a
        message's born host is, for one."""
        return self.remote if self.transport == "tcp" else fallback


Answer = RemotingResponse | Awaitable[RemotingResponse]
Handler = Callable[[RemotingRequest, RequestContext], Answer]
WireAnswer = RemotingCommand | EncodedFrame
"""A TCP answer: the command to encode, or its frame already encoded."""
Encoder = Callable[[RemotingCommand, RemotingResponse], WireAnswer]


class RPCHook:
    """Runs around every request of a pipeline (RocketMQ's RPCHook). `before` may refuse a request
    with an answer; `after` sees every answer, refusals included, with the time it took."""

    def before(self, request: RemotingRequest, ctx: RequestContext) -> RemotingResponse | None:
        return None

    def after(self, request: RemotingRequest, ctx: RequestContext, response: RemotingResponse,
              elapsed_ms: float) -> None:
        return None


class RequestPipeline:
    def __init__(self, name: str, encoder: Encoder) -> None:
        """`encoder` turns an answer into the wire command (or its encoded frame) answering a TCP
        request."""
        self.name = name
        self.encoder = encoder
        self.handlers: dict[int, Handler] = {}
        self.default: Handler | None = None
        self.hooks: list[RPCHook] = []
        self._before: list[RPCHook] = []
        """The hooks that define `before` (the rest would only be called to return None)."""

    # ------------------------------------------------------------------ wiring
    def register(self, handlers: Mapping[int, Handler]) -> None:
        """Serve these codes with these handlers (a processor's table)."""
        for code, handler in handlers.items():
            if code in self.handlers:
                raise ValueError(f"{self.name}: request code {code} has a handler already")
            self.handlers[int(code)] = handler

    def register_default(self, handler: Handler) -> None:
        """The processor for every code not registered on its own (RocketMQ's default processor)."""
        self.default = handler

    def add_hook(self, hook: RPCHook) -> None:
        self.hooks.append(hook)
        if type(hook).before is not RPCHook.before:
            self._before.append(hook)

    # ------------------------------------------------------------------ requests
    def handle(self, request: RemotingRequest, ctx: RequestContext) -> Answer:
        """Answer one request from either transport; never raises."""
        started = time.perf_counter()
        malformed = _malformed(request)
        if malformed is not None:
            return self._after(request, ctx, error(ResponseCode.SYSTEM_ERROR, malformed), started)
        return self._handle(request, ctx, started)

    def _handle(self, request: RemotingRequest, ctx: RequestContext, started: float) -> Answer:
        """`handle` of a request known to be well formed (see `_malformed`)."""
        for hook in self._before:
            refused = hook.before(request, ctx)
            if refused is not None:
                return self._after(request, ctx, refused, started)
        handler = self.handlers.get(request.code, self.default)
        if handler is None:
            answer: Answer = error(ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                                   f" request type {request.code} not supported")
        else:
            try:
                answer = handler(request, ctx)
            except Exception as e:
                answer = self._raised(request, ctx, e)
        if isinstance(answer, RemotingResponse):  # `_after`, inlined: most answers are given at once
            elapsed_ms = (time.perf_counter() - started) * 1000
            for hook in self.hooks:
                hook.after(request, ctx, answer, elapsed_ms)
            return answer
        return self._after_later(request, ctx, answer, started)

    async def _after_later(self, request: RemotingRequest, ctx: RequestContext,
                           pending: Awaitable[RemotingResponse], started: float) -> RemotingResponse:
        try:
            response = await pending
        except Exception as e:
            response = self._raised(request, ctx, e)
        return self._after(request, ctx, response, started)

    def _raised(self, request: RemotingRequest, ctx: RequestContext, e: Exception) -> RemotingResponse:
        """The answer to a handler that raised `e` (called in its `except`, at once or later alike)."""
        refused = refusal_of(e)
        if refused is not None:
            return refused.response()
        # a bug: answer anyway, as RocketMQ's processRequestCommand does
        log.exception("%s: request %s from %s failed", self.name, request.code, ctx.remote)
        return error(ResponseCode.SYSTEM_ERROR, f"{type(e).__name__}: {e}")

    def _after(self, request: RemotingRequest, ctx: RequestContext, response: RemotingResponse,
               started: float) -> RemotingResponse:
        elapsed_ms = (time.perf_counter() - started) * 1000
        for hook in self.hooks:
            hook.after(request, ctx, response, elapsed_ms)
        return response

    def handle_command(self, cmd: RemotingCommand, ctx: RequestContext) -> WireAnswer | Awaitable[WireAnswer]:
        """A decoded TCP request, answered with the wire command (or frame) to write back. The
        neutral request is `command.to_request`'s, built inline; a decoded frame is well formed by
        construction (an int code, extFields a map of strings, bytes or no body), so `_malformed`,
        there for Ray callers, is not asked."""
        started = time.perf_counter()
        ext = cmd.ext_fields
        request = RemotingRequest(cmd.code, dict(ext) if ext else {}, cmd.body, cmd.version, True, cmd.language)
        answer = self._handle(request, ctx, started)
        if isinstance(answer, RemotingResponse):
            return self.encoder(cmd, answer)
        return self._encode_later(cmd, answer)

    async def _encode_later(self, cmd: RemotingCommand, pending: Awaitable[RemotingResponse]) -> WireAnswer:
        return self.encoder(cmd, await pending)


def refusal_of(e: Exception) -> MQServerError | None:
    """How every server answers a handler's exception (None: a bug, answered SYSTEM_ERROR and logged):

    - `MQServerError`: its own code and remark (a processor's refusal: NO_PERMISSION, TOPIC_NOT_EXIST, ...);
    - a request that fails validation (a header or body that does not parse or check: pydantic's
      ValidationError, InvalidInput, CodecError): SYSTEM_ERROR "invalid request: <why>", as RocketMQ
      answers the RemotingCommandException of a header that does not decode (processRequestCommand:
      SYSTEM_ERROR with the exception's description).

    A server with refusals of its own maps them first (the broker's dispatcher: an illegal message
    is MESSAGE_ILLEGAL) and hands the rest here."""
    if isinstance(e, MQServerError):
        return e
    if isinstance(e, ValidationError):
        return MQServerError(ResponseCode.SYSTEM_ERROR, f"invalid request: {describe_errors(e)}")
    if isinstance(e, (InvalidInput, CodecError)):
        return MQServerError(ResponseCode.SYSTEM_ERROR, f"invalid request: {e}")
    return None


def _malformed(request: RemotingRequest) -> str | None:
    """What makes a request unusable before any hook may read it (Ray callers can send anything)."""
    code = request.code
    if not isinstance(code, int) or isinstance(code, bool):
        return f"request code must be an integer, got {code!r}"
    if not isinstance(request.ext_fields, dict):
        return "extFields must be a map"
    if request.body is not None and not isinstance(request.body, (bytes, bytearray)):
        return "body must be bytes or None"
    return None


async def resolve(answer: Answer) -> RemotingResponse:
    """The response of an answer given at once or later (for Ray methods, which always await)."""
    if inspect.isawaitable(answer):
        return await answer
    return answer
