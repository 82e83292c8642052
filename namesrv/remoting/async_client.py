"""A remoting client on an asyncio event loop: one TCP connection to one server, many requests in
flight matched to their answers by opaque, and the server's own requests (a broker's
CHECK_TRANSACTION_STATE) handed to `on_request`. What the RocketMQ 5 proxy actors use to reach
brokers (RocketMQ's proxy keeps Netty connections to them the same way).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable
from typing import Any

from namesrv.remoting.client import RemotingConnectError, RemotingTimeoutError
from namesrv.remoting.codec import encode_command
from namesrv.remoting.frame_decoder import FrameDecoder
from namesrv.remoting.wire_command import (
    FrameError,
    RemotingCommand,
)

log = logging.getLogger(__name__)

RequestCallback = Callable[["AsyncRemotingClient", RemotingCommand], None]


class AsyncRemotingClient:
    def __init__(self, address: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 on_request: RequestCallback | None) -> None:
        self.address = address
        self._reader = reader
        self._writer = writer
        self._on_request = on_request
        self._opaque = itertools.count(1)
        self._pending: dict[int, asyncio.Future[RemotingCommand]] = {}
        self._decoder = FrameDecoder()
        self.closed = False
        self._task = asyncio.get_running_loop().create_task(self._read_loop())

    @classmethod
    async def connect(cls, host: str, port: int, timeout_s: float = 3.0,
                      on_request: RequestCallback | None = None) -> AsyncRemotingClient:
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout_s)
        except (OSError, TimeoutError) as e:
            raise RemotingConnectError(f"cannot connect to {host}:{port}: {e}") from None
        return cls(f"{host}:{port}", reader, writer, on_request)

    async def _read_loop(self) -> None:
        reason = "closed by the server"
        try:
            while True:
                data = await self._reader.read(1 << 20)
                if not data:
                    break
                for cmd in self._decoder.feed(data):
                    if cmd.is_response:
                        fut = self._pending.pop(cmd.opaque, None)
                        if fut is not None and not fut.done():
                            fut.set_result(cmd)
                    elif self._on_request is not None:
                        try:
                            self._on_request(self, cmd)
                        except Exception:
                            log.exception("%s: handling server request %d failed", self.address, cmd.code)
        except (OSError, FrameError) as e:
            reason = f"{type(e).__name__}: {e}"
        finally:
            self._fail_all(reason)

    def _fail_all(self, reason: str) -> None:
        self.closed = True
        for fut in self._pending.values():
            if not fut.done():
                fut.set_exception(RemotingConnectError(f"lost connection to {self.address}: {reason}"))
        self._pending.clear()
        self._writer.close()

    def _command(self, code: int, ext: dict[str, Any] | None, body: bytes | None, flag: int) -> RemotingCommand:
        return RemotingCommand.request(code, next(self._opaque), ext, body, flag)

    def _write(self, cmd: RemotingCommand) -> None:
        if self.closed:
            raise RemotingConnectError(f"connection to {self.address} is closed")
        self._writer.write(encode_command(cmd))

    async def invoke(self, code: int, ext: dict[str, Any] | None = None, body: bytes | None = None,
                     timeout_s: float = 3.0) -> RemotingCommand:
        """Send one request and await its answer (RemotingTimeoutError, RemotingConnectError)."""
        cmd = self._command(code, ext, body, 0)
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[RemotingCommand] = loop.create_future()
        self._pending[cmd.opaque] = fut
        # one timer, not asyncio.wait_for (a waiter future and callbacks more per request)
        timer = loop.call_later(timeout_s, self._expire, fut, timeout_s)
        try:
            self._write(cmd)
            return await fut
        finally:
            timer.cancel()
            self._pending.pop(cmd.opaque, None)

    def _expire(self, fut: asyncio.Future[RemotingCommand], timeout_s: float) -> None:
        if not fut.done():
            fut.set_exception(RemotingTimeoutError(f"{self.address} did not answer in {timeout_s} s"))

    def invoke_oneway(self, code: int, ext: dict[str, Any] | None = None, body: bytes | None = None) -> None:
        self._write(self._command(code, ext, body, 2))

    async def close(self) -> None:
        self._task.cancel()
        self._fail_all("closed by the client")
        try:
            await self._task
        except (asyncio.CancelledError, Exception):
            pass
