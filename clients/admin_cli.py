"""`namesrv up | status | down | route | topic`: deploy and inspect a cluster from the shell."""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from typing import Any

from clients.render import route_table, table

DEFAULT_NAMESPACE = "namesrv"


def _connect(args: argparse.Namespace) -> Any:
    from actors.launcher import connect, ensure_ray

    ensure_ray(address=args.address, namespace=args.namespace)
    dep = connect(args.namespace)
    if not dep.namesrvs:
        raise SystemExit(f"no NameServer found in Ray namespace {args.namespace!r} at {args.address}")
    return dep


def _start_local_ray() -> None:
    """`ray start --head` (unless one runs already), so detached actors outlive this command."""
    ray_bin = shutil.which("ray") or str(__import__("pathlib").Path(sys.executable).parent / "ray")
    status = subprocess.run([ray_bin, "status"], capture_output=True, text=True)
    if status.returncode == 0:
        return
    subprocess.run(
        [ray_bin, "start", "--head", "--disable-usage-stats", "--include-dashboard=false"],
        check=True,
        capture_output=True,
    )


def cmd_up(args: argparse.Namespace) -> int:
    from actors.launcher import BrokerSpec, ClusterSpec, connect, deploy, ensure_ray, spread_over_nodes, wait_for_nodes

    if args.address is None:
        _start_local_ray()
        args.address = "auto"
    ensure_ray(address=args.address, namespace=args.namespace)
    existing = connect(args.namespace)
    if existing.namesrvs:
        print(f"already deployed in namespace {args.namespace!r}: {sorted(existing.namesrvs)}", file=sys.stderr)
        return 1
    brokers = []
    for name in args.brokers.split(","):
        brokers.append(BrokerSpec(name.strip(), 0, args.cluster))
        brokers.extend(BrokerSpec(name.strip(), i, args.cluster) for i in range(1, args.slaves + 1))
    spec = ClusterSpec(
        namesrv_count=args.namesrvs, brokers=brokers, profile=args.profile, namespace=args.namespace,
        data_dir=args.data_dir, detached=True,
    )
    if args.pin_brokers or args.spread_namesrvs:
        nodes = wait_for_nodes(args.wait_nodes, args.wait_timeout)
        spread_over_nodes(spec, nodes, brokers=args.pin_brokers, namesrvs=args.spread_namesrvs)
        for b in spec.brokers:
            print(f"{b.addr} pinned to node {b.node_id}")
        for name in spec.namesrv_names:
            if spec.namesrv_node_id(name):
                print(f"{name} placed on node {spec.namesrv_node_id(name)} (soft)")
    dep = deploy(spec)
    print(f"deployed {len(dep.namesrvs)} NameServers and {len(dep.brokers)} brokers "
          f"(profile {args.profile}) in Ray namespace {args.namespace!r}")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    from clients.admin import AdminClient

    status = AdminClient(_connect(args)).status()
    ns_rows = []
    for name, s in sorted(status["namesrvs"].items()):
        if "error" in s:
            ns_rows.append((name, "UNREACHABLE " + s["error"], "", "", ""))
        else:
            state = "ready" if s["ready"] else "NOT READY"
            ns_rows.append((name, state, len(s["brokers"]), s["topics"], s["route_seq"]))
    print(table(("namesrv", "state", "brokers", "topics", "route seq"), ns_rows))
    rows = []
    for name, s in sorted(status["namesrvs"].items()):
        for b in s.get("brokers", []):
            age = b["last_heartbeat_age_ms"]
            rows.append((name, b["cluster"], b["broker_name"], b["broker_id"], b["broker_addr"],
                         "-" if age is None else f"{age} ms", b["topics"], "yes" if b["watched"] else "no"))
    print()
    print(table(("namesrv", "cluster", "broker", "id", "address", "last heartbeat", "topics", "watched"), rows))
    brows = []
    for addr, info in sorted(status["brokers"].items()):
        if "error" in info:
            brows.append((addr, "UNREACHABLE " + info["error"], "", "", ""))
        else:
            brows.append((addr, f"pid {info['pid']}", info["topics"], sum(info["queues"].values()),
                          info["data_version"]["counter"]))
    print()
    print(table(("broker", "process", "topics", "messages", "data version"), brows))
    return 0


