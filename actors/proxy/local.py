"""The broker a local-mode proxy lives in (RocketMQ's LocalMessageService): its requests go through
that broker's request pipeline in process (the same ACL hook, processors and wire encoder as a TCP
frame), with no socket, no frame and no second process. The proxy's heartbeats, and the transaction
check-backs its broker sends on the channel they open, still travel over TCP (actors.proxy.brokers)."""

from __future__ import annotations

import inspect
import itertools

from namesrv.remoting.pipeline import RequestContext, RequestPipeline
from namesrv.remoting.wire_command import RemotingCommand


class LocalBroker:
    def __init__(self, broker_name: str, broker_addr: str, pipeline: RequestPipeline, remote: str) -> None:
        """`remote`: who the broker sees as the requester (the proxy's gRPC host:port), as its ACL
        whitelist and its log read a TCP peer."""
        self.broker_name = broker_name
        self.broker_addr = broker_addr
        self._pipeline = pipeline
        self._ctx = RequestContext(None, remote)
        self._opaque = itertools.count(1)

    async def invoke(self, code: int, ext: dict[str, object], body: bytes | None) -> RemotingCommand:
        """The broker's answer to one request, as it would have written it on the wire."""
        cmd = RemotingCommand.request(code, next(self._opaque), ext, body)
        answer = self._pipeline.handle_command(cmd, self._ctx)
        if inspect.isawaitable(answer):
            answer = await answer
        if not isinstance(answer, RemotingCommand):  # the broker's encoder answers commands, never frames
            raise TypeError(f"broker {self.broker_addr} answered {type(answer).__name__}, not a RemotingCommand")
        return answer
