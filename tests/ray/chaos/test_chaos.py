"""The chaos suite: seeded fault plans, the measuring and checking helpers, a short chaos run with
every fault kind (default suite), a longer soak and a multi-node node loss (both `slow`).

The Ray tests each start and stop their own Ray (a private local one, or a `Cluster` of several
raylets), so the module never shares a session and the Cluster never meets another `ray.init`.
Bounds come from the `fast` profile (0.5 s heartbeat, 0.2 s scan, 2 s expiry) plus generous margins.
"""

from __future__ import annotations

import itertools
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from actors.deployment.launcher import Deployment
from actors.deployment.spec import BrokerSpec, ClusterSpec
from clients.admin.client import AdminClient
from clients.chaos.checks import check_no_live_removal, check_no_loss, check_sends
from clients.chaos.cli import build_config
from clients.chaos.driver import ChaosDriver
from clients.chaos.invariants import (
    explain_failure,
    impaired_windows,
    measure_namesrv_detection,
    measure_namesrv_return,
    measure_producer_routes,
    spurious_removals,
)
from clients.chaos.leaks import wait_actors_gone
from clients.chaos.observe import RemovalLog, RouteObservation, RouteObserver
from clients.chaos.plan import (
    ChaosConfig,
    FaultRecord,
    parse_fault_mix,
    plan_faults,
    plan_signature,
    timeline_signature,
)
from clients.chaos.report import ChaosReport, render_report
from clients.chaos.run import consume_everything, run_chaos
from clients.chaos.schema import (
    BROKER_FAULTS,
    FAULT_KINDS,
    HEAL,
    HOST_FAULTS,
    KILL_BROKER,
    KILL_NAMESRV,
    RESTART_BROKER,
    RESTART_NAMESRV,
    SET_FAULTS,
    SIGCONT_BROKER,
    SIGKILL_BROKER,
    SIGSTOP_BROKER,
    TIMELINE_KINDS,
)
from clients.chaos.target import ChaosSetupError
from clients.consumer.pull_consumer import ConsumedMessage
from namesrv.common.clock import system_clock as now_ms
from tests.support.ray_cluster import local_ray, release_shared_ray, unique_namespace

pytestmark = pytest.mark.timeout(300)

BROKERS = ["broker-a-0", "broker-b-0", "broker-c-0"]
NAMESRVS = ["namesrv-0", "namesrv-1"]
SHORT_RUN_SEED = 3


# ---------------------------------------------------------------------------------------- plans (no Ray)
def _down_intervals(cfg: ChaosConfig, plan: list[Any]) -> dict[str, list[tuple[float, float]]]:
    open_at: dict[str, float] = {}
    out: dict[str, list[tuple[float, float]]] = {}
    for e in plan:
        if e.kind in BROKER_FAULTS:
            open_at[e.target] = e.at_s
        elif e.kind in (RESTART_BROKER, SIGCONT_BROKER):
            out.setdefault(e.target, []).append((open_at.pop(e.target), e.at_s))
    assert not open_at, f"faults never revived: {open_at}"
    return out


def test_same_seed_same_plan_and_different_seeds_differ() -> None:
    cfg = ChaosConfig(duration_s=60, fault_interval_s=3, seed=11)
    first = plan_faults(cfg, BROKERS, NAMESRVS)
    assert plan_faults(cfg, list(reversed(BROKERS)), list(reversed(NAMESRVS))) == first
    others = {tuple(plan_signature(plan_faults(ChaosConfig(duration_s=60, fault_interval_s=3, seed=s), BROKERS,
                                               NAMESRVS))) for s in range(12, 20)}
    assert len(others - {tuple(plan_signature(first))}) > 1, "different seeds give different timelines"


def test_short_plan_covers_the_mix() -> None:
    """Kinds come from a shuffled bag: four faults cover four kinds when each is feasible then."""
    covered = [seed for seed in range(10)
               if {e.kind for e in plan_faults(ChaosConfig(duration_s=12, fault_interval_s=1.8, seed=seed),
                                               BROKERS, NAMESRVS)} >= set(FAULT_KINDS)]
    assert SHORT_RUN_SEED in covered
    assert len(covered) >= 7


