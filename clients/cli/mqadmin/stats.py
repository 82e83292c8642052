"""mqadmin's query verbs over the brokers: topicStatus, topicClusterList, consumerProgress,
consumerConnection and getBrokerConfig, in mqadmin's columns (GET_TOPIC_STATS_INFO,
GET_CONSUME_STATS, GET_CONSUMER_CONNECTION_LIST, GET_BROKER_CONFIG on each broker that matters);
statsAll lives in `mqadmin_stats_all`."""

from __future__ import annotations

import argparse
import time
from typing import Any

from clients.admin.brokers import MQAdminError
from clients.admin.client import DefaultMQAdminExt
from clients.cli.mqadmin.args import group_arg
from clients.cli.mqadmin.common import (
    admin_of,
    emit_json,
    target_broker_addrs,
)
from clients.cli.mqadmin.verb import one_of, option, sub_command
from clients.cli.render import table
from clients.cli.support import CLIError, cluster_arg, topic_arg
from namesrv.protocol.admin_bodies import ConsumerConnection, ConsumeStats
from namesrv.protocol.constants import MASTER_ID, RETRY_GROUP_TOPIC_PREFIX


def _time(ms: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ms / 1000)) if ms > 0 else ""


def masters_of_topic(admin: DefaultMQAdminExt, topic: str) -> list[str]:
    route = admin.examine_topic_route_info(topic)
    return sorted(addr for bd in route.broker_datas if (addr := bd.broker_addrs.get(MASTER_ID)) is not None)


@sub_command("topicStatus", "each queue's min and max offset and last store time on every master "
             "(GET_TOPIC_STATS_INFO)",
             option("-t", "--topic", required=True, type=topic_arg))
def cmd_topic_status(args: argparse.Namespace) -> int:
    """Every queue of the topic on every master of its route: min and max offset, last store time."""
    with admin_of(args) as admin:
        stats = {addr: admin.examine_topic_stats(addr, args.topic) for addr in masters_of_topic(admin, args.topic)}
    rows = sorted((mq.broker_name, mq.queue_id, o.min_offset, o.max_offset, o.last_update_timestamp)
                  for s in stats.values() for mq, o in s.offset_table.items())
    if args.json:
        emit_json([dict(zip(("brokerName", "queueId", "minOffset", "maxOffset", "lastUpdateTimestamp"), r,
                            strict=True)) for r in rows])
    else:
        print(table(("#Broker Name", "#QID", "#Min Offset", "#Max Offset", "#Last Updated"),
                    [(*r[:4], _time(r[4])) for r in rows]))
    return 0


@sub_command("topicClusterList", "the clusters a topic is on",
             option("-t", "--topic", required=True, type=topic_arg))
def cmd_topic_cluster_list(args: argparse.Namespace) -> int:
    """The clusters the topic's brokers belong to."""
    with admin_of(args) as admin:
        route = admin.examine_topic_route_info(args.topic)
    clusters = sorted({bd.cluster for bd in route.broker_datas})
    if args.json:
        emit_json({"clusters": clusters})
    else:
        print("\n".join(clusters))
    return 0


def group_masters(admin: DefaultMQAdminExt, group: str) -> list[str]:
    """The masters a group can consume on: those of its retry topic's route (as mqadmin finds them)."""
    try:
        return masters_of_topic(admin, RETRY_GROUP_TOPIC_PREFIX + group)
    except MQAdminError:
        raise CLIError(f"consumer group {group!r} has no retry topic route: it never consumed here") from None


def _merged_consume_stats(admin: DefaultMQAdminExt, group: str, topic: str | None) -> ConsumeStats:
    merged = ConsumeStats()
    for addr in group_masters(admin, group):
        stats = admin.examine_consume_stats(addr, group, topic)
        merged.offset_table.update(stats.offset_table)
        merged.consume_tps += stats.consume_tps
    return merged


def _first_connection(admin: DefaultMQAdminExt, group: str) -> ConsumerConnection | None:
    for addr in group_masters(admin, group):
        try:
            return admin.examine_consumer_connection_info(addr, group)
        except MQAdminError:  # not online on this broker: ask the next
            continue
    return None


def version_desc(ordinal: int) -> str:
    """MQVersion.getVersionDesc from 4.0.0 on: from V4_0_0_SNAPSHOT (ordinal 212) the enum holds a
    SNAPSHOT and a release per x.y.z up to V5_9_9 (611), then HIGHER_VERSION; an older client's
    version is shown as its ordinal."""
    if ordinal > 611:
        return "HIGHER_VERSION"
    if ordinal < 212:
        return f"V3 ({ordinal})"
    k, release = divmod(ordinal - 212, 2)
    return f"V{4 + k // 100}_{k // 10 % 10}_{k % 10}" + ("" if release else "_SNAPSHOT")


