"""Replication over TCP: HA_TRANSFER on the master's client port (namesrv.store.ha.wire).

The master serves the request code from its existing remoting server (`HATransferProcessor`, one
handler registered on the broker's request pipeline, behind its ACL hook: a slave signs as a
broker); the answer comes from the same long poll as the Ray transport (HAMasterService.transfer:
woken by group commits, big reads in a thread, the request is the slave's acknowledgement).

The slave keeps one connection to its master (`HAConnection`, asyncio streams on the broker's own
event loop; requests matched to answers by opaque, so a pipelined slave's requests share it). A
lost connection or a late answer closes it and raises (ConnectionError, TimeoutError): the slave
retries from its own end after RETRY_S, on a new connection. RocketMQ streams over a socket of its
own (haListenPort) with its own framing; this one reuses the remoting port and framing, one port
fewer to open and guard.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from namesrv.acl.plain_acl import SessionCredentials, signed
from namesrv.protocol.codes import BrokerRequestCode, ResponseCode
from namesrv.remoting.codec import encode_command
from namesrv.remoting.command import RemotingRequest, RemotingResponse
from namesrv.remoting.config import host_port
from namesrv.remoting.frame_decoder import decode_frame
from namesrv.remoting.pipeline import Answer, Handler, RequestContext
from namesrv.remoting.wire_command import MAX_LENGTH_FIELD, FrameError, LanguageCode, RemotingCommand
from namesrv.store.ha.wire import TransferRequest, parse_transfer_answer, parse_transfer_request, transfer_answer

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 3.0
READ_LIMIT = 1 << 22
"""The stream's buffer before it stops reading: a 4 MiB batch (a catch-up) is read in one go, not
in 128 KiB steps of pause and resume."""

Transfer = Callable[[int, int, int, int, Any, int | None, int], Awaitable[dict[str, Any]]]
"""HAMasterService.transfer(slave_id, from_offset, max_bytes, wait_ms, channel, ack_offset, stream)."""


class HATransferProcessor:
    """The master's side: HA_TRANSFER answered from HAMasterService.transfer."""

    def __init__(self, transfer: Transfer) -> None:
        self._transfer = transfer
        self.handlers: dict[int, Handler] = {BrokerRequestCode.HA_TRANSFER: self.transfer}
        self._slave_on: dict[str, int] = {}
        """Open connection token -> the slave replicating over it."""
        self.is_open: Callable[[str], bool] = lambda token: True
        """Whether the connection with this token is still open (the broker's remoting server)."""
        self.on_slave_disconnected: Callable[[int], None] = lambda slave_id: None
        """A slave's last replication connection closed (RocketMQ: its HAConnection closed): it
        leaves the SyncStateSet at once, as when its actor dies, and rejoins once caught up."""

    def transfer(self, request: RemotingRequest, ctx: RequestContext) -> Answer:
        """Raises InvalidInput (answered SYSTEM_ERROR by the pipeline, nothing changed) on a request
        that does not parse."""
        parsed = parse_transfer_request(request.ext_fields, request.body)
        if ctx.transport == "tcp" and isinstance(ctx.channel, str):
            if not self.is_open(ctx.channel):  # read before the close, run after it: no acknowledgement
                return request.response(ResponseCode.SYSTEM_ERROR, "replication connection closed")
            self._slave_on[ctx.channel] = parsed.slave_id
        return self._answer(request, parsed)

    def connection_closed(self, token: str) -> None:
        slave_id = self._slave_on.pop(token, None)
        if slave_id is not None and slave_id not in self._slave_on.values():
            self.on_slave_disconnected(slave_id)

    async def _answer(self, request: RemotingRequest, req: TransferRequest) -> RemotingResponse:
        reply = await self._transfer(req.slave_id, req.from_offset, req.max_bytes, req.wait_ms, None,
                                           req.ack_offset, req.stream)
        code, remark, ext, body = transfer_answer(reply)
        return request.response(code, remark, ext, body)


