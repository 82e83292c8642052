"""Replication benchmark on a private local Ray: what a slave costs a master's senders, how far
behind it runs under load, and how fast a slave that missed a lot of log catches up.

    bash run.sh bench bench_replication            # 10 s per configuration, 100 MB to catch up
    bash run.sh bench bench_replication --quick    # 0.5 s per configuration, 4 MB (a smoke run)

1. 16 concurrent senders (threads of this driver, sync Ray sends back to back, 256-byte bodies, SYNC_FLUSH
   everywhere) against: an unreplicated ASYNC_MASTER; an ASYNC_MASTER with one slave; a SYNC_MASTER
   with one slave (each send acknowledged once the slave holds it; `--compare-depth-2` adds one whose
   slave keeps two replication requests in flight, ha_pipeline_depth 2; `--compare-ray` one whose
   slave replicates over Ray calls, ha_transport "ray", instead of its one TCP connection to the
   master's client port, the default). Printed side by side:
   msg/s, ack p50/p99 (the master's replication state is sampled in every configuration alike), the
   slave's lag in time twice: probed (for each sample of the master's log end, how long until a
   later sample showed the slave holding it; a sample is a Ray call to the busy master plus 10 ms,
   so this reads at least one probe interval) and timed by the master (from each batch's write to
   the slave's acknowledgement that covers it, both on the master's clock: its status'
   replication_lag_ms, the last 4,096 batches), and where the SYNC_MASTER's slave spends a transfer.
   Targets (issue 21): SYNC_MASTER >= 0.7x unreplicated msg/s; lag p99 <= 50 ms.
2. Catch-up: a master alone takes N MB (16 KiB bodies), then its slave starts empty; the time from
   the slave's first request to holding the master's whole log (its own clock), in MB/s (target
   >= 50 MB/s).
"""

from __future__ import annotations

import argparse
import bisect
import threading
import time
from typing import Any

import ray
from _common import latency_ms, local_ray_run, pct_ms, ratio_table

from actors.deployment.launcher import Deployment, deploy
from actors.deployment.spec import BrokerSpec, ClusterSpec
from namesrv.common.stats import percentile

TOPIC = "BenchRepl"
SENDERS = 16
MASTER, SLAVE = "broker-a-0", "broker-a-1"


def deploy_set(run: Any, role: str, slave: bool, tag: str, depth: int = 1, transport: str = "tcp") -> Deployment:
    brokers = [BrokerSpec("broker-a", 0)] + ([BrokerSpec("broker-a", 1)] if slave else [])
    spec = ClusterSpec(namesrv_count=1, brokers=brokers, profile="fast", namespace=f"{run.namespace}-{tag}",
                       data_dir=f"{run.data_dir}/{tag}", namesrv_port=0, broker_port=0,
                       broker_overrides={"broker_role": role, "ha_poll_wait_ms": 500,
                                         "ha_pipeline_depth": depth, "ha_transport": transport})
    dep = deploy(spec)
    run.deployments.append(dep)
    assert ray.get(dep.brokers[dep.addr_of(MASTER)].create_topic.remote(TOPIC, 8, 8), timeout=60).ok
    return dep


def ha(dep: Deployment, name: str) -> dict[str, Any]:
    return ray.get(dep.brokers[dep.addr_of(name)].get_ha_info.remote(), timeout=60)


def wait_for(predicate: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.01)


