"""What unauthenticated clients can make a server hold is bounded (issue 25, point 5), over real
sockets against a NameServer with ACL on: a frame of a code that carries no big body is refused
once it is longer than the small-frame limit; big frames share one budget and a connection that
finds it spent stops reading; connections are limited; closing returns what they held."""

from __future__ import annotations

import asyncio
import json
import struct
from pathlib import Path

from actors.namesrv.lifecycle import NamesrvController
from namesrv.common.waiting import wait_until_async
from namesrv.protocol.codes import RequestCode, ResponseCode
from namesrv.protocol.models import TopicConfig
from tests.support.security_servers import BROKER, Client, namesrv_server

SMALL = 64 * 1024
IDENT = {"clusterName": "C", "brokerAddr": "127.0.0.1:10911", "brokerName": "b", "brokerId": "0"}


def frame_start(code: int, total: int) -> bytes:
    """The first bytes of a JSON-header frame of `total` bytes (length field included)."""
    header = json.dumps({"code": code, "extFields": IDENT, "flag": 0, "language": "JAVA", "opaque": 1,
                         "version": 0}).encode()
    return struct.pack(">ii", total - 4, len(header)) + header


def test_a_route_query_may_not_be_a_big_frame(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with namesrv_server(tmp_path) as ns:
            c = await Client.connect(ns.remoting.port)
            c.writer.write(frame_start(RequestCode.GET_ROUTEINFO_BY_TOPIC, 8 * 1024 * 1024) + b"\0" * (2 * SMALL))
            assert await asyncio.wait_for(c.closed_by_server(), 30)
            stats = ns.remoting.stats()
            assert stats.bad_frames == 1 and stats.buffered_bytes == 0
            c.close()

    asyncio.run(scenario())


def test_half_frames_share_one_budget_and_closing_returns_it(tmp_path: Path) -> None:
    budget, frame = 2 * 1024 * 1024, 1536 * 1024

    async def scenario() -> None:
        async with namesrv_server(tmp_path, server_pending_frames_max_bytes=budget) as ns:
            server = ns.remoting
            clients = [await Client.connect(server.port) for _ in range(4)]
            for c in clients:  # every one holds a half registration: most of its body, never the end
                c.writer.write(frame_start(RequestCode.REGISTER_BROKER, frame) + b"\0" * (frame - 8 * 1024))
            await wait_until_async(
                lambda: server.stats().budget_waits == 3 and server.stats().buffered_bytes >= frame - 9000, 30,
                "one connection reads its frame, three wait for the budget")
            stats = server.stats()
            assert stats.reserved_bytes == frame
            assert stats.buffered_bytes <= frame + 3 * SMALL, stats
            clients[0].close()  # its reservation goes to the next connection, which reads its frame
            await wait_until_async(lambda: server.stats().reserved_bytes == frame and server.stats().connections == 3,
                                   30, "the next connection got the budget")
            for c in clients[1:]:
                c.close()
            await wait_until_async(lambda: server.stats().connections == 0, 30, "every connection closed")
            stats = server.stats()
            assert stats.buffered_bytes == 0 and stats.reserved_bytes == 0 and server.budget_waiters == []

    asyncio.run(scenario())


def test_connections_are_limited(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with namesrv_server(tmp_path, server_max_connections=2) as ns:
            first, second = await Client.connect(ns.remoting.port), await Client.connect(ns.remoting.port)
            for c in (first, second):  # unsigned: refused, but answered
                answer = await c.invoke(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T"})
                assert answer.code == ResponseCode.NO_PERMISSION
            third = await Client.connect(ns.remoting.port)
            assert await asyncio.wait_for(third.closed_by_server(), 30)
            assert ns.remoting.stats().refused_connections == 1
            first.close()
            await wait_until_async(lambda: ns.remoting.stats().connections == 1, 30, "the first connection closed")
            fourth = await Client.connect(ns.remoting.port)
            answer = await fourth.invoke(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T"})
            assert answer.code == ResponseCode.NO_PERMISSION
            for c in (second, third, fourth):
                c.close()

    asyncio.run(scenario())


def registered_topics(ns: NamesrvController) -> int:
    return len(ns.rim.topic_queue_table)


def test_a_big_signed_registration_still_goes_through(tmp_path: Path) -> None:
    table = {f"Topic{i:05d}": TopicConfig(topic_name=f"Topic{i:05d}").to_wire() for i in range(10_000)}
    body = json.dumps({"topicConfigSerializeWrapper": {"dataVersion": {"counter": 1, "timestamp": 1},
                                                       "topicConfigTable": table},
                       "filterServerList": []}).encode()
    assert len(body) > 1024 * 1024

    async def scenario() -> None:
        async with namesrv_server(tmp_path) as ns:
            c = await Client.connect(ns.remoting.port)
            answer = await c.invoke(RequestCode.REGISTER_BROKER, IDENT, body, BROKER)
            assert answer.code == ResponseCode.SUCCESS, answer.remark
            assert registered_topics(ns) == 10_000
            assert ns.remoting.stats().reserved_bytes == 0
            c.close()

    asyncio.run(scenario())