@pytest.mark.parametrize("seed", range(8))
def test_plan_keeps_a_broker_up_and_revives_every_fault(seed: int) -> None:
    cfg = ChaosConfig(duration_s=12, fault_interval_s=1.8, seed=seed)
    plan = plan_faults(cfg, BROKERS, NAMESRVS)
    assert [e.at_s for e in plan] == sorted(e.at_s for e in plan)
    down = _down_intervals(cfg, plan)
    for target, spans in down.items():
        for start, end in spans:
            kind = next(e.kind for e in plan if e.target == target and e.at_s == start)
            expected = cfg.stop_time() if kind == SIGSTOP_BROKER else cfg.down_time_s
            assert end - start == pytest.approx(expected, abs=0.01)
            assert end <= cfg.duration_s - 1.0 + 1e-6, "revived before sending stops"
    # at no instant are all brokers down at once
    edges = sorted({t for spans in down.values() for span in spans for t in span})
    for t in edges:
        downs = sum(1 for spans in down.values() for a, b in spans if a <= t < b)
        assert downs <= len(BROKERS) - 1
    # a revived broker rests `settle_s` before its next fault
    for spans in down.values():
        for (_, end), (start, _) in itertools.pairwise(spans):
            assert start - end >= cfg.settle_s - 1e-6


def test_plan_with_two_brokers_never_faults_both_and_honours_weights() -> None:
    cfg = ChaosConfig(duration_s=120, fault_interval_s=1.0, seed=3, brokers=2,
                      faults=tuple(parse_fault_mix("kill_broker:3,kill_namesrv").items()))
    plan = plan_faults(cfg, BROKERS[:2], NAMESRVS)
    down = _down_intervals(cfg, plan)
    spans = sorted((a, b) for s in down.values() for a, b in s)
    for (_, end), (start, _) in itertools.pairwise(spans):
        assert start >= end, "with two brokers a broker fault waits until the other one is back"
    kinds = [e.kind for e in plan if e.kind in FAULT_KINDS]
    assert set(kinds) == {KILL_BROKER, KILL_NAMESRV}


def test_fault_mix_parsing_and_config_validation() -> None:
    assert parse_fault_mix("kill_broker, sigstop_broker:2") == {KILL_BROKER: 1, SIGSTOP_BROKER: 2}
    for bad in ("", "kill_everything", "kill_broker:0"):
        with pytest.raises(ValueError):
            parse_fault_mix(bad)
    with pytest.raises(ValueError, match="at least 2 brokers"):
        ChaosConfig(brokers=1)
    ChaosConfig(brokers=1, faults=((KILL_NAMESRV, 1),))  # NameServer-only chaos needs one broker only
    timing = ChaosConfig().timing()
    assert (timing.expiry_ms, timing.scan_ms, timing.register_period_ms, timing.register_timeout_ms) == (
        2_000, 200, 500, 1_000)
    assert timing.detect_bound_ms(SIGSTOP_BROKER) == 2_000 + 200 + 1_000
    assert timing.detect_bound_ms(KILL_BROKER) == 2_000


# ---------------------------------------------------------------------------------------- measuring (no Ray)
class _FakeRemovals(RemovalLog):
    def __init__(self, events: dict[str, list[tuple[str, str, int]]]) -> None:
        self.namesrvs = dict.fromkeys(events)
        self._events = {n: set(e) for n, e in events.items()}


def test_detection_uses_removal_times_and_counts_a_namesrv_restart() -> None:
    timing = ChaosConfig().timing()
    timeline = [
        FaultRecord(0, 1_000, KILL_BROKER, "broker-a-0", "broker-a-0"),
        FaultRecord(1, 5_000, KILL_NAMESRV, "namesrv-1", None),
        FaultRecord(2, 9_000, SIGSTOP_BROKER, "broker-b-0", "broker-b-0"),
    ]
    removals = _FakeRemovals({
        "namesrv-0": [("broker-a-0", "expired", 500), ("broker-a-0", "channel", 1_012),
                      ("broker-b-0", "expired", 11_900)],
        "namesrv-1": [("broker-a-0", "channel", 4_500)],  # too late for the 2 s channel bound
    })
    rows = {(d.fault_id, d.observer): d for d in measure_namesrv_detection(timeline, removals, NAMESRVS, timing)}
    first = rows[0, "namesrv-0"]
    assert (first.elapsed_ms, first.cause, first.ok) == (12, "channel", True)
    assert (rows[0, "namesrv-1"].elapsed_ms, rows[0, "namesrv-1"].ok) == (3_500, False)
    assert (rows[2, "namesrv-0"].elapsed_ms, rows[2, "namesrv-0"].ok) == (2_900, True)
    # namesrv-1 never removed broker-b: it was killed earlier, and never killed after, so: never
    assert (rows[2, "namesrv-1"].cause, rows[2, "namesrv-1"].ok) == ("never", False)


