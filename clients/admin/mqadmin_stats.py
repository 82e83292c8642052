"""mqadmin's query verbs over the brokers: topicStatus, topicClusterList, consumerProgress,
consumerConnection, getBrokerConfig and statsAll, in mqadmin's columns (GET_TOPIC_STATS_INFO,
GET_CONSUME_STATS, GET_CONSUMER_CONNECTION_LIST, GET_BROKER_CONFIG, QUERY_TOPIC_CONSUME_BY_WHO and
VIEW_BROKER_STATS_DATA on each broker that matters)."""

from __future__ import annotations

import argparse
import time
from typing import Any

from clients.admin.client import DefaultMQAdminExt, MQAdminError
from clients.admin.mqadmin_common import admin_of, check_broker_known, check_cluster_known, emit_json
from clients.cli_support import CLIError
from clients.render import table
from namesrv.broker.stats_items import GROUP_GET_NUMS, TOPIC_PUT_NUMS
from namesrv.protocol.admin_bodies import ConsumerConnection, ConsumeStats
from namesrv.protocol.constants import DLQ_GROUP_TOPIC_PREFIX, MASTER_ID, RETRY_GROUP_TOPIC_PREFIX


def _time(ms: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ms / 1000)) if ms > 0 else ""


def _masters_of_topic(admin: DefaultMQAdminExt, topic: str) -> list[str]:
    route = admin.examine_topic_route_info(topic)
    return sorted(addr for bd in route.broker_datas if (addr := bd.broker_addrs.get(MASTER_ID)) is not None)


def cmd_topic_status(args: argparse.Namespace) -> int:
    """Every queue of the topic on every master of its route: min and max offset, last store time."""
    with admin_of(args) as admin:
        stats = {addr: admin.examine_topic_stats(addr, args.topic) for addr in _masters_of_topic(admin, args.topic)}
    rows = sorted((mq.broker_name, mq.queue_id, o.min_offset, o.max_offset, o.last_update_timestamp)
                  for s in stats.values() for mq, o in s.offset_table.items())
    if args.json:
        emit_json([dict(zip(("brokerName", "queueId", "minOffset", "maxOffset", "lastUpdateTimestamp"), r,
                            strict=True)) for r in rows])
    else:
        print(table(("#Broker Name", "#QID", "#Min Offset", "#Max Offset", "#Last Updated"),
                    [(*r[:4], _time(r[4])) for r in rows]))
    return 0


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


def _group_masters(admin: DefaultMQAdminExt, group: str) -> list[str]:
    """The masters a group can consume on: those of its retry topic's route (as mqadmin finds them)."""
    try:
        return _masters_of_topic(admin, RETRY_GROUP_TOPIC_PREFIX + group)
    except MQAdminError:
        raise CLIError(f"consumer group {group!r} has no retry topic route: it never consumed here") from None


def cmd_consumer_progress(args: argparse.Namespace) -> int:
    """A group's committed offset against each queue's max offset, and the total it is behind."""
    with admin_of(args) as admin:
        merged = ConsumeStats()
        for addr in _group_masters(admin, args.group):
            stats = admin.examine_consume_stats(addr, args.group, args.topic)
            merged.offset_table.update(stats.offset_table)
            merged.consume_tps += stats.consume_tps
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


def cmd_consumer_connection(args: argparse.Namespace) -> int:
    """Who is in the group: each client's id, address, language and version, and what it subscribes."""
    conn: ConsumerConnection | None = None
    with admin_of(args) as admin:
        for addr in _group_masters(admin, args.group):
            try:
                conn = admin.examine_consumer_connection_info(addr, args.group)
                break
            except MQAdminError:  # not online on this broker: ask the next
                continue
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


def cmd_get_broker_config(args: argparse.Namespace) -> int:
    """Every setting of a broker (-b) or of each broker of a cluster (-c), `key = value` as mqadmin."""
    with admin_of(args) as admin:
        info = admin.examine_broker_cluster_info()
        if args.broker_addr is not None:
            addrs = [check_broker_known(info, args.broker_addr)]
        else:
            addrs = DefaultMQAdminExt.master_addrs_of_cluster(info, check_cluster_known(info, args.cluster))
        configs = {addr: admin.get_broker_config(addr) for addr in addrs}
    if args.json:
        emit_json(configs)
        return 0
    for addr, config in configs.items():
        print(f"============{addr}============")
        for key in sorted(config):
            print(f"{key:<50}=  {config[key]}")
    return 0


