"""RocketMQ's mqadmin verbs as `namesrv` subcommands, under mqadmin's names and option letters: the
argument types and the parsers; the verbs live by family in `mqadmin_cluster`, `mqadmin_topic`,
`mqadmin_stats`, `mqadmin_stats_all`, `mqadmin_consumer`, `mqadmin_message` and `mqadmin_namesrv`,
all on the one admin client (`clients.admin.client.DefaultMQAdminExt`). The older `namesrv route` / `namesrv topic`
(clients.admin.cli) are aliases on that same client.

Each reaches the cluster one of two ways: `-n "127.0.0.1:9876;127.0.0.1:9877"` speaks RocketMQ's
remoting protocol to those NameServers (and, for updateTopic/deleteTopic, to the brokers' TCP
addresses from the cluster info), as mqadmin does; without -n, the actors of a Ray namespace
(`--namespace NS [--address auto]`). Output is mqadmin's shape as tables; `--json` for scripts.

Every argument is checked before anything connects; an unknown topic, cluster or broker is found
before anything changes. A problem is one line on stderr and a non-zero exit.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from clients.admin.mqadmin_cluster import cmd_broker_status, cmd_cluster_list, cmd_update_broker_config
from clients.admin.mqadmin_consumer import cmd_consumer_status
from clients.admin.mqadmin_message import add_message_verbs
from clients.admin.mqadmin_namesrv import (
    cmd_delete_kv_config,
    cmd_get_namesrv_config,
    cmd_update_kv_config,
    cmd_update_namesrv_config,
    write_perm,
)
from clients.admin.mqadmin_stats import (
    cmd_consumer_connection,
    cmd_consumer_progress,
    cmd_get_broker_config,
    cmd_topic_cluster_list,
    cmd_topic_status,
)
from clients.admin.mqadmin_stats_all import cmd_stats_all
from clients.admin.mqadmin_topic import cmd_delete_topic, cmd_topic_list, cmd_topic_route, cmd_update_topic
from clients.cli_support import cluster_arg, positive_float, queue_count_arg, topic_arg
from namesrv.protocol.constants import SYSTEM_TOPICS
from namesrv.protocol.types import InvalidInput, check_name

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


def group_arg(value: str) -> str:
    try:
        return check_name(value, "consumer group")
    except InvalidInput as e:
        raise argparse.ArgumentTypeError(str(e)) from None


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


# ---------------------------------------------------------------------------- parsers
def _common(p: argparse.ArgumentParser, timeout: float = 3.0) -> None:
    p.add_argument("-n", "--namesrvAddr", dest="namesrv_addr", type=namesrv_addr_arg, default=None,
                   help='NameServers over TCP, RocketMQ\'s form: "127.0.0.1:9876;127.0.0.1:9877" '
                        "(default: the actors of --namespace)")
    p.add_argument("--namespace", default=DEFAULT_NAMESPACE, help="without -n: Ray namespace of the actors")
    p.add_argument("--address", default="auto", help="without -n: Ray cluster address (default: auto)")
    p.add_argument("--timeout", type=positive_float, default=timeout,
                   help=f"seconds to wait for each server (default {timeout:g})")
    p.add_argument("--json", action="store_true", help="print JSON for scripts")


Handler = Callable[[argparse.Namespace], int]


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    def verb(name: str, help_: str, func: Handler, timeout: float = 3.0) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=f"mqadmin: {help_}", description=f"{help_} (mqadmin {name})")
        _common(p, timeout)
        p.set_defaults(func=func)
        return p

    p = verb("clusterList", "list the clusters' brokers with their runtime figures (GET_BROKER_RUNTIME_INFO)",
             cmd_cluster_list)
    p.add_argument("-c", "--clusterName", dest="cluster", type=cluster_arg, help="only this cluster")

    p = verb("brokerStatus", "a broker's runtime figures, every key (GET_BROKER_RUNTIME_INFO)", cmd_broker_status)
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("-b", "--brokerAddr", dest="broker_addr", help="this broker (host:port)")
    which.add_argument("-c", "--clusterName", dest="cluster", type=cluster_arg, help="every broker of this cluster")

    p = verb("topicStatus", "each queue's min and max offset and last store time on every master "
             "(GET_TOPIC_STATS_INFO)", cmd_topic_status)
    p.add_argument("-t", "--topic", required=True, type=topic_arg)

    p = verb("topicClusterList", "the clusters a topic is on", cmd_topic_cluster_list)
    p.add_argument("-t", "--topic", required=True, type=topic_arg)

    p = verb("consumerProgress", "a consumer group's offsets against each queue's, and its backlog "
             "(GET_CONSUME_STATS)", cmd_consumer_progress)
    p.add_argument("-g", "--groupName", dest="group", type=group_arg, default=None,
                   help="this group's queues (default: one line per group)")
    p.add_argument("-t", "--topicName", dest="topic", type=topic_arg, default=None, help="with -g: only this topic")

    p = verb("consumerConnection", "a consumer group's clients and subscriptions (GET_CONSUMER_CONNECTION_LIST)",
             cmd_consumer_connection)
    p.add_argument("-g", "--consumerGroup", dest="group", required=True, type=group_arg)

    p = verb("consumerStatus", "what a group's consumers say about themselves, asked through a broker "
             "(GET_CONSUMER_RUNNING_INFO); -i one client in full", cmd_consumer_status,
             timeout=15.0)  # as mqadmin (3 x 5 s): past the broker's 10 s wait for the client
    p.add_argument("-g", "--consumerGroup", dest="group", required=True, type=group_arg)
    p.add_argument("-i", "--clientId", dest="client_id", default=None, help="only this client, in full")
    p.add_argument("-b", "--brokerAddr", dest="broker_addr", default=None,
                   help="ask through this broker (default: the group's masters)")
    p.add_argument("-s", "--jstack", action="store_true", help="ask the client for its thread dump too")

    p = verb("getBrokerConfig", "every setting of a broker or of a cluster's masters (GET_BROKER_CONFIG)",
             cmd_get_broker_config)
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("-b", "--brokerAddr", dest="broker_addr", help="this broker (host:port)")
    which.add_argument("-c", "--clusterName", dest="cluster", type=cluster_arg, help="every master of this cluster")

    p = verb("updateBrokerConfig", "change one config key on a running broker or on a cluster's masters "
             "(UPDATE_BROKER_CONFIG: brokerPermission and the retention settings)", cmd_update_broker_config)
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("-b", "--brokerAddr", dest="broker_addr", help="this broker (host:port)")
    which.add_argument("-c", "--clusterName", dest="cluster", type=cluster_arg, help="every master of this cluster")
    p.add_argument("-k", "--key", required=True, help="RocketMQ's key, e.g. fileReservedTime, deleteWhen")
    p.add_argument("-v", "--value", required=True)

    p = verb("statsAll", "per topic and consumer group: backlog, in/out TPS over the last minute and 24-hour "
             "counts (VIEW_BROKER_STATS_DATA, GET_CONSUME_STATS)", cmd_stats_all)
    p.add_argument("-a", "--activeTopic", dest="active", action="store_true", help="only topics with traffic")
    p.add_argument("-t", "--topic", type=topic_arg, default=None, help="only this topic")

    add_message_verbs(verb, topic_arg)

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
             lambda a: write_perm(a, wipe=True))
    p.add_argument("-b", "--brokerName", dest="broker_name", required=True, type=broker_name_arg)

    p = verb("addWritePerm", "give write permission back to a broker on every NameServer",
             lambda a: write_perm(a, wipe=False))
    p.add_argument("-b", "--brokerName", dest="broker_name", required=True, type=broker_name_arg)
