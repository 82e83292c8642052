"""`run_chaos`: one chaos scenario from start to verdict. Deploy (or adopt an existing deployment),
send, break things on the seeded plan while observing routes and collecting route snapshots,
recover, check the invariants, clean up, report.

The pieces it wires together each have their module: `target` (the deployment it faults),
`plan` (config, timing, the seeded plan), `driver` (making faults; `hosts` the kernel's, on the
test bed), `observe` (routes, removals, snapshots, producers' records), `reader`, `transactions` and
`group` (a consumer, a transactional producer and a consumer group while faults happen),
`invariants` (measurements), `checks`, `history`, `roles` and `ownership` (verdicts), `report` (the
report, its Parquet and text).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import time
import uuid
from dataclasses import asdict
from pathlib import Path
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from clients.admin.client import AdminClient
from clients.chaos.checks import (
    Invariant,
    check_detections,
    check_kept_routes,
    check_no_live_removal,
    check_no_loss,
    check_sends,
)
from clients.chaos.driver import ChaosDriver, NodeRemover
from clients.chaos.group import GroupLane
from clients.chaos.history import check_history, history_of_run
from clients.chaos.hosts.faults import HostBed, HostFaults
from clients.chaos.invariants import (
    explain_failure,
    impaired_windows,
    measure_kept_routes,
    measure_namesrv_detection,
    measure_namesrv_return,
    measure_producer_routes,
    spurious_removals,
)
from clients.chaos.leaks import alive_actor_ids, alive_actors, check_leaks, remove_store, wait_actors_gone
from clients.chaos.nodes import await_lost_removals, node_fault_refusal
from clients.chaos.observe import RemovalLog, RouteObserver, SnapshotCollector, collect_producer_results
from clients.chaos.ownership import check_ownership, excused_windows, judged, ownership_defects
from clients.chaos.plan import ChaosConfig, client_namesrvs, plan_faults, plan_signature, timeline_signature
from clients.chaos.reader import LiveReader
from clients.chaos.report import EXISTING, PRIVATE, ChaosReport, summarize
from clients.chaos.roles import (
    RoleLogCollector,
    check_loss_for_role,
    check_one_master,
    check_paused_slave_sends,
    counted_not_failed,
    masterless_windows,
    no_master_anywhere,
    promises_no_loss,
    role_spans,
)
from clients.chaos.schema import (
    BROKER_FAULTS,
    BROKER_REVIVALS,
    FAULTS_FILE,
    MIX_KINDS,
    NODE_FAULTS,
    RESTART_BROKER,
    SNAPSHOTS_DIR,
)
from clients.chaos.target import ChaosSetupError, Target, adopt_existing, private_target
from clients.chaos.transactions import TX_CHECK_BACK_ALLOWANCE_S, TransactionLane
from clients.consumer.pull_consumer import PullConsumer
from clients.producer.actor import ProducerActor
from namesrv.common.clock import system_clock as now_ms

log = logging.getLogger(__name__)

BROKERS_SHOW_UP_S = 90.0
"""How long the set-up waits for every broker in every NameServer's routes (a 3-raylet cluster on 2
loaded cores can take a while)."""


def _check_out_dir(out: Path) -> None:
    if (out / FAULTS_FILE).exists() or (out / SNAPSHOTS_DIR).exists():
        raise ChaosSetupError(f"{out} already holds a chaos run's output; choose a new --out directory")


def consume_everything(namespace: str, namesrvs: list[str], topics: list[str]) -> list[Any]:
    consumer = PullConsumer(namespace, namesrvs, timeout_s=30)
    return [m for topic in topics for m in consumer.consume_all(topic)]


def run_chaos(cfg: ChaosConfig, out_dir: str | os.PathLike[str] | None = None, *,
              lose_node: NodeRemover | None = None, bed: HostBed | None = None) -> ChaosReport:
    """One chaos scenario on the connected Ray cluster (call ray.init first). By default it deploys
    a fresh cluster in its own namespace and tears it down afterwards; with `cfg.existing` it faults
    the deployment running in `cfg.namespace` and leaves it running. With `out_dir`, every
    NameServer's route snapshots are collected into OUT/snapshots while it runs, and the report's
    Parquet files are written beside them.

    `lose_node` (see `driver.NodeRemover`) is what lose_master_node calls; the kind is refused
    without it. With that kind, a private deployment pins each set's master and slaves to different
    nodes, its NameServers (and, as always, the controller) to the head, and the producers to this
    driver's node, so only brokers are lost with a node.

    `bed` (needed when `cfg.hosts`): the multi-host test bed this driver is connected to
    (clients.chaos.hosts.faults), which the caller owns; the deployment is placed on its hosts, the
    producers on this driver's node, and the host faults are made by its nemesis."""
    if not ray.is_initialized():
        raise RuntimeError("run_chaos needs a connected Ray (ray.init)")
    if bool(cfg.hosts) != (bed is not None) or (bed is not None and bed.hosts.count != cfg.hosts):
        raise ChaosSetupError(f"a run with hosts={cfg.hosts} needs a test bed of as many hosts (run_chaos(bed=...)); "
                              f"given {bed.hosts.count if bed is not None else 'none'}")
    out = Path(out_dir) if out_dir is not None else None
    if out is not None:
        _check_out_dir(out)
    run_id = uuid.uuid4().hex[:8]
    namespace = cfg.namespace or f"chaos-{run_id}"
    job_id = ray.get_runtime_context().get_job_id()
    alive_before = alive_actors()
    job_actors_before = alive_actor_ids(job_id)  # the driver's own (a Spark session's, say): not the run's
    target = adopt_existing(cfg) if cfg.existing else private_target(cfg, namespace, bed)
    dep, timing = target.dep, target.timing
    suffix = f"-{run_id}" if cfg.existing else ""  # never mix with an earlier rehearsal's topics
    topics = [f"ChaosTopic{i}{suffix}" for i in range(cfg.topics)]
    names = {addr: s.broker_name for addr, s in dep.broker_specs.items()}
    refusal = node_fault_refusal(cfg, dep, lose_node)
    if refusal is not None:
        if target.own_dir:
            shutil.rmtree(target.data_dir, ignore_errors=True)
        raise ChaosSetupError(refusal)
    plan = plan_faults(cfg, target.fault_brokers, sorted(dep.spec.namesrv_names), timing, target.sets)
    if not any(e.kind in MIX_KINDS for e in plan):
        if target.own_dir:
            shutil.rmtree(target.data_dir, ignore_errors=True)
        raise ChaosSetupError(
            f"no fault fits in {cfg.duration_s:g} s of sending: a fault starts after {cfg.warmup_s:g} s and its "
            f"broker must be back 1 s before the end (down {cfg.down_time_s:g} s, SIGSTOP held "
            f"{cfg.stop_time(timing):.1f} s with this deployment's {timing.expiry_ms / 1000:g} s expiry); "
            "raise --duration or change --faults")
    producers: dict[str, Any] = {}
    loops: list[Any] = []
    observer: RouteObserver | None = None
    collector: SnapshotCollector | None = None
    driver: ChaosDriver | None = None
    roles: RoleLogCollector | None = None
    reader: LiveReader | None = None
    lane: TransactionLane | None = None
    host_faults: HostFaults | None = None
    group: GroupLane | None = None
    started_ms = now_ms()
    log.info("chaos run on %s deployment in namespace %s, data in %s, seed %d",
             target.kind, namespace, target.data_dir, cfg.seed)
    try:
        if target.kind == PRIVATE:
            dep.start()
        host_faults = HostFaults.of(bed, dep) if bed is not None else None
        admin = AdminClient(dep, timeout_s=30)
        for topic in topics:
            admin.create_topic(topic, read_queue_nums=cfg.queues, write_queue_nums=cfg.queues)
        if out is not None:
            collector = SnapshotCollector(dep.namesrvs, out / SNAPSHOTS_DIR, f"chaos-{run_id}",
                                          cfg.snapshot_interval_ms / 1000).start()
        observer = RouteObserver(dep.namesrvs, topics).start()
        if not observer.wait_for(lambda: all(observer.advertised_everywhere(a) for a in dep.brokers),
                                 BROKERS_SHOW_UP_S):
            missing = {n: sorted(a for a in dep.brokers if not observer.advertised(a, n)) for n in observer.namesrvs}
            raise RuntimeError(f"brokers never showed up in every NameServer's routes in {BROKERS_SHOW_UP_S:g} s: "
                               "missing " + "; ".join(f"{n}: {', '.join(a) or 'none'}"
                                                      for n, a in sorted(missing.items())))
        removals = RemovalLog(dep.namesrvs)
        actor_cls = ray.remote(ProducerActor)
        pin: dict[str, Any] = {}
        if any(k in NODE_FAULTS for k in cfg.fault_mix) or bed is not None:  # their records must outlive any
            # node loss; on the test bed the clients are on this driver's node, which no host fault touches
            pin["scheduling_strategy"] = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), False)
        for i in range(cfg.producers):
            pname = f"chaos-producer-{i}" if not cfg.existing else f"chaos-{run_id}-producer-{i}"
            producers[pname] = actor_cls.options(num_cpus=0, max_concurrency=4, name=pname, namespace=namespace,
                                                 **pin).remote(
                f"chaos_producer_{i}", namespace, client_namesrvs(sorted(dep.namesrvs), i, cfg.route_union),
                poll_name_server_interval_ms=timing.route_poll_ms, route_union=cfg.route_union)
        ray.get([p.summary.remote() for p in producers.values()], timeout=120)
        driver = drv = ChaosDriver(dep, cfg, observer, removals, timing=timing, snapshots=collector,
                                   lose_node=lose_node, host_faults=host_faults)
        roles = RoleLogCollector(lambda: {a: h for a, h in dep.brokers.items() if a not in drv.lost}, names,
                                 now_ms).start()
        reader = LiveReader(namespace, sorted(dep.namesrvs), topics).start()
        if cfg.group_members:
            queues = {(t, n, q) for t in topics for n in set(names.values()) for q in range(cfg.queues)}
            group = GroupLane(namespace, sorted(dep.namesrvs), topics, queues, members=cfg.group_members,
                              rebalance_interval_ms=cfg.group_rebalance_ms, route_union=cfg.route_union).start()
            if not group.wait_settled(BROKERS_SHOW_UP_S):
                log.warning("the consumer group did not own every queue once within %.0f s", BROKERS_SHOW_UP_S)
        if cfg.transactions:
            lane = TransactionLane(namespace, sorted(dep.namesrvs), topics, cfg.transactions, cfg.seed,
                                   timing.route_poll_ms).start()
        start = time.monotonic()
        started_ms = now_ms()
        loops = [p.run_send_loop.remote(topics, cfg.rate, cfg.duration_s, 128, cfg.seed * 1000 + i)
                 for i, p in enumerate(producers.values())]
        timeline = driver.run(plan, start)
        ray.get(loops, timeout=cfg.duration_s + 300)
        if lane is not None:  # stopped with the sends; the deferred ones get their check-backs' time: a
            # half is first checked after the timeout, again every check interval (an answer lost to a kill)
            bc = target.broker_config
            check_back_ms = bc.transaction_timeout_ms + bc.transaction_check_interval_ms
            lane.finish(check_back_ms / 1000 + TX_CHECK_BACK_ALLOWANCE_S)
        if not observer.wait_for(lambda: all(observer.advertised_everywhere(a) for a in dep.brokers
                                             if a not in drv.lost), timing.back_bound_ms(RESTART_BROKER) / 1000):
            log.warning("not every broker is back in every route at the end of the run")
        await_lost_removals(removals, driver.lost, timeline, timing)
        removals.snapshot()
        reader.stop()
        if group is not None:
            group.stop_sampling()
        sends, route_logs = collect_producer_results(producers)
        consumed = consume_everything(namespace, sorted(dep.namesrvs), topics)
        history = observer.snapshot_history()
    finally:
        if driver is not None:
            driver.release_stopped()
        for p in producers.values():
            try:
                ray.get(p.shutdown.remote(), timeout=10)
            except Exception as e:
                log.info("producer shutdown: %s", type(e).__name__)
            ray.kill(p, no_restart=True)
        threads_stopped = observer.stop() if observer is not None else True
        threads_stopped = (collector.stop() if collector is not None else True) and threads_stopped
        threads_stopped = (roles.stop() if roles is not None else True) and threads_stopped
        threads_stopped = (reader.stop() if reader is not None else True) and threads_stopped
        threads_stopped = (group.stop() if group is not None else True) and threads_stopped
        threads_stopped = (lane.finish(0) if lane is not None else True) and threads_stopped
        _clean_up(target, cfg, topics, job_id, job_actors_before, driver.lost if driver is not None else set())
    ended_ms = now_ms()

    spans = role_spans(roles.incarnations() if roles is not None else [], timeline, ended_ms, started_ms)
    masterless = masterless_windows(spans, target.sets, started_ms, ended_ms, timing.route_poll_ms + timing.margin_ms)
    replicated = {n: w for n, w in masterless.items() if len(target.sets[n]) > 1}  # a set of one: its fault's window
    up_ms = driver.recovery_ms if driver is not None else {}  # revival fault_id -> its new actor's start
    bound_ms = up_ms | (driver.cut_ms if driver is not None else {})  # ... or the cut a heal removed
    windows = impaired_windows(timeline, names, timing, ended_ms, bound_ms, replicated)
    no_master = no_master_anywhere(masterless)
    for r in sends:
        r["explained"] = None if r["ok"] else explain_failure(r, windows, no_master, set(names.values()))
    tx_ids = {s.msg_id for s in lane.sent} if lane is not None else set()
    loss, loss_counts = check_no_loss([r for r in sends if r["ok"]], [m for m in consumed if m.msg_id not in tx_ids])
    role = str(target.broker_config.broker_role) if target.slaves else None
    loss, role_figures = check_loss_for_role(loss, loss_counts, role, target.slaves, timeline)
    bc = target.broker_config
    shrink_ms = bc.ha_max_time_slave_not_catchup_ms + bc.slave_timeout_ms + bc.ha_poll_wait_ms + timing.margin_ms
    send_inv, send_counts = check_sends(sends)
    namesrv_names = sorted(removals.namesrvs)
    ns_detect = measure_namesrv_detection(timeline, removals, namesrv_names, timing)
    ns_back = measure_namesrv_return(timeline, history, namesrv_names, topics, timing, bound_ms)
    prod = measure_producer_routes(timeline, route_logs, names, topics, timing, bound_ms)
    detections = ns_detect + ns_back + prod
    kept_dir = target.data_dir if target.own_dir and not cfg.keep_data else None
    spurious = spurious_removals(removals, timeline, timing, bound_ms)
    ownership: list[Invariant] = []
    group_defects: list[dict[str, Any]] = []
    if group is not None:
        defects = ownership_defects(group.samples)
        excused = excused_windows(timeline, names, namesrv_names, timing, cfg.group_rebalance_ms, ended_ms, bound_ms)
        ownership.append(check_ownership(defects, excused, group.bound_ms(timing.margin_ms), len(group.samples)))
        group_defects = [asdict(d) | {"lasted_ms": d.lasted_ms} for d in judged(defects, excused)]
    kept = measure_kept_routes(timeline, route_logs, names, topics, timing, bound_ms)
    invariants = [
        loss,
        send_inv,
        check_detections("3a dead broker leaves every NameServer in bound", ns_detect, "NameServer removals in bound"),
        check_detections("3b producer caches follow in bound", [d for d in prod if d.kind in BROKER_FAULTS],
                         "producer cache drops in bound"),
        check_detections("3c revived broker back everywhere in bound",
                         ns_back + [d for d in prod if d.kind in BROKER_REVIVALS], "returns in bound"),
        check_no_live_removal(spurious),
        *([check_kept_routes(kept)] if kept else []),
        *ownership,
        check_one_master(roles.incarnations() if roles is not None else [], timeline, ended_ms, started_ms),
        check_paused_slave_sends(sends, timeline, names, shrink_ms, role == "SYNC_MASTER"),
        check_leaks(namespace, job_id, alive_before, loops, kept_dir, threads_stopped,
                    keep=target.keep | job_actors_before, own_store=target.kind == PRIVATE),
        *[h if promises_no_loss(role, target.slaves) else counted_not_failed(h)
          for h in check_history(history_of_run(sends, reader.received if reader is not None else [], consumed,
                                                lane.sent if lane is not None else [],
                                                lane.decided() if lane is not None else []))],
    ]
    figures = summarize(timeline, detections, up_ms, send_counts, loss_counts, timing)
    figures["timeline_matches_plan"] = timeline_signature(timeline) == plan_signature(plan)
    figures["spurious_removals"] = spurious
    figures["kept_routes"] = kept
    figures["host_faults"] = host_faults.windows() if host_faults is not None else []
    figures["live_reader"] = reader.figures() if reader is not None else {}
    figures["group"] = (group.figures() | {"judged_defects": group_defects}) if group is not None else {}
    figures["transactions"] = lane.figures() if lane is not None else {}
    figures["replication"] = role_figures | {"slave_transports": sorted(roles.transports) if roles is not None else []}
    report = ChaosReport(cfg, namespace, target.data_dir, plan, timeline, sends, detections, removals.rows(),
                         route_logs, history, invariants, figures, started_ms, target=target.kind,
                         broker_names=names, snapshot_rows=collector.total_rows if collector else 0,
                         ended_ms=ended_ms, roles=[asdict(s) for s in spans])
    if out is not None:
        report.write_parquet(out)
    return report


def _clean_up(target: Target, cfg: ChaosConfig, topics: list[str], job_id: str, job_actors_before: set[str],
              lost: set[str]) -> None:
    """A private deployment is torn down (and its temp dir removed); an existing one keeps running,
    rid of the run's topics. Brokers lost with a node are only marked dead (ray.kill), never asked to
    shut down: a call to an actor on a node Ray has not yet declared dead would hang until its timeout."""
    dep = target.dep
    for addr in sorted(lost):
        handle = dep.brokers.pop(addr, None)
        if handle is not None:
            with contextlib.suppress(Exception):
                ray.kill(handle, no_restart=True)
    if target.kind == EXISTING:
        admin = AdminClient(dep, timeout_s=30)
        for topic in topics:
            try:
                admin.delete_topic(topic)
            except Exception as e:
                log.warning("could not delete chaos topic %s: %s", topic, e)
        return
    try:
        dep.teardown(graceful=True)
    except Exception:
        log.exception("teardown failed")
    if target.own_dir and not cfg.keep_data:
        wait_actors_gone(job_id, exclude=job_actors_before)  # a dying NameServer may still persist its brokers
        remove_store(target.data_dir)
