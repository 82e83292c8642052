"""mqadmin's topic verbs: topicList, topicRoute, updateTopic, deleteTopic, and the shapes they print."""

from __future__ import annotations

import argparse

from pydantic import ValidationError

from clients.admin.brokers import MQAdminError
from clients.cli.mqadmin.args import bool_arg, new_topic_arg, perm_arg
from clients.cli.mqadmin.common import admin_of, check_broker_known, emit_json, require_all
from clients.cli.mqadmin.verb import one_of, option, sub_command
from clients.cli.render import table
from clients.cli.support import CLIError, cluster_arg, queue_count_arg, topic_arg
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


@sub_command("topicList", "list every topic the NameServer knows",
             option("-c", "--clusterModel", dest="cluster_model", action="store_true",
                    help="a table of each topic's cluster"))
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


@sub_command("topicRoute", "a topic's route (JSON; -l a table)",
             option("-t", "--topic", required=True, type=topic_arg),
             option("-l", "--list", action="store_true", help="print a table"))
def cmd_topic_route(args: argparse.Namespace) -> int:
    with admin_of(args) as admin:
        route = admin.examine_topic_route_info(args.topic)
    if args.list and not args.json:
        print(route_list_table(route))
    else:
        emit_json(route.to_wire())
    return 0


@sub_command("updateTopic", "create or update a topic on a broker or on every master of a cluster",
             one_of(option("-b", "--brokerAddr", dest="broker_addr", help="create on this broker (host:port)"),
                    option("-c", "--clusterName", dest="cluster", type=cluster_arg,
                           help="create on this cluster's masters")),
             option("-t", "--topic", required=True, type=new_topic_arg),
             option("-r", "--readQueueNums", dest="read_queue_nums", type=queue_count_arg, default=8),
             option("-w", "--writeQueueNums", dest="write_queue_nums", type=queue_count_arg, default=8),
             option("-p", "--perm", type=perm_arg, default=6, help="2 (W), 4 (R) or 6 (RW, default)"),
             option("-o", "--order", type=bool_arg, default=False, help="true|false (default false)"))
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


@sub_command("deleteTopic", "delete a topic from a cluster's brokers, then from every NameServer",
             option("-t", "--topic", required=True, type=new_topic_arg),
             option("-c", "--clusterName", dest="cluster", required=True, type=cluster_arg))
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
