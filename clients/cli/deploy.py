"""`namesrv up | status | down | route | topic | restart-broker`: deploy and inspect a cluster from the shell.

`route` and `topic` are this project's older verbs, kept as aliases of the mqadmin verbs on the same
admin client (`clients.admin.client`): `route T` is `topicRoute -t T` asked of every NameServer,
`topic T` is `updateTopic -t T` on every master broker of the deployment, `topic T --delete` is
`deleteTopic -t T`.

Arguments are checked before anything connects; a problem is one line on stderr and a non-zero
exit (see `clients.cli.main`).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
from typing import Any

from actors.deployment.spec import DEFAULT_NAMESPACE
from clients.cli.render import route_table, table
from clients.cli.support import (
    CLIError,
    acl_overrides,
    broker_names_arg,
    cluster_arg,
    connect_deployment,
    connect_ray,
    env_credentials,
    int_in,
    queue_count_arg,
    ray_executable,
    topic_arg,
)

LAUNCHER_CONFIG = "~/ray_bootstrap_config.yaml"
"""The cluster config `ray up` leaves on the head for its autoscaler (`--wait-nodes launcher`)."""
RAY_STOP_CAVEAT = "`ray stop` stops EVERY Ray on this machine, not only the one `namesrv up` started"


def _admin(args: argparse.Namespace) -> Any:
    from clients.admin.client import AdminClient

    return AdminClient(connect_deployment(args), credentials=env_credentials())


def _run_ray(*ray_args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([ray_executable(), *ray_args], capture_output=True, text=True)


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1] if lines else "no output"


def wait_nodes_arg(value: str) -> int | str:
    """argparse type of --wait-nodes: a count, or `launcher` (see launcher_node_count)."""
    return value if value == "launcher" else int_in(1)(value)


def launcher_node_count(path: str = LAUNCHER_CONFIG) -> int:
    """How many nodes `ray up` brings up on its own: the head plus the min_workers of every node type
    in the config it left on the head (with the local provider: every one of `worker_ips`)."""
    import yaml

    try:
        with open(os.path.expanduser(path)) as f:
            config = yaml.safe_load(f)
        types = config["available_node_types"].values()
        return 1 + sum(int(t.get("min_workers", 0)) for t in types)
    except OSError as e:
        raise CLIError(f"--wait-nodes launcher: no cluster config of `ray up` here ({e.strerror}: {path}); "
                       "run it on the head `ray up` started, or give a count") from None
    except (yaml.YAMLError, TypeError, KeyError, AttributeError, ValueError) as e:
        raise CLIError(f"--wait-nodes launcher: {path} is not a cluster config of `ray up` ({e!r})") from None


def _start_local_ray() -> None:
    """`ray start --head` (unless a Ray runs on this machine already), so detached actors outlive
    this command."""
    if _run_ray("status").returncode == 0:
        return
    started = _run_ray("start", "--head", "--disable-usage-stats", "--include-dashboard=false")
    if started.returncode != 0:
        raise CLIError(f"`ray start --head` failed: {_last_line(started.stderr or started.stdout)}")


def cmd_up(args: argparse.Namespace) -> int:
    from actors.deployment.launcher import connect, deploy
    from actors.deployment.placement import spread_over_nodes, wait_for_nodes
    from actors.deployment.profiles import replication_overrides
    from actors.deployment.spec import BrokerSpec, ClusterSpec
    from actors.proxy.actor import proxy_actor_name

    wait_nodes = launcher_node_count() if args.wait_nodes == "launcher" else args.wait_nodes
    if args.address is None:
        _start_local_ray()
        args.address = "auto"
    connect_ray(args.address, args.namespace)
    existing = connect(args.namespace)
    if existing.namesrvs:
        raise CLIError(f"already deployed in namespace {args.namespace!r}: {sorted(existing.namesrvs)} "
                       "(`namesrv down` first, or pick another --namespace)")
    brokers = []
    for name in args.brokers:
        brokers.append(BrokerSpec(name, 0, args.cluster))
        brokers.extend(BrokerSpec(name, i, args.cluster) for i in range(1, args.slaves + 1))
    spec = ClusterSpec(
        namesrv_count=args.namesrvs, brokers=brokers, profile=args.profile, namespace=args.namespace,
        data_dir=args.data_dir, detached=True, namesrv_port=args.namesrv_port, listen_host=args.listen_host,
        controller=args.slaves > 0 and not args.no_controller, proxy_count=args.proxies or 0,
        proxy_port=args.proxy_port, proxy_mode=args.proxy_mode,
    )
    spec.console, spec.console_port = args.console, args.console_port
    spec.broker_overrides.update(replication_overrides(args.slaves, args.broker_role))
    if args.acl is not None:
        namesrv_acl, broker_acl = acl_overrides(args.acl)
        spec.namesrv_overrides.update(namesrv_acl)
        spec.broker_overrides.update(broker_acl)
        spec.proxy_overrides.update(broker_acl)  # the proxies check clients, sign their own reads with it
    spread = args.pin_brokers or args.spread_namesrvs
    per_node = args.proxies is None  # one proxy on each node (Ray Serve's placement), however many that is
    if spread or per_node:
        try:
            nodes = wait_for_nodes(wait_nodes if spread else 1, args.wait_timeout)
        except TimeoutError as e:
            raise CLIError(str(e)) from None
        spread_over_nodes(spec, nodes, brokers=args.pin_brokers, namesrvs=args.spread_namesrvs, proxies=per_node)
        for b in spec.brokers:
            print(f"{b.addr} pinned to node {b.node_id}")
        for name in spec.namesrv_names:
            if spec.namesrv_node_id(name):
                print(f"{name} placed on node {spec.namesrv_node_id(name)} (soft)")
        for i in range(spec.proxy_count if per_node else 0):
            print(f"{proxy_actor_name(i)} placed on node {spec.proxy_node_id(i)} (soft)")
    dep = deploy(spec)
    print(f"deployed {len(dep.namesrvs)} NameServers and {len(dep.brokers)} brokers "
          f"(profile {args.profile}) in Ray namespace {args.namespace!r}")
    print(f"namesrvAddr: {dep.namesrv_addr()}")
    for name, endpoint in sorted(dep.proxy_endpoints.items()):
        print(f"{name}: RocketMQ 5 gRPC endpoint {endpoint}")
    if dep.console_url:
        print(f"console: {dep.console_url}")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    status = _admin(args).status()
    if args.json:
        print(json.dumps(status, indent=2, sort_keys=True, default=str))
        return 0
    ns_rows: list[tuple[object, ...]] = []
    for name, s in sorted(status["namesrvs"].items()):
        if "error" in s:
            ns_rows.append((name, "UNREACHABLE " + s["error"], "", "", "", ""))
        else:
            state = "ready" if s["ready"] else "NOT READY"
            ns_rows.append((name, state, len(s["brokers"]), s["topics"], s["route_seq"],
                            s.get("remoting_address") or "-"))
    print(table(("namesrv", "state", "brokers", "topics", "route seq", "remoting address"), ns_rows))
    addrs = [s.get("remoting_address") for _, s in sorted(status["namesrvs"].items()) if s.get("remoting_address")]
    if addrs:
        print(f"namesrvAddr: {';'.join(addrs)}")
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
            brows.append((addr, "UNREACHABLE " + info["error"], "", "", "", "", "", ""))
        else:
            replica = info.get("replica") or {}
            brows.append((addr, f"pid {info['pid']}", info["topics"], sum(info["queues"].values()),
                          info["data_version"]["counter"], info.get("broker_role", "-"),
                          replica.get("masterEpoch", "-") if replica.get("controller_mode") else "-",
                          _replication(info)))
    print()
    print(table(("broker", "process", "topics", "messages", "data version", "role", "epoch", "replication"), brows))
    prows = [(name, "UNREACHABLE " + p["error"], "", "", "", "") if "error" in p else
             (name, p["endpoint"], f"pid {p['pid']}", p["sent"], p["telemetry_sessions"],
              "off" if p.get("acl_refused") is None else p["acl_refused"])
             for name, p in sorted(status.get("proxies", {}).items())]
    if prows:
        print()
        print(table(("proxy", "gRPC endpoint", "process", "sent", "telemetry streams", "ACL refused"), prows))
    console = status.get("console")
    print()
    print(f"console: {console['url'] or 'not answering'}" if console else
          "console: none (`namesrv console` starts one)")
    return 0


def _replication(info: dict[str, Any]) -> str:
    """A broker's replication in a few words: a slave's lag, a master's SyncStateSet and slave lags."""
    ha = info.get("ha") or {}
    if ha.get("role") == "SLAVE":
        return f"lag {ha['lag_bytes']} B" + ("" if ha.get("reachable") else ", master unreachable")
    lags = ha.get("slave_lag_bytes") or {}
    if not lags:
        return "-"
    return f"in sync {ha['sync_state_set']}, lag " + ", ".join(f"{s}: {b} B" for s, b in sorted(lags.items()))