STATS_ALL_HEAD = ("#Topic", "#Consumer Group", "#Accumulation", "#InTPS", "#OutTPS", "#InMsg24Hour", "#OutMsg24Hour")


def _sum_24h(data: dict[str, Any] | None) -> int:
    """StatsAllSubCommand.compute24HourSum: the day's sum, else the hour's, else the minute's."""
    for window in ("statsDay", "statsHour", "statsMinute"):
        total = int((data or {}).get(window, {}).get("sum", 0))
        if total:
            return total
    return 0


def _tps(data: dict[str, Any] | None) -> float:
    return float((data or {}).get("statsMinute", {}).get("tps", 0.0))


def _topic_stats_rows(admin: DefaultMQAdminExt, topic: str) -> list[dict[str, Any]]:
    """One row per consumer group of the topic (or one with no group), as printTopicDetail sums
    them over the topic's masters: VIEW_BROKER_STATS_DATA for the TPS and 24-hour counts,
    GET_CONSUME_STATS for the backlog."""
    masters = _masters_of_topic(admin, topic)
    puts = [admin.view_broker_stats_data(addr, TOPIC_PUT_NUMS, topic) for addr in masters]
    in_tps, in_24h = sum(map(_tps, puts)), sum(map(_sum_24h, puts))
    groups: set[str] = set()
    for addr in masters:
        groups.update(admin.query_topic_consume_by_who(addr, topic).group_list)
    rows: list[dict[str, Any]] = []
    for group in sorted(groups):
        gets = [admin.view_broker_stats_data(addr, GROUP_GET_NUMS, f"{topic}@{group}") for addr in masters]
        backlog = 0
        for addr in masters:
            try:
                backlog += admin.examine_consume_stats(addr, group, topic).diff_total()
            except MQAdminError:  # as RocketMQ: a group without stats on a broker adds nothing
                continue
        rows.append({"topic": topic, "group": group, "accumulation": max(0, backlog), "inTps": in_tps,
                     "outTps": sum(map(_tps, gets)), "inMsg24Hour": in_24h, "outMsg24Hour": sum(map(_sum_24h, gets))})
    return rows or [{"topic": topic, "group": None, "accumulation": 0, "inTps": in_tps, "outTps": None,
                     "inMsg24Hour": in_24h, "outMsg24Hour": None}]


def cmd_stats_all(args: argparse.Namespace) -> int:
    """Per topic (and consumer group): backlog, put and get TPS over the last minute, 24-hour counts.
    Retry and DLQ topics are skipped; -a keeps only topics with traffic in the last 24 hours."""
    rows: list[dict[str, Any]] = []
    with admin_of(args) as admin:
        topics = [args.topic] if args.topic else admin.fetch_all_topic_list()
        for topic in topics:
            if topic.startswith((RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX)):
                continue
            try:
                found = _topic_stats_rows(admin, topic)
            except MQAdminError:
                if args.topic:
                    raise
                continue  # as RocketMQ: a topic whose route or stats cannot be had is left out
            rows.extend(r for r in found if not args.active or r["inMsg24Hour"] or r["outMsg24Hour"])
    if args.json:
        emit_json(rows)
        return 0
    print(f"{STATS_ALL_HEAD[0]:<64}  {STATS_ALL_HEAD[1]:<64} {STATS_ALL_HEAD[2]:>12} {STATS_ALL_HEAD[3]:>11} "
          f"{STATS_ALL_HEAD[4]:>11} {STATS_ALL_HEAD[5]:>14} {STATS_ALL_HEAD[6]:>14}")
    for r in rows:
        out_tps = "" if r["outTps"] is None else f"{r['outTps']:.2f}"
        out_24h = "NO_CONSUMER" if r["outMsg24Hour"] is None else str(r["outMsg24Hour"])
        print(f"{r['topic']:<64}  {r['group'] or '':<64} {r['accumulation']:>12} {r['inTps']:>11.2f} {out_tps:>11} "
              f"{r['inMsg24Hour']:>14} {out_24h:>14}")
    return 0
