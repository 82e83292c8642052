"""Put -> delivered to a held pull, over TCP (issue 22, point 7).

    bash run.sh bench bench_pull_wakeup [--queues 4] [--messages 150] [--jitter-ms 2] [--suspend-ms 15000] [--quick]

A broker (BrokerController with its remoting server on 127.0.0.1, SYNC_FLUSH on the real disk under
the temp dir, no NameServer) runs in a child process. For each of `--queues` queues this process
keeps one consumer connection pulling as RocketMQ's push consumer does (PULL_MESSAGE with the
suspend flag, `--suspend-ms` as brokerSuspendMaxTimeMillis, the next pull sent as soon as an answer
arrives) and one producer connection that sends the queue's next message `--jitter-ms` (uniform,
from 0) after the previous one was delivered: the queue is otherwise quiet, and the send often
lands while the consumer's next pull is on its way or being read, which is where a wake-up can be
missed. Latency: from just before the SEND_MESSAGE frame is written to the PULL_MESSAGE answer
holding that message being decoded, both in this process.

Printed: the machine, p50 / p99 / max of put -> delivered (target: p99 <= 20 ms), the send acks'
latency beside it (both wait for the same write, and its fsync with SYNC_FLUSH), how long after
its ack each message was delivered (what the hold and wake-up add), and how many
deliveries took over 1 s (a missed wake-up waits for the suspend timeout or a periodic re-check),
then put -> delivered side by side with put -> ack. `--flush ASYNC_FLUSH` takes the fsync out of
both. `--quick`: 4 queues x 50 messages.

`--compare-replicated` (issue 33): the cost of the read fence. Two brokers on a local Ray instead
of the child process, side by side in one run, each driven the same way in alternating rounds: an
unreplicated master, and a SYNC_MASTER whose slave replicates over TCP, where a message is readable
(and a held pull woken) only once the slave holds it. Printed: put -> delivered for both, and their
ratio (target: replicated p99 <= 2x unreplicated).
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import random
import shutil
import struct
import tempfile
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from _common import latency_ms, pct_ms, print_machine, ratio_table

from namesrv.protocol.codes import BrokerRequestCode as Code
from namesrv.protocol.codes import ResponseCode
from namesrv.protocol.message.properties import properties_to_string
from namesrv.remoting.codec import encode_command
from namesrv.remoting.frame_decoder import FrameDecoder
from namesrv.remoting.wire_command import RemotingCommand

TOPIC = "BenchWakeup"


def broker_main(store_dir: str, queues: int, flush: str, pipe: Connection) -> None:
    """The child: one broker serving TCP until the parent says stop."""
    from actors.broker.lifecycle import BrokerController
    from actors.namesrv.housekeeping import BrokerChannel
    from namesrv.broker.config import BrokerConfig
    from namesrv.protocol.models import TopicConfig
    from namesrv.remoting.config import RemotingServerConfig
    from namesrv.store.types import FlushDiskType

    async def serve() -> None:
        config = BrokerConfig(flush_disk_type=FlushDiskType(flush))
        controller = BrokerController("BenchCluster", "bench-broker", 0, Path(store_dir), config, [], "",
                                      RemotingServerConfig(listen_port=0), lambda port: f"127.0.0.1:{port}",
                                      lambda token: BrokerChannel(None, token), "bench-broker")
        controller.topics.update_topic_config(TopicConfig(topic_name=TOPIC, read_queue_nums=queues,
                                                          write_queue_nums=queues))
        await controller.durable()
        controller.loop.spawn("remoting-serve", controller.remoting.serve())
        pipe.send(controller.remoting.port)
        await asyncio.get_running_loop().run_in_executor(None, pipe.recv)
        controller.processor.closed = True
        controller.processor.hold.notify_all()
        await controller.remoting.stop()
        controller.store.close()

    asyncio.run(serve())


class Wire:
    """One client connection: a request at a time, its answer awaited."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.decoder = FrameDecoder()
        self.opaque = 0
        self.answers: list[RemotingCommand] = []

    @classmethod
    async def open(cls, port: int) -> Wire:
        return cls(*await asyncio.open_connection("127.0.0.1", port))

    async def call(self, code: int, ext: dict[str, str], body: bytes | None = None) -> RemotingCommand:
        self.opaque += 1
        self.writer.write(encode_command(RemotingCommand(code, self.opaque, 0, 0, 317, None, ext, body)))
        while not self.answers:
            data = await self.reader.read(1 << 20)
            if not data:
                raise ConnectionError("broker closed the connection")
            self.answers.extend(self.decoder.feed(data))
        return self.answers.pop(0)

    def close(self) -> None:
        self.writer.close()


