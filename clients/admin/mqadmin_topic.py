"""mqadmin's topic verbs: topicList, topicRoute, updateTopic, deleteTopic, and the shapes they print."""

from __future__ import annotations

import argparse

from pydantic import ValidationError

from clients.admin.client_brokers import MQAdminError
from clients.admin.mqadmin_common import admin_of, check_broker_known, emit_json, require_all
from clients.cli_support import CLIError
from clients.render import table
from namesrv.protocol.constants import perm_to_string
from namesrv.protocol.models import TopicConfig, TopicRouteData
from namesrv.protocol.types import describe_errors


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
        require_all(replies, f"deleting topic {args.topic} from the NameServers")
    if args.json:
        emit_json({"topic": args.topic, "cluster": args.cluster, "brokers": masters, "namesrvs": sorted(replies)})
    else:
        print(f"delete topic [{args.topic}] from NameServer success.")
    return 0
