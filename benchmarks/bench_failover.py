"""How long does a broker set go without a master when its master is killed? (issue 21, failover)

One broker set in controller mode on a local Ray, fast profile: broker-a-0 and broker-a-1 (SYNC_MASTER
with one slave), two NameServers, the controller. Each round: SIGKILL of the master's worker process
(or `ray.kill` with `--ray-kill`), then, from the kill:

- accepting: the surviving replica answers a send SEND_OK (the driver sends to it every 20 ms);
- routed: every NameServer routes brokerName broker-a's brokerId 0 to it;

then the killed broker is restarted from its store (it returns as a slave and catches up) and the
next round kills whichever replica is master. Side by side: the p50/p99 beside RocketMQ 5's floor
(the controller's default 10 s heartbeat timeout before it elects; 4.x never fails over) and beside
the issue's bounds (3 s accepting, 3.5 s routed). `--quick`: 2 kills.

    bash run.sh bench bench_failover [--kills 20] [--ray-kill] [--quick]
"""

from __future__ import annotations

import argparse
import signal
import time
from typing import Any

import ray
from _common import latency_ms, local_ray_run, pct_ms, ratio_table

from actors.controller.start import controller_config
from actors.deployment.launcher import Deployment
from actors.deployment.spec import BrokerSpec, ClusterSpec

TOPIC = "BenchFailover"
NAMES = ("broker-a-0", "broker-a-1")
HA = {"slave_sync_interval_ms": 200, "slave_read_enable": True, "ha_poll_wait_ms": 300, "broker_role": "SYNC_MASTER",
      "slave_timeout_ms": 1_000, "controller_first_elect_delay_ms": 500}
ROCKETMQ_HEARTBEAT_TIMEOUT_MS = 10_000.0


def status(dep: Deployment, name: str) -> dict[str, Any]:
    return ray.get(dep.brokers[name].status.remote(), timeout=30)


def wait(predicate: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if predicate():
                return
        except Exception:  # an actor still starting
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"no {what} after {timeout_s} s")
        time.sleep(0.02)


def master_in_sync(dep: Deployment) -> str | None:
    for name in NAMES:
        s = status(dep, name)
        if s["role"] == "SYNC_MASTER" and len(s["controller"]["sync_state_set"]) == 2:
            other = NAMES[1 - NAMES.index(name)]
            if status(dep, other)["max_offset"] == s["max_offset"]:
                return name
    return None


def routed_everywhere(dep: Deployment, addr: str) -> bool:
    for ns in dep.namesrvs.values():
        resp = ray.get(ns.get_routeinfo_by_topic.remote(topic=TOPIC), timeout=10)
        if not resp.ok:
            return False
        datas = resp.wire_body()["brokerDatas"]
        if not any({str(k): v for k, v in bd["brokerAddrs"].items()}.get("0") == addr for bd in datas):
            return False
    return True


def one_failover(dep: Deployment, sigkill: bool) -> tuple[float, float]:
    master = master_in_sync(dep)
    assert master is not None
    survivor = NAMES[1 - NAMES.index(master)]
    pid = dep.broker_pid(master)
    t0 = time.perf_counter()
    if sigkill:
        dep.signal_broker(master, signal.SIGKILL, pid)
    else:
        dep.kill_broker(master)
    accepting = routed = None
    handle = dep.brokers[survivor]
    while accepting is None or routed is None:
        if accepting is None and ray.get(handle.send_message.remote(TOPIC, 0, b"probe"), timeout=30).ok:
            accepting = time.perf_counter() - t0
        if routed is None and routed_everywhere(dep, survivor):
            routed = time.perf_counter() - t0
        if time.perf_counter() - t0 > 60:
            raise TimeoutError(f"failover of {master} incomplete after 60 s: accepting {accepting}, routed {routed}")
        time.sleep(0.02)
    dep.restart_broker(master)
    wait(lambda: master_in_sync(dep) == survivor, 60, "returning replica in sync")
    return accepting, routed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kills", type=int, default=20)
    ap.add_argument("--ray-kill", action="store_true", help="ray.kill the master's actor instead of SIGKILL")
    ap.add_argument("--quick", action="store_true", help="2 kills")
    args = ap.parse_args()
    if args.quick:
        args.kills = 2
    with local_ray_run("bench-failover") as run:
        spec = ClusterSpec(namesrv_count=2, brokers=[BrokerSpec("broker-a", 0), BrokerSpec("broker-a", 1)],
                           profile="fast", namespace=run.namespace, data_dir=run.data_dir, namesrv_port=None,
                           broker_port=None, controller=True, broker_overrides=HA)
        dep = Deployment(spec)
        run.deployments.append(dep)
        dep.start()
        wait(lambda: master_in_sync(dep) is not None, 60, "master with its slave in sync")
        master = master_in_sync(dep)
        assert master is not None
        assert ray.get(dep.brokers[master].create_topic.remote(TOPIC, 4, 4), timeout=30).ok
        wait(lambda: routed_everywhere(dep, master), 30, "route")
        accepting: list[float] = []
        routed: list[float] = []
        for _ in range(args.kills):
            a, r = one_failover(dep, not args.ray_kill)
            accepting.append(a)
            routed.append(r)
        how = "ray.kill" if args.ray_kill else "SIGKILL"
        timeout_s = controller_config("fast").broker_heartbeat_timeout_ms / 1000
        print(f"\nfailover, {args.kills} kills ({how} of the master), SYNC_MASTER + 1 slave, 2 NameServers, "
              f"fast profile (controller heartbeat timeout {timeout_s:g} s)")
        print(f"  kill -> new master accepting sends:    {latency_ms(accepting)}")
        print(f"  kill -> every NameServer routes to it: {latency_ms(routed)}")
        print("\n== beside RocketMQ 5's floor (its controller waits out a 10 s heartbeat timeout) and the "
              "issue's bounds (ms)")
        print(ratio_table([
            ("accepting p50 (vs RocketMQ 5 heartbeat timeout)", ROCKETMQ_HEARTBEAT_TIMEOUT_MS, pct_ms(accepting, 0.5)),
            ("routed p50 (vs RocketMQ 5 heartbeat timeout)", ROCKETMQ_HEARTBEAT_TIMEOUT_MS, pct_ms(routed, 0.5)),
            ("accepting p99 (vs bound 3 s)", 3_000.0, pct_ms(accepting, 0.99)),
            ("routed p99 (vs bound 3.5 s)", 3_500.0, pct_ms(routed, 0.99)),
        ], "reference", "measured", digits=1))


if __name__ == "__main__":
    main()
