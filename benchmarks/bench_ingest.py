"""Broker ingest over RocketMQ's remoting protocol on TCP (issue 34): one broker actor (SYNC_FLUSH,
the default: every send answered once its group commit is fsynced) side by side with a no-op
remoting server answering the same SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE frames with one prebuilt
send answer (the remoting floor: framing and header handling, nothing stored), in one run.

    bash run.sh bench bench_ingest [--connections 16] [--inflight 1] [--seconds 3] [--body 1024] [--batch 32]

16 connections from load processes of their own stand for 16 async producers, each keeping
--inflight requests in flight: single sends (SEND_MESSAGE_V2, one message each) and batches
(SEND_BATCH_MESSAGE, --batch messages each), 1 KiB bodies, every message with a unique key of its
own (UNIQ_KEY, indexed by the broker), over the topic's 8 queues. Each round alternates the broker
and the no-op server, so both see the same machine. Printed: messages acknowledged per second,
p50/p99 per request, the broker's CPU per message, their ratios, and the machine.

Then the same frames, decoded, through a broker's processor in this process (no sockets, no Ray:
`_common.pure_broker`, SYNC_FLUSH with group commit), --connections requests awaited together:
messages/s and this process's CPU per message (its store threads included). This is the send path's
own cost, without the remoting it serves behind: what is left for the path when the floor's share is
taken out.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import _loadgen as loadgen
import psutil
import ray
from _common import local_ray_run, pure_broker, ratio_table
from _loadgen import MakeRequest

from actors.deployment.launcher import deploy
from actors.deployment.spec import BrokerSpec, ClusterSpec
from namesrv.protocol.codes import BrokerRequestCode, ResponseCode
from namesrv.protocol.message.codec import BatchEntry, encode_batch
from namesrv.protocol.message.properties import properties_to_string
from namesrv.remoting.codec import encode_command
from namesrv.remoting.command import to_request
from namesrv.remoting.frame_decoder import FrameDecoder
from namesrv.remoting.pipeline import RequestContext, resolve
from namesrv.remoting.server import RemotingServer
from namesrv.remoting.wire_command import RemotingCommand

TOPIC, QUEUES = "BenchIngest", 8
SINGLES_FLOOR_RATIO = 0.5
BATCH_TARGET_PER_S = 50_000


@ray.remote(num_cpus=0)
class NoopSendServer:
    """The broker's RemotingServer class, answering every request with one prebuilt send answer.
    Given `decode_in` (a scratch directory for a broker's processor), it first decodes each send
    into its messages with the broker's own decoder (SendMessageProcessor.decode): what a broker
    spends on a send before it checks, stores or answers anything."""

    def __init__(self, decode_in: str | None = None) -> None:
        self.decoder = pure_broker(Path(decode_in), TOPIC, QUEUES).sender if decode_in else None
        self.server = RemotingServer("noop-send", self.handle, lambda conn, why: None, 0,
                                     lambda coro: asyncio.get_event_loop().create_task(coro))
        self.port = self.server.bind("127.0.0.1", 0)
        self.ext = {"msgId": "7F00000100002A9F0000000000000000", "queueId": "0", "queueOffset": "0",
                    "transactionId": "", "MSG_REGION": "DefaultRegion", "TRACE_ON": "true"}
        asyncio.get_event_loop().create_task(self.server.serve())

    def handle(self, conn: Any, cmd: RemotingCommand) -> RemotingCommand:
        if self.decoder is not None:
            self.decoder.decode(to_request(cmd), RequestContext(conn.token, conn.peer))
        return cmd.response(ResponseCode.SUCCESS, None, dict(self.ext))

    async def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def pid(self) -> int:
        return os.getpid()


def sends(body_size: int, batch: int) -> MakeRequest:
    """SEND_MESSAGE_V2 of one message (`batch` 1) or SEND_BATCH_MESSAGE of `batch` messages, each
    with a key unique to this load process and message, round-robin over the topic's queues."""
    body = b"x" * body_size
    counter: itertools.count[int] | None = None

    def uniq() -> str:
        nonlocal counter
        if counter is None:  # per process (forked after this closure was made)
            counter = itertools.count()
        return f"{os.getpid():08X}{next(counter):024X}"

    def make(opaque: int) -> bytes:
        ext = {"a": "PID_bench_ingest", "b": TOPIC, "c": "TBW102", "d": "4", "e": str(opaque % QUEUES), "f": "0",
               "g": str(int(time.time() * 1000)), "h": "0", "j": "0", "k": "false"}
        if batch == 1:
            ext["i"] = properties_to_string({"UNIQ_KEY": uniq(), "WAIT": "true"})
            return encode_command(RemotingCommand(BrokerRequestCode.SEND_MESSAGE_V2, opaque, 0, 0, 399, None, ext,
                                                  body))
        ext["m"] = "true"
        ext["i"] = properties_to_string({"WAIT": "true"})
        data = encode_batch([BatchEntry(0, body, {"UNIQ_KEY": uniq(), "WAIT": "true"}) for _ in range(batch)])
        return encode_command(RemotingCommand(BrokerRequestCode.SEND_BATCH_MESSAGE, opaque, 0, 0, 399, None, ext,
                                              data))
    return make


def in_process(root: Path, make: MakeRequest, batch: int, together: int, seconds: float) -> dict[str, float]:
    """The frames `make` builds, decoded beforehand, through a broker's processor in this process,
    `together` requests awaited at a time for `seconds` of processing: messages/s and this
    process's CPU per message (the store's writer threads included; building and decoding the
    frames left out, as the remoting's share)."""
    processor = pure_broker(root, TOPIC, QUEUES)
    client = RequestContext("tcp:127.0.0.1:1#1", "127.0.0.1:1")
    opaque = itertools.count()

    async def run() -> tuple[int, float, float]:
        decoder = FrameDecoder()
        messages, wall, cpu = 0, 0.0, 0.0
        while wall < seconds:
            requests = [to_request(c) for _ in range(together) for c in decoder.feed(make(next(opaque)))]
            t0, c0 = time.perf_counter(), time.process_time()
            answers = await asyncio.gather(*(resolve(processor.process(r, client)) for r in requests))
            wall += time.perf_counter() - t0
            cpu += time.process_time() - c0
            refused = {a.code for a in answers if a.code != ResponseCode.SUCCESS}
            assert not refused, f"in process: answers that were not SUCCESS: {refused}"
            messages += len(requests) * batch
        return messages, wall, cpu

    try:
        messages, wall, cpu = asyncio.run(run())
    finally:
        processor.store.close()
    return {"per_s": messages / wall, "cpu_us": cpu / messages * 1e6}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--connections", type=int, default=16)
    ap.add_argument("--inflight", type=int, default=1, help="requests in flight per connection")
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--rounds", type=int, default=2, help="interleaved broker / no-op rounds per kind of send")
    ap.add_argument("--body", type=int, default=1024, help="body bytes per message")
    ap.add_argument("--batch", type=int, default=32, help="messages per SEND_BATCH_MESSAGE")
    ap.add_argument("--procs", type=int, default=1, help="load generator processes")
    ap.add_argument("--quick", action="store_true", help="0.5 s, 1 round")
    args = ap.parse_args()
    if args.quick:
        args.seconds, args.rounds = 0.5, 1

    with local_ray_run("bench-ingest", fsync=True) as run:
        dep = deploy(ClusterSpec(namesrv_count=1, brokers=[BrokerSpec("broker-a")], namespace=run.namespace,
                                 data_dir=os.path.join(run.data_dir, "cluster"), namesrv_port=0, broker_port=0))
        run.deployments.append(dep)
        [addr] = dep.brokers
        created = ray.get(dep.brokers[addr].create_topic.remote(TOPIC, QUEUES, QUEUES), timeout=60)
        assert created.code == ResponseCode.SUCCESS, created
        noop, decoding = NoopSendServer.remote(), NoopSendServer.remote(os.path.join(run.data_dir, "decode-only"))
        servers = {"broker": (addr, psutil.Process(dep.broker_pid(addr))),
                   "noop": (ray.get(noop.address.remote()), psutil.Process(ray.get(noop.pid.remote()))),
                   "decode": (ray.get(decoding.address.remote()), psutil.Process(ray.get(decoding.pid.remote())))}
        print(f"\n== broker-a (SYNC_FLUSH) at {addr} vs a no-op remoting server at {servers['noop'][0]}; "
              f"{args.connections} connections x {args.inflight} in flight, {args.body}-byte bodies, "
              f"{args.seconds:g} s per measurement, {args.rounds} round(s)", flush=True)
        rows, decode_rows, summary = [], [], {}
        for label, batch in (("singles", 1), (f"batches of {args.batch}", args.batch)):
            make = sends(args.body, batch)
            got: dict[str, list[dict[str, Any]]] = {kind: [] for kind in servers}
            for _ in range(args.rounds):
                for kind, (server_addr, proc) in servers.items():
                    got[kind].append(loadgen.measure(server_addr, args.connections, args.inflight, args.seconds,
                                                     args.procs, make, proc))
            best = {k: max(v, key=lambda r: r["qps"]) for k, v in got.items()}
            b, n, d = best["broker"], best["noop"], best["decode"]
            refused = {k: r["refused"] for k, r in best.items() if r["refused"]}
            assert not refused, f"{label}: answers that were not SUCCESS, by code: {refused}"
            rows += [(f"{label}: messages/s", n["qps"] * batch, b["qps"] * batch),
                     (f"{label}: p50 ms", n["p50_ms"], b["p50_ms"]),
                     (f"{label}: p99 ms", n["p99_ms"], b["p99_ms"]),
                     (f"{label}: server CPU us/message", n["server_cpu_us"] / batch, b["server_cpu_us"] / batch)]
            decode_rows += [(f"{label}: messages/s", n["qps"] * batch, d["qps"] * batch),
                            (f"{label}: server CPU us/message", n["server_cpu_us"] / batch, d["server_cpu_us"] / batch)]
            summary[label] = {"broker_per_s": b["qps"] * batch, "floor_per_s": n["qps"] * batch,
                              "ratio": b["qps"] / n["qps"], "decode_ratio": d["qps"] / n["qps"], "broker": b, "noop": n}
        print(ratio_table(rows, "no-op server", "broker"))
        print("\n== the no-op server decoding each send with the broker's decoder first (SendMessageProcessor.decode: "
              "header, properties, messages; nothing checked, stored or answered late), same rounds", flush=True)
        print(ratio_table(decode_rows, "no-op server", "decode only"))
        print(f"\n== the same sends through a broker's processor in this process (no sockets, no Ray; SYNC_FLUSH, "
              f"{args.connections} requests awaited together, {args.seconds:g} s of processing each)", flush=True)
        for label, batch in (("singles", 1), (f"batches of {args.batch}", args.batch)):
            with tempfile.TemporaryDirectory(dir=run.data_dir) as root:
                alone = in_process(Path(root), sends(args.body, batch), batch, args.connections, args.seconds)
            summary[label]["in_process"] = alone
            print(f"  {label:<16} {alone['per_s']:10,.0f} messages/s  {alone['cpu_us']:6.1f} us of CPU a message "
                  f"(over TCP: {summary[label]['broker']['server_cpu_us'] / batch:.1f})")
        singles, batches = summary["singles"], summary[f"batches of {args.batch}"]
        print(f"bound: decoding a single send alone leaves {singles['decode_ratio']:.2f}x the floor, before the broker "
              f"checks, stores ({batches['in_process']['cpu_us']:.1f} us of CPU a message in process, batched), "
              f"fsyncs and answers it")
        print(f"side by side: singles {singles['ratio']:.2f}x the remoting floor (aim >= {SINGLES_FLOOR_RATIO}x: "
              f"{'met' if singles['ratio'] >= SINGLES_FLOOR_RATIO else 'not met'}); batches of {args.batch} "
              f"{batches['broker_per_s']:,.0f} messages/s acknowledged (aim >= {BATCH_TARGET_PER_S:,}: "
              f"{'met' if batches['broker_per_s'] >= BATCH_TARGET_PER_S else 'not met'}), "
              f"{batches['ratio']:.2f}x the floor")
        status = ray.get(dep.brokers[addr].get_runtime_info.remote(), timeout=30)
        print(f"broker store: {status['store_batches']:,} group-commit batches, {status['store_fsyncs']:,} fsyncs")
        print(json.dumps({k: {"broker_per_s": v["broker_per_s"], "floor_per_s": v["floor_per_s"], "ratio": v["ratio"],
                              "decode_ratio": v["decode_ratio"], "in_process": v["in_process"]}
                          for k, v in summary.items()}))


if __name__ == "__main__":
    main()
