"""Where a route query's CPU goes in the NameServer: each stage of its TCP path, per request.

    bash run.sh bench profile_wire [--quick] [--seconds 3] [--connections 16] [--acl] [--uvloop]

A NameServer (NamesrvController, the same pipeline as the actor: metrics and wire-log hooks on,
the ACL hook too with --acl) and the no-op remoting server of bench_wire run in a process of their
own each, no Ray, under bench_wire's load (route queries for random topics of --topics on
--brokers brokers). Printed per request, for both: CPU (the server process's user + system time over
the requests it answered, unprofiled), then a second run under cProfile splitting the NameServer's
time into stages (frame decode, header parse, ACL, dispatch, route lookup, metrics and wire log,
encode, write, and the event loop with its socket reads), each scaled to the unprofiled CPU per
request (cProfile's own overhead falls on every Python call, so only the shares are its).
Not in the README's benchmark list: a diagnosis tool, not a figure (docs/performance.md quotes it).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import multiprocessing as mp
import pstats
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import print_machine, ratio_table
from bench_wire import measure, register_brokers, warm_up

from namesrv.protocol.codes import RequestCode, ResponseCode
from namesrv.remoting.client import RemotingClient
from namesrv.remoting.server import RemotingServer

FUNCS: dict[str, list[tuple[str, str]]] = {
    # inclusive (cumulative) times of these functions; the stages are differences of them
    "data_received": [("remoting/connection.py", "data_received")],
    "feed": [("remoting/frame_decoder.py", "feed")],
    "header_wire": [("remoting/json_header.py", "decode_json_header"),
                   ("remoting/rocketmq_header.py", "decode_rocketmq_header")],
    "handle_command": [("remoting/pipeline.py", "handle_command")],
    "to_request": [("remoting/command.py", "to_request")],
    "acl": [("acl/rpc_hook.py", "before")],
    "header_typed": [("protocol/headers.py", "from_ext")],
    "route_lookup": [("routeinfo/routes.py", "pickup")],
    "hooks_after": [("actors/runtime/metrics.py", "after"), ("remoting/wire_log.py", "after")],
    "wire_encode": [("routeinfo/wire_encoder.py", "encode_frame")],
    "conn_write": [("remoting/connection.py", "write")],
    "encode_command": [("remoting/codec.py", "encode_command_parts")],
    "transport_write": [("asyncio/selector_events.py", "write"), ("asyncio/selector_events.py", "writelines"),
                        ("uvloop", "write"), ("uvloop", "writelines")],
}


def _inclusive(stats: pstats.Stats, suffix: str, func: str) -> tuple[float, int]:
    total, calls = 0.0, 0
    for (file, _line, name), (_cc, nc, _tt, ct, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        if name == func and (file.endswith(suffix) or (suffix == "uvloop" and "uvloop" in file)):
            total += ct
            calls += nc
    return total, calls


def _serve(kind: str, acl: bool, use_uvloop: bool, brokers: int, topics: int, profile_to: str | None,
           ready: Any, stop: Any, out: Any) -> None:
    """One server process: start, register (NameServer), say its port, serve until told to stop,
    then report its CPU and request count (and write its profile)."""
    if use_uvloop:
        import uvloop
        uvloop.install()
    asyncio.run(_serve_async(kind, acl, brokers, topics, profile_to, ready, stop, out))


async def _serve_async(kind: str, acl: bool, brokers: int, topics: int, profile_to: str | None,
                       ready: Any, stop: Any, out: Any) -> None:
    from actors.namesrv.lifecycle import NamesrvController
    from actors.runtime.metrics import Metrics
    from namesrv.remoting.config import RemotingServerConfig
    from namesrv.routeinfo.config import NamesrvConfig

    loop = asyncio.get_running_loop()
    if kind == "noop":
        body = ready.get()
        server = RemotingServer("noop", lambda conn, cmd: cmd.response(ResponseCode.SUCCESS, None, None, body, 479),
                                lambda conn, why: None, 0, lambda coro: loop.create_task(coro))
        port = server.bind("127.0.0.1", 0)
        await server.serve()
    else:
        root = Path(tempfile.mkdtemp(prefix="profile-wire-"))
        acl_file = root / "plain_acl.yml"
        acl_file.write_text("globalWhiteRemoteAddresses: ['127.0.0.1']\naccounts: []\n")
        config = NamesrvConfig(acl_enable=acl, acl_file=str(acl_file), not_ready_window_ms=0,
                               snapshot_interval_ms=0, kv_config_path=str(root / "kv.json"),
                               config_store_path=str(root / "namesrv.properties"))
        ns = NamesrvController("ns", config, root, remoting=RemotingServerConfig(listen_port=0),
                               metrics=Metrics("namesrv", "profile"), restarted=False)
        server = ns.remoting
        await server.serve()
        port = server.port
    out.put(port)
    while ready.empty():  # the parent registers brokers, then says go
        await asyncio.sleep(0.05)
    ready.get()
    profiler = cProfile.Profile() if profile_to else None
    r0, n0 = resource.getrusage(resource.RUSAGE_SELF), server.requests
    if profiler is not None:
        profiler.enable()
    while stop.empty():
        await asyncio.sleep(0.05)
    if profiler is not None:
        profiler.disable()
        profiler.dump_stats(profile_to)
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    out.put(((r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime), server.requests - n0))


def run(kind: str, args: argparse.Namespace, body: bytes, profile_to: str | None) -> dict[str, Any]:
    ctx = mp.get_context("fork")
    ready, stop, out = ctx.Queue(), ctx.Queue(), ctx.Queue()
    proc = ctx.Process(target=_serve, args=(kind, args.acl, args.uvloop, args.brokers, args.topics, profile_to,
                                            ready, stop, out))
    if kind == "noop":
        ready.put(body)
    proc.start()
    port = out.get(timeout=60)
    addr = f"127.0.0.1:{port}"
    if kind == "ns":
        register_brokers(addr, args.brokers, args.topics)
        warm_up(addr, args.topics)
    time.sleep(0.2)
    ready.put("go")
    time.sleep(0.1)
    figures = measure(addr, args.connections, args.inflight, args.seconds, args.topics, 1)
    stop.put("stop")
    cpu, requests = out.get(timeout=60)
    proc.join(30)
    from bench_wire import _keep
    for c in _keep:
        c.close()
    _keep.clear()
    figures.update(cpu_us_per_request=cpu / max(requests, 1) * 1e6, requests=requests)
    return figures


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--connections", type=int, default=16)
    ap.add_argument("--inflight", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--topics", type=int, default=2_000)
    ap.add_argument("--brokers", type=int, default=10)
    ap.add_argument("--acl", action="store_true", help="the ACL hook on (a white-listed address: no signature)")
    ap.add_argument("--uvloop", action="store_true", help="serve on uvloop's event loop")
    ap.add_argument("--top", type=int, default=0, help="also print the profile's top N functions by own time")
    ap.add_argument("--quick", action="store_true", help="1 s per run")
    args = ap.parse_args()
    if args.quick:
        args.seconds = 1.0

    print_machine()
    # the route answer the no-op server repeats: one from a NameServer holding the same tables
    body = _route_body(args)
    noop = run("noop", args, body, None)
    ns = run("ns", args, body, None)
    prof_path = tempfile.mktemp(suffix=".prof")
    profiled = run("ns", args, body, prof_path)
    stats = pstats.Stats(prof_path)
    n = profiled["requests"]
    total = stats.total_tt  # type: ignore[attr-defined]
    scale = ns["cpu_us_per_request"] / (total / n * 1e6)
    t = {k: sum(_inclusive(stats, suffix, func)[0] for suffix, func in fns) for k, fns in FUNCS.items()}
    stages = {
        "frame decode": t["feed"] - t["header_wire"],
        "header parse (wire header)": t["header_wire"],
        "header parse (typed header)": t["header_typed"],
        "ACL": t["acl"],
        "dispatch (pipeline, processor)": t["handle_command"] - t["to_request"] - t["acl"] - t["header_typed"]
        - t["route_lookup"] - t["hooks_after"] - t["wire_encode"] + t["to_request"],
        "route lookup": t["route_lookup"],
        "metrics + wire log": t["hooks_after"],
        "encode": t["wire_encode"] + t["encode_command"],
        "write (transport)": t["transport_write"],
        "connection bookkeeping": t["data_received"] - t["feed"] - t["handle_command"] - t["encode_command"]
        - t["transport_write"],
        "event loop, socket reads": total - t["data_received"],
    }
    rows = [(name, seconds / n * 1e6 * scale) for name, seconds in stages.items()]
    print(f"\nload: {args.connections} connections x {args.inflight} in flight, {args.seconds:.0f} s; "
          f"{args.brokers} brokers x {args.topics} topics; ACL {'on' if args.acl else 'off'}; "
          f"loop {'uvloop' if args.uvloop else 'asyncio'}")
    print(ratio_table([("QPS", noop["qps"], ns["qps"]), ("p50 ms", noop["p50_ms"], ns["p50_ms"]),
                       ("p99 ms", noop["p99_ms"], ns["p99_ms"]),
                       ("server CPU us/request", noop["cpu_us_per_request"], ns["cpu_us_per_request"])],
                      "no-op server", "NameServer"))
    print(f"\nNameServer CPU per request by stage (cProfile shares x {ns['cpu_us_per_request']:.1f} us unprofiled):")
    for name, us in rows:
        print(f"  {name:32s} {us:7.2f} us")
    if args.top:
        stats.sort_stats("tottime").print_stats(args.top)
    sys.stdout.flush()


def _route_body(args: argparse.Namespace) -> bytes:
    """A 10-broker route's wire answer, from a NameServer registered as the benchmark's."""
    ctx = mp.get_context("fork")
    ready, stop, out = ctx.Queue(), ctx.Queue(), ctx.Queue()
    proc = ctx.Process(target=_serve, args=("ns", False, False, args.brokers, args.topics, None, ready, stop, out))
    proc.start()
    port = out.get(timeout=60)
    register_brokers(f"127.0.0.1:{port}", args.brokers, args.topics)
    ready.put("go")
    with RemotingClient("127.0.0.1", port) as c:
        body = c.invoke(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "BenchTopic0"}).body or b""
    stop.put("stop")
    out.get(timeout=60)
    proc.join(30)
    from bench_wire import _keep
    for c2 in _keep:
        c2.close()
    _keep.clear()
    return body


if __name__ == "__main__":
    main()