def test_producer_route_drop_and_return_from_its_route_log() -> None:
    timing = ChaosConfig().timing()
    timeline = [FaultRecord(0, 1_000, KILL_BROKER, "broker-a-0", "broker-a-0"),
                FaultRecord(1, 4_000, RESTART_BROKER, "broker-a-0", "broker-a-0", revives=0)]
    log = [("T0", 100, "poll", ("broker-a", "broker-b")), ("T1", 100, "poll", ("broker-a", "broker-b")),
           ("T0", 1_020, "push", ("broker-b",)), ("T1", 1_050, "push", ("broker-b",)),
           ("T0", 4_700, "push", ("broker-a", "broker-b")), ("T1", 4_600, "poll", ("broker-a", "broker-b"))]
    rows = measure_producer_routes(timeline, {"p0": log}, {"broker-a-0": "broker-a"}, ["T0", "T1"], timing)
    drop, back = rows
    assert (drop.elapsed_ms, drop.cause, drop.ok) == (50, "push", True)
    assert (back.elapsed_ms, back.cause, back.ok) == (700, "push", True)


def test_a_namesrv_outage_restarts_the_clock_for_clients_and_that_namesrv() -> None:
    """A client long-polling a killed NameServer is blind until Ray fails its call (~2 s, as the
    actor restarts); the bound then counts from the NameServer's return, and a broker revived before
    that left nothing to drop."""
    timing = ChaosConfig().timing()
    timeline = [
        FaultRecord(0, 10_000, SIGSTOP_BROKER, "broker-a-0", "broker-a-0"),
        FaultRecord(1, 11_900, KILL_NAMESRV, "namesrv-1", None),
        FaultRecord(2, 13_400, RESTART_NAMESRV, "namesrv-1", None, revives=1),
        FaultRecord(3, 13_300, SIGCONT_BROKER, "broker-a-0", "broker-a-0", revives=0),  # namesrv-1 still down
    ]
    both = ("broker-a", "broker-b")
    on_dead_namesrv = [("T0", 5_000, "poll", both), ("T0", 13_700, "push", both)]
    rows = measure_producer_routes(timeline, {"p": on_dead_namesrv}, {"broker-a-0": "broker-a"}, ["T0"], timing)
    drop = next(d for d in rows if d.fault_id == 0)
    assert drop.ok and drop.seen_t_ms is None and drop.cause.startswith("revived before its NameServer returned")
    assert drop.bound_ms == 13_400 + timing.producer_bound_ms(SIGSTOP_BROKER) - 10_000
    # without the outage the same log is a failure: the producer never dropped the hung broker
    rows = measure_producer_routes([timeline[0], timeline[3]], {"p": on_dead_namesrv}, {"broker-a-0": "broker-a"},
                                   ["T0"], timing)
    assert not next(d for d in rows if d.fault_id == 0).ok
    # namesrv-1 is held to the return bound from its own restart, namesrv-0 from the SIGCONT
    history = [RouteObservation(13_350, "namesrv-0", "T0", ("broker-a-0",)),
               RouteObservation(13_400 + timing.back_bound_ms(SIGCONT_BROKER) - 10, "namesrv-1", "T0", ("broker-a-0",))]
    back = {d.observer: d for d in measure_namesrv_return(timeline, history, NAMESRVS, ["T0"], timing)}
    assert back["namesrv-0"].ok and back["namesrv-0"].elapsed_ms == 50
    assert back["namesrv-1"].ok and "after namesrv-1 restart" in back["namesrv-1"].cause


