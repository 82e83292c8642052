"""RocketMQ 5 clients through the gRPC proxy side by side with the 4.x client over remoting, against the
same brokers in the same run (a local Ray: 1 NameServer, 2 brokers on TCP, 1 proxy actor, fast
profile; each broker also serves a local-mode proxy of its own, `proxy_mode="local"`).

    bash run.sh bench bench_proxy            # 2,000 sync sends each per round, 3 rounds
    bash run.sh bench bench_proxy --quick    # 100 sync sends each, one round (a smoke run)

1. Sync sends, one sender each, back to back, the same body size and count: the official 5.x Python
   client (PyPI rocketmq-python-client, in its own venv, benchmarks/_rmq5_load.py) to the proxy
   actor, which sends each on to a broker over TCP (cluster mode); the same client to the brokers'
   own proxies (local mode: each queue's broker stores its sends in process); and the 4.x client
   (PyPI rocketmq 0.4.4, rocketmq-client-cpp) straight to the brokers. The first --warmup sends of
   each are left out; in each round all three run, each ratio is taken within the round and the
   tables show the median round's.
2. Consumption of everything both stored: the 5.x SimpleConsumer receiving 32 at a time and acking
   each message in turn (pop and ack through the proxy; 5.1.2's ack_async returns no future), and
   the 4.x client's PushConsumer over remoting (its progress is an offset, not an ack per message);
   messages/s from the first delivery to the last (for the SimpleConsumer, to the last ack
   answered), start-up left out.

3. Where a 5.x send's time goes: the same count of bare gRPC calls through the wheel's generated
   stub alone (no client library), Heartbeats (the call itself) and SendMessages (the call, the
   proxy's work and its send to a broker), beside the clients' mean send latency, for both modes.

4. One AckMessage of a received batch of 32 (raw gRPC: the official client acks one message per
   call) through the deployment's proxy, which sends each broker one BATCH_ACK, and through a
   second proxy with `batch_ack` off (an ACK_MESSAGE per entry, one after the other), alternately,
   each on a topic of its own: the call's time and the broker requests it took (benchmarks/_batch_ack.py).

Issue 35 asks for >= 0.7x on both; the figures say whether it holds on this machine.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import uuid
from pathlib import Path
from typing import Any

from _batch_ack import BATCH, bench_batch_ack
from _common import latency_ms, local_ray_run, ratio_table
from _real_client import bench_real_consume, bench_real_sends, median_index, send_figures

from actors.deployment.launcher import deploy
from actors.deployment.spec import BrokerSpec, ClusterSpec
from clients.admin.client import AdminClient
from clients.cli.render import table

BASE, MEASURED, LOCAL = "4.x client (remoting)", "5.x client (proxy)", "5.x client (local mode)"
ROOT = Path(__file__).resolve().parent.parent
LOAD = ROOT / "benchmarks" / "_rmq5_load.py"


def rmq5_python() -> Path:
    """The official 5.x client's venv (run.sh makes it: `bash run.sh bench bench_proxy`)."""
    python = ROOT / os.environ.get("NAMESRV_RMQ5_VENV", ".venv-rmq5") / "bin" / "python"
    if not python.exists():
        raise SystemExit(f"{python} is missing: `bash run.sh bench bench_proxy` makes the RocketMQ 5 client's venv")
    return python


def run_rmq5(*args: str, timeout_s: float) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    out = subprocess.run([str(rmq5_python()), str(LOAD), *args], capture_output=True, text=True, timeout=timeout_s,
                         check=False)
    lines = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    if not lines or "done" not in lines[-1]:
        raise RuntimeError(f"the 5.x client's {args[0]} failed (exit {out.returncode}): {out.stderr[-1500:]}")
    return lines[:-1], lines[-1]["done"]


def bench_rmq5_sends(endpoint: str, topic: str, count: int, warmup: int, body_size: int) -> dict[str, Any]:
    records, _ = run_rmq5("produce", endpoint, topic, str(count + warmup), str(body_size), timeout_s=600)
    failed = [r for r in records[warmup:] if "error" in r]
    if failed:
        raise RuntimeError(f"{len(failed)} 5.x sends failed, e.g. {failed[0]['error']}")
    ok = [r for r in records if "error" not in r]
    warm_failed = len(records) - len(ok)
    return send_figures([r["t"] for r in ok], [r["latency_ms"] / 1000 for r in ok], warmup - warm_failed)


