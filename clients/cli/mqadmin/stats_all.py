"""mqadmin statsAll: per topic and consumer group, the backlog (GET_CONSUME_STATS), put and get TPS
over the last minute and 24-hour counts (VIEW_BROKER_STATS_DATA), summed over the topic's masters
as RocketMQ's StatsAllSubCommand does."""

from __future__ import annotations

import argparse
from typing import Any

from clients.admin.brokers import MQAdminError
from clients.admin.client import DefaultMQAdminExt
from clients.cli.mqadmin.common import admin_of, emit_json
from clients.cli.mqadmin.stats import masters_of_topic
from clients.cli.mqadmin.verb import option, sub_command
from clients.cli.support import topic_arg
from namesrv.broker.stats_items import GROUP_GET_NUMS, TOPIC_PUT_NUMS
from namesrv.protocol.constants import DLQ_GROUP_TOPIC_PREFIX, RETRY_GROUP_TOPIC_PREFIX

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
    masters = masters_of_topic(admin, topic)
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


@sub_command("statsAll", "per topic and consumer group: backlog, in/out TPS over the last minute and 24-hour "
             "counts (VIEW_BROKER_STATS_DATA, GET_CONSUME_STATS)",
             option("-a", "--activeTopic", dest="active", action="store_true", help="only topics with traffic"),
             option("-t", "--topic", type=topic_arg, default=None, help="only this topic"))
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