def test_a_restart_is_held_to_one_registration_round_after_its_actor_was_up() -> None:
    """Ray's start of the new broker actor (10.7 s once on a loaded CI machine) is measured, not
    guessed: the return bound counts from the actor being up, so a slow start passes and a broker
    that was up early but registered late fails."""
    timing = ChaosConfig().timing()
    timeline = [FaultRecord(0, 1_000, SIGKILL_BROKER, "broker-a-0", "broker-a-0"),
                FaultRecord(1, 3_000, RESTART_BROKER, "broker-a-0", "broker-a-0", revives=0)]
    slow_start = timing.actor_start_ms + 2_700
    round_ms = timing.back_bound_ms(RESTART_BROKER, 0)
    seen = 3_000 + slow_start + 250
    history = [RouteObservation(seen, n, "T0", ("broker-a-0",)) for n in NAMESRVS]
    back = measure_namesrv_return(timeline, history, NAMESRVS, ["T0"], timing, up_ms={1: float(slow_start)})
    assert all(d.ok and d.bound_ms == round_ms + slow_start for d in back)
    assert not any(d.ok for d in measure_namesrv_return(timeline, history, NAMESRVS, ["T0"], timing))
    early = measure_namesrv_return(timeline, history, NAMESRVS, ["T0"], timing, up_ms={1: 500.0})
    assert not any(d.ok for d in early), "up in 0.5 s, yet back in routes only 10.9 s later"
    log = [("T0", 100, "poll", ("broker-b",)), ("T0", seen + 300, "push", ("broker-a", "broker-b"))]
    rows = measure_producer_routes(timeline, {"p": log}, {"broker-a-0": "broker-a"}, ["T0"], timing,
                                   up_ms={1: float(slow_start)})
    assert next(d for d in rows if d.fault_id == 1).ok


def test_send_checks_explain_only_failures_on_faulted_brokers() -> None:
    timing = ChaosConfig().timing()
    timeline = [FaultRecord(0, 1_000, SIGSTOP_BROKER, "broker-a-0", "broker-a-0"),
                FaultRecord(1, 4_000, SIGCONT_BROKER, "broker-a-0", "broker-a-0", revives=0)]
    windows = impaired_windows(timeline, {"broker-a-0": "broker-a"}, timing, 10_000)
    hung = {"t_ms": 1_500, "latency_ms": 3_000.0, "ok": False, "attempts": 1, "brokers_tried": "broker-a",
            "error": "Send [1] times, send timed out"}
    healthy = {**hung, "brokers_tried": "broker-a,broker-b"}
    later = {**hung, "t_ms": 8_000}
    assert "hung broker(s) broker-a" in (explain_failure(hung, windows) or "")
    assert explain_failure(healthy, windows) is None
    assert explain_failure(later, windows) is None
    records = [{**r, "explained": explain_failure(r, windows)} for r in (hung, healthy)]
    records.append({"ok": True, "attempts": 2})
    inv, counts = check_sends(records)
    assert not inv.ok and counts["unexplained_failures"] == 1 and counts["retried"] == 1


def test_send_window_ends_at_the_revival_not_at_the_return_bound() -> None:
    """A failure right after a SIGCONT, or after a restarted broker was up, was not the fault's."""
    timing = ChaosConfig().timing()
    timeline = [FaultRecord(0, 1_000, SIGSTOP_BROKER, "broker-a-0", "broker-a-0"),
                FaultRecord(1, 4_000, SIGCONT_BROKER, "broker-a-0", "broker-a-0", revives=0),
                FaultRecord(2, 5_000, KILL_BROKER, "broker-b-0", "broker-b-0"),
                FaultRecord(3, 7_000, RESTART_BROKER, "broker-b-0", "broker-b-0", revives=2)]
    names = {"broker-a-0": "broker-a", "broker-b-0": "broker-b"}
    windows = impaired_windows(timeline, names, timing, 20_000, up_ms={3: 800.0})
    assert windows == {"broker-a": [(1_000, 4_000)], "broker-b": [(5_000, 7_800)]}
    after = {"t_ms": 4_200, "latency_ms": 5.0, "ok": False, "attempts": 1, "brokers_tried": "broker-a", "error": "x"}
    assert 4_200 < 4_000 + timing.back_bound_ms(SIGCONT_BROKER)  # the old window explained it
    assert explain_failure(after, windows) is None
    assert explain_failure({**after, "t_ms": 7_700, "brokers_tried": "broker-b"}, windows) is not None
    assert explain_failure({**after, "t_ms": 7_900, "brokers_tried": "broker-b"}, windows) is None


def test_a_removal_of_a_broker_no_fault_touched_fails_invariant_3d() -> None:
    timing = ChaosConfig().timing()
    timeline = [FaultRecord(0, 1_000, KILL_BROKER, "broker-a-0", "broker-a-0"),
                FaultRecord(1, 4_000, RESTART_BROKER, "broker-a-0", "broker-a-0", revives=0)]
    fault_only = _FakeRemovals({"namesrv-0": [("broker-a-0", "channel", 1_010)], "namesrv-1": []})
    assert check_no_live_removal(spurious_removals(fault_only, timeline, timing)).ok
    flapped = _FakeRemovals({"namesrv-0": [("broker-a-0", "channel", 1_010), ("broker-b-0", "channel", 2_000)],
                             "namesrv-1": [("broker-b-0", "unregister", 3_000)]})  # a graceful leave is fine
    inv = check_no_live_removal(spurious_removals(flapped, timeline, timing))
    assert not inv.ok and "namesrv-0 removed broker-b-0 (channel)" in inv.detail


