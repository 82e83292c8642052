"""A server asks a client over the client's own connection and awaits its answer
(RemotingServer.invoke): matched by opaque, a timeout that leaves the loop serving, a late or
stray answer dropped, a closed connection failing the call at once. Real sockets on 127.0.0.1."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from namesrv.remoting.codec import encode_command
from namesrv.remoting.connection import Connection
from namesrv.remoting.frame_decoder import FrameDecoder
from namesrv.remoting.invoke import ClientCallError, ClientCallTimeout
from namesrv.remoting.limits import ServerLimits
from namesrv.remoting.server import RemotingServer
from namesrv.remoting.wire_command import RESPONSE_FLAG, RemotingCommand

ASK = 307


class Client:
    """A client on its own connection: answers the server's requests with `answer` and sends its own."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 answer: Callable[[RemotingCommand], bytes | None]) -> None:
        self.reader, self.writer, self.answer = reader, writer, answer
        self.asked: list[RemotingCommand] = []
        self.answers: asyncio.Queue[RemotingCommand] = asyncio.Queue()
        self.task = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        decoder = FrameDecoder()
        while data := await self.reader.read(65536):
            for cmd in decoder.feed(data):
                if cmd.is_response:
                    self.answers.put_nowait(cmd)
                    continue
                self.asked.append(cmd)
                out = self.answer(cmd)
                if out is not None:
                    self.writer.write(out)


async def _with_server(answer: Callable[[RemotingCommand], bytes | None],
                       body: Callable[[RemotingServer, Client, str], Awaitable[None]],
                       limits: ServerLimits | None = None) -> RemotingServer:
    def handler(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(0, "pong")

    server = RemotingServer("t", handler, lambda conn, why: None, 0, lambda coro: asyncio.ensure_future(coro),
                            limits)
    port = server.bind("127.0.0.1", 0)
    await server.serve()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    client = Client(reader, writer, answer)
    try:
        while not server.by_token:
            await asyncio.sleep(0)
        await body(server, client, next(iter(server.by_token)))
    finally:
        writer.close()
        client.task.cancel()
        await server.stop()
    return server


def _answer_with(body: bytes) -> Callable[[RemotingCommand], bytes]:
    return lambda cmd: encode_command(RemotingCommand(0, cmd.opaque, RESPONSE_FLAG, body=body))


def test_the_clients_answer_is_matched_by_opaque() -> None:
    async def body(server: RemotingServer, client: Client, token: str) -> None:
        first, second = await asyncio.gather(
            server.invoke(token, RemotingCommand(ASK, ext_fields={"clientId": "a"}), 5),
            server.invoke(token, RemotingCommand(ASK, ext_fields={"clientId": "b"}), 5))
        assert [c.ext_fields for c in client.asked] == [{"clientId": "a"}, {"clientId": "b"}]
        assert first.opaque == client.asked[0].opaque and second.opaque == client.asked[1].opaque
        assert first.opaque != second.opaque
        assert first.body == b"info" and first.is_response
        assert len(server.pending) == 0

    asyncio.run(_with_server(_answer_with(b"info"), body))


def test_a_silent_client_times_out_without_blocking_the_loop_and_its_late_answer_is_dropped() -> None:
    async def body(server: RemotingServer, client: Client, token: str) -> None:
        ticks = 0

        async def tick() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0.01)

        ticker = asyncio.ensure_future(tick())
        with pytest.raises(ClientCallTimeout, match="timeout, 200"):
            await server.invoke(token, RemotingCommand(ASK), 0.2)
        ticker.cancel()
        assert ticks >= 5, "the loop kept running while the call waited"
        assert len(server.pending) == 0
        # The answer arrives late: dropped and counted; the connection still serves requests.
        client.writer.write(encode_command(RemotingCommand(0, client.asked[0].opaque, RESPONSE_FLAG)))
        client.writer.write(encode_command(RemotingCommand(105, opaque=77)))
        answer = await asyncio.wait_for(client.answers.get(), 5)
        assert (answer.opaque, answer.remark) == (77, "pong")
        assert server.pending.unmatched == 1

    asyncio.run(_with_server(lambda cmd: None, body))


def test_a_client_that_answers_garbage_is_closed_and_the_call_fails_at_once() -> None:
    async def body(server: RemotingServer, client: Client, token: str) -> None:
        with pytest.raises(ClientCallError, match="closed: bad frame"):
            await server.invoke(token, RemotingCommand(ASK), 5)
        assert len(server.pending) == 0 and server.bad_frames == 1

    server = asyncio.run(_with_server(lambda cmd: b"\x00\x00\x00\x08garbage!", body))
    assert server.requests == 0


def test_a_client_not_connected_fails_at_once() -> None:
    async def body(server: RemotingServer, client: Client, token: str) -> None:
        with pytest.raises(ClientCallError, match="is closed"):
            await server.invoke("tcp:127.0.0.1:1#0", RemotingCommand(ASK), 5)
        assert client.asked == [] and len(server.pending) == 0

    asyncio.run(_with_server(lambda cmd: None, body))


def test_an_answer_longer_than_a_small_frame_is_read_only_while_a_call_waits() -> None:
    big = b"x" * 200_000  # a ConsumerRunningInfo of many queues; small frames stop at 64 KiB
    limits = ServerLimits(large_codes=frozenset({10}))

    async def body(server: RemotingServer, client: Client, token: str) -> None:
        answer = await server.invoke(token, RemotingCommand(ASK), 5)
        assert answer.body == big and server.bad_frames == 0
        assert server.by_token[token].decoder.large_codes == frozenset({10}), "the limit is back"
        client.writer.write(encode_command(RemotingCommand(0, 99, RESPONSE_FLAG, body=big)))  # unasked: refused
        while server.by_token:
            await asyncio.sleep(0.01)
        assert server.bad_frames == 1

    asyncio.run(_with_server(_answer_with(big), body, limits))
