"""Machine instructions per route query on the NameServer's TCP path, counted by valgrind: a figure
the load of a shared machine does not move (CPU time per request swings by 2x at load 5).

    bash run.sh bench count_wire [--acl] [--noop] [--brokers 10] [--topics 200]

A NameServer (NamesrvController, the actor's pipeline with its metrics and wire-log hooks, ACL with
--acl; or with --noop bench_wire's no-op remoting server) gets 10 brokers registered over TCP, then
frames of 4 route queries each (random topics, JSON, client version 63, as bench_wire sends them)
are fed to one of its `Connection`s, whose answers go to a transport that only counts bytes: frame
decode, header parse, pipeline, hooks, route lookup, encode and the batched write, without the
socket calls and the event loop (the same for both servers). The process runs twice under
`valgrind --tool=cachegrind`, with 100 and 2,600 frames; the difference over the 10,000 extra
requests is the count per request (start-up and registration mostly cancel out; ±5 % run to run).
Not in the README's benchmark list: a diagnosis tool (docs/performance.md quotes it); needs valgrind.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench_wire import _keep, register_brokers, warm_up

from namesrv.protocol.codes import RequestCode, ResponseCode
from namesrv.remoting.codec import encode_command
from namesrv.remoting.connection import Connection
from namesrv.remoting.server import RemotingServer
from namesrv.remoting.wire_command import RemotingCommand

FRAMES_FEW, FRAMES_MANY = 100, 2_600
REQUESTS_PER_FRAME = 4
DISTINCT_FRAMES = 100
"""Frames are built once and fed round robin, so building them is not counted per request."""


class CountingTransport:
    """What a Connection writes to: bytes counted, nothing sent."""

    def __init__(self) -> None:
        self.written = 0

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 40000) if name == "peername" else default

    def write(self, data: bytes) -> None:
        self.written += len(data)

    def writelines(self, parts: list[bytes]) -> None:
        self.written += sum(len(p) for p in parts)

    def is_closing(self) -> bool:
        return False

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def close(self) -> None:
        pass

    def abort(self) -> None:
        pass


async def feed(args: argparse.Namespace) -> None:
    """One measured process: serve, register, ask every route once, then feed `args.frames`."""
    from actors.namesrv.lifecycle import NamesrvController
    from actors.runtime.metrics import Metrics
    from namesrv.remoting.config import RemotingServerConfig
    from namesrv.routeinfo.config import NamesrvConfig

    root = Path(tempfile.mkdtemp(prefix="count-wire-"))
    acl_file = root / "plain_acl.yml"
    acl_file.write_text("globalWhiteRemoteAddresses: ['127.0.0.1']\naccounts: []\n")
    config = NamesrvConfig(acl_enable=args.acl, acl_file=str(acl_file), not_ready_window_ms=0, snapshot_interval_ms=0,
                           kv_config_path=str(root / "kv.json"), config_store_path=str(root / "namesrv.properties"))
    ns = NamesrvController("ns", config, root, remoting=RemotingServerConfig(listen_port=0),
                           metrics=Metrics("namesrv", "count"), restarted=False)
    await ns.remoting.serve()
    addr = f"127.0.0.1:{ns.remoting.port}"
    await asyncio.to_thread(register_brokers, addr, args.brokers, args.topics)
    await asyncio.to_thread(warm_up, addr, args.topics)
    server = ns.remoting
    if args.noop:
        body = b"x" * 1945  # bench_wire's 10-broker route answer is 1,945 bytes
        server = RemotingServer("noop", lambda conn, cmd: cmd.response(ResponseCode.SUCCESS, None, None, body, 479),
                                lambda conn, why: None, 0, lambda coro: None)
    conn = Connection(server)
    conn.connection_made(CountingTransport())  # type: ignore[arg-type]
    rng = random.Random(1)
    frames: list[bytes] = []
    for f in range(DISTINCT_FRAMES):
        frames.append(b"".join(
            encode_command(RemotingCommand(RequestCode.GET_ROUTEINFO_BY_TOPIC, f * REQUESTS_PER_FRAME + i, 0, 1, 63,
                                           None, {"topic": f"BenchTopic{rng.randrange(args.topics)}"}))
            for i in range(REQUESTS_PER_FRAME)))
    before = server.requests
    for n in range(args.frames):
        conn.data_received(frames[n % DISTINCT_FRAMES])
        server._turn_bytes = 0  # no loop turns here: each frame starts a fresh read budget
    assert server.requests - before == args.frames * REQUESTS_PER_FRAME
    for c in _keep:
        c.close()


def instructions(frames: int, args: argparse.Namespace) -> int:
    cmd = ["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null",
           sys.executable, __file__, "--feed", str(frames), "--brokers", str(args.brokers),
           "--topics", str(args.topics)]
    cmd += ["--acl"] if args.acl else []
    cmd += ["--noop"] if args.noop else []
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True)
    m = re.search(r"I\s+refs:\s+([\d,]+)", done.stderr)
    if m is None:
        raise RuntimeError(f"no instruction count from valgrind: {done.stderr[-2000:]}")
    return int(m.group(1).replace(",", ""))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--acl", action="store_true", help="the ACL hook on (a white-listed address: no signature)")
    ap.add_argument("--noop", action="store_true", help="bench_wire's no-op remoting server instead")
    ap.add_argument("--brokers", type=int, default=10)
    ap.add_argument("--topics", type=int, default=200)
    ap.add_argument("--feed", type=int, default=0, help=argparse.SUPPRESS)  # the measured child process
    args = ap.parse_args()
    if args.feed:
        args.frames = args.feed
        asyncio.run(feed(args))
        return
    few, many = instructions(FRAMES_FEW, args), instructions(FRAMES_MANY, args)
    per_request = (many - few) / ((FRAMES_MANY - FRAMES_FEW) * REQUESTS_PER_FRAME)
    server = "no-op server" if args.noop else f"NameServer (ACL {'on' if args.acl else 'off'})"
    print(f"{server}: {per_request:,.0f} instructions per route query "
          f"({args.brokers} brokers x {args.topics} topics, {FRAMES_MANY - FRAMES_FEW} frames of {REQUESTS_PER_FRAME})")


if __name__ == "__main__":
    main()