def _groups_overview(admin: DefaultMQAdminExt) -> list[dict[str, Any]]:
    """consumerProgress without -g: every group with a retry topic, its clients and backlog."""
    rows = []
    groups = sorted(t[len(RETRY_GROUP_TOPIC_PREFIX):] for t in admin.fetch_all_topic_list()
                    if t.startswith(RETRY_GROUP_TOPIC_PREFIX))
    for group in groups:
        try:
            stats: ConsumeStats | None = _merged_consume_stats(admin, group, None)
        except (MQAdminError, CLIError):
            stats = None
        try:
            conn = _first_connection(admin, group)
        except CLIError:
            conn = None
        count = len(conn.connection_set) if conn is not None else 0
        push = conn is not None and conn.consume_type == "CONSUME_PASSIVELY"
        rows.append({"group": group, "count": count,
                     "version": version_desc(min(c.version for c in conn.connection_set))
                     if conn is not None and count else "OFFLINE",
                     "type": ("PUSH" if push else "PULL") if count else "",
                     "model": conn.message_model if conn is not None and count and push else "",
                     "tps": int(stats.consume_tps) if stats else 0, "diffTotal": stats.diff_total() if stats else 0})
    return rows


@sub_command("consumerProgress", "a consumer group's offsets against each queue's, and its backlog "
             "(GET_CONSUME_STATS)",
             option("-g", "--groupName", dest="group", type=group_arg, default=None,
                    help="this group's queues (default: one line per group)"),
             option("-t", "--topicName", dest="topic", type=topic_arg, default=None, help="with -g: only this topic"))
def cmd_consumer_progress(args: argparse.Namespace) -> int:
    """A group's committed offset against each queue's max offset, and the total it is behind;
    without -g one line per consumer group (its clients, version, type, model, TPS, backlog)."""
    if args.group is None:
        with admin_of(args) as admin:
            overview = _groups_overview(admin)
        if args.json:
            emit_json(overview)
        else:
            print(table(("#Group", "#Count", "#Version", "#Type", "#Model", "#TPS", "#Diff Total"),
                        [tuple(r.values()) for r in overview]))
        return 0
    with admin_of(args) as admin:
        merged = _merged_consume_stats(admin, args.group, args.topic)
    rows = sorted((mq.topic, mq.broker_name, mq.queue_id, o.broker_offset, o.consumer_offset,
                   o.broker_offset - o.consumer_offset, o.last_timestamp) for mq, o in merged.offset_table.items())
    if args.json:
        emit_json({"consumeTps": merged.consume_tps, "diffTotal": merged.diff_total(), "queues": [
            dict(zip(("topic", "brokerName", "queueId", "brokerOffset", "consumerOffset", "diff", "lastTimestamp"),
                     r, strict=True)) for r in rows]})
    else:
        print(table(("#Topic", "#Broker Name", "#QID", "#Broker Offset", "#Consumer Offset", "#Diff", "#LastTime"),
                    [(*r[:6], _time(r[6])) for r in rows]))
        print(f"\nConsume TPS: {merged.consume_tps:.2f}\nDiff Total: {merged.diff_total()}")
    return 0


@sub_command("consumerConnection", "a consumer group's clients and subscriptions (GET_CONSUMER_CONNECTION_LIST)",
             option("-g", "--consumerGroup", dest="group", required=True, type=group_arg))
def cmd_consumer_connection(args: argparse.Namespace) -> int:
    """Who is in the group: each client's id, address, language and version, and what it subscribes."""
    with admin_of(args) as admin:
        conn = _first_connection(admin, args.group)
    if conn is None:
        raise CLIError(f"consumer group {args.group!r} is not online")
    if args.json:
        emit_json(conn.to_wire())
        return 0
    print(table(("#ClientId", "#ClientAddr", "#Language", "#Version"),
                sorted((c.client_id, c.client_addr, c.language, c.version) for c in conn.connection_set)))
    print("\nBelow is subscription:")
    print(table(("#Topic", "#SubExpression"), sorted((t, str(s.get("subString", ""))) for t, s in
                                                      conn.subscription_table.items())))
    print(f"\nConsumeType: {conn.consume_type}\nMessageModel: {conn.message_model}\n"
          f"ConsumeFromWhere: {conn.consume_from_where}")
    return 0


@sub_command("getBrokerConfig", "every setting of a broker or of a cluster's masters (GET_BROKER_CONFIG)",
             one_of(option("-b", "--brokerAddr", dest="broker_addr", help="this broker (host:port)"),
                    option("-c", "--clusterName", dest="cluster", type=cluster_arg,
                           help="every master of this cluster")))
def cmd_get_broker_config(args: argparse.Namespace) -> int:
    """Every setting of a broker (-b) or of each broker of a cluster (-c), `key = value` as mqadmin."""
    with admin_of(args) as admin:
        addrs = target_broker_addrs(admin, args)
        configs = {addr: admin.get_broker_config(addr) for addr in addrs}
    if args.json:
        emit_json(configs)
        return 0
    for addr, config in configs.items():
        print(f"============{addr}============")
        for key in sorted(config):
            print(f"{key:<50}=  {config[key]}")
    return 0