def test_loss_check_keys_by_topic_and_reports_duplicates() -> None:
    def msg(topic: str, offset: int, msg_id: str) -> ConsumedMessage:
        return ConsumedMessage(topic, "broker-a", 0, offset, msg_id, b"x", {})

    acked = [{"topic": "T0", "broker_name": "broker-a", "queue_id": 0, "queue_offset": 0, "msg_id": "m1"},
             {"topic": "T1", "broker_name": "broker-a", "queue_id": 0, "queue_offset": 0, "msg_id": "m2"}]
    inv, counts = check_no_loss(acked, [msg("T0", 0, "m1"), msg("T1", 0, "m2"), msg("T1", 1, "m2")])
    assert inv.ok and counts["duplicates"] == 1 and counts["lost"] == 0
    inv, counts = check_no_loss(acked, [msg("T0", 0, "m1"), msg("T1", 0, "other")])
    assert not inv.ok and counts["lost"] == 1


def test_cli_options_build_the_config() -> None:
    import argparse

    from clients.chaos.cli import add_parser

    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["chaos", "--duration", "30", "--seed", "9", "--faults", "kill_broker:2,kill_namesrv",
                              "--brokers", "4", "--rate", "20"])
    cfg = build_config(args, "ns")
    assert (cfg.duration_s, cfg.seed, cfg.brokers, cfg.rate) == (30, 9, 4, 20)
    assert cfg.fault_mix == {KILL_BROKER: 2, KILL_NAMESRV: 1}
    assert not cfg.broker_tcp
    assert build_config(parser.parse_args(["chaos", "--tcp-brokers"]), "ns").broker_tcp
    assert cfg.transactions == 0 and build_config(parser.parse_args(["chaos", "--transactions", "5"]),
                                                  "ns").transactions == 5
    with pytest.raises(ValueError):
        build_config(parser.parse_args(["chaos", "--transactions", "-1"]), "ns")
    with pytest.raises(ValueError):
        build_config(parser.parse_args(["chaos", "--faults", "kill_everything"]), "ns")


# ---------------------------------------------------------------------------------------- a real run
def _assert_report(report: ChaosReport, cfg: ChaosConfig) -> None:
    failing = [i for i in report.invariants if not i.ok]
    assert not failing, render_report(report)
    assert report.figures["messages"]["lost"] == 0
    assert report.figures["sends"]["acknowledged"] > 0
    plan = plan_faults(cfg, BROKERS, NAMESRVS)
    assert plan_signature(report.plan) == plan_signature(plan), "the plan is a function of the seed alone"
    assert timeline_signature(report.timeline) == plan_signature(plan), "faults ran as planned, in order"
    assert all(r.ok for r in report.timeline), [r for r in report.timeline if not r.ok]


@pytest.fixture(scope="module")
def private_ray() -> Iterator[str]:
    """One private local Ray for this module's single-node tests (the multi-node test, last in the
    module, shuts it down before starting its Cluster)."""
    with local_ray("chaos") as namespace:
        yield namespace


def test_namesrv_pays_for_pyarrow_first_use_before_its_first_snapshot(private_ray: str, tmp_path: Path) -> None:
    """Regression: the first route snapshot used to import pandas (pyarrow's lazy import) on the
    event loop at the first registration, stalling the NameServer 0.3-3 s so live brokers expired.
    Now a NameServer nobody collects from never loads it, and the first collector's lease loads it
    (on a thread) before any snapshot is taken."""
    import sys

    from actors.namesrv.actor import NameServerActor

    handle = ray.remote(NameServerActor).options(num_cpus=0).remote("namesrv-probe", None, str(tmp_path))
    try:
        assert not ray.get(handle.__ray_call__.remote(lambda self: "pandas" in sys.modules), timeout=120)
        assert ray.get(handle.__ray_call__.remote(lambda self: self.controller.snapshots.buffer.taken), timeout=60) == 0
        batches = ray.get(handle.drain_snapshots.remote(take_now=True, reader="probe"), timeout=120)
        assert [b.num_rows for b in batches] == [0], "one snapshot of no broker"
        assert ray.get(handle.__ray_call__.remote(lambda self: "pandas" in sys.modules), timeout=60)
    finally:
        ray.kill(handle)