def load(dep: Deployment, seconds: float, replicated: bool) -> dict[str, Any]:
    master = dep.brokers[dep.addr_of(MASTER)]
    body = b"x" * 256
    stop = threading.Event()
    lat: list[float] = []
    failed = [0]
    lock = threading.Lock()

    def sender(i: int) -> None:
        mine: list[float] = []
        bad = 0
        n = 0
        while not stop.is_set():
            t0 = time.perf_counter()
            r = ray.get(master.send_message.remote(TOPIC, (i + n) % 8, body))
            mine.append(time.perf_counter() - t0)
            bad += not r.ok
            n += 1
        with lock:
            lat.extend(mine)
            failed[0] += bad

    samples: list[tuple[float, int, int]] = []

    def sampler() -> None:
        while not stop.is_set():
            info = ha(dep, MASTER)
            samples.append((time.perf_counter(), info["master_max"], info["slave_acks"].get(1, 0)))
            time.sleep(0.01)

    # every configuration is sampled alike (the unreplicated one too), so the sampler's own calls on
    # the master cost each the same
    threads = [threading.Thread(target=sender, args=(i,)) for i in range(SENDERS)] + [threading.Thread(target=sampler)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    timed = ray.get(master.status.remote(), timeout=60)["replication_lag_ms"].get(1) if replicated else None
    return {"msgs": len(lat), "rate": len(lat) / elapsed, "lat": lat, "failed": failed[0],
            "lag_ms": lag_ms(samples) if replicated else [], "lag_timed": timed}


def lag_ms(samples: list[tuple[float, int, int]]) -> list[float]:
    """For each sample's master log end: ms until a later sample shows the slave holding it."""
    acks = [a for _, _, a in samples]
    times = [t for t, _, _ in samples]
    running = []
    best = 0
    for a in acks:  # acks only grow; keep them monotonic for the search
        best = max(best, a)
        running.append(best)
    out = []
    for t, end, _ in samples:
        i = bisect.bisect_left(running, end)
        if i < len(samples):
            out.append(max(0.0, (times[i] - t) * 1000))
    return out


def transfer_parts(before: dict[str, Any], after: dict[str, Any]) -> dict[str, float]:
    """The slave's per-transfer timing (get_ha_info mean_ms) over the transfers between two reads."""
    n = after["data_transfers"] - before["data_transfers"]
    out = {k: (after["mean_ms"][k] * after["data_transfers"] - before["mean_ms"][k] * before["data_transfers"])
           / max(1, n) for k in after["mean_ms"]}
    return out | {"n": n}


def catch_up(run: Any, megabytes: int) -> tuple[float, float]:
    dep = deploy_set(run, "ASYNC_MASTER", False, "catchup")
    master = dep.brokers[dep.addr_of(MASTER)]
    body = b"y" * 16384
    per_batch = 64
    total = megabytes * 1024 * 1024 // len(body)
    for start in range(0, total, per_batch):
        refs = [master.send_message.remote(TOPIC, i % 8, body) for i in range(start, min(total, start + per_batch))]
        assert all(r.ok for r in ray.get(refs, timeout=120))
    end = ha(dep, MASTER)["master_max"]
    dep.start_broker(BrokerSpec("broker-a", 1))
    wait_for(lambda: ha(dep, SLAVE)["offset"] >= end, 600, "slave catch-up")
    info = ha(dep, SLAVE)  # the slave's own clock: its first request to holding the whole log
    return end / 2**20, (info["caught_up_ms"] - info["first_request_ms"]) / 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="0.5 s per configuration, 4 MB catch-up")
    ap.add_argument("--seconds", type=float, default=None)
    ap.add_argument("--megabytes", type=int, default=None)
    ap.add_argument("--compare-depth-2", action="store_true",
                    help="also SYNC_MASTER with ha_pipeline_depth 2 (two replication requests in flight)")
    ap.add_argument("--compare-ray", action="store_true",
                    help="also SYNC_MASTER whose slave replicates over Ray calls (ha_transport ray)")
    args = ap.parse_args()
    seconds = args.seconds or (0.5 if args.quick else 10.0)
    megabytes = args.megabytes or (4 if args.quick else 100)
    with local_ray_run("bench-replication", fsync=True) as run:
        dep = deploy_set(run, "ASYNC_MASTER", False, "plain")
        plain = load(dep, seconds, False)
        run.retire(dep)  # each configuration runs alone: no idle deployment beside it
        dep = deploy_set(run, "ASYNC_MASTER", True, "async")
        wait_for(lambda: ha(dep, MASTER)["sync_state_set"] == [0, 1], 60, "slave in sync")
        async_slave = load(dep, seconds, True)
        run.retire(dep)
        dep = deploy_set(run, "SYNC_MASTER", True, "sync")
        wait_for(lambda: ha(dep, MASTER)["sync_state_set"] == [0, 1], 60, "slave in sync")
        before = ha(dep, SLAVE)
        sync_slave = load(dep, seconds, True)
        after = ha(dep, SLAVE)
        run.retire(dep)
        parts = transfer_parts(before, after)
        over_ray = ray_parts = None
        if args.compare_ray:
            dep = deploy_set(run, "SYNC_MASTER", True, "syncray", transport="ray")
            wait_for(lambda: ha(dep, MASTER)["sync_state_set"] == [0, 1], 60, "slave in sync")
            before_ray = ha(dep, SLAVE)
            over_ray = load(dep, seconds, True)
            ray_parts = transfer_parts(before_ray, ha(dep, SLAVE))
            run.retire(dep)
        two = None
        if args.compare_depth_2:
            dep = deploy_set(run, "SYNC_MASTER", True, "sync2", depth=2)
            wait_for(lambda: ha(dep, MASTER)["sync_state_set"] == [0, 1], 60, "slave in sync")
            two = load(dep, seconds, True)
            run.retire(dep)
        print(f"\n{SENDERS} senders, {seconds:g} s each, 256-byte bodies, SYNC_FLUSH")
        rows = [("unreplicated", plain), ("ASYNC_MASTER + slave", async_slave), ("SYNC_MASTER + slave", sync_slave)]
        rows += [("  two requests in flight", two)] if two else []
        rows += [("  over Ray calls", over_ray)] if over_ray else []
        for name, r in rows:
            lag = r["lag_ms"]
            lag_text = f"; slave lag p50 {percentile(lag, 0.5) or 0:.1f} ms, p99 {percentile(lag, 0.99) or 0:.1f} ms" \
                if lag else ""
            timed = r["lag_timed"]
            if timed:
                lag_text += (f" probed, {timed['p50']:.1f} / {timed['p99']:.1f} ms timed by the master "
                             f"({timed['n']:,} batches)")
            print(f"  {name:22s} {r['rate']:8,.0f} msg/s ({r['msgs']:,} sent, {r['failed']} not SEND_OK), "
                  f"ack {latency_ms(r['lat'])}{lag_text}")
        for how, p in ((after.get("transport", "ray"), parts),) + ((("ray", ray_parts),) if ray_parts else ()):
            print(f"  SYNC_MASTER's slave over {how}, mean per transfer that carried records ({p['n']:,}): the round "
                  f"trip and the master's read {p['call']:.1f} ms, the master's wait for records "
                  f"{p['master_wait']:.1f} ms, the slave's append {p['append']:.2f} ms")
        print()
        print(ratio_table([("msg/s", plain["rate"], sync_slave["rate"]),
                           ("ack p50 (ms)", pct_ms(plain["lat"], 0.5), pct_ms(sync_slave["lat"], 0.5)),
                           ("ack p99 (ms)", pct_ms(plain["lat"], 0.99), pct_ms(sync_slave["lat"], 0.99))],
                          "unreplicated", "SYNC_MASTER + slave"))
        mb, secs = catch_up(run, megabytes)
        print(f"\ncatch-up: a slave started empty copied {mb:.1f} MB in {secs:.2f} s = {mb / secs:.1f} MB/s "
              "(from its first request; 4 MiB batches, each written, acknowledged, then fsynced)")


if __name__ == "__main__":
    main()
