"""How fast does the controller elect, persist and come back? (the controller half of issue 21)

One controller actor (fast profile: heartbeat timeout 3 s, scans every 200 ms) and `--sets` broker
sets of two replicas, heartbeating from the driver every 200 ms. Measured:

- a reported death (what a broker actor's death becomes): report -> new master persisted and answered;
- a silent master (a SIGSTOP: heartbeats just stop): last heartbeat -> new master seen by a long-poll;
- persisted changes: alter-SyncStateSet round trips (each one written to the GCS KV before its answer);
- a controller kill: ray.kill -> the restarted actor answers with its state rebuilt from the GCS KV.

Side by side: the silent master's detection against the heartbeat timeout (the floor it cannot
beat), and a reported death's election against one persisted alter-SyncStateSet (each makes one
write to the GCS KV). `--quick`: 2 broker sets, 10 alters.

    bash run.sh bench bench_controller [--sets 20] [--alters 200] [--quick]
"""

from __future__ import annotations

import argparse
import threading
import time
from typing import Any

import ray
from _common import latency_ms, local_ray_run, pct_ms, ratio_table

from actors.controller.start import controller_config, start_controller

CLUSTER = "DefaultCluster"


class Beats:
    def __init__(self, ctl: Any, alive: set[tuple[str, int]]) -> None:
        self.ctl, self.alive = ctl, alive
        self.last: dict[tuple[str, int], float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            for name, bid in list(self.alive):
                self.ctl.heartbeat.remote(CLUSTER, name, f"{name}:{bid}", bid, epoch=1, max_offset=0)
                self.last[(name, bid)] = time.monotonic()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def get(ref: Any) -> Any:
    return ray.get(ref, timeout=120)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sets", type=int, default=20)
    ap.add_argument("--alters", type=int, default=200)
    ap.add_argument("--quick", action="store_true", help="2 broker sets, 10 alters")
    args = ap.parse_args()
    if args.quick:
        args.sets, args.alters = 2, 10
    assert args.sets >= 2, "one set measures the alters, the others the failovers"
    config = controller_config("fast")
    with local_ray_run("bench-controller") as run:
        ctl = start_controller(run.namespace, config, detached=False)
        names = [f"broker-{i}" for i in range(args.sets)]
        for name in names:
            for bid in (1, 2):
                assert get(ctl.apply_broker_id.remote(CLUSTER, name, bid, f"{name}:{bid};1")).ok
                assert get(ctl.register_broker.remote(CLUSTER, name, bid, f"{name}:{bid}")).ok
        beats = Beats(ctl, {(n, b) for n in names for b in (1, 2)})
        while len(get(ctl.stats.remote())["live_brokers"]) < 2 * args.sets:
            time.sleep(0.05)
        for name in names:
            first = get(ctl.elect_master.remote(name, 1))
            assert first.ok, first
            assert get(ctl.alter_sync_state_set.remote(name, 1, 1, [1, 2], first.header["syncStateSetEpoch"])).ok

        alters: list[float] = []
        name = names[0]
        for i in range(args.alters):
            members, epoch = ([1], 2 + i) if i % 2 == 0 else ([1, 2], 2 + i)
            t0 = time.perf_counter()
            assert get(ctl.alter_sync_state_set.remote(name, 1, 1, members, epoch)).ok
            alters.append(time.perf_counter() - t0)

        deaths: list[float] = []
        for name in names[1:]:
            t0 = time.perf_counter()
            result = get(ctl.report_actor_death.remote(name, 1))
            deaths.append(time.perf_counter() - t0)
            assert result is not None and result.header["masterBrokerId"] == 2, result

        silent: list[float] = []
        for name in names[1:]:  # master 2 takes 1 (heartbeating again) back into its set, then falls silent
            epochs = get(ctl.stats.remote())["epochs"][name]
            deadline = time.monotonic() + 5
            while not (res := get(ctl.alter_sync_state_set.remote(name, 2, epochs[0], [1, 2], epochs[1]))).ok:
                assert time.monotonic() < deadline, res  # 1 counts as alive again once it heartbeats
                time.sleep(0.05)
            epochs = get(ctl.stats.remote())["epochs"][name]
            beats.alive.discard((name, 2))
            time.sleep(0.25)  # the beat in flight lands
            last = beats.last[(name, 2)]
            changed = get(ctl.wait_for_change.remote({name: tuple(epochs)}, 30))
            silent.append(time.monotonic() - last)
            assert changed[name].header["masterBrokerId"] == 1, changed[name]

        before = get(ctl.stats.remote())
        t0 = time.perf_counter()
        ray.kill(ctl, no_restart=False)
        while True:
            try:
                stats = get(ctl.stats.remote())
                if stats["incarnation"] != before["incarnation"]:
                    break
            except ray.exceptions.RayActorError:
                time.sleep(0.01)
        restart = time.perf_counter() - t0
        beats.stop()
        assert stats["epochs"] == before["epochs"], "state lost across the restart"

        print(f"\ncontroller, {args.sets} broker sets x 2 replicas, fast profile (timeout "
              f"{config.broker_heartbeat_timeout_ms / 1000:g} s, scans {config.scan_not_active_broker_interval_ms} ms)")
        print(f"  alter SyncStateSet (persisted): {latency_ms(alters)}")
        print(f"  reported death -> elected:      {latency_ms(deaths)}")
        print(f"  silent master -> change seen:   {latency_ms(silent)}")
        print(f"  kill -> restored and answering: {restart * 1000:.0f} ms ({stats['restored_events']} events after "
              f"snapshot {stats['snapshot_index']}, replayed in {stats['restore_ms']:.1f} ms)")
        timeout_ms = float(config.broker_heartbeat_timeout_ms)
        print("\n== failovers beside a reference (ms): the heartbeat timeout, a silent master's floor; one "
              "persisted alter, the same one GCS KV write an election makes")
        print(ratio_table([
            ("silent master -> seen, p50 (vs heartbeat timeout)", timeout_ms, pct_ms(silent, 0.5)),
            ("silent master -> seen, max (vs heartbeat timeout)", timeout_ms, max(silent) * 1000),
            ("reported death -> elected, p50 (vs alter p50)", pct_ms(alters, 0.5), pct_ms(deaths, 0.5)),
        ], "reference", "measured", digits=2))


if __name__ == "__main__":
    main()