def cmd_route(args: argparse.Namespace) -> int:
    from clients.admin.brokers import MQAdminError

    try:
        routes = _admin(args).routes_everywhere(args.topic)
    except MQAdminError as e:
        raise CLIError(str(e)) from None
    if all(route is None for route in routes.values()):
        raise CLIError(f"topic {args.topic!r} has no route on any NameServer ({', '.join(sorted(routes))}): "
                       f"create it with `namesrv topic {args.topic}`")
    for name, route in routes.items():
        print(f"-- {name}")
        print(route_table(args.topic, route))
    return 0


def _broker_label(actor_name: str, addr: str) -> str:
    """`broker-a-0 (127.0.0.1:10911)` for a broker serving TCP, its actor name for a Ray-only one."""
    return actor_name if actor_name == addr else f"{actor_name} ({addr})"


def cmd_topic(args: argparse.Namespace) -> int:
    from clients.admin.brokers import MQAdminError

    admin = _admin(args)
    try:
        if args.delete:
            admin.delete_topic(args.topic, args.cluster)
            print(f"deleted {args.topic}")
        else:
            outcomes = admin.create_topic(args.topic, args.cluster, args.queues, args.queues)
            where = [_broker_label(admin.dep.broker_specs[addr].actor_name, addr) for addr in sorted(outcomes)]
            print(f"created {args.topic} on {', '.join(where)} with {args.queues} queues each")
    except MQAdminError as e:
        raise CLIError(str(e)) from None
    return 0


