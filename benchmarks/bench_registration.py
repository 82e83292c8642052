"""Registration at scale (issue #13): N brokers x T topics registering with one NameServer over TCP,
while a route-query client watches how long the NameServer's event loop is held.

    bash run.sh bench bench_registration [--brokers 30,300] [--topics 10000] [--parallel 0]
    bash run.sh bench bench_registration --quick      # 5 brokers x 1,000 topics, 0.5 s idle windows

One NameServer actor on a private local Ray serves RocketMQ's remoting protocol on 127.0.0.1 (a
free port). Brokers are simulated as registration clients in this process, one TCP connection each
(kept open: a closed connection unregisters its broker), sending REGISTER_BROKER (103) with
RocketMQ's JSON RegisterBrokerBody (topicConfigSerializeWrapper{topicConfigTable, dataVersion},
filterServerList) as fastjson writes it. The body is encoded once per DataVersion and shared by
every broker; only the brokerName/brokerAddr headers differ, so every topic is on every broker (at
300 x 10,000 that is 3M queue entries, and each route names 300 brokers).

A route-query client in a separate process (multiprocessing, spawn) sends GET_ROUTEINFO_BY_TOPIC
(105) back to back over its own connection, rotating over 64 of the topics, and timestamps every
answer (CLOCK_MONOTONIC, shared by every process on the machine). Per phase:

1. first registration of every broker (all tables written);
2. unchanged re-registration (same dataVersion: a NameServer must not look at the topics);
3. changed re-registration (a new dataVersion, the same topics: every topic is walked again).

Each phase is followed by an idle window of the same table (route queries, no registration
running): the side-by-side baseline for that phase's route-query figures. Printed per phase:
registration wall time, per-registration answer time, route-query p50/p99/max, the longest gap
between consecutive answers (the loop stall; target <= 5 ms), and the NameServer's RSS (psutil on
the actor's pid) against the empty NameServer's; then the NameServer's own loop stalls over 5 ms,
the worst split into its loop's CPU, GC, other threads' CPU and time not run (namesrv.common.loop_probe).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import tempfile
import time
import uuid
from array import array
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from textwrap import indent
from typing import Any

import ray
from _common import fmt, pct_ms, print_machine, ratio_table, ray_init
from _registration_probes import QueryLog, RssSampler, loop_stalls, query_loop
from registration_slices import Profile, concurrent_loop_turns, profile_registrations

from actors.deployment.launcher import Deployment
from actors.deployment.spec import ClusterSpec
from clients.cli.render import table
from namesrv.protocol import fastjson
from namesrv.protocol.bodies import body_crc32, encode_compressed_register_body
from namesrv.protocol.codes import RequestCode, ResponseCode
from namesrv.protocol.models import DataVersion, TopicConfig
from namesrv.remoting.client import RemotingClient, parse_namesrv_addr
from namesrv.remoting.wire_command import ext_value

CLUSTER = "BenchCluster"
QUERY_TOPICS = 64
STALL_TARGET_MS = 5.0
T0_MS = 1_700_000_000_000


# ---------------------------------------------------------------------------- bodies and brokers
def topic_names(topics: int) -> list[str]:
    return [f"BenchTopic{i:06d}" for i in range(topics)]


def register_body(names: list[str], counter: int, encoding: str) -> bytes:
    """RocketMQ's RegisterBrokerBody, as a broker sends it (JSON as fastjson writes it, or compressed)."""
    body = {
        "filterServerList": [],
        "topicConfigSerializeWrapper": {
            "dataVersion": {**DataVersion(T0_MS, counter).to_wire(), "stateVersion": 0},
            "topicConfigTable": {
                t: TopicConfig(topic_name=t, read_queue_nums=8, write_queue_nums=8).to_wire() for t in names
            },
        },
    }
    return encode_compressed_register_body(body) if encoding == "compressed" else fastjson.dumps(body)


