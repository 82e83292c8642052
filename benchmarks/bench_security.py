"""Pre-authentication cost on a NameServer and a broker with ACL on, over real sockets (issue 25).

Each server runs in a child process of its own (so its RSS is its own), with a loop-lag probe: a
1 ms timer that records the longest gap between two of its runs (the longest stall). Figures:

- stall: an unsigned 40 KB HEART_BEAT to a broker, and a broker-signed 24 KB malformed JSON
  REGISTER_BROKER to a NameServer (bodies built to hit a super-linear parse), each beside the same
  request with a 2-byte body on the same server (the baseline);
- memory: 20 unsigned connections each holding a 15 MiB half frame, RSS growth while they hold it
  and after they closed, beside the bytes they sent;
- bomb: a broker-signed compressed REGISTER_BROKER inflating to 300 MiB, peak RSS growth beside it.

Run: `bash run.sh bench bench_security [stall] [memory] [bomb] [--quick]` (or
`.venv/bin/python benchmarks/bench_security.py`). `--quick`: 4 connections hold half frames.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from pathlib import Path
from typing import Any

import psutil
from _common import print_machine, ratio_table

ACL = """
accounts:
  - accessKey: admin
    secretKey: admin-secret
    admin: true
  - accessKey: brokers
    secretKey: broker-secret
    broker: true
  - accessKey: app
    secretKey: app-secret-1
    defaultTopicPerm: DENY
    topicPerms:
      - T=PUB|SUB
