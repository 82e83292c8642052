"""RocketMQ's mqadmin verbs as `namesrv` subcommands, under mqadmin's names and option letters.

Each reaches the cluster one of two ways: `-n "127.0.0.1:9876;127.0.0.1:9877"` speaks RocketMQ's
remoting protocol to those NameServers (and, for updateTopic/deleteTopic, to the brokers' TCP
addresses from the cluster info), as mqadmin does; without -n, the actors of a Ray namespace
(`--namespace NS [--address auto]`). Output is mqadmin's shape as tables; `--json` for scripts.

Every argument is checked before anything connects; an unknown topic, cluster or broker is found
before anything changes. A problem is one line on stderr and a non-zero exit.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from pydantic import ValidationError

from clients.admin.mqadmin_ext import MQAdminError, MQAdminExt
from clients.admin.transport import Reply
from clients.cli_support import CLIError, cluster_arg, env_credentials, positive_float, queue_count_arg, topic_arg
from clients.render import table
from namesrv.protocol.constants import SYSTEM_TOPICS, perm_to_string
from namesrv.protocol.headers import KVConfigHeader
from namesrv.protocol.models import ClusterInfo, TopicConfig, TopicRouteData
from namesrv.protocol.types import InvalidInput, check_name, describe_errors

log = logging.getLogger(__name__)

DEFAULT_NAMESPACE = "namesrv"
PERMS = {"2": 2, "4": 4, "6": 6}


# ---------------------------------------------------------------------------- argument types
def namesrv_addr_arg(value: str) -> str:
    """argparse type: RocketMQ's namesrvAddr, `host:port;host:port`."""
    from namesrv.remoting.client import parse_namesrv_addr

    try:
        parse_namesrv_addr(value)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return value


def perm_arg(value: str) -> int:
    """argparse type: a topic's permission as mqadmin takes it, 2 (W), 4 (R) or 6 (RW)."""
    if value.strip() not in PERMS:
        raise argparse.ArgumentTypeError(f"{value!r} is not a topic permission: 2 (W), 4 (R) or 6 (RW)")
    return PERMS[value.strip()]


def bool_arg(value: str) -> bool:
    if value.strip().lower() not in ("true", "false"):
        raise argparse.ArgumentTypeError(f"{value!r} is not true or false")
    return value.strip().lower() == "true"


def broker_name_arg(value: str) -> str:
    try:
        return check_name(value, "broker name")
    except InvalidInput as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def new_topic_arg(value: str) -> str:
    """A topic name one may create or delete: valid, and not one of RocketMQ's system topics."""
    topic = topic_arg(value)
    if topic in SYSTEM_TOPICS:
        raise argparse.ArgumentTypeError(f"{topic!r} is a system topic (the brokers refuse to change it)")
    return topic


# ---------------------------------------------------------------------------- connecting and output
@contextmanager
def admin_of(args: argparse.Namespace) -> Iterator[MQAdminExt]:
    """Over TCP with -n, else over the Ray namespace's actors."""
    from clients.admin.transport import AdminTransport, RayTransport

    transport: AdminTransport
    if args.namesrv_addr:
        from clients.admin.tcp_admin import TcpTransport

        transport = TcpTransport(args.namesrv_addr, args.timeout, env_credentials())
    else:
        from clients.admin.cli import _connect

        transport = RayTransport(_connect(args), args.timeout, env_credentials())
    try:
        yield MQAdminExt(transport)
    except MQAdminError as e:
        raise CLIError(str(e)) from None
    finally:
        transport.close()


def emit_json(obj: Any) -> None:
    print(json.dumps(obj, indent=2, sort_keys=True))


def _require_all(replies: dict[str, Reply], what: str) -> None:
    bad = MQAdminExt.failures(replies)
    if bad is not None:
        raise CLIError(f"{what} failed on {bad}")


def topic_config_text(tc: TopicConfig) -> str:
    """RocketMQ's TopicConfig.toString(), which mqadmin updateTopic prints."""
    return (f"TopicConfig [topicName={tc.topic_name}, readQueueNums={tc.read_queue_nums}, "
            f"writeQueueNums={tc.write_queue_nums}, perm={perm_to_string(tc.perm)}, "
            f"topicFilterType={tc.topic_filter_type}, topicSysFlag={tc.topic_sys_flag}, "
            f"order={str(tc.order).lower()}, attributes={{}}]")