def test_short_chaos_run_holds_every_invariant(private_ray: str, tmp_path: Path) -> None:
    cfg = ChaosConfig(duration_s=12, fault_interval_s=1.8, seed=SHORT_RUN_SEED, rate=40,
                      namespace=unique_namespace("chaos"))
    report = run_chaos(cfg, str(tmp_path / "out"))
    _assert_report(report, cfg)
    kinds = {r.kind for r in report.timeline}
    assert kinds == set(TIMELINE_KINDS) - SET_FAULTS - HOST_FAULTS - {HEAL}, \
        "every default fault kind and every recovery ran (the test bed's are its own test's)"
    # detection happened the way each fault should be noticed
    expected = {KILL_BROKER: "channel", SIGKILL_BROKER: "channel", SIGSTOP_BROKER: "expired"}
    for d in report.detections:
        if d.observer_kind == "namesrv" and d.kind in BROKER_FAULTS:
            assert d.cause in (expected[d.kind], "namesrv_restart"), d
    # Parquet for the Spark analysis: the timeline reads back through the analysis' own reader
    from clients.analysis.faults import read_faults_arrow

    faults = read_faults_arrow(report.files["faults"])
    assert faults.column("kind").to_pylist() == [r.kind for r in report.timeline]
    assert pq.read_table(report.files["sends"]).num_rows == report.figures["sends"]["attempted"]
    assert pq.read_table(report.files["detections"]).num_rows == len(report.detections)
    assert not Path(report.data_dir).exists(), "the temp store dir is removed"
    text = render_report(report)
    assert "PASS" in text and "a private deployment" in text
    # every NameServer's route snapshots of the run, as `namesrv snapshot` writes them
    from clients.snapshots.dataset import read_snapshots_arrow

    snaps = read_snapshots_arrow(report.files["snapshots"])
    assert snaps.num_rows == report.snapshot_rows > 0
    assert set(snaps.column("namesrv").to_pylist()) == set(NAMESRVS)
    # one summary row per fault, read first; nothing lost on any fault's account
    summary = report.fault_summary()
    assert [r["fault_id"] for r in summary] == [r.fault_id for r in report.timeline if r.kind in FAULT_KINDS]
    assert all(r["lost"] == 0 and r["acknowledged"] is not None for r in summary)
    assert all(r["namesrv_detect_delay_ms"] is not None for r in summary if r["kind"] in BROKER_FAULTS)
    assert text.index("faults (read this first)") < text.index("fault timeline")
    with pytest.raises(ChaosSetupError, match="already holds"):
        run_chaos(cfg, str(tmp_path / "out"))


