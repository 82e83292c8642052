"""`namesrv chaos`: break brokers and NameServers on a seeded timeline while producers send, check
the invariants, print the per-fault summary, the timeline and the verdict, and (with --out) leave
the run's Parquet and every NameServer's route snapshots for `namesrv analyze`.

Which deployment it faults: without --namespace, a private one it deploys in a fresh namespace and
tears down afterwards (the default); with --namespace NS, the deployment already running in NS
(e.g. one `namesrv up` made), which it leaves running.

Exit status 0 when every invariant holds, 1 when one fails, 2 when the run could not be made.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import time
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from clients.chaos.hosts.faults import HostBed
    from clients.chaos.plan import ChaosConfig

log = logging.getLogger(__name__)

DEFAULT_FAULTS = "kill_broker,sigkill_broker,sigstop_broker,kill_namesrv"


def build_config(args: argparse.Namespace, namespace: str) -> ChaosConfig:
    """The run's config from the options; `--namespace` given means: fault that existing deployment."""
    from clients.chaos.plan import ChaosConfig, parse_fault_mix

    return ChaosConfig(
        duration_s=args.duration, seed=args.seed, fault_interval_s=args.fault_interval,
        faults=tuple(parse_fault_mix(args.faults).items()), brokers=args.brokers, namesrvs=args.namesrvs,
        producers=args.producers, rate=args.rate, transactions=args.transactions, topics=args.topics,
        down_time_s=args.down_time,
        snapshot_interval_ms=round(args.snapshot_interval * 1000), namespace=namespace,
        existing=getattr(args, "namespace", None) is not None, data_dir=args.data_dir, keep_data=args.keep_data,
        slaves=args.slaves, broker_role=args.broker_role, controller=args.controller,
        broker_tcp=args.tcp_brokers or bool(args.hosts), hosts=args.hosts, group_members=args.group,
        route_union=not args.one_view, delay_ms=args.delay_ms,
    )


def _config_error(e: ValueError) -> str:
    from pydantic import ValidationError

    if not isinstance(e, ValidationError):
        return str(e)
    parts = []
    for err in e.errors(include_url=False):
        msg = str(err["msg"]).removeprefix("Value error, ")
        parts.append(f"{'.'.join(str(p) for p in err['loc'])} {msg}".strip())
    return "; ".join(parts)


def _announce(cfg: ChaosConfig, faults: str) -> bool:
    """Say which deployment the run will fault; False when an existing one is asked for and absent."""
    print(f"chaos: {cfg.duration_s:g} s, seed {cfg.seed}, a fault every {cfg.fault_interval_s:g} s from {faults}; "
          f"{cfg.producers} producers x {cfg.rate:g} msg/s"
          + (f", {cfg.transactions:g} transactions/s" if cfg.transactions else ""), flush=True)
    if not cfg.existing:
        print(f"target: a PRIVATE deployment ({cfg.brokers} brokers, {cfg.namesrvs} NameServers, profile "
              f"{cfg.profile}) in the fresh namespace {cfg.namespace}, torn down afterwards", flush=True)
        return True
    from actors.deployment.launcher import connect

    dep = connect(str(cfg.namespace))
    if not dep.namesrvs:
        print(f"namesrv chaos: no deployment in Ray namespace {cfg.namespace!r} to fault (check --address; "
              "leave --namespace out to run on a private deployment)")
        return False
    print(f"target: the EXISTING deployment in namespace {cfg.namespace!r}: {len(dep.namesrvs)} NameServers "
          f"({', '.join(sorted(dep.namesrvs))}), {len(dep.brokers)} brokers ({', '.join(sorted(dep.brokers))}); "
          "its brokers and NameServers WILL be killed, stopped and restarted; it is left running", flush=True)
    return True