def bodies(payload: bytes) -> list[bytes]:
    """The message bodies of a PULL_MESSAGE answer (RocketMQ's stored layout: see message_codec)."""
    out, pos = [], 0
    while pos < len(payload):
        (size,) = struct.unpack_from(">i", payload, pos)
        (length,) = struct.unpack_from(">i", payload, pos + 84)
        out.append(payload[pos + 88 : pos + 88 + length])
        pos += size
    return out


async def one_queue(port: int, queue_id: int, messages: int, jitter_s: float, suspend_ms: int,
                    latencies: list[float], acks: list[float], after_ack: list[float]) -> None:
    consumer, producer = await Wire.open(port), await Wire.open(port)
    sent_at: dict[bytes, float] = {}
    delivered_at: dict[bytes, float] = {}
    delivered: asyncio.Queue[bytes] = asyncio.Queue()

    start = await consumer.call(Code.GET_MAX_OFFSET, {"topic": TOPIC, "queueId": str(queue_id)})
    first = int((start.ext_fields or {}).get("offset", 0))  # a later round starts past the earlier ones

    async def consume() -> None:
        offset = first
        while True:
            answer = await consumer.call(Code.PULL_MESSAGE, {
                "consumerGroup": "BenchGroup", "topic": TOPIC, "queueId": str(queue_id), "queueOffset": str(offset),
                "maxMsgNums": "32", "sysFlag": "2", "commitOffset": "0", "suspendTimeoutMillis": str(suspend_ms),
                "subVersion": "0"})
            now = time.perf_counter()
            if answer.code == ResponseCode.SUCCESS:
                for body in bodies(answer.body or b""):
                    latencies.append(now - sent_at[body])
                    delivered_at[body] = now
                    delivered.put_nowait(body)
            if answer.ext_fields and "nextBeginOffset" in answer.ext_fields:
                offset = int(answer.ext_fields["nextBeginOffset"])

    pulling = asyncio.ensure_future(consume())
    try:
        for k in range(messages):
            await asyncio.sleep(random.uniform(0, jitter_s))
            body = f"{queue_id}:{k}".encode()
            ext = {"producerGroup": "BenchProducer", "topic": TOPIC, "defaultTopic": "TBW102",
                   "defaultTopicQueueNums": "4", "queueId": str(queue_id), "sysFlag": "0",
                   "bornTimestamp": str(int(time.time() * 1000)), "flag": "0",
                   "properties": properties_to_string({"UNIQ_KEY": body.decode()})}
            sent_at[body] = time.perf_counter()
            ack = await producer.call(Code.SEND_MESSAGE, ext, body)
            acked = time.perf_counter()
            acks.append(acked - sent_at[body])
            assert ack.code == ResponseCode.SUCCESS, ack.remark
            got = await asyncio.wait_for(delivered.get(), suspend_ms / 1000 + 30)
            assert got == body
            after_ack.append(max(0.0, delivered_at[body] - acked))
    finally:
        pulling.cancel()
        consumer.close()
        producer.close()


async def drive(port: int, args: argparse.Namespace) -> tuple[list[float], list[float], list[float]]:
    latencies: list[float] = []
    acks: list[float] = []
    after_ack: list[float] = []
    await asyncio.gather(*(one_queue(port, q, args.messages, args.jitter_ms / 1000, args.suspend_ms, latencies,
                                     acks, after_ack) for q in range(args.queues)))
    return latencies, acks, after_ack


def replicated_ports(run: Any, queues: int) -> tuple[int, int]:
    """(unreplicated master's port, SYNC_MASTER's port) of two deployments on the run's Ray, each
    with the benchmark's topic and, for the SYNC_MASTER, its slave in the SyncStateSet."""
    import ray

    from actors.deployment.launcher import Deployment
    from actors.deployment.spec import BrokerSpec, ClusterSpec
    from clients.admin.client import AdminClient
    from namesrv.common.waiting import wait_until

    ports = []
    for name, brokers, role in (("plain", [BrokerSpec("broker-a", 0)], "ASYNC_MASTER"),
                                ("replicated", [BrokerSpec("broker-a", 0), BrokerSpec("broker-a", 1)], "SYNC_MASTER")):
        spec = ClusterSpec(namesrv_count=1, brokers=brokers, profile="fast", namespace=f"{run.namespace}-{name}",
                           data_dir=f"{run.data_dir}/{name}", namesrv_port=0, broker_port=0,
                           broker_overrides={"broker_role": role})
        dep = Deployment(spec)
        run.deployments.append(dep)
        dep.start()
        AdminClient(dep).create_topic(TOPIC, read_queue_nums=queues, write_queue_nums=queues)
        master = dep.brokers[dep.addr_of("broker-a-0")]
        if len(brokers) > 1:
            wait_until(lambda m=master: ray.get(m.get_ha_info.remote(), timeout=30)["sync_state_set"] == [0, 1],
                       60, "the slave in the SyncStateSet")
        ports.append(int(dep.addr_of("broker-a-0").rsplit(":", 1)[1]))
    return ports[0], ports[1]