def cmd_route(args: argparse.Namespace) -> int:
    from clients.admin import AdminClient

    admin = AdminClient(_connect(args))
    for name, route in admin.routes_everywhere(args.topic).items():
        print(f"-- {name}")
        print(route_table(args.topic, route))
    return 0


def cmd_topic(args: argparse.Namespace) -> int:
    from clients.admin import AdminClient

    admin = AdminClient(_connect(args))
    if args.delete:
        admin.delete_topic(args.topic, args.cluster)
        print(f"deleted {args.topic}")
    else:
        outcomes = admin.create_topic(args.topic, args.cluster, args.queues, args.queues)
        print(f"created {args.topic} on {', '.join(sorted(outcomes))}")
    return 0


def cmd_down(args: argparse.Namespace) -> int:
    dep = _connect(args)
    n_ns, n_b = len(dep.namesrvs), len(dep.brokers)
    dep.teardown(graceful=True)
    print(f"stopped {n_b} brokers and {n_ns} NameServers in namespace {args.namespace!r}")
    if args.stop_ray:
        ray_bin = shutil.which("ray") or "ray"
        subprocess.run([ray_bin, "stop"], check=False, capture_output=True)
        print("ray stopped")
    return 0


def _common(p: argparse.ArgumentParser, address_default: str | None = "auto") -> None:
    p.add_argument("--address", default=address_default,
                   help=f"Ray cluster address (default: {address_default or 'start a local Ray'})")
    p.add_argument("--namespace", default=DEFAULT_NAMESPACE, help="Ray namespace of the actors")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("up", help="deploy NameServers and brokers as detached actors")
    _common(p, address_default=None)
    p.add_argument("--namesrvs", type=int, default=2, help="number of NameServers (default 2)")
    p.add_argument("--brokers", default="broker-a,broker-b,broker-c", help="comma-separated broker names")
    p.add_argument("--slaves", type=int, default=0, help="slaves per broker group (default 0)")
    p.add_argument("--cluster", default="DefaultCluster")
    p.add_argument("--profile", default="default", choices=("default", "fast"))
    p.add_argument("--data-dir", default="~/namesrv-data", help="where brokers and NameServers keep files")
    p.add_argument("--pin-brokers", action="store_true",
                   help="pin each broker to a node, round-robin over alive nodes (workers first), so a "
                        "restart finds its store on the same disk")
    p.add_argument("--spread-namesrvs", action="store_true",
                   help="place NameServers round-robin over alive nodes (soft: one whose node dies restarts elsewhere)")
    p.add_argument("--wait-nodes", type=int, default=1,
                   help="with --pin-brokers/--spread-namesrvs: wait until this many Ray nodes are alive (default 1)")
    p.add_argument("--wait-timeout", type=float, default=600.0, help="seconds to wait for --wait-nodes (default 600)")
    p.set_defaults(func=cmd_up)

    p = sub.add_parser("status", help="NameServers, brokers, liveness and topics")
    _common(p)
    p.set_defaults(func=cmd_status)

    p = sub.add_parser("route", help="a topic's route on every NameServer")
    _common(p)
    p.add_argument("topic")
    p.set_defaults(func=cmd_route)

    p = sub.add_parser("topic", help="create a topic on every master broker of a cluster (or delete it)")
    _common(p)
    p.add_argument("topic")
    p.add_argument("--cluster", default=None)
    p.add_argument("--queues", type=int, default=8)
    p.add_argument("--delete", action="store_true")
    p.set_defaults(func=cmd_topic)

    p = sub.add_parser("down", help="gracefully stop every broker and NameServer of the namespace")
    _common(p)
    p.add_argument("--stop-ray", action="store_true", help="also `ray stop` the local cluster")
    p.set_defaults(func=cmd_down)
