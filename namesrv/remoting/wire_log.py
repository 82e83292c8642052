"""The recent TCP requests of a server, as a pipeline hook: who asked what, and the answer's code."""

from __future__ import annotations

import collections
from dataclasses import dataclass

from namesrv.common.clock import Clock
from namesrv.remoting.command import RemotingRequest, RemotingResponse
from namesrv.remoting.pipeline import RAY_REMOTE, RequestContext, RPCHook

WIRE_LOG_KEPT = 1_000
"""Recent TCP requests kept for inspection (`namesrv status`, tests)."""


@dataclass(frozen=True, slots=True)
class WireRecord:
    """One request served over TCP."""

    t_ms: int
    peer: str
    code: int
    language: int
    version: int
    subject: str
    """The request's topic, or its broker name for broker requests (empty otherwise)."""
    response_code: int


class WireLogHook(RPCHook):
    def __init__(self, clock: Clock, kept: int = WIRE_LOG_KEPT) -> None:
        self.clock = clock
        self.log: collections.deque[tuple[int, str, int, int, int, str, int]] = collections.deque(maxlen=kept)
        """WireRecord fields as plain tuples (cheap on the hot path); `records()` names them."""

    def after(self, request: RemotingRequest, ctx: RequestContext, response: RemotingResponse,
              elapsed_ms: float) -> None:
        remote = ctx.remote
        if remote == RAY_REMOTE:
            return
        ext = request.ext_fields
        self.log.append((self.clock(), remote, request.code, request.language, request.version,
                         ext.get("topic") or ext.get("brokerName") or "", int(response.code)))

    def records(self) -> list[WireRecord]:
        return [WireRecord(*r) for r in self.log]