@contextlib.contextmanager
def _test_bed(count: int, namespace: str) -> Iterator[HostBed]:
    """`count` hosts as network namespaces with a Ray node each, this process connected as the
    driver; all of it torn down afterwards (needs root, nftables and iproute2)."""
    from clients.chaos.hosts.faults import HostBed
    from clients.chaos.hosts.nemesis import Nemesis
    from clients.chaos.hosts.netns import Hosts, HostsUnavailable
    from clients.chaos.hosts.ray_nodes import RayOnHosts

    if os.geteuid() != 0:
        raise HostsUnavailable("--hosts makes network namespaces and nftables rules: run it as root")
    print(f"test bed: {count} hosts as network namespaces (a Ray node in each), torn down afterwards", flush=True)
    with Hosts(count) as hosts, RayOnHosts(hosts) as cluster:
        cluster.connect(namespace)
        yield HostBed(hosts, cluster, Nemesis(hosts))


def cmd_chaos(args: argparse.Namespace) -> int:
    import ray

    from clients.chaos.hosts.netns import HostsUnavailable
    from clients.chaos.report import render_report
    from clients.chaos.run import run_chaos
    from clients.chaos.target import ChaosSetupError

    namespace = args.namespace or f"chaos-{uuid.uuid4().hex[:10]}"
    try:
        cfg = build_config(args, namespace)
    except ValueError as e:
        print(f"namesrv chaos: {_config_error(e)}")
        return 2
    from clients.chaos.schema import NODE_FAULTS

    if any(k in NODE_FAULTS for k in cfg.fault_mix):  # before any Ray: this command owns no cluster's nodes
        print("namesrv chaos: lose_master_node removes a whole Ray node, which only whoever owns the cluster can "
              "do; it needs a node-removal hook (run_chaos(cfg, lose_node=...) from Python, as the multi-node test "
              "cluster gives), which this command has none of: choose other --faults")
        return 2
    if cfg.hosts and args.address:
        print("namesrv chaos: --hosts builds a test bed with a Ray cluster of its own; leave --address out")
        return 2
    started = time.monotonic()
    with contextlib.ExitStack() as stack:
        try:
            bed = stack.enter_context(_test_bed(cfg.hosts, namespace)) if cfg.hosts else None
            if bed is None and args.address:
                ray.init(address=args.address, namespace=namespace, log_to_driver=False)
            elif bed is None:
                ray.init(address="local", num_cpus=2, include_dashboard=False, namespace=namespace,
                         log_to_driver=False)
            stack.callback(ray.shutdown)
            if not _announce(cfg, args.faults):
                return 2
            report = run_chaos(cfg, args.out, bed=bed)
        except (ChaosSetupError, HostsUnavailable) as e:
            print(f"namesrv chaos: {e}")
            return 2
    print(render_report(report))
    print(f"total {time.monotonic() - started:.1f} s")
    return 0 if report.ok else 1


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "chaos",
        help="seeded broker/NameServer faults under load; checks no loss and route convergence "
             "(a private deployment, or the one in --namespace)",
        description="Kill, SIGKILL, SIGSTOP and restart brokers and kill NameServers on a seeded timeline while "
                    "producers send; check that nothing acknowledged was lost and that routes followed every "
                    "fault in bound. WHICH DEPLOYMENT: without --namespace it deploys a PRIVATE cluster in a "
                    "fresh namespace and tears it down afterwards (the default); with --namespace NS it faults "
                    "the EXISTING deployment in NS (e.g. from `namesrv up`; use --address auto to reach it) and "
                    "leaves it running. With --out DIR it also collects every NameServer's route snapshots "
                    "into DIR/snapshots: `namesrv analyze DIR` then relates them to the faults.",
    )
    p.add_argument("--duration", type=float, default=60.0, help="seconds of sending (default 60)")
    p.add_argument("--seed", type=int, default=1, help="same seed, same faults on the same targets (default 1)")
    p.add_argument("--fault-interval", type=float, default=4.0, help="seconds between faults (default 4)")
    p.add_argument("--faults", default=DEFAULT_FAULTS,
                   help=f"fault mix, kind[:weight] comma separated (default {DEFAULT_FAULTS}; also kill_master, "
                        "sigkill_master, pause_slave; with --hosts partition_broker_namesrv, partition_client_broker, "
                        "isolate_host, delay_broker; lose_master_node needs a node-removal hook, which only "
                        "run_chaos(lose_node=...) gives, so it is refused here)")
    p.add_argument("--delay-ms", type=int, default=100,
                   help="delay_broker's hold on each chunk, each way, ms (default 100)")
    p.add_argument("--hosts", type=int, default=0,
                   help="run on a test bed of this many hosts (network namespaces on one bridge, a Ray node in "
                        "each; needs root): each NameServer and broker on a host of its own, TCP brokers, the "
                        "clients in the root namespace; the kernel's faults (--faults partition_broker_namesrv, "
                        "partition_client_broker, isolate_host) need it (default 0: a local Ray)")
    p.add_argument("--down-time", type=float, default=2.0, help="seconds a killed broker stays down (default 2)")
    p.add_argument("--brokers", type=int, default=3, help="brokers of the private deployment (default 3)")
    p.add_argument("--slaves", type=int, default=0,
                   help="slaves per broker set of the private deployment (default 0); the HA kinds kill_master, "
                        "sigkill_master and pause_slave (--faults) act on whichever broker holds the role")
    p.add_argument("--controller", action="store_true",
                   help="with --slaves: deploy the controller, so a killed master is replaced by its slave "
                        "(controller mode); without it roles stay as deployed and a killed master's set waits")
    p.add_argument("--tcp-brokers", action="store_true",
                   help="the private deployment's brokers listen on TCP (free loopback ports), as `namesrv up` "
                        "deploys them: producers send over TCP and slaves replicate over HA_TRANSFER; by default "
                        "brokers are Ray-only (actor calls)")
    p.add_argument("--brokerRole", dest="broker_role", choices=("SYNC_MASTER", "ASYNC_MASTER"), default=None,
                   help="the masters' role with --slaves (default SYNC_MASTER)")
    p.add_argument("--namesrvs", type=int, default=2, help="NameServers of the private deployment (default 2)")
    p.add_argument("--producers", type=int, default=2)
    p.add_argument("--one-view", action="store_true",
                   help="each of the run's producers and group members is given one NameServer (client i "
                        "NameServer i; a RocketMQ client sticks to the one it picked) instead of taking the union "
                        "of every NameServer's view: to see what divergence does without it (invariants 3e, 7)")
    p.add_argument("--group", type=int, default=0,
                   help="push consumers of one consumer group reading the topics (rebalancing every second); "
                        "invariant 7 holds each queue the group can reach to one owner (default 0: none)")
    p.add_argument("--rate", type=float, default=50.0, help="messages per second per producer (default 50)")
    p.add_argument("--transactions", type=float, default=0.0,
                   help="transactions per second from a transactional producer, each committed, rolled back or "
                        "left to its check-back by the seed; the history checks H3/H4 (default 0: none)")
    p.add_argument("--topics", type=int, default=2)
    p.add_argument("--out", default=None,
                   help="write faults/sends/detections/removals Parquet, summary.json and the route snapshots "
                        "of every NameServer (DIR/snapshots) here: the input of `namesrv analyze DIR`")
    p.add_argument("--snapshot-interval", type=float, default=1.0,
                   help="with --out: collect route snapshots this often, seconds (default 1)")
    p.add_argument("--address", default=None, help="an existing Ray cluster, e.g. auto (default: a private local Ray)")
    p.add_argument("--namespace", default=None,
                   help="fault the EXISTING deployment in this Ray namespace instead of a private one")
    p.add_argument("--data-dir", default=None, help="private deployment's stores (default: a temp dir removed after)")
    p.add_argument("--keep-data", action="store_true", help="keep the temp store dir")
    p.set_defaults(func=cmd_chaos)