def bench_rmq5_consume(endpoint: str, topic: str, total: int) -> dict[str, Any]:
    records, done = run_rmq5("consume", endpoint, topic, f"GID_bench_{uuid.uuid4().hex[:6]}", str(total), "300",
                             timeout_s=400)
    if done["distinct"] < total:
        raise RuntimeError(f"the SimpleConsumer got {done['distinct']} of {total} messages")
    times = [r["t"] for r in records]  # each first receipt, then the last ack's answer
    return {"per_s": (len(times) - 2) / (times[-1] - times[0]), "deliveries": done["deliveries"],
            "distinct": done["distinct"]}


def bench_raw_calls(endpoint: str, topic: str, count: int, warmup: int, body_size: int) -> dict[str, float]:
    """Mean latency (ms) of bare Heartbeat and SendMessage calls (the first `warmup` of each left out)."""
    records, _ = run_rmq5("raw", endpoint, topic, str(count + warmup), str(body_size), timeout_s=600)
    means = {}
    for rpc in ("Heartbeat", "SendMessage"):
        lat = [r["latency_ms"] for r in records if r["rpc"] == rpc][warmup:]
        means[rpc] = sum(lat) / len(lat)
    return means


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="100 sends each instead of 2,000, one round (a smoke run)")
    ap.add_argument("--count", type=int, help="measured sync sends per client and round (default 2000, --quick 100)")
    ap.add_argument("--warmup", type=int, default=20, help="sends per client left out of the figures")
    ap.add_argument("--body-size", type=int, default=128)
    ap.add_argument("--rounds", type=int, help="rounds of both clients' sends (default 3, --quick 1)")
    ap.add_argument("--ack-rounds", type=int, help="AckMessages of 32 timed per path (default 20, --quick 3)")
    args = ap.parse_args(argv)
    count = args.count or (100 if args.quick else 2000)
    rounds_n = args.rounds or (1 if args.quick else 3)
    ack_rounds = args.ack_rounds or (3 if args.quick else 20)
    if importlib.util.find_spec("rocketmq") is None:
        raise SystemExit("the 4.x client is missing: pip install rocketmq==0.4.4 (or pip install -e '.[dev]')")
    rmq5_python()

    with local_ray_run("bench-proxy") as run:
        dep = deploy(ClusterSpec(
            namesrv_count=1, brokers=[BrokerSpec("broker-a"), BrokerSpec("broker-b")], profile="fast",
            namespace=run.namespace, data_dir=os.path.join(run.data_dir, "cluster"), namesrv_port=0, broker_port=0,
            proxy_count=1, proxy_port=0, proxy_mode="local",
            proxy_overrides={"min_invisible_time_ms_for_recv": 1_000, "consumer_min_long_polling_timeout_ms": 500},
        ))
        run.deployments.append(dep)
        addr, endpoint = dep.namesrv_addr(), dep.proxy_endpoints["proxy-0"]
        local_ep = dep.proxy_endpoints["broker-a-0"]  # the access point; each queue is at its broker's own proxy
        topic = f"BenchProxy_{uuid.uuid4().hex[:6]}"
        AdminClient(dep).create_topic(topic, read_queue_nums=4, write_queue_nums=4)
        print("\n== 1 NameServer, brokers broker-a and broker-b (fast profile, SYNC_FLUSH with group commit), "
              f"namesrvAddr {addr}, "
              f"proxy actor {endpoint}, local-mode proxies {dep.proxy_endpoints['broker-a-0']} and "
              f"{dep.proxy_endpoints['broker-b-0']}; topic {topic} with 4 queues on each; {count:,} sync sends per "
              f"client and round after {args.warmup} warm-up, {args.body_size}-byte bodies, one sender each, back to "
              "back", flush=True)
        rounds: list[tuple[dict[str, Any], dict[str, Any], dict[str, Any]]] = []
        for r in range(rounds_n):
            print(f"  round {r + 1} of {rounds_n}", flush=True)
            real = bench_real_sends(addr, topic, count, args.warmup, args.body_size)
            print(f"    {BASE:<24} {real['per_s']:8.0f} sends/s  {latency_ms(real['lat'])}", flush=True)
            rmq5 = bench_rmq5_sends(endpoint, topic, count, args.warmup, args.body_size)
            print(f"    {MEASURED:<24} {rmq5['per_s']:8.0f} sends/s  {latency_ms(rmq5['lat'])}", flush=True)
            local = bench_rmq5_sends(local_ep, topic, count, args.warmup, args.body_size)
            print(f"    {LOCAL:<24} {local['per_s']:8.0f} sends/s  {latency_ms(local['lat'])}", flush=True)
            rounds.append((real, rmq5, local))
        ratios = [rmq5["per_s"] / real["per_s"] for real, rmq5, _ in rounds]
        local_ratios = [local["per_s"] / real["per_s"] for real, _, local in rounds]
        print(f"  per round: 5.x through the proxy actor / 4.x over remoting {', '.join(f'{x:.2f}x' for x in ratios)}; "
              f"5.x in local mode / 4.x {', '.join(f'{x:.2f}x' for x in local_ratios)}")
        real, rmq5, _ = rounds[median_index(ratios)]
        real_l, _, local = rounds[median_index(local_ratios)]

        total = sum(x["acked"] for round_ in rounds for x in round_)  # a failed warm-up send is not there
        print(f"\n== consume all {total:,} messages of {topic}: the 4.x client's PushConsumer over remoting and "
              "the 5.x SimpleConsumer through the proxy actor (receive 32, ack each), first to last delivery",
              flush=True)
        real_c = bench_real_consume(addr, topic, total)
        print(f"  {BASE:<22} {real_c['per_s']:8.0f} msgs/s  ({real_c['deliveries']:,} deliveries of "
              f"{real_c['distinct']:,} messages)", flush=True)
        rmq5_c = bench_rmq5_consume(endpoint, topic, total)
        print(f"  {MEASURED:<22} {rmq5_c['per_s']:8.0f} msgs/s  ({rmq5_c['deliveries']:,} deliveries of "
              f"{rmq5_c['distinct']:,} messages)", flush=True)

        print()
        print(ratio_table([
            ("sync sends/s", real["per_s"], rmq5["per_s"]),
            ("send p50 ms", real["p50_ms"], rmq5["p50_ms"]),
            ("send p99 ms", real["p99_ms"], rmq5["p99_ms"]),
            ("consume msgs/s", real_c["per_s"], rmq5_c["per_s"]),
        ], BASE, MEASURED, digits=3))
        print()
        print(ratio_table([
            ("sync sends/s", real_l["per_s"], local["per_s"]),
            ("send p50 ms", real_l["p50_ms"], local["p50_ms"]),
            ("send p99 ms", real_l["p99_ms"], local["p99_ms"]),
        ], BASE, LOCAL, digits=3))

        for label, ep, base, measured in (("the proxy actor", endpoint, real, rmq5),
                                          ("local mode (broker-a's own proxy)", local_ep, real_l, local)):
            raw = bench_raw_calls(ep, topic, count, args.warmup, args.body_size)
            real_ms, rmq5_ms = (sum(x["lat"]) / len(x["lat"]) * 1000 for x in (base, measured))
            parts = [("the 5.x client library's own share (send - bare SendMessage)", rmq5_ms - raw["SendMessage"]),
                     ("the proxy's work and its send to the broker (bare SendMessage - bare Heartbeat)",
                      raw["SendMessage"] - raw["Heartbeat"]),
                     ("a bare gRPC call (Heartbeat)", raw["Heartbeat"])]
            print(f"\n== where a 5.x send's time goes through {label}: mean ms over {count:,} calls each (the "
                  "median round's sends; bare gRPC calls through the generated stub, no client library)")
            print(table(["part", "ms", "of the 5.x send"], [
                ["4.x client send over remoting (the whole round trip)", f"{real_ms:.3f}", ""],
                ["5.x client send (the whole round trip)", f"{rmq5_ms:.3f}", "100%"],
                *([f"  {name}", f"{ms:.3f}", f"{ms / rmq5_ms:.0%}"] for name, ms in parts)]))
            print(f"0.7x the 4.x client's sends would need a 5.x send of {real_ms / 0.7:.3f} ms")

        one_by_one, batched = "ACK_MESSAGE each", "BATCH_ACK per broker"
        off = dep.start_proxy(1, {"batch_ack": False})
        paths = {}
        for label, (endpoint_, proxy) in {one_by_one: (off, dep.proxies["proxy-1"]),
                                          batched: (endpoint, dep.proxies["proxy-0"])}.items():
            paths[label] = (endpoint_, proxy, f"BenchAck_{uuid.uuid4().hex[:6]}")
            AdminClient(dep).create_topic(paths[label][2], read_queue_nums=4, write_queue_nums=4)
        print(f"\n== one AckMessage of {BATCH} received messages, {ack_rounds} per path, alternately: proxy {off} "
              f"with batch_ack off ({one_by_one}), proxy {endpoint} with it on ({batched})", flush=True)
        acks = bench_batch_ack(paths, ack_rounds)
        print(ratio_table([
            (f"AckMessage of {BATCH}, p50 ms", acks[one_by_one]["p50_ms"], acks[batched]["p50_ms"]),
            (f"AckMessage of {BATCH}, p90 ms", acks[one_by_one]["p90_ms"], acks[batched]["p90_ms"]),
            ("broker requests per AckMessage", acks[one_by_one]["requests"], acks[batched]["requests"]),
        ], one_by_one, batched, digits=3))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
