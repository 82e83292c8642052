"""The TCP server spreads a burst of big frames over loop turns (RemotingServer.READ_BUDGET) and
still answers every request, each with its own body: real sockets on 127.0.0.1, no Ray."""

from __future__ import annotations

import asyncio
import zlib
from typing import Any

from namesrv.remoting.codec import encode_command
from namesrv.remoting.connection import Connection
from namesrv.remoting.frame_decoder import FrameDecoder
from namesrv.remoting.server import RemotingServer
from namesrv.remoting.wire_command import RemotingCommand

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


async def _querier(port: int, stop: asyncio.Event) -> int:
    """Small requests back to back on their own connection while the burst is read: how many answered."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    decoder, answered, opaque = FrameDecoder(), 0, 0
    while not stop.is_set():
        opaque += 1
        writer.write(encode_command(RemotingCommand(code=105, opaque=opaque)))
        while not (answers := decoder.feed(await reader.read(65536))):
            pass
        answered += len(answers)
    writer.close()
    return answered


async def _burst_with_queries(clients: int) -> tuple[RemotingServer, list[int], int, bool]:
    turns: list[int] = []
    querier_paused = False

    def handler(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        nonlocal querier_paused
        turns.append(server._turn_bytes)
        if cmd.code == 105:
            querier_paused |= any(c is conn for c in server.budget_paused)
        return cmd.response(0, str(zlib.crc32(cmd.body or b"")))

    server = RemotingServer("t", handler, lambda conn, why: None, 0, lambda coro: asyncio.ensure_future(coro))
    port = server.bind("127.0.0.1", 0)
    await server.serve()
    stop = asyncio.Event()
    try:
        query = asyncio.ensure_future(_querier(port, stop))
        await asyncio.wait_for(asyncio.gather(*(_client(port, i) for i in range(clients))), 60)
        stop.set()
        answered = await asyncio.wait_for(query, 10)
    finally:
        await server.stop()
    return server, turns, answered, querier_paused


def test_a_burst_from_many_connections_reads_about_the_budget_per_turn_and_never_holds_small_requests() -> None:
    clients = 40
    server, turns, answered, querier_paused = asyncio.run(_burst_with_queries(clients))
    # Once the budget is spent a turn reads a few KiB per ready connection, not a chunk from each.
    assert max(turns) <= (RemotingServer.READ_BUDGET + RemotingServer.READ_CHUNK
                          + clients * RemotingServer.SPENT_TURN_READ + 65536)
    assert answered > 0 and not querier_paused, "small requests were answered during the burst, never paused"
    assert server.budget_paused == [], "every paused connection was resumed"


class _CountingServer(RemotingServer):
    """Counts the reads made after the turn's budget was spent."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.spent_reads = 0

    def over_read_budget(self, n: int) -> bool:
        self.spent_reads += self.turn_spent()
        return super().over_read_budget(n)


async def _two_bursts(clients: int) -> tuple[_CountingServer, int]:
    """Every client sends a big frame and waits for its answer, one after the other; then all send
    another at once: (the server, its reads after a turn's budget was spent during the second)."""

    def handler(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(0, str(zlib.crc32(cmd.body or b"")))

    server = _CountingServer("t", handler, lambda conn, why: None, 0, lambda coro: asyncio.ensure_future(coro))
    port = server.bind("127.0.0.1", 0)
    await server.serve()
    streams = [await asyncio.open_connection("127.0.0.1", port) for _ in range(clients)]

    async def exchange(i: int) -> int:
        reader, writer = streams[i]
        writer.write(encode_command(RemotingCommand(code=103, opaque=i, body=bytes([i]) * BODY)))
        decoder = FrameDecoder()
        while not (answers := decoder.feed(await reader.read(65536))):
            pass
        return int(answers[0].remark or "0")

    try:
        for i in range(clients):  # one at a time: each connection is now known to send big frames
            await exchange(i)
        assert all(c.bulk for c in server.connections)
        server.spent_reads = 0
        answers = await asyncio.wait_for(asyncio.gather(*(exchange(i) for i in range(clients))), 60)
        assert answers == [zlib.crc32(bytes([i]) * BODY) for i in range(clients)], "each answered with its own"
        assert server.budget_paused == [], "every paused connection was resumed"
    finally:
        for _, writer in streams:
            writer.close()
        await server.stop()
    return server, server.spent_reads


def test_clients_known_for_big_frames_stop_reading_before_their_read_once_the_turn_is_spent() -> None:
    # Without the early pause a spent turn still read a few KiB from each ready connection (52 such
    # reads here for 30 clients); now the connections that send big frames are paused before the
    # loop gets to their reads.
    server, spent_reads = asyncio.run(_two_bursts(30))
    assert server.budget_pauses > 0, "the burst was spread over turns"
    assert spent_reads <= 3, spent_reads