def route_list_table(route: TopicRouteData) -> str:
    """topicRoute -l: one row per broker group, then the totals."""
    queues = {q.broker_name: q for q in route.queue_datas}
    rows: list[tuple[object, ...]] = []
    for bd in sorted(route.broker_datas, key=lambda b: b.broker_name):
        q = queues.get(bd.broker_name)
        addrs = "{" + ", ".join(f"{i}={a}" for i, a in sorted(bd.broker_addrs.items())) + "}"
        rows.append((bd.cluster, bd.broker_name, addrs, q.read_queue_nums if q else 0,
                     q.write_queue_nums if q else 0, q.perm if q else ""))
    rows.append(("Total:", len(queues), "", sum(q.read_queue_nums for q in queues.values()),
                 sum(q.write_queue_nums for q in queues.values()), ""))
    return table(("#ClusterName", "#BrokerName", "#BrokerAddrs", "#ReadQueue", "#WriteQueue", "#Perm"), rows)


# ---------------------------------------------------------------------------- verbs
def check_broker_known(info: ClusterInfo, broker_addr: str) -> str:
    known = MQAdminExt.broker_addrs(info)
    if broker_addr not in known:
        raise CLIError(f"no broker at {broker_addr!r} (brokers: {', '.join(sorted(known)) or 'none'})")
    return broker_addr


def check_cluster_known(info: ClusterInfo, cluster: str) -> str:
    if cluster not in info.cluster_addr_table:
        raise CLIError(f"no cluster {cluster!r} (clusters: {', '.join(sorted(info.cluster_addr_table)) or 'none'})")
    return cluster


CLUSTER_LIST_HEAD = ("#Cluster Name", "#Broker Name", "#BID", "#Addr", "#Version", "#InTPS(LOAD)", "#OutTPS(LOAD)",
                     "#Timer(Progress)", "#PCWait(ms)", "#Hour", "#SPACE", "#ACTIVATED")


def cluster_brokers(info: ClusterInfo, clusters: list[str]) -> list[tuple[str, str, int, str]]:
    """(cluster, broker name, broker id, address) of every broker of `clusters`, by name and id."""
    return [(c, name, bid, addr) for c in clusters for name in sorted(info.cluster_addr_table[c])
            if (bd := info.broker_addr_table.get(name)) is not None for bid, addr in sorted(bd.broker_addrs.items())]


def fetch_runtime_stats(admin: MQAdminExt, addrs: list[str]) -> dict[str, dict[str, str]]:
    """Each broker's runtime info; as mqadmin, a broker that cannot be asked is a warning and is left
    out, not an error that hides the others."""
    stats: dict[str, dict[str, str]] = {}
    for addr in addrs:
        try:
            stats[addr] = admin.fetch_broker_runtime_stats(addr)
        except MQAdminError as e:
            log.warning("%s", e)
    return stats


def runtime_columns(stats: dict[str, str], now_ms: int) -> tuple[str, ...]:
    """#Version ... #ACTIVATED as ClusterListSubCommand derives them from a broker's runtime info
    (its blanks and zeros when the broker could not be asked: `stats` empty)."""

    def number(key: str) -> float:
        """The value's first number (putTps holds three), 0 when blank or missing."""
        try:
            return float(stats.get(key, "").split(" ")[0])
        except ValueError:
            return 0.0

    earliest = int(number("earliestMessageTimeStamp"))  # -1: no message (RocketMQ would print ~500,000 hours)
    hour = (now_ms - earliest) / 3_600_000 if earliest > 0 else 0.0
    get = stats.get
    return (
        get("brokerVersionDesc", ""),
        f"{number('putTps'):.2f}({get('sendThreadPoolQueueSize', '')},"
        f"{get('sendThreadPoolQueueHeadWaitTimeMills', '')}ms)",
        f"{number('getTransferredTps'):.2f}({get('pullThreadPoolQueueSize', '')},"
        f"{get('pullThreadPoolQueueHeadWaitTimeMills', '')}ms|{get('ackThreadPoolQueueSize', 'N')},"
        f"{get('ackThreadPoolQueueHeadWaitTimeMills', 'N')}ms)",
        f"{int(number('timerReadBehind'))}-{int(number('timerOffsetBehind'))}"
        f"({number('timerCongestNum') / 10000:.1f}w, "
        f"{number('timerEnqueueTps'):.1f}, {number('timerDequeueTps'):.1f})",
        get("pageCacheLockTimeMills", ""),
        f"{hour:.2f}",
        f"{number('commitLogDiskRatio'):.4f}",
        get("brokerActive", "false"),
    )


