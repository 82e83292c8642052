"""mqadmin clusterList and brokerStatus: the clusters' brokers with the runtime figures each broker
reports (GET_BROKER_RUNTIME_INFO), in mqadmin's columns."""

from __future__ import annotations

import argparse
import logging
import time

from clients.admin.brokers import MQAdminError
from clients.admin.client import DefaultMQAdminExt
from clients.cli.mqadmin.common import (
    admin_of,
    check_broker_known,
    check_cluster_known,
    emit_json,
    target_broker_addrs,
)
from clients.cli.mqadmin.verb import one_of, option, sub_command
from clients.cli.render import table
from clients.cli.support import cluster_arg
from namesrv.protocol.models import ClusterInfo

log = logging.getLogger(__name__)

CLUSTER_LIST_HEAD = ("#Cluster Name", "#Broker Name", "#BID", "#Addr", "#Version", "#InTPS(LOAD)", "#OutTPS(LOAD)",
                     "#Timer(Progress)", "#PCWait(ms)", "#Hour", "#SPACE", "#ACTIVATED")


def cluster_brokers(info: ClusterInfo, clusters: list[str]) -> list[tuple[str, str, int, str]]:
    """(cluster, broker name, broker id, address) of every broker of `clusters`, by name and id."""
    return [(c, name, bid, addr) for c in clusters for name in sorted(info.cluster_addr_table[c])
            if (bd := info.broker_addr_table.get(name)) is not None for bid, addr in sorted(bd.broker_addrs.items())]


def fetch_runtime_stats(admin: DefaultMQAdminExt, addrs: list[str]) -> dict[str, dict[str, str]]:
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


@sub_command("clusterList", "list the clusters' brokers with their runtime figures (GET_BROKER_RUNTIME_INFO)",
             option("-c", "--clusterName", dest="cluster", type=cluster_arg, help="only this cluster"))
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


@sub_command("brokerStatus", "a broker's runtime figures, every key (GET_BROKER_RUNTIME_INFO)",
             one_of(option("-b", "--brokerAddr", dest="broker_addr", help="this broker (host:port)"),
                    option("-c", "--clusterName", dest="cluster", type=cluster_arg,
                           help="every broker of this cluster")))
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


@sub_command("updateBrokerConfig", "change one config key on a running broker or on a cluster's masters "
             "(UPDATE_BROKER_CONFIG: brokerPermission and the retention settings)",
             one_of(option("-b", "--brokerAddr", dest="broker_addr", help="this broker (host:port)"),
                    option("-c", "--clusterName", dest="cluster", type=cluster_arg,
                           help="every master of this cluster")),
             option("-k", "--key", required=True, help="RocketMQ's key, e.g. fileReservedTime, deleteWhen"),
             option("-v", "--value", required=True))
def cmd_update_broker_config(args: argparse.Namespace) -> int:
    """mqadmin updateBrokerConfig: one key on a broker (-b) or on every master of a cluster (-c);
    the broker checks key and value (a refusal is the broker's reason, and nothing changed)."""
    with admin_of(args) as admin:
        addrs = target_broker_addrs(admin, args)
        for addr in addrs:
            admin.update_broker_config(addr, {args.key: args.value})
    if args.json:
        emit_json({addr: {args.key: args.value} for addr in addrs})
        return 0
    for addr in addrs:
        print(f"update broker config success, {addr}")
    return 0