def test_chaos_faults_an_existing_deployment_and_leaves_it_running(private_ray: str, tmp_path: Path) -> None:
    """`namesrv chaos --namespace NS`: the deployment's own brokers and NameServers are faulted while an
    operator's collector drains the same NameServers; both datasets see the faults, the deployment stays."""
    import threading

    from actors.deployment.launcher import connect
    from clients.chaos.leaks import named_actors
    from clients.snapshots.collect import collect_once
    from clients.snapshots.dataset import read_snapshots_arrow

    namespace = unique_namespace("staging")
    spec = ClusterSpec(namesrv_count=2, brokers=[BrokerSpec("broker-a"), BrokerSpec("broker-b")], profile="fast",
                       namespace=namespace, data_dir=str(tmp_path / "data"), detached=True)
    dep = Deployment(spec).start()
    before = named_actors(namespace)
    ops, stop = tmp_path / "ops-snapshots", threading.Event()

    def operator_collects() -> None:  # `namesrv snapshot --every 0.5` as the default reader
        while not stop.wait(0.5):
            collect_once(dep.namesrvs, ops)

    operator = threading.Thread(target=operator_collects, daemon=True)
    operator.start()
    try:
        cfg = ChaosConfig(duration_s=8, fault_interval_s=2.5, seed=1, rate=30, namespace=namespace, existing=True,
                          faults=((KILL_BROKER, 1), (KILL_NAMESRV, 1)))
        report = run_chaos(cfg, str(tmp_path / "out"))
        stop.set()
        operator.join(timeout=30)
        collect_once(dep.namesrvs, ops)
        failing = [i for i in report.invariants if not i.ok]
        assert not failing, render_report(report)
        assert report.target == "existing" and "the EXISTING deployment" in render_report(report)
        assert {r.kind for r in report.timeline} == {KILL_BROKER, RESTART_BROKER, KILL_NAMESRV, RESTART_NAMESRV}
        assert {r.target for r in report.timeline} <= set(dep.brokers) | set(dep.namesrvs)
        # the deployment is still there, whole, restarted broker included (detached: it outlives this driver)
        assert named_actors(namespace) == before
        again = connect(namespace)
        assert sorted(again.brokers) == sorted(dep.brokers)
        assert ray.get([h.ping.remote() for h in again.brokers.values()], timeout=30)
        from ray._private import state

        killed = next(r.target for r in report.timeline if r.kind == KILL_BROKER)
        assert all(a["IsDetached"] for a in state.actors().values() if a["Name"] == killed and a["State"] == "ALIVE")
        # both collectors saw the killed broker leave: each got every snapshot
        fault_ms = next(r.t_ms for r in report.timeline if r.kind == KILL_BROKER)
        back_ms = next(r.t_ms for r in report.timeline if r.kind == RESTART_BROKER)
        for root in (ops, Path(report.files["snapshots"])):
            rows = read_snapshots_arrow(root).to_pylist()
            during = {(r["namesrv"], r["snapshot_ms"]) for r in rows if fault_ms < r["snapshot_ms"] < back_ms}
            with_broker = {(r["namesrv"], r["snapshot_ms"]) for r in rows if r["broker_addr"] == killed}
            assert during - with_broker, f"{root} has no snapshot without {killed} while it was down"
    finally:
        stop.set()
        dep = connect(namespace)
        dep.teardown(graceful=False)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_chaos_soak(private_ray: str, tmp_path: Path) -> None:
    cfg = ChaosConfig(duration_s=40, fault_interval_s=2, seed=21, rate=50, namespace=unique_namespace("soak"))
    report = run_chaos(cfg, str(tmp_path / "out"))
    _assert_report(report, cfg)
    assert sum(1 for r in report.timeline if r.kind in FAULT_KINDS) >= 15