def cmd_cluster_list(args: argparse.Namespace) -> int:
    with admin_of(args) as admin:
        info = admin.examine_broker_cluster_info()
        clusters = sorted(info.cluster_addr_table)
        if args.cluster is not None:
            clusters = [check_cluster_known(info, args.cluster)]
        brokers = cluster_brokers(info, clusters)
        stats = fetch_runtime_stats(admin, [addr for *_, addr in brokers])  # a missing one: listed with blanks
    if args.json:
        emit_json([{"cluster": c, "brokerName": n, "brokerId": i, "brokerAddr": a, "runtimeInfo": stats.get(a)}
                   for c, n, i, a in brokers])
    else:
        now_ms = int(time.time() * 1000)
        print(table(CLUSTER_LIST_HEAD, [(*b, *runtime_columns(stats.get(b[3], {}), now_ms)) for b in brokers]))
    return 0


def cmd_broker_status(args: argparse.Namespace) -> int:
    """Every key of one broker's runtime info (-b), or of each broker of a cluster (-c), sorted."""
    with admin_of(args) as admin:
        info = admin.examine_broker_cluster_info()
        if args.broker_addr is not None:
            check_broker_known(info, args.broker_addr)
            addrs = [args.broker_addr]
            tables = {args.broker_addr: admin.fetch_broker_runtime_stats(args.broker_addr)}
        else:
            addrs = sorted(addr for *_, addr in cluster_brokers(info, [check_cluster_known(info, args.cluster)]))
            tables = fetch_runtime_stats(admin, addrs)
    if args.json:
        emit_json(tables)
    else:
        for addr, kv in tables.items():
            for key in sorted(kv):
                print(f"{key:<32}: {kv[key]}" if args.broker_addr else f"{addr:<24} {key:<32}: {kv[key]}")
    return 0 if len(tables) == len(addrs) else 1


def cmd_topic_list(args: argparse.Namespace) -> int:
    with admin_of(args) as admin:
        topics = admin.fetch_all_topic_list()
        if not args.cluster_model:
            if args.json:
                emit_json({"topicList": topics})
            else:
                print("\n".join(topics))
            return 0
        info = admin.examine_broker_cluster_info()
        cluster_of = {name: c for c, names in info.cluster_addr_table.items() for name in names}
        rows = []
        for topic in topics:
            try:
                route = admin.examine_topic_route_info(topic)
            except MQAdminError:  # deleted between the two queries
                continue
            names = sorted(bd.broker_name for bd in route.broker_datas)
            rows.append((cluster_of.get(names[0], "") if names else "", topic))
    if args.json:
        emit_json([{"cluster": c, "topic": t} for c, t in rows])
    else:
        print(table(("#Cluster Name", "#Topic"), rows))
    return 0


def cmd_topic_route(args: argparse.Namespace) -> int:
    with admin_of(args) as admin:
        route = admin.examine_topic_route_info(args.topic)
    if args.list and not args.json:
        print(route_list_table(route))
    else:
        emit_json(route.to_wire())
    return 0


def cmd_update_topic(args: argparse.Namespace) -> int:
    try:
        tc = TopicConfig(topic_name=args.topic, read_queue_nums=args.read_queue_nums,
                         write_queue_nums=args.write_queue_nums, perm=args.perm, order=args.order)
    except ValidationError as e:
        raise CLIError(f"invalid topic config: {describe_errors(e)}") from None
    with admin_of(args) as admin:
        info = admin.examine_broker_cluster_info()
        if args.broker_addr is not None:
            check_broker_known(info, args.broker_addr)
            targets = [args.broker_addr]
        else:
            targets = admin.master_addrs_of_cluster(info, args.cluster)
        for addr in targets:
            admin.create_and_update_topic_config(addr, tc)
            if not args.json:
                print(f"create topic to {addr} success.")
    if args.json:
        emit_json({"topicConfig": tc.to_wire(), "brokers": targets})
    else:
        print(topic_config_text(tc))
    return 0


def cmd_delete_topic(args: argparse.Namespace) -> int:
    with admin_of(args) as admin:
        masters = admin.master_addrs_of_cluster(admin.examine_broker_cluster_info(), args.cluster)
        lists = admin.topic_lists()
        if not any(isinstance(topics, list) and args.topic in topics for topics in lists.values()):
            raise CLIError(f"topic {args.topic!r} does not exist on any NameServer of {admin.transport.where}")
        admin.delete_topic_in_broker(masters, args.topic)
        if not args.json:
            print(f"delete topic [{args.topic}] from cluster [{args.cluster}] success.")
        replies = admin.delete_topic_in_namesrv(args.cluster, args.topic)
        _require_all(replies, f"deleting topic {args.topic} from the NameServers")
    if args.json:
        emit_json({"topic": args.topic, "cluster": args.cluster, "brokers": masters, "namesrvs": sorted(replies)})
    else:
        print(f"delete topic [{args.topic}] from NameServer success.")
    return 0