def cmd_restart_broker(args: argparse.Namespace) -> int:
    """Restart a broker (dead or alive) on its node with its store, as the deployment recorded it."""
    from actors.deployment.launcher import BrokerRestartError

    dep = connect_deployment(args)
    try:
        addr = dep.addr_of(args.broker)
        handle = dep.restart_broker(addr, start_empty=args.start_empty)
    except KeyError:
        known = ", ".join(sorted(s.actor_name for s in dep.broker_specs.values())) or "none"
        raise CLIError(f"no broker {args.broker!r} in namespace {args.namespace!r} (known: {known})") from None
    except BrokerRestartError as e:
        raise CLIError(str(e)) from None
    import ray

    info = ray.get(handle.get_runtime_info.remote(), timeout=30)
    print(f"restarted {_broker_label(info['actor_name'], info['broker_addr'])} on node {info['node_id']}: "
          f"recovered {info['recovered_messages']} messages from {info['store_dir']}")
    return 0


def _stop_ray() -> None:
    import ray

    ray.shutdown()  # this driver lets go first, so nothing of it waits on a stopping cluster
    stopped = _run_ray("stop")
    if stopped.returncode != 0:
        raise CLIError(f"`ray stop` failed: {_last_line(stopped.stderr or stopped.stdout)}")
    print("ray stopped (every Ray on this machine)")