def split_addr(addr: str) -> tuple[str, int]:
    split = host_port(addr)
    if split is None:
        raise ValueError(f"bad master address {addr!r}: expected host:port")
    return split


class HAConnection:
    """The slave's one remoting connection to its master."""

    def __init__(self, addr: str, credentials: SessionCredentials | None) -> None:
        self.addr = addr
        self.credentials = credentials
        self._opaque = itertools.count(1)
        self._pending: dict[int, asyncio.Future[RemotingCommand]] = {}
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._reading: asyncio.Task[None] | None = None
        self.closed = False

    async def open(self) -> None:
        host, port = split_addr(self.addr)
        try:
            self._reader, self._writer = await asyncio.wait_for(asyncio.open_connection(host, port, limit=READ_LIMIT),
                                                                CONNECT_TIMEOUT_S)
        except TimeoutError:
            raise ConnectionError(f"cannot connect to master {self.addr} in {CONNECT_TIMEOUT_S} s") from None
        except OSError as e:
            raise ConnectionError(f"cannot connect to master {self.addr}: {e}") from None
        self._reading = asyncio.get_running_loop().create_task(self._read_loop())

    async def _read_loop(self) -> None:
        reader = self._reader
        assert reader is not None
        try:
            while True:
                head = await reader.readexactly(4)
                length = int.from_bytes(head, "big", signed=True)
                if not 4 <= length <= MAX_LENGTH_FIELD:
                    raise FrameError(f"frame length {length} from master {self.addr}")
                cmd = decode_frame(await reader.readexactly(length))
                waiter = self._pending.pop(cmd.opaque, None) if cmd.is_response else None
                if waiter is not None and not waiter.done():
                    waiter.set_result(cmd)
        except (asyncio.IncompleteReadError, OSError, FrameError, ValueError) as e:
            reason = "closed by the master" if isinstance(e, asyncio.IncompleteReadError) else str(e)
            self.close(ConnectionError(f"connection to master {self.addr} lost: {reason}"))

    def close(self, why: BaseException | None = None) -> None:
        """Close the connection; requests still waiting fail with `why` (a ConnectionError)."""
        if self.closed:
            return
        self.closed = True
        pending, self._pending = self._pending, {}
        for waiter in pending.values():
            if not waiter.done():
                waiter.set_exception(why or ConnectionError(f"connection to master {self.addr} closed"))
        if self._writer is not None:
            self._writer.close()
        if self._reading is not None and self._reading is not asyncio.current_task():
            self._reading.cancel()

    async def transfer(self, request: TransferRequest, timeout_s: float) -> dict[str, Any]:
        """One HA_TRANSFER: the answer in the Ray transport's reply shape. A lost connection raises
        ConnectionError, no answer within `timeout_s` TimeoutError; either closes the connection."""
        if self.closed or self._writer is None:
            raise ConnectionError(f"connection to master {self.addr} is closed")
        ext = signed(request.ext_fields(), None, self.credentials)
        cmd = RemotingCommand(BrokerRequestCode.HA_TRANSFER, next(self._opaque) & 0x7FFFFFFF, 0,
                              LanguageCode.PYTHON, 0, None, {k: str(v) for k, v in ext.items()}, None)
        waiter: asyncio.Future[RemotingCommand] = asyncio.get_running_loop().create_future()
        self._pending[cmd.opaque] = waiter
        try:
            self._writer.write(encode_command(cmd))
            answer = await asyncio.wait_for(waiter, timeout_s)
        except TimeoutError:
            self.close(ConnectionError(f"master {self.addr} did not answer in {timeout_s} s"))
            raise TimeoutError(f"master {self.addr} did not answer HA_TRANSFER in {timeout_s} s") from None
        except OSError as e:
            self.close(ConnectionError(str(e)))
            raise ConnectionError(f"connection to master {self.addr} lost: {e}") from None
        finally:
            self._pending.pop(cmd.opaque, None)
        return parse_transfer_answer(answer.code, answer.remark, answer.ext_fields, answer.body)