def _kv_header(namespace: str, key: str, value: str | None = None) -> KVConfigHeader:
    try:
        return KVConfigHeader(namespace=namespace, key=key, value=value)
    except ValidationError as e:
        raise CLIError(f"invalid KV config: {describe_errors(e)}") from None


def cmd_update_kv_config(args: argparse.Namespace) -> int:
    h = _kv_header(args.kv_namespace, args.key, args.value)
    with admin_of(args) as admin:
        replies = admin.create_and_update_kv_config(h.namespace, h.key, args.value)
    _require_all(replies, "updating the KV config")
    if args.json:
        emit_json({"namespace": h.namespace, "key": h.key, "value": args.value, "namesrvs": sorted(replies)})
    else:
        print("create or update kv config to namespace success.")
    return 0


def cmd_delete_kv_config(args: argparse.Namespace) -> int:
    from namesrv.protocol.codes import RequestCode

    h = _kv_header(args.kv_namespace, args.key)
    with admin_of(args) as admin:
        held = admin.each(RequestCode.GET_KV_CONFIG, {"namespace": h.namespace, "key": h.key})
        if not any(r.ok for r in held.values()):
            raise CLIError(f"no KV config {h.namespace}/{h.key} on any NameServer of {admin.transport.where}")
        replies = admin.delete_kv_config(h.namespace, h.key)
    _require_all(replies, "deleting the KV config")
    if args.json:
        emit_json({"namespace": h.namespace, "key": h.key, "namesrvs": sorted(replies)})
    else:
        print("delete kv config from namespace success.")
    return 0


def cmd_get_namesrv_config(args: argparse.Namespace) -> int:
    with admin_of(args) as admin:
        configs = admin.get_namesrv_config()
    good = {ns: c for ns, c in configs.items() if isinstance(c, dict)}
    if args.json:
        emit_json(good)
    else:
        for ns, config in good.items():
            print(f"============{ns}============")
            for key, value in sorted(config.items()):
                print(f"{key:<50}=  {value}")
    bad = {ns: c for ns, c in configs.items() if not isinstance(c, dict)}
    if bad:
        raise CLIError("no config from " + "; ".join(f"{ns}: {why}" for ns, why in bad.items()))
    return 0


def cmd_update_namesrv_config(args: argparse.Namespace) -> int:
    with admin_of(args) as admin:
        configs = admin.get_namesrv_config()
        known = next((c for c in configs.values() if isinstance(c, dict)), None)
        if known is None:
            raise CLIError("no NameServer gave its config: " + "; ".join(f"{ns}: {c}" for ns, c in configs.items()))
        if args.key not in known:
            raise CLIError(f"unknown NameServer config key {args.key!r} (see `namesrv getNamesrvConfig`)")
        replies = admin.update_namesrv_config({args.key: args.value})
    _require_all(replies, f"updating {args.key}")
    if args.json:
        emit_json({"key": args.key, "value": args.value, "namesrvs": sorted(replies)})
    else:
        print(f"update name server config success![{', '.join(sorted(replies))}]\n{args.key} : {args.value}")
    return 0


def _write_perm(args: argparse.Namespace, wipe: bool) -> int:
    verb, field = ("wipe", "wipeTopicCount") if wipe else ("add", "addTopicCount")
    with admin_of(args) as admin:
        info = admin.examine_broker_cluster_info()
        if args.broker_name not in info.broker_addr_table:
            known = ", ".join(sorted(info.broker_addr_table)) or "none"
            raise CLIError(f"no broker named {args.broker_name!r} (brokers: {known})")
        op = admin.wipe_write_perm_of_broker if wipe else admin.add_write_perm_of_broker
        replies = op(args.broker_name)
    counts = {ns: int(r.ext.get(field, 0)) for ns, r in replies.items() if r.ok}
    if args.json:
        emit_json({"brokerName": args.broker_name, field: counts})
    else:
        for ns, r in replies.items():
            outcome = f"OK, {counts[ns]}" if r.ok else "Failed"
            print(f"{verb} write perm of broker[{args.broker_name}] in name server[{ns}] {outcome}")
    _require_all(replies, f"{verb} write perm of broker {args.broker_name}")
    return 0


