"""Route queries over RocketMQ's remoting protocol on TCP: a NameServer actor side by side with a
no-op remoting server (same framing and header handling, one constant prebuilt answer), in one run.

    bash run.sh bench bench_wire [--connections 1,16,64] [--inflight 4] [--seconds 3] [--topics 10000]

The NameServer holds --topics topics on --brokers brokers (registered over TCP, every topic on every
broker), so a route answer is a realistic 10-broker route; every topic is asked for once before the
rounds (each route's JSON is encoded once per route version, then served from the cache: the rounds
measure that steady state). Load comes from separate processes (one
asyncio loop each) keeping --inflight requests in flight per connection; each round alternates the
NameServer and the no-op server so both see the same machine. Printed: QPS, p50 and p99 per
connection count, their ratio, the load generators' CPU use, the NameServer's RSS and the machine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import time
from typing import Any

import _loadgen as loadgen
import psutil
import ray
from _common import print_machine, ratio_table, ray_init
from _loadgen import MakeRequest

from namesrv.protocol.bodies import body_crc32
from namesrv.protocol.codes import RequestCode, ResponseCode
from namesrv.remoting.client import RemotingClient
from namesrv.remoting.codec import encode_command
from namesrv.remoting.server import RemotingServer
from namesrv.remoting.wire_command import RemotingCommand

# ---------------------------------------------------------------------------- the two servers


@ray.remote(num_cpus=0)
class NoopRemotingActor:
    """The same RemotingServer, answering every request with one constant, prebuilt route."""

    def __init__(self, body: bytes) -> None:
        self.body = body
        self.server = RemotingServer("noop", self.handle, lambda conn, why: None, 0,
                                     lambda coro: asyncio.get_event_loop().create_task(coro))
        self.port = self.server.bind("127.0.0.1", 0)
        asyncio.get_event_loop().create_task(self.server.serve())

    def handle(self, conn: Any, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(ResponseCode.SUCCESS, None, None, self.body, 479)

    async def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def pid(self) -> int:
        return os.getpid()


def register_brokers(addr: str, brokers: int, topics: int) -> None:
    """Register `brokers` fake brokers over TCP, each hosting every topic (full registrations)."""
    host, port = addr.rsplit(":", 1)
    table = {f"BenchTopic{t}": {"topicName": f"BenchTopic{t}", "readQueueNums": 4, "writeQueueNums": 4, "perm": 6,
                                "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0, "order": False}
             for t in range(topics)}
    body = json.dumps({"topicConfigSerializeWrapper": {"dataVersion": {"counter": 1, "timestamp": 1},
                                                       "topicConfigTable": table}, "filterServerList": []}).encode()
    clients = []
    for b in range(brokers):
        c = RemotingClient(host, int(port), timeout_s=60)
        answer = c.invoke(RequestCode.REGISTER_BROKER, {
            "brokerAddr": f"10.0.0.{b}:10911", "brokerName": f"bench-broker-{b}", "brokerId": 0,
            "clusterName": "BenchCluster", "haServerAddr": f"10.0.0.{b}:10912", "bodyCrc32": body_crc32(body)}, body)
        assert answer.code == ResponseCode.SUCCESS, answer
        clients.append(c)  # kept open: closing a broker's connection removes it (channel semantics)
    _keep.extend(clients)


def warm_up(addr: str, topics: int) -> None:
    """Ask for every topic's route once, so the measured rounds see the steady state (each route's
    JSON encoded once per route version and cached), not the first encoding of each."""
    host, port = addr.rsplit(":", 1)
    with RemotingClient(host, int(port), timeout_s=60, version=63) as c:  # the load's version: its JSON flavour
        for t in range(topics):
            answer = c.invoke(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": f"BenchTopic{t}"})
            assert answer.code == ResponseCode.SUCCESS, answer


_keep: list[RemotingClient] = []

# ---------------------------------------------------------------------------- load


def route_queries(topics: int) -> MakeRequest:
    """GET_ROUTEINFO_BY_TOPIC of a random topic (each load process seeds from its pid)."""
    rng: random.Random | None = None

    def make(opaque: int) -> bytes:
        nonlocal rng
        if rng is None:
            rng = random.Random(os.getpid())
        return encode_command(RemotingCommand(RequestCode.GET_ROUTEINFO_BY_TOPIC, opaque, 0, 1, 63, None,
                                              {"topic": f"BenchTopic{rng.randrange(topics)}"}))
    return make


def measure(addr: str, conns: int, inflight: int, seconds: float, topics: int, procs: int,
            server: psutil.Process | None = None) -> dict[str, Any]:
    """QPS and latency with `conns` connections spread over `procs` load processes (and the CPU
    `server`'s process used per request meanwhile, when given)."""
    return loadgen.measure(addr, conns, inflight, seconds, procs, route_queries(topics), server)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--connections", default="1,16,64")
    ap.add_argument("--inflight", type=int, default=4, help="requests in flight per connection")
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--rounds", type=int, default=2, help="interleaved NameServer/no-op rounds per count")
    ap.add_argument("--topics", type=int, default=10_000)
    ap.add_argument("--brokers", type=int, default=10)
    ap.add_argument("--procs", type=int, default=1, help="load generator processes")
    ap.add_argument("--quick", action="store_true", help="16 connections, 0.5 s, 1 round, 500 topics")
    args = ap.parse_args()
    if args.quick:
        args.connections, args.seconds, args.rounds, args.topics = "16", 0.5, 1, 500

    from actors.deployment.launcher import deploy
    from actors.deployment.spec import ClusterSpec

    ray_init()
    dep = deploy(ClusterSpec(namesrv_count=1, brokers=[], namesrv_port=0, broker_port=None,
                             namesrv_overrides={"snapshot_interval_ms": 0, "not_ready_window_ms": 0}))
    ns = dep.namesrvs["namesrv-0"]
    addr = dep.namesrv_addr()
    t0 = time.perf_counter()
    register_brokers(addr, args.brokers, args.topics)
    print(f"registered {args.brokers} brokers x {args.topics} topics over TCP in {time.perf_counter() - t0:.1f} s")
    warm_up(addr, args.topics)
    status = ray.get(ns.get_status.remote())
    rss = psutil.Process(status["pid"]).memory_info().rss
    host, port = addr.rsplit(":", 1)
    with RemotingClient(host, int(port)) as c:
        route_body = c.invoke(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "BenchTopic0"}).body or b""
    noop = NoopRemotingActor.remote(route_body)
    noop_addr = ray.get(noop.address.remote())
    ns_proc, noop_proc = psutil.Process(status["pid"]), psutil.Process(ray.get(noop.pid.remote()))

    print_machine()
    print(f"NameServer RSS with {args.topics:,} topics on {args.brokers} brokers: {rss / 2**20:.0f} MiB; "
          f"route answer {len(route_body)} bytes; {args.inflight} requests in flight per connection")
    summary, table_rows = [], []
    for conns in (int(x) for x in args.connections.split(",")):
        rows: dict[str, list[dict[str, float]]] = {"ns": [], "noop": []}
        for _ in range(args.rounds):
            rows["ns"].append(measure(addr, conns, args.inflight, args.seconds, args.topics, args.procs, ns_proc))
            rows["noop"].append(measure(noop_addr, conns, args.inflight, args.seconds, args.topics, args.procs,
                                        noop_proc))
        best = {k: max(v, key=lambda r: r["qps"]) for k, v in rows.items()}
        n, o = best["ns"], best["noop"]
        table_rows += [(f"{conns} conns: QPS", o["qps"], n["qps"]),
                       (f"{conns} conns: p50 ms", o["p50_ms"], n["p50_ms"]),
                       (f"{conns} conns: p99 ms", o["p99_ms"], n["p99_ms"]),
                       (f"{conns} conns: server CPU us/request", o["server_cpu_us"], n["server_cpu_us"]),
                       (f"{conns} conns: loadgen CPU s/s", o["loadgen_cpu_s"] / args.seconds,
                        n["loadgen_cpu_s"] / args.seconds)]
        summary.append({"connections": conns, "namesrv": n, "noop": o, "ratio": n["qps"] / o["qps"]})
    print(ratio_table(table_rows, "no-op server", "NameServer"))
    encodings = ray.get(ns.get_status.remote()).get("route_encodings")
    print(f"route bodies encoded: {encodings} (cached per route version)")
    print(json.dumps({"rss_mib": rss / 2**20, "results": summary}))
    dep.teardown()
    ray.shutdown()


if __name__ == "__main__":
    main()