def compare_replicated(args: argparse.Namespace) -> None:
    from _common import local_ray_run

    results: dict[str, list[float]] = {"unreplicated": [], "replicated": []}
    with local_ray_run("bench-pull-wakeup-ha", fsync=True) as run:
        plain, replicated = replicated_ports(run, args.queues)
        for _ in range(args.rounds):
            for label, port in (("unreplicated", plain), ("replicated", replicated)):
                latencies, _, _ = asyncio.run(drive(port, args))
                results[label] += latencies
    print(f"\n== put -> delivered to a held pull: {args.queues} queues x {args.messages} messages x "
          f"{args.rounds} rounds each, SYNC_FLUSH; replicated: SYNC_MASTER + a slave over TCP, reads fenced "
          f"at what the slave holds")
    for label, latencies in results.items():
        print(f"  {label:12s} {latency_ms(latencies)}")
    print(ratio_table([(f"p{round(p * 100)}", pct_ms(results["unreplicated"], p), pct_ms(results["replicated"], p))
                       for p in (0.5, 0.9, 0.99)], "unreplicated", "replicated", digits=3))
    ratio = pct_ms(results["replicated"], 0.99) / max(pct_ms(results["unreplicated"], 0.99), 1e-9)
    print(f"\nreplicated p99 {ratio:.2f}x unreplicated: {'within' if ratio <= 2 else 'OVER'} the 2x target")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queues", type=int, default=4)
    parser.add_argument("--messages", type=int, default=150, help="per queue")
    parser.add_argument("--jitter-ms", type=float, default=2.0)
    parser.add_argument("--suspend-ms", type=int, default=15_000)
    parser.add_argument("--flush", choices=["SYNC_FLUSH", "ASYNC_FLUSH"], default="SYNC_FLUSH")
    parser.add_argument("--quick", action="store_true", help="4 queues x 50 messages")
    parser.add_argument("--compare-replicated", action="store_true",
                        help="an unreplicated master and a SYNC_MASTER with a slave, side by side on a local Ray")
    parser.add_argument("--rounds", type=int, default=2, help="with --compare-replicated: alternating rounds")
    args = parser.parse_args()
    if args.quick:
        args.queues, args.messages = 4, 50
    if args.compare_replicated:
        if args.flush != "SYNC_FLUSH":
            parser.error("--compare-replicated measures SYNC_FLUSH brokers")
        compare_replicated(args)
        return
    root = tempfile.mkdtemp(prefix="bench-pull-wakeup-")
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    broker = ctx.Process(target=broker_main, args=(root, args.queues, args.flush, child), daemon=True)
    try:
        print_machine(root, fsync=True)
        broker.start()
        if not parent.poll(120):
            raise RuntimeError("the broker did not start")
        port = parent.recv()
        started = time.perf_counter()
        latencies, acks, after_ack = asyncio.run(drive(port, args))
        elapsed = time.perf_counter() - started
        parent.send("stop")
        broker.join(30)
    finally:
        if broker.is_alive():
            broker.kill()
        shutil.rmtree(root, ignore_errors=True)
    slow = sum(1 for x in latencies if x > 1.0)
    print(f"\n== put -> delivered to a held pull: {args.queues} queues x {args.messages} messages, "
          f"jitter 0-{args.jitter_ms:g} ms, suspend {args.suspend_ms} ms, {args.flush}, {elapsed:.1f} s")
    print(f"  delivered  {latency_ms(latencies)}")
    print(f"  send ack   {latency_ms(acks)}  (the same durable write, for comparison)")
    print(f"  after ack  {latency_ms(after_ack)}  (delivered after its send's ack; 0 when before)")
    print(f"  over 1 s: {slow} of {len(latencies)}")
    print("\n== put -> delivered vs put -> ack (ms)")
    print(ratio_table([(f"p{round(p * 100)}", pct_ms(acks, p), pct_ms(latencies, p)) for p in (0.5, 0.9, 0.99)]
                      + [("max", max(acks, default=0.0) * 1000, max(latencies, default=0.0) * 1000)],
                      "put -> ack", "put -> delivered", digits=3))
    p99 = pct_ms(latencies, 0.99)
    print(f"\np99 {p99:.2f} ms: {'within' if p99 <= 20 else 'OVER'} the 20 ms target")


if __name__ == "__main__":
    main()