def broker_ext(index: int, crc: int, compressed: bool) -> dict[str, str]:
    """Broker `index`'s REGISTER_BROKER header fields (the only thing that differs between brokers)."""
    addr = f"10.9.{index // 250}.{index % 250 + 1}:10911"
    ext = {"brokerAddr": addr, "brokerName": f"bench-broker-{index:03d}", "brokerId": 0, "clusterName": CLUSTER,
           "haServerAddr": addr, "bodyCrc32": crc, "compressed": compressed, "heartbeatTimeoutMillis": 3_600_000}
    return {k: ext_value(v) for k, v in ext.items()}


@dataclass
class SimBroker:
    """One simulated broker: its own connection to the NameServer."""

    index: int
    client: RemotingClient

    def register(self, body: bytes, crc: int, compressed: bool) -> tuple[float, float]:
        """Send one REGISTER_BROKER and wait for its answer: (sent, answered) monotonic seconds."""
        ext = broker_ext(self.index, crc, compressed)
        t0 = time.monotonic()
        answer = self.client.invoke(RequestCode.REGISTER_BROKER, ext, body)
        t1 = time.monotonic()
        if answer.code != ResponseCode.SUCCESS or answer.remark:
            raise RuntimeError(f"broker {self.index}: register answered {answer.code} {answer.remark!r}")
        return t0, t1


# ---------------------------------------------------------------------------- measurements
@dataclass
class Phase:
    name: str
    start: float = 0.0
    end: float = 0.0
    idle_start: float = 0.0
    idle_end: float = 0.0
    answer_s: list[float] = field(default_factory=list)
    rss_end: int = 0
    rss_peak: int = 0
    route_encodings: int = 0
    namesrv_cpu_s: float = 0.0
    """CPU the NameServer process used during the phase (user + system)."""
    load_avg: float = 0.0
    loop: dict[str, Any] = field(default_factory=dict)
    """The NameServer's loop-lag probe over the phase (namesrv.common.loop_probe): its stalls and GC."""


def register_all(brokers: list[SimBroker], body: bytes, compressed: bool, parallel: int) -> tuple[float, float,
                                                                                                   list[float]]:
    """Every broker registers `body` (at most `parallel` at once; 0: all at once):
    (first sent, last answered, per-registration answer times)."""
    crc = body_crc32(body)
    with ThreadPoolExecutor(max_workers=parallel or len(brokers)) as pool:
        spans = list(pool.map(lambda b: b.register(body, crc, compressed), brokers))
    return min(s for s, _ in spans), max(e for _, e in spans), [e - s for s, e in spans]