def cmd_down(args: argparse.Namespace) -> int:
    """Stop the namespace's brokers and NameServers; with --stop-ray also stop Ray, even when the
    namespace held nothing or no Ray answered (then the exit is still non-zero, saying so)."""
    problem: CLIError | None = None
    try:
        dep = connect_deployment(args)
    except CLIError as e:
        if not args.stop_ray:
            raise
        problem = e
    else:
        n_ns, n_b = len(dep.namesrvs), len(dep.brokers)
        dep.teardown(graceful=True)
        print(f"stopped {n_b} brokers and {n_ns} NameServers in namespace {args.namespace!r}")
    if args.stop_ray:
        _stop_ray()
    if problem is not None:
        raise problem
    return 0


def _common(p: argparse.ArgumentParser, address_default: str | None = "auto") -> None:
    p.add_argument("--address", default=address_default,
                   help=f"Ray cluster address (default: {address_default or 'start a local Ray'})")
    p.add_argument("--namespace", default=DEFAULT_NAMESPACE, help="Ray namespace of the actors")


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "up", help="deploy NameServers and brokers as detached actors",
        description="Deploy NameServers and brokers as detached actors. Without --address, starts a local "
                    "`ray start --head` (unless a Ray runs on this machine already); stop it with "
                    f"`namesrv down --stop-ray` ({RAY_STOP_CAVEAT}).",
    )
    _common(p, address_default=None)
    p.add_argument("--namesrvs", type=int_in(1, 64), default=2, help="number of NameServers (default 2)")
    p.add_argument("--brokers", type=broker_names_arg, default="broker-a,broker-b,broker-c",
                   help="comma-separated broker names (default broker-a,broker-b,broker-c)")
    p.add_argument("--slaves", type=int_in(0, 16), default=0,
                   help="slaves per broker group, each replicating its master's log (default 0)")
    p.add_argument("--brokerRole", "--broker-role", dest="broker_role", choices=("SYNC_MASTER", "ASYNC_MASTER"),
                   default=None, help="masters' role: SYNC_MASTER acknowledges a send once its in-sync slaves "
                                      "hold it (default with --slaves), ASYNC_MASTER at once (default without)")
    p.add_argument("--no-controller", action="store_true",
                   help="with --slaves: no controller; roles stay as deployed (brokerId 0 master) and a dead "
                        "master is not replaced (RocketMQ 4's master/slave). By default --slaves starts the "
                        "controller and brokers run in controller mode: a slave takes over a dead master")
    p.add_argument("--cluster", type=cluster_arg, default="DefaultCluster")
    p.add_argument("--profile", default="default", choices=("default", "fast"))
    p.add_argument("--acl", metavar="FILE", default=None,
                   help="turn RocketMQ's plain ACL on with this plain_acl.yml (reloaded when it changes); "
                        "brokers register with its first `broker: true` account; admin commands then sign "
                        "with NAMESRV_ACCESS_KEY / NAMESRV_SECRET_KEY")
    p.add_argument("--console", action=argparse.BooleanOptionalAction, default=True,
                   help="start the web console (default on; its URL is printed; --no-console to skip it)")
    p.add_argument("--console-port", type=int_in(0, 65535), default=0,
                   help="the console's port on 127.0.0.1 (default 0: a free port)")
    p.add_argument("--data-dir", default="~/namesrv-data", help="where brokers and NameServers keep files")
    p.add_argument("--namesrv-port", type=int, default=9876,
                   help="NameServer i serves RocketMQ's remoting protocol on this port + i (default 9876)")
    p.add_argument("--listen-host", default="127.0.0.1",
                   help="where the TCP servers listen: 127.0.0.1 (default, this machine only) or 0.0.0.0 "
                        "(a multi-node cluster: clients on other hosts)")
    p.add_argument("--proxies", type=int_in(0, 64), default=None,
                   help="RocketMQ 5 gRPC proxies for the official 5.x clients (docs/proxy.md); by default one on "
                        "each Ray node (placed softly, as Ray Serve places its proxies); 0 starts none")
    p.add_argument("--proxy-port", type=int, default=8081,
                   help="proxy i serves gRPC on this port + i (default 8081; 0 takes free ports)")
    p.add_argument("--proxy-mode", choices=("cluster", "local"), default="cluster",
                   help="local: every broker also serves gRPC itself on its port + 2 (RocketMQ 5's local mode: "
                        "no hop through a proxy actor); cluster (default): only the --proxies proxy actors")
    p.add_argument("--pin-brokers", action="store_true",
                   help="pin each broker to a node, round-robin over alive nodes (workers first), so a "
                        "restart finds its store on the same disk")
    p.add_argument("--spread-namesrvs", action="store_true",
                   help="place NameServers round-robin over alive nodes (soft: one whose node dies restarts elsewhere)")
    p.add_argument("--wait-nodes", type=wait_nodes_arg, default=1,
                   help="with --pin-brokers/--spread-namesrvs: wait until this many Ray nodes are alive (default 1); "
                        "`launcher` on a head `ray up` started: the head and every worker its config starts "
                        "(with the local provider, each of worker_ips)")
    p.add_argument("--wait-timeout", type=float, default=600.0, help="seconds to wait for --wait-nodes (default 600)")
    p.set_defaults(func=cmd_up)

    p = sub.add_parser("status", help="NameServers, brokers, liveness and topics")
    _common(p)
    p.add_argument("--json", action="store_true",
                   help="print the whole status as JSON (each broker's role, masterEpoch, replication lag)")
    p.set_defaults(func=cmd_status)

    p = sub.add_parser("route", help="alias of topicRoute: a topic's route on every NameServer (exit 1 when none "
                                     "has one)")
    _common(p)
    p.add_argument("topic", type=topic_arg)
    p.set_defaults(func=cmd_route)

    p = sub.add_parser("topic", help="alias of updateTopic / deleteTopic: create a topic on every master broker "
                                     "of a cluster (or delete it)")
    _common(p)
    p.add_argument("topic", type=topic_arg)
    p.add_argument("--cluster", type=cluster_arg, default=None, help="only this cluster's brokers (default all)")
    p.add_argument("--queues", type=queue_count_arg, default=8,
                   help="read and write queues per broker, 1 to 1024 (default 8)")
    p.add_argument("--delete", action="store_true", help="delete it from the brokers, then from every NameServer")
    p.set_defaults(func=cmd_topic)

    p = sub.add_parser(
        "restart-broker", help="restart a broker on its node with its store (refuses to start it empty)",
        description="Restart a broker (by actor name, e.g. broker-a-0, or address) with the name, node, port and "
                    "store the deployment recorded. Refuses when its node is dead or holds no store of it, unless "
                    "--start-empty.",
    )
    _common(p)
    p.add_argument("broker", help="actor name (broker-a-0) or address")
    p.add_argument("--start-empty", action="store_true",
                   help="start it even without its store (its messages are lost; on another node if its node is dead)")
    p.set_defaults(func=cmd_restart_broker)

    p = sub.add_parser(
        "down", help="gracefully stop every broker and NameServer of the namespace",
        description="Gracefully stop every broker and NameServer of the namespace (brokers unregister first).",
    )
    _common(p)
    p.add_argument("--stop-ray", action="store_true",
                   help=f"then run `ray stop`, even when the namespace is empty ({RAY_STOP_CAVEAT})")
    p.set_defaults(func=cmd_down)