# ---------------------------------------------------------------------------------------- several nodes
@pytest.fixture
def three_nodes() -> Iterator[tuple[Any, list[Any], str]]:
    """A head and two more raylets on this machine; the driver connects to it, then all goes."""
    from ray.cluster_utils import Cluster

    release_shared_ray()
    if ray.is_initialized():
        ray.shutdown()
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    try:
        nodes = [cluster.head_node, cluster.add_node(num_cpus=1), cluster.add_node(num_cpus=0)]
        namespace = unique_namespace("chaos-nodes")
        ray.init(address=cluster.address, namespace=namespace, log_to_driver=False)
        cluster.wait_for_nodes()
        yield cluster, nodes, namespace
    finally:
        ray.shutdown()
        cluster.shutdown()


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_losing_a_node_drops_its_broker_from_every_route(three_nodes: tuple[Any, list[Any], str]) -> None:
    from clients.producer.actor import ProducerActor

    cluster, (head, node_1, node_2), namespace = three_nodes
    cfg = ChaosConfig(margin_ms=1_500)  # generous: this machine runs three raylets on two cores
    timing = cfg.timing()
    data_dir = tempfile.mkdtemp(prefix="namesrv-chaos-nodes-")
    spec = ClusterSpec(
        namesrv_count=2, profile="fast", namespace=namespace, data_dir=data_dir,
        namesrv_port=0, broker_port=None,  # brokers over Ray only: routes name them `broker-a-0`
        namesrv_node_ids=[head.node_id, node_1.node_id],
        brokers=[BrokerSpec("broker-a", node_id=head.node_id), BrokerSpec("broker-b", node_id=node_1.node_id),
                 BrokerSpec("broker-c", node_id=node_2.node_id)],
    )
    dep = Deployment(spec)
    topics = ["NodeTopic0", "NodeTopic1"]
    observer: RouteObserver | None = None
    producer = None
    on_head = NodeAffinitySchedulingStrategy(head.node_id, soft=False)
    try:
        for name in spec.namesrv_names:  # softly pinned: Ray may restart one elsewhere
            dep.start_namesrv(name)
        ray.get([h.ping.remote() for h in dep.namesrvs.values()], timeout=120)
        for b in spec.brokers:
            dep.start_broker(b)
        placed = {a: ray.get(h.get_runtime_info.remote(), timeout=60)["node_id"] for a, h in dep.brokers.items()}
        assert placed == {"broker-a-0": head.node_id, "broker-b-0": node_1.node_id, "broker-c-0": node_2.node_id}
        for topic in topics:
            AdminClient(dep, timeout_s=30).create_topic(topic, read_queue_nums=4, write_queue_nums=4)
        observer = RouteObserver(dep.namesrvs, topics).start()
        assert observer.wait_for(lambda: all(observer.advertised_everywhere(a) for a in dep.brokers), 60)
        removals = RemovalLog(dep.namesrvs)
        producer = ray.remote(ProducerActor).options(
            num_cpus=0, max_concurrency=4, namespace=namespace, scheduling_strategy=on_head,
        ).remote("node_loss_producer", namespace, sorted(dep.namesrvs),
                 poll_name_server_interval_ms=timing.route_poll_ms)
        # 24 sends round-robin over every queue of every broker, then keep sending through the fault
        first = ray.get(producer.run_send_loop.remote(topics, 0, 60.0, 128, 5, 24), timeout=120)
        assert first["acknowledged"] == 24
        loop = producer.run_send_loop.remote(topics, 40.0, 12.0, 128, 6)

        # The fault: node_2 and broker-c on it vanish without a goodbye. The GCS declares a dead node
        # only after ~15 s, so no channel watch fires: the expiry scan has to catch it (hang bound).
        driver = ChaosDriver(dep, cfg, observer, removals)
        fault = driver.inject(KILL_BROKER, "broker-c-0", lambda: cluster.remove_node(node_2, allow_graceful=False),
                              "node removed (ungraceful)")
        assert observer.wait_for(lambda: observer.gone_everywhere("broker-c-0"), timing.hang_bound_ms / 1000 + 5)
        removals.snapshot(timeout_s=60)
        for name, handle in dep.namesrvs.items():
            seen = [t for a, _, t in removals.events(name) if a == "broker-c-0" and t >= fault.t_ms]
            if not seen:
                # A NameServer Ray restarted after the fault (it was on the lost node, or placed there)
                # started empty: its record of the removal, if any, died with it. It must not serve
                # broker-c (the observer saw it gone everywhere), and broker-c cannot be in its tables.
                assert removals.restarted_since(name, fault.t_ms, 60), f"{name} never removed broker-c-0"
                tables = ray.get(handle.dump_tables.remote(), timeout=60)
                assert "broker-c-0" not in tables["brokerLiveTable"], f"restarted {name} holds broker-c-0"
                continue
            assert seen[0] - fault.t_ms <= timing.hang_bound_ms, (name, seen[0] - fault.t_ms)

        # broker-c comes back on the head node from the same store (one machine, one disk)
        dep.broker_specs["broker-c-0"] = BrokerSpec("broker-c", node_id=head.node_id)
        back = driver.execute(RESTART_BROKER, "broker-c-0")
        assert back.ok, back.detail
        assert observer.wait_for(lambda: observer.advertised_everywhere("broker-c-0"),
                                 timing.back_bound_ms(RESTART_BROKER) / 1000)
        ray.get(loop, timeout=120)
        sends = ray.get(producer.get_records.remote(), timeout=60)
        route_log = ray.get(producer.route_log.remote(), timeout=60)
        consumed = consume_everything(namespace, sorted(dep.namesrvs), topics)
    finally:
        if producer is not None:
            ray.kill(producer)
        if observer is not None:
            observer.stop()
        dep.teardown(graceful=False)
        wait_actors_gone(ray.get_runtime_context().get_job_id())
        shutil.rmtree(data_dir, ignore_errors=True)

    names = {b.addr: b.broker_name for b in spec.brokers}
    drop = [d for d in measure_producer_routes(driver.timeline, {"p": route_log}, names, topics, timing)
            if d.fault_id == fault.fault_id]
    assert drop and drop[0].elapsed_ms is not None and drop[0].elapsed_ms <= timing.producer_bound_ms(SIGSTOP_BROKER)
    windows = impaired_windows(driver.timeline, names, timing, now_ms())
    for r in sends:
        r["explained"] = None if r["ok"] else explain_failure(r, windows)
    send_inv, _ = check_sends(sends)
    assert send_inv.ok, send_inv
    loss, counts = check_no_loss([r for r in sends if r["ok"]], consumed)
    assert loss.ok, loss
    assert counts["acknowledged"] > 0