# ---------------------------------------------------------------------------- parsers
def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("-n", "--namesrvAddr", dest="namesrv_addr", type=namesrv_addr_arg, default=None,
                   help='NameServers over TCP, RocketMQ\'s form: "127.0.0.1:9876;127.0.0.1:9877" '
                        "(default: the actors of --namespace)")
    p.add_argument("--namespace", default=DEFAULT_NAMESPACE, help="without -n: Ray namespace of the actors")
    p.add_argument("--address", default="auto", help="without -n: Ray cluster address (default: auto)")
    p.add_argument("--timeout", type=positive_float, default=3.0, help="seconds to wait for each server (default 3)")
    p.add_argument("--json", action="store_true", help="print JSON for scripts")


Handler = Callable[[argparse.Namespace], int]


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    def verb(name: str, help_: str, func: Handler) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=f"mqadmin: {help_}", description=f"{help_} (mqadmin {name})")
        _common(p)
        p.set_defaults(func=func)
        return p

    p = verb("clusterList", "list the clusters' brokers with their runtime figures (GET_BROKER_RUNTIME_INFO)",
             cmd_cluster_list)
    p.add_argument("-c", "--clusterName", dest="cluster", type=cluster_arg, help="only this cluster")

    p = verb("brokerStatus", "a broker's runtime figures, every key (GET_BROKER_RUNTIME_INFO)", cmd_broker_status)
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("-b", "--brokerAddr", dest="broker_addr", help="this broker (host:port)")
    which.add_argument("-c", "--clusterName", dest="cluster", type=cluster_arg, help="every broker of this cluster")

    p = verb("topicList", "list every topic the NameServer knows", cmd_topic_list)
    p.add_argument("-c", "--clusterModel", dest="cluster_model", action="store_true",
                   help="a table of each topic's cluster")

    p = verb("topicRoute", "a topic's route (JSON; -l a table)", cmd_topic_route)
    p.add_argument("-t", "--topic", required=True, type=topic_arg)
    p.add_argument("-l", "--list", action="store_true", help="print a table")

    p = verb("updateTopic", "create or update a topic on a broker or on every master of a cluster", cmd_update_topic)
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("-b", "--brokerAddr", dest="broker_addr", help="create on this broker (host:port)")
    where.add_argument("-c", "--clusterName", dest="cluster", type=cluster_arg, help="create on this cluster's masters")
    p.add_argument("-t", "--topic", required=True, type=new_topic_arg)
    p.add_argument("-r", "--readQueueNums", dest="read_queue_nums", type=queue_count_arg, default=8)
    p.add_argument("-w", "--writeQueueNums", dest="write_queue_nums", type=queue_count_arg, default=8)
    p.add_argument("-p", "--perm", type=perm_arg, default=6, help="2 (W), 4 (R) or 6 (RW, default)")
    p.add_argument("-o", "--order", type=bool_arg, default=False, help="true|false (default false)")

    p = verb("deleteTopic", "delete a topic from a cluster's brokers, then from every NameServer", cmd_delete_topic)
    p.add_argument("-t", "--topic", required=True, type=new_topic_arg)
    p.add_argument("-c", "--clusterName", dest="cluster", required=True, type=cluster_arg)

    p = verb("updateKvConfig", "create or update a KV config on every NameServer", cmd_update_kv_config)
    p.add_argument("-s", "--kvNamespace", dest="kv_namespace", required=True,
                   help="the KV namespace (mqadmin's -s)")
    p.add_argument("-k", "--key", required=True)
    p.add_argument("-v", "--value", required=True)

    p = verb("deleteKvConfig", "delete a KV config from every NameServer", cmd_delete_kv_config)
    p.add_argument("-s", "--kvNamespace", dest="kv_namespace", required=True,
                   help="the KV namespace (mqadmin's -s)")
    p.add_argument("-k", "--key", required=True)

    verb("getNamesrvConfig", "every NameServer's config", cmd_get_namesrv_config)

    p = verb("updateNamesrvConfig", "change one config key on every NameServer", cmd_update_namesrv_config)
    p.add_argument("-k", "--key", required=True)
    p.add_argument("-v", "--value", required=True)

    p = verb("wipeWritePerm", "take write permission from a broker on every NameServer",
             lambda a: _write_perm(a, wipe=True))
    p.add_argument("-b", "--brokerName", dest="broker_name", required=True, type=broker_name_arg)

    p = verb("addWritePerm", "give write permission back to a broker on every NameServer",
             lambda a: _write_perm(a, wipe=False))
    p.add_argument("-b", "--brokerName", dest="broker_name", required=True, type=broker_name_arg)