"""


# ---------------------------------------------------------------------------- the server side
def _serve(kind: str, data: Path) -> None:
    from actors.namesrv.housekeeping import BrokerChannel
    from namesrv.remoting.config import RemotingServerConfig

    acl = data / "plain_acl.yml"
    acl.write_text(ACL)
    remoting = RemotingServerConfig(listen_port=0)
    gap = {"max": 0.0}

    async def main() -> None:
        if kind == "namesrv":
            from actors.namesrv.lifecycle import NamesrvController
            from namesrv.routeinfo.config import NamesrvConfig

            ns = NamesrvController("ns", NamesrvConfig(kv_config_path=str(data / "kv.json"), acl_enable=True,
                                                       acl_file=str(acl)), data, remoting=remoting, restarted=False)
            server = ns.remoting
        else:
            from actors.broker.lifecycle import BrokerController
            from namesrv.broker.config import BrokerConfig

            bc = BrokerController("C", "b", 0, data, BrokerConfig(acl_enable=True, acl_file=str(acl)), [], "", remoting,
                                  lambda p: f"127.0.0.1:{p}", lambda t: BrokerChannel(None, t), "b-0")
            server = bc.remoting
        await server.serve()
        loop = asyncio.get_running_loop()
        last = [time.perf_counter()]

        def tick() -> None:
            now = time.perf_counter()
            gap["max"] = max(gap["max"], now - last[0])
            last[0] = now
            loop.call_later(0.001, tick)

        tick()
        print(server.port, flush=True)
        await asyncio.Event().wait()

    def control() -> None:
        for line in sys.stdin:
            if line.strip() == "reset":
                gap["max"] = 0.0
            print(json.dumps({"rss": psutil.Process().memory_info().rss,
                              "peak": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                              "gap_ms": gap["max"] * 1000}), flush=True)

    threading.Thread(target=control, daemon=True).start()
    asyncio.run(main())


# ---------------------------------------------------------------------------- the attacker side
class Server:
    def __init__(self, kind: str) -> None:
        self.dir = tempfile.TemporaryDirectory()
        self.proc = subprocess.Popen([sys.executable, __file__, "--serve", kind, self.dir.name],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        self.port = int(self.proc.stdout.readline())

    def stats(self, reset: bool = False) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write("reset\n" if reset else "stats\n")
        self.proc.stdin.flush()
        out: dict[str, Any] = json.loads(self.proc.stdout.readline())
        return out

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()
        self.dir.cleanup()


def _signed(ext: dict[str, str], body: bytes | None, ak: str, sk: str) -> dict[str, str]:
    from namesrv.acl.plain_acl import SessionCredentials, signed

    return signed(ext, body, SessionCredentials(access_key=ak, secret_key=sk))


def _invoke(port: int, code: int, ext: dict[str, str], body: bytes | None) -> tuple[int, str]:
    from namesrv.remoting.client import RemotingClient

    with RemotingClient("127.0.0.1", port, timeout_s=600) as c:
        answer = c.invoke(code, ext, body)
        return answer.code, (answer.remark or "")[:60]


def _quadratic_json(size: int) -> bytes:
    """Malformed JSON: a quote followed by escaped quotes, never closed."""
    return b'{"a":"' + b'\\"' * (size // 2)


IDENT = {"clusterName": "C", "brokerAddr": "127.0.0.1:10911", "brokerName": "b", "brokerId": "0"}


Figures = list[tuple[str, float, float]]
"""(name, baseline, measured) rows for `ratio_table`"""


def stall() -> Figures:
    out = []
    broker = Server("broker")
    try:
        _invoke(broker.port, 34, {}, b"{}")  # warm up: the first request on a fresh server
        broker.stats(reset=True)
        _invoke(broker.port, 34, {}, b"{}")  # the baseline: the same request with a 2-byte body
        base = broker.stats()["gap_ms"]
        broker.stats(reset=True)
        code, remark = _invoke(broker.port, 34, {}, _quadratic_json(40_000))  # HEART_BEAT, unsigned
        out.append(("broker: unsigned 40 KB HEART_BEAT", base, broker.stats()["gap_ms"]))
        print(f"  heartbeat answered {code} {remark!r}")
    finally:
        broker.close()
    ns = Server("namesrv")
    try:
        warm = b"{}"  # a first registration, so the figures below are the bodies' alone
        _invoke(ns.port, 103, _signed(IDENT, warm, "brokers", "broker-secret"), warm)
        ns.stats(reset=True)
        _invoke(ns.port, 103, _signed(IDENT, warm, "brokers", "broker-secret"), warm)
        base = ns.stats()["gap_ms"]
        ns.stats(reset=True)
        body = _quadratic_json(24_000)
        code, remark = _invoke(ns.port, 103, _signed(IDENT, body, "brokers", "broker-secret"), body)
        out.append(("namesrv: signed 24 KB malformed REGISTER_BROKER", base, ns.stats()["gap_ms"]))
        print(f"  registration answered {code} {remark!r}")
    finally:
        ns.close()
    return out


def memory(connections: int = 20, half: int = 15 * 1024 * 1024) -> Figures:
    ns = Server("namesrv")
    try:
        before = ns.stats()["rss"]
        header = json.dumps({"code": 103, "extFields": IDENT, "flag": 0, "language": "JAVA", "opaque": 1,
                             "version": 0}).encode()
        total = 16 * 1024 * 1024 - 4  # the largest frame the limit allows
        socks = []
        for _ in range(connections):
            s = socket.create_connection(("127.0.0.1", ns.port))
            s.settimeout(1.0)  # a server that stopped reading leaves the rest unsent
            try:
                s.sendall(struct.pack(">ii", total, len(header)) + header + b"\0" * half)
            except OSError:
                pass  # the server stopped reading (a timeout) or closed the connection
            socks.append(s)
        time.sleep(2)  # a benchmark, not a test: let the server read what the kernel holds
        held = ns.stats()["rss"]
        for s in socks:
            s.close()
        time.sleep(2)
        after = ns.stats()["rss"]
        sent = connections * half / 1e6
        return [("RSS growth while held (MB)", sent, (held - before) / 1e6),
                ("RSS growth after close (MB)", sent, (after - before) / 1e6)]
    finally:
        ns.close()


def bomb() -> Figures:
    ns = Server("namesrv")
    try:
        before = ns.stats()["peak"]
        inflated = 300 * 1024 * 1024
        body = zlib.compress(b"\0" * inflated, 9)
        ext = IDENT | {"compressed": "true"}
        code, remark = _invoke(ns.port, 103, _signed(ext, body, "brokers", "broker-secret"), body)
        print(f"  bomb ({len(body)} bytes compressed) answered {code} {remark!r}")
        return [("peak RSS growth (MB)", inflated / 1e6, (ns.stats()["peak"] - before) / 1e6)]
    finally:
        ns.close()


PARTS = {"stall": ("longest stall (ms)", "baseline", "attack"),
         "memory": ("memory", "sent by attackers", "server"),
         "bomb": ("memory", "inflated size", "server")}
"""each part's table: (label, baseline column, measured column)"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("parts", nargs="*", metavar="PART", help="stall, memory, bomb (default: all)")
    ap.add_argument("--quick", action="store_true", help="4 connections hold half frames instead of 20")
    args = ap.parse_args()
    only = args.parts or list(PARTS)
    if unknown := sorted(set(only) - set(PARTS)):
        ap.error(f"unknown part(s) {', '.join(unknown)}; choose from {', '.join(PARTS)}")
    print_machine()
    runs = {"stall": stall, "memory": lambda: memory(4 if args.quick else 20), "bomb": bomb}
    for name, run in runs.items():
        if name not in only:
            continue
        print(f"\n{name}:")
        label, base, measured = PARTS[name]
        print(ratio_table(run(), base, measured, label=label, digits=1))


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--serve":
        _serve(sys.argv[2], Path(sys.argv[3]))
    else:
        main()
