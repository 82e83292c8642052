"""`namesrv chaos`: break brokers and NameServers on a seeded timeline while producers send, check
the invariants, print the timeline and the verdict, and leave Parquet for the Spark analysis.

Exit status 0 when every invariant holds, 1 when one fails, 2 when the run could not be made.
"""

from __future__ import annotations

import argparse
import logging
import time
import uuid
from typing import TYPE_CHECKING, Any

from clients.render import table

if TYPE_CHECKING:
    from actors.chaos import ChaosConfig, ChaosReport
    from actors.launcher import Deployment

log = logging.getLogger(__name__)

DEFAULT_FAULTS = "kill_broker,sigkill_broker,sigstop_broker,kill_namesrv"


def admin_create_topic(dep: Deployment, topic: str, queues: int) -> None:
    """Create the topic on every master broker, so its queues spread over the whole cluster."""
    from clients.admin import AdminClient

    AdminClient(dep, timeout_s=30).create_topic(topic, read_queue_nums=queues, write_queue_nums=queues)


def run_scenario(cfg: ChaosConfig, out_dir: str | None = None) -> ChaosReport:
    """A chaos run on the connected Ray cluster, topics created through the admin API."""
    from actors.chaos import run_chaos

    return run_chaos(cfg, admin_create_topic, out_dir)


def _fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:.0f}"


def render_report(report: ChaosReport) -> str:
    """The timeline, per-kind detection and recovery figures, and the invariants, as text tables."""
    t0 = report.started_ms
    out = [f"chaos run: seed {report.config.seed}, namespace {report.namespace}", "", "fault timeline"]
    out.append(table(
        ("id", "t (s)", "kind", "target", "detail"),
        [(r.fault_id, f"{(r.t_ms - t0) / 1000:.2f}", r.kind, r.target, r.detail) for r in report.timeline],
    ))
    f = report.figures
    rows: list[tuple[Any, ...]] = []
    for kind, by in f["detection_ms"].items():
        for who in ("namesrv", "producer"):
            s = by[who]
            if s["n"]:
                rows.append((kind, who, s["n"], _fmt(s["p50"]), _fmt(s["p99"]), _fmt(s["max"]),
                             ",".join(by["causes"]) if who == "namesrv" else ""))
    for kind, by in f["return_ms"].items():
        for who in ("namesrv", "producer"):
            s = by[who]
            if s["n"]:
                rows.append((kind, who, s["n"], _fmt(s["p50"]), _fmt(s["p99"]), _fmt(s["max"]), "back in routes"))
    for label, s in (("broker restart", f["broker_restart_up_ms"]), ("namesrv restart", f["namesrv_restart_ms"])):
        if s["n"]:
            rows.append((label, "actor up", s["n"], _fmt(s["p50"]), _fmt(s["p99"]), _fmt(s["max"]), ""))
    out += ["", "detection and recovery (ms after the fault / revival)"]
    out.append(table(("kind", "seen by", "n", "p50", "p99", "max", "how"), rows))
    sends, msgs = f["sends"], f["messages"]
    out += ["", table(
        ("sends attempted", "acknowledged", "failed", "unexplained", "success", "lost", "duplicates",
         "stored unacked"),
        [(sends["attempted"], sends["acknowledged"], sends["failed"], sends["unexplained_failures"],
          f"{sends['success_rate']:.2%}", msgs["lost"], msgs["duplicates"], msgs["stored_unacknowledged"])],
    )]
    spurious = f.get("spurious_removals") or []
    if spurious:
        out += ["", f"note: {len(spurious)} removals of brokers no fault touched (live brokers dropped):"]
        out.append(table(("namesrv", "broker", "cause", "t (s)"),
                         [(r["namesrv"], r["broker_addr"], r["cause"], f"{(r['t_ms'] - t0) / 1000:.2f}")
                          for r in spurious]))
    out += ["", "invariants"]
    out.append(table(("invariant", "result", "value", "detail"),
                     [(i.name, "PASS" if i.ok else "FAIL", i.value, i.detail) for i in report.invariants]))
    if report.files:
        out += ["", "written: " + ", ".join(sorted(report.files.values()))]
    out += ["", "OK: every invariant holds" if report.ok else "FAILED: see the invariants above"]
    return "\n".join(out)


def build_config(args: argparse.Namespace, namespace: str) -> ChaosConfig:
    from actors.chaos import ChaosConfig, parse_fault_mix

    return ChaosConfig(
        duration_s=args.duration, seed=args.seed, fault_interval_s=args.fault_interval,
        faults=tuple(parse_fault_mix(args.faults).items()), brokers=args.brokers, namesrvs=args.namesrvs,
        producers=args.producers, rate=args.rate, topics=args.topics, down_time_s=args.down_time,
        namespace=namespace, data_dir=args.data_dir, keep_data=args.keep_data,
    )


def cmd_chaos(args: argparse.Namespace) -> int:
    import ray

    namespace = args.namespace or f"chaos-{uuid.uuid4().hex[:10]}"
    try:
        cfg = build_config(args, namespace)
    except ValueError as e:
        print(f"namesrv chaos: {e}")
        return 2
    started = time.monotonic()
    if args.address:
        ray.init(address=args.address, namespace=namespace, log_to_driver=False)
    else:
        ray.init(address="local", num_cpus=2, include_dashboard=False, namespace=namespace, log_to_driver=False)
    try:
        print(f"chaos: {cfg.duration_s:.0f} s, seed {cfg.seed}, a fault every {cfg.fault_interval_s} s from "
              f"{args.faults}; {cfg.brokers} brokers, {cfg.namesrvs} NameServers, {cfg.producers} producers "
              f"x {cfg.rate:.0f} msg/s", flush=True)
        report = run_scenario(cfg, args.out)
    finally:
        ray.shutdown()
    print(render_report(report))
    print(f"total {time.monotonic() - started:.1f} s")
    return 0 if report.ok else 1


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("chaos", help="seeded broker/NameServer faults under load; checks no loss and route convergence")
    p.add_argument("--duration", type=float, default=60.0, help="seconds of sending (default 60)")
    p.add_argument("--seed", type=int, default=1, help="same seed, same faults on the same targets (default 1)")
    p.add_argument("--fault-interval", type=float, default=4.0, help="seconds between faults (default 4)")
    p.add_argument("--faults", default=DEFAULT_FAULTS,
                   help=f"fault mix, kind[:weight] comma separated (default {DEFAULT_FAULTS})")
    p.add_argument("--down-time", type=float, default=2.0, help="seconds a killed broker stays down (default 2)")
    p.add_argument("--brokers", type=int, default=3)
    p.add_argument("--namesrvs", type=int, default=2)
    p.add_argument("--producers", type=int, default=2)
    p.add_argument("--rate", type=float, default=50.0, help="messages per second per producer (default 50)")
    p.add_argument("--topics", type=int, default=2)
    p.add_argument("--out", default=None, help="write faults/sends/detections/removals Parquet + summary.json here")
    p.add_argument("--address", default=None, help="an existing Ray cluster (default: a private local Ray)")
    p.add_argument("--namespace", default=None, help="Ray namespace for the run (default: a fresh one)")
    p.add_argument("--data-dir", default=None, help="broker stores (default: a temp dir removed afterwards)")
    p.add_argument("--keep-data", action="store_true", help="keep the temp store dir")
    p.set_defaults(func=cmd_chaos)