def run_scale(n: int, topics: int, args: argparse.Namespace, data_dir: str) -> dict[str, Any]:
    names = topic_names(topics)
    t = time.perf_counter()
    bodies = {c: register_body(names, c, args.encoding) for c in (1, 2)}
    print(f"\n== {n} brokers x {topics:,} topics ({n * topics:,} queue entries), {args.encoding} body of "
          f"{len(bodies[1]):,} bytes (encoded once per DataVersion in {time.perf_counter() - t:.2f} s), "
          f"{'all' if not args.parallel else args.parallel} registrations in flight")
    spec = ClusterSpec(
        namesrv_count=1, brokers=[], profile="default", namespace=f"bench-reg-{uuid.uuid4().hex[:8]}",
        data_dir=data_dir, namesrv_port=0, broker_port=None,
        namesrv_overrides={"snapshot_interval_ms": args.snapshot_interval_ms, "not_ready_window_ms": 0,
                           "broker_channel_expired_time_ms": 3_600_000},
        remoting_overrides={"server_channel_max_idle_time_seconds": 86_400},
    )
    dep = Deployment(spec).start()
    ns = dep.namesrvs["namesrv-0"]
    host, port = parse_namesrv_addr(dep.namesrv_addr())[0]
    status = ray.get(ns.get_status.remote())
    rss = RssSampler(status["pid"])
    rss_empty = rss.now()
    ray.get(ns.loop_probe.remote())  # starts the NameServer's loop-lag probe
    ctx = mp.get_context("spawn")
    stop = ctx.Event()
    parent, child = ctx.Pipe(duplex=False)
    step = max(1, topics // QUERY_TOPICS)
    querier = ctx.Process(target=query_loop, args=(host, port, names[::step][:QUERY_TOPICS], stop, child),
                          daemon=True)
    querier.start()
    brokers: list[SimBroker] = []
    phases: list[Phase] = []
    try:
        if not parent.poll(60) or parent.recv() != "ready":
            raise RuntimeError("the route-query process did not start")
        brokers = [SimBroker(i, RemotingClient(host, port, timeout_s=1800)) for i in range(n)]
        time.sleep(args.idle_seconds)  # the querier against the empty NameServer, before anything
        for label, counter in (("first registration", 1), ("unchanged re-registration", 1),
                               ("changed re-registration", 2)):
            phase = Phase(label)
            rss.reset()
            encodings = ray.get(ns.get_status.remote())["route_encodings"]
            cpu = rss.cpu_s()
            phase.start, phase.end, phase.answer_s = register_all(
                brokers, bodies[counter], args.encoding == "compressed", args.parallel)
            phase.namesrv_cpu_s = rss.cpu_s() - cpu
            phase.load_avg = os.getloadavg()[0]
            phase.rss_peak = rss.peak
            phase.route_encodings = ray.get(ns.get_status.remote())["route_encodings"] - encodings
            phase.loop = ray.get(ns.loop_probe.remote(phase.start))
            idle_s = max(args.idle_seconds, min(phase.end - phase.start, args.idle_max_seconds))
            phase.idle_start = time.monotonic()
            time.sleep(idle_s)
            phase.idle_end = time.monotonic()
            phase.rss_end = rss.now()
            phases.append(phase)
            print(f"  {label}: {phase.end - phase.start:.2f} s (idle window {idle_s:.1f} s after it)", flush=True)
            if phase.rss_peak > args.max_rss_gib * 2**30:
                raise RuntimeError(f"NameServer RSS {phase.rss_peak / 2**30:.1f} GiB > --max-rss-gib")
        status = ray.get(ns.get_status.remote()) | {"nice": rss.proc.nice()}
    finally:
        stop.set()
        log = None
        if parent.poll(120):
            raw = parent.recv()
            while raw == "ready":
                raw = parent.recv()
            log = QueryLog(array("d", raw[0]), array("d", raw[1]), array("i", raw[2]))
        querier.join(10)
        rss.stop()
        for b in brokers:
            b.client.close()
        dep.teardown(graceful=False)
    assert log is not None, "the route-query process sent nothing"
    return report(n, topics, status, rss_empty, phases, log)


def report(n: int, topics: int, status: dict[str, Any], rss_empty: int, phases: list[Phase],
           log: QueryLog) -> dict[str, Any]:
    print(f"  NameServer at the end: {status['topics']:,} topics, {len(status['brokers'])} brokers, "
          f"RSS empty {rss_empty / 2**20:,.0f} MiB, process niceness {status.get('nice', '?')}")
    out: dict[str, Any] = {"brokers": n, "topics": topics, "rss_empty_mib": rss_empty / 2**20, "phases": []}
    for p in phases:
        busy, idle = log.window(p.start, p.end), log.window(p.idle_start, p.idle_end)
        wall = p.end - p.start
        rows: list[tuple[str, float | None, float | None]] = [
            ("registration wall time s", None, wall),
            ("registrations / s", None, n / wall if wall > 0 else None),
            ("NameServer CPU s used in the phase", None, p.namesrv_cpu_s),
            ("registration answer p50 ms", None, pct_ms(p.answer_s, 0.5)),
            ("registration answer max ms", None, max(p.answer_s) * 1000),
            ("route queries answered", float(idle["answers"]), float(busy["answers"])),
            ("route queries / s", idle["qps"], busy["qps"]),
            ("route query p50 ms", idle["p50_ms"], busy["p50_ms"]),
            ("route query p99 ms", idle["p99_ms"], busy["p99_ms"]),
            ("route query max ms", idle["max_ms"], busy["max_ms"]),
            ("longest gap between answers ms", idle["gap_ms"], busy["gap_ms"]),
            ("NameServer RSS MiB (idle: empty)", rss_empty / 2**20, p.rss_end / 2**20),
            ("NameServer peak RSS MiB", rss_empty / 2**20, p.rss_peak / 2**20),
        ]
        verdict = "within" if busy["gap_ms"] <= STALL_TARGET_MS else "OVER"
        print(f"\n  -- {n} brokers, {p.name}: longest gap {fmt(busy['gap_ms'])} ms, {verdict} the "
              f"{STALL_TARGET_MS:.0f} ms target (at +{busy['gap_at_s']:.2f} s); "
              f"{busy['not_found']} TOPIC_NOT_EXIST and {busy['errors']} other errors answered; "
              f"{p.route_encodings:,} route encodings; load average {p.load_avg:.1f}")
        print(indent(ratio_table(rows, "idle", p.name), "  "))
        print(indent("\n".join(loop_stalls(p.loop, p.start, p.end)), "  "))
        out["phases"].append({"phase": p.name, "wall_s": wall, "busy": busy, "idle": idle,
                              "rss_end_mib": p.rss_end / 2**20, "rss_peak_mib": p.rss_peak / 2**20,
                              "route_encodings": p.route_encodings, "namesrv_cpu_s": p.namesrv_cpu_s,
                              "load_avg": p.load_avg, "loop_stalls": p.loop.get("stalls", [])[:20],
                              "answer_p50_ms": pct_ms(p.answer_s, 0.5), "answer_max_ms": max(p.answer_s) * 1000})
    return out


def run_profile(n: int, topics: int, encoding: str) -> dict[str, Any]:
    """The same registrations in this process, each piece that holds the loop timed (see registration_slices)."""
    names = topic_names(topics)
    compressed = encoding == "compressed"
    phases = {"first registration": register_body(names, 1, encoding)}
    phases["unchanged re-registration"] = phases["first registration"]
    phases["changed re-registration"] = register_body(names, 2, encoding)
    print(f"\n== where the loop time goes: the same {n} registrations x {topics:,} topics through the "
          f"NameServer's controller in this process (wall and this thread's CPU ms per piece)")
    profiles = profile_registrations(n, phases, lambda i, body: broker_ext(i, body_crc32(body), compressed),
                                     names[0])
    out: dict[str, Any] = {}
    for phase, prof in profiles.items():
        print(f"  -- {phase}")
        print(indent(profile_table(prof), "  "))
        out[phase] = {"pieces": {k: asdict(v) for k, v in prof.pieces.items()},
                      "gc": {f"gen{g}": asdict(v) for g, v in prof.gc.items()}}
    print(f"\n== loop turns: the same {n} registrations started at once on one event loop in this process "
          f"(the controller's process_async, no Ray, no TCP); a probe task times each turn of the loop")
    turns = concurrent_loop_turns(n, phases, lambda i, body: broker_ext(i, body_crc32(body), compressed))
    rows = []
    for phase, t in turns.items():
        rows.append((phase, fmt(t.seconds), fmt(len(t.wall_ms)), fmt(pct_ms([x / 1000 for x in t.wall_ms], 0.5)),
                     fmt(pct_ms([x / 1000 for x in t.wall_ms], 0.99)), fmt(max(t.wall_ms, default=float("nan"))),
                     fmt(pct_ms([x / 1000 for x in t.cpu_ms], 0.99)), fmt(max(t.cpu_ms, default=float("nan")))))
        out[phase]["loop_turns"] = {"seconds": t.seconds, "turns": len(t.wall_ms),
                                    "max_wall_ms": max(t.wall_ms, default=None),
                                    "max_cpu_ms": max(t.cpu_ms, default=None)}
    print(indent(table(("phase", "wall s", "turns", "p50 ms", "p99 ms", "max ms", "p99 CPU ms", "max CPU ms"),
                       rows), "  "))
    return out


def profile_table(prof: Profile) -> str:
    rows = [(label, p.count, p.wall_ms, p.max_wall_ms, p.max_cpu_ms) for label, p in prof.pieces.items()]
    rows += [(f"gc generation {g} (inside the pieces above)", p.count, p.wall_ms, p.max_wall_ms, p.max_cpu_ms)
             for g, p in sorted(prof.gc.items())]
    return table(("piece", "count", "total wall ms", "max wall ms", "max CPU ms"),
                 [(label, fmt(c), fmt(t), fmt(w), fmt(cpu)) for label, c, t, w, cpu in rows])


def summary(results: list[dict[str, Any]]) -> None:
    print("\n== summary: longest gap between route answers (ms) / route query p99 (ms), registering vs idle")
    head = f"  {'brokers':>7}  {'phase':<26} {'wall s':>8} {'gap ms':>8} {'idle gap':>8} {'p99 ms':>8} " \
           f"{'idle p99':>8} {'RSS MiB':>8}"
    print(head)
    for r in results:
        for p in r["phases"]:
            print(f"  {r['brokers']:>7}  {p['phase']:<26} {p['wall_s']:>8.2f} {p['busy']['gap_ms']:>8.2f} "
                  f"{p['idle']['gap_ms']:>8.2f} {p['busy']['p99_ms']:>8.2f} {p['idle']['p99_ms']:>8.2f} "
                  f"{p['rss_end_mib']:>8,.0f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--brokers", default="30,300", help="comma list of broker counts, one run each")
    ap.add_argument("--topics", type=int, default=10_000, help="topics per broker (the same on every broker)")
    ap.add_argument("--parallel", type=int, default=0, help="registrations in flight at once (0: every broker)")
    ap.add_argument("--encoding", choices=["json", "compressed"], default="json", help="register body format")
    ap.add_argument("--idle-seconds", type=float, default=3.0, help="shortest idle window after each phase")
    ap.add_argument("--idle-max-seconds", type=float, default=10.0,
                    help="an idle window lasts as long as its phase, up to this")
    ap.add_argument("--snapshot-interval-ms", type=int, default=0, help="NameServer route snapshots (0: off)")
    ap.add_argument("--max-rss-gib", type=float, default=12.0, help="stop when the NameServer grows beyond this")
    ap.add_argument("--profile-brokers", type=int, default=30,
                    help="after each run, profile this many of its registrations in process (0: skip)")
    ap.add_argument("--profile-only", action="store_true", help="only the in-process profile (no Ray)")
    ap.add_argument("--quick", action="store_true", help="5 brokers x 1,000 topics, 0.5 s idle windows")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    args = ap.parse_args()
    if args.quick:
        args.brokers, args.topics, args.idle_seconds, args.idle_max_seconds = "5", 1_000, 0.5, 0.5
    counts = [int(x) for x in args.brokers.split(",")]

    info = print_machine()
    if args.profile_only:
        for n in counts:
            run_profile(min(n, args.profile_brokers or n), args.topics, args.encoding)
        return
    ray_init()
    results = []
    try:
        with tempfile.TemporaryDirectory(prefix="bench-registration-", ignore_cleanup_errors=True) as tmp:
            for n in counts:
                results.append(run_scale(n, args.topics, args, f"{tmp}/{n}"))
                if args.profile_brokers:
                    results[-1]["profile"] = run_profile(min(n, args.profile_brokers), args.topics, args.encoding)
    finally:
        ray.shutdown()
    summary(results)
    if args.json:
        args.json.write_text(json.dumps({"machine": info, "args": vars(args) | {"json": str(args.json)},
                                         "results": results}, indent=1, default=str))


if __name__ == "__main__":
    main()
