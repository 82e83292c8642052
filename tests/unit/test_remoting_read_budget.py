"""The TCP server spreads a burst of big frames over loop turns (RemotingServer.READ_BUDGET) and
still answers every request, each with its own body: real sockets on 127.0.0.1, no Ray."""

from __future__ import annotations

import asyncio
import zlib

from namesrv.remoting.codec import FrameDecoder, RemotingCommand, encode_command
from namesrv.remoting.server import Connection, RemotingServer

CLIENTS = 12
BODY = 1_000_000  # 12 MB in flight at once: six times the per-turn budget


async def _client(port: int, i: int) -> tuple[int, int]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    body = bytes([i]) * BODY
    writer.write(encode_command(RemotingCommand(code=103, opaque=i, body=body)))
    await writer.drain()
    decoder = FrameDecoder()
    while True:
        answers = decoder.feed(await reader.read(65536))
        if answers:
            writer.close()
            return answers[0].opaque, int(answers[0].remark or "0")


async def _burst() -> tuple[dict[int, int], RemotingServer, list[int]]:
    turns: list[int] = []

    def handler(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        turns.append(server._turn_bytes)  # bytes read so far in the turn this frame completed in
        return cmd.response(0, str(zlib.crc32(cmd.body or b"")))

    server = RemotingServer("t", handler, lambda conn, why: None, 0, lambda coro: asyncio.ensure_future(coro))
    port = server.bind("127.0.0.1", 0)
    await server.serve()
    try:
        answers = await asyncio.wait_for(asyncio.gather(*(_client(port, i) for i in range(CLIENTS))), 60)
    finally:
        await server.stop()
    return dict(answers), server, turns


def test_a_burst_of_big_frames_is_read_over_several_turns_and_every_one_answered() -> None:
    answers, server, turns = asyncio.run(_burst())
    assert answers == {i: zlib.crc32(bytes([i]) * BODY) for i in range(CLIENTS)}, "each answered with its own body"
    assert server.budget_pauses > 0, "the burst exceeded one turn's budget and was spread out"
    # No turn read more than the budget plus one read per connection that was still reading.
    assert max(turns) <= RemotingServer.READ_BUDGET + CLIENTS * 256 * 1024
    assert server.budget_paused == [], "every paused connection was resumed"
