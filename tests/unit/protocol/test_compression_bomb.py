"""A compressed registration is inflated only up to one byte past the largest legitimate body (a
16 MiB frame's worth) and then refused (issue 25, point 6), by a signed broker over TCP: the
memory it costs is bounded by that, measured with tracemalloc, not by what the bomb would inflate to."""

from __future__ import annotations

import asyncio
import tracemalloc
import zlib
from pathlib import Path

from namesrv.protocol.codes import RequestCode, ResponseCode
from namesrv.protocol.constants import MAX_FRAME_SIZE
from namesrv.protocol.register_body_compressed import MAX_INFLATED_SIZE
from tests.support.security_servers import BROKER, Client, namesrv_server

BOMB_SIZE = 128 * 1024 * 1024
IDENT = {"clusterName": "C", "brokerAddr": "127.0.0.1:10911", "brokerName": "b", "brokerId": 0, "compressed": "true"}


def test_a_compression_bomb_is_refused_after_one_frame_s_worth(tmp_path: Path) -> None:
    bomb = zlib.compress(b"\0" * BOMB_SIZE, 9)
    assert MAX_INFLATED_SIZE == MAX_FRAME_SIZE

    async def scenario() -> tuple[int, str, int]:
        async with namesrv_server(tmp_path) as ns:
            c = await Client.connect(ns.remoting.port)
            tracemalloc.start()  # from here: what serving the request costs
            try:
                answer = await c.invoke(RequestCode.REGISTER_BROKER, IDENT, bomb, BROKER)
                _, peak = tracemalloc.get_traced_memory()
            finally:
                tracemalloc.stop()
            c.close()
            assert ns.rim.broker_addr_table == {}, "nothing registered"
            return answer.code, answer.remark or "", peak

    code, remark, peak = asyncio.run(scenario())
    assert code == ResponseCode.SYSTEM_ERROR and f"inflates beyond {MAX_FRAME_SIZE} bytes" in remark, remark
    assert peak < 2 * MAX_FRAME_SIZE, f"inflating cost {peak / 2**20:.0f} MiB"
