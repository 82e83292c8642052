"""Remoting load from processes of their own: connections keeping requests in flight against a
server over TCP, and the latency of every answer (bench_wire's route queries, bench_ingest's sends).

Each load process runs one asyncio loop with `conns` connections; each connection keeps `inflight`
requests in flight until the deadline, building each with `make_request(opaque)` (a frame, encoded).
Processes are forked, so `make_request` may be any callable. `measure` also reads the server
process's CPU time over the run, when given its pid.
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import resource
import time
from collections.abc import Callable
from typing import Any, cast

import psutil

from namesrv.common.stats import percentile
from namesrv.remoting.frame_decoder import FrameDecoder

MakeRequest = Callable[[int], bytes]
"""opaque -> one encoded request frame."""


class _Conn(asyncio.Protocol):
    def __init__(self, make_request: MakeRequest, inflight: int, deadline: float, latencies: list[float],
                 refused: list[int]) -> None:
        self.make_request, self.inflight, self.deadline, self.lat = make_request, inflight, deadline, latencies
        self.refused = refused
        self.decoder = FrameDecoder()
        self.sent: dict[int, float] = {}
        self.opaque = 0
        self.done = asyncio.get_event_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's TCP transport is a Transport in all but its class (not a subclass of asyncio's)
        self.transport = cast(asyncio.Transport, transport)
        self.transport.write(b"".join(self._request() for _ in range(self.inflight)))

    def _request(self) -> bytes:
        self.opaque += 1
        self.sent[self.opaque] = time.perf_counter()
        return self.make_request(self.opaque)

    def data_received(self, data: bytes) -> None:
        now = time.perf_counter()
        out = []
        for cmd in self.decoder.feed(data):
            self.lat.append(now - self.sent.pop(cmd.opaque))
            if cmd.code != 0:
                self.refused.append(cmd.code)
            if now < self.deadline:
                out.append(self._request())
        if out:
            self.transport.write(b"".join(out))
        elif not self.sent and not self.done.done():
            self.done.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            self.done.set_result(None)


async def _drive(addr: str, conns: int, inflight: int, seconds: float,
                 make_request: MakeRequest) -> tuple[list[float], list[int]]:
    host, port = addr.rsplit(":", 1)
    loop = asyncio.get_running_loop()
    latencies: list[float] = []
    refused: list[int] = []
    deadline = time.perf_counter() + seconds
    protocols = []
    for _ in range(conns):
        _, proto = await loop.create_connection(lambda: _Conn(make_request, inflight, deadline, latencies, refused),
                                                host, int(port))
        protocols.append(proto)
    await asyncio.wait_for(asyncio.gather(*(p.done for p in protocols)), seconds + 30)
    for p in protocols:
        p.transport.close()
    return latencies, refused


def _worker(addr: str, conns: int, inflight: int, seconds: float, make_request: MakeRequest, out: Any) -> None:
    start = resource.getrusage(resource.RUSAGE_SELF)
    latencies, refused = asyncio.run(_drive(addr, conns, inflight, seconds, make_request))
    end = resource.getrusage(resource.RUSAGE_SELF)
    out.put((latencies, refused, (end.ru_utime - start.ru_utime) + (end.ru_stime - start.ru_stime)))


def _cpu_s(server: psutil.Process | None) -> float:
    if server is None:
        return 0.0
    t = server.cpu_times()
    return float(t.user + t.system)


def measure(addr: str, conns: int, inflight: int, seconds: float, procs: int, make_request: MakeRequest,
            server: psutil.Process | None = None) -> dict[str, Any]:
    """Answers per second and their latency with `conns` connections spread over `procs` load
    processes, the answers that were not SUCCESS (by code), and the CPU the `server`'s process used
    per answer meanwhile (when given)."""
    ctx = mp.get_context("fork")
    queue: Any = ctx.Queue()
    share = [conns // procs + (1 if i < conns % procs else 0) for i in range(procs)]
    workers = [ctx.Process(target=_worker, args=(addr, n, inflight, seconds, make_request, queue))
               for n in share if n]
    cpu_before = _cpu_s(server)
    for w in workers:
        w.start()
    results = [queue.get(timeout=seconds + 120) for _ in workers]
    server_cpu = _cpu_s(server) - cpu_before
    for w in workers:
        w.join()
    lat = [x for r in results for x in r[0]]
    refused: dict[int, int] = {}
    for r in results:
        for code in r[1]:
            refused[code] = refused.get(code, 0) + 1
    return {"qps": len(lat) / seconds, "p50_ms": (percentile(lat, 0.5) or 0) * 1000,
            "p99_ms": (percentile(lat, 0.99) or 0) * 1000, "loadgen_cpu_s": sum(r[2] for r in results),
            "server_cpu_us": server_cpu / max(len(lat), 1) * 1e6, "refused": refused}
