"""The asyncio remoting client (namesrv.remoting.async_client) against a real TCP server on 127.0.0.1:
answers matched by opaque out of order, the server's own requests handed to `on_request`, a lost
connection failing what waits, a silent server timing out."""

from __future__ import annotations

import asyncio

import pytest

from namesrv.remoting.async_client import AsyncRemotingClient
from namesrv.remoting.client import RemotingConnectError, RemotingTimeoutError
from namesrv.remoting.codec import encode_command
from namesrv.remoting.frame_decoder import FrameDecoder
from namesrv.remoting.wire_command import RemotingCommand


async def _serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Answers code 1 after code 2 (out of order), pushes a request of its own on code 3, never
    answers code 4, hangs up on code 5."""
    decoder, held = FrameDecoder(), []
    while data := await reader.read(65536):
        for cmd in decoder.feed(data):
            if cmd.code == 1:
                held.append(cmd)
            elif cmd.code == 2:
                for c in [cmd, *held]:
                    writer.write(encode_command(c.response(0, f"answer {c.code}", {"echo": str(c.ext_fields)})))
                held.clear()
            elif cmd.code == 3:
                writer.write(encode_command(RemotingCommand(39, 900, 2, 0, 479, None, {"topic": "T"}, b"half")))
                writer.write(encode_command(cmd.response(0)))
            elif cmd.code == 5:
                writer.close()
                return
    writer.close()


def test_requests_answers_and_server_requests() -> None:
    async def main() -> None:
        server = await asyncio.start_server(_serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        pushed: list[RemotingCommand] = []
        client = await AsyncRemotingClient.connect("127.0.0.1", port, on_request=lambda c, cmd: pushed.append(cmd))
        first = asyncio.ensure_future(client.invoke(1, {"a": 1}))
        await asyncio.sleep(0)  # let the first request go out before the second
        second = await client.invoke(2, {"b": "x"})
        assert (await first).remark == "answer 1" and second.remark == "answer 2"
        await client.invoke(3)
        assert [(c.code, c.body) for c in pushed] == [(39, b"half")]
        with pytest.raises(RemotingTimeoutError):
            await client.invoke(4, timeout_s=0.2)
        with pytest.raises(RemotingConnectError):
            await client.invoke(5)
        assert client.closed
        with pytest.raises(RemotingConnectError):
            client.invoke_oneway(1)
        await client.close()
        server.close()
        await server.wait_closed()

    asyncio.run(main())


def test_nothing_listening_is_a_connect_error() -> None:
    async def main() -> None:
        server = await asyncio.start_server(_serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        server.close()
        await server.wait_closed()
        with pytest.raises(RemotingConnectError):
            await AsyncRemotingClient.connect("127.0.0.1", port)

    asyncio.run(main())
