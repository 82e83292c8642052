"""mqadmin's group verbs: updateSubGroup, deleteSubGroup (subscription-group configs on brokers),
producerConnection, and the offset operations resetOffsetByTime, skipAccumulatedMessage and
cloneGroupOffset, under mqadmin's names and option letters.

updateSubGroup builds the config as mqadmin does: RocketMQ's defaults except consumeBroadcastEnable
and consumeFromMinEnable, which mqadmin sets false unless -d / -m say otherwise; the config replaces
the group's on each broker. resetOffsetByTime asks every master of the topic's route
(INVOKE_BROKER_TO_RESET_OFFSET): a live group's members are told by their brokers and jump, a
stopped group's offsets are committed by the brokers themselves (where mqadmin, told
CONSUMER_NOT_ONLINE, commits them queue by queue). skipAccumulatedMessage is the same reset to each
queue's max offset. resetOffsetByTime -b BROKER -q QUEUE [-o OFFSET] moves that queue alone, to
OFFSET or to the offset at -s (RocketMQ 5's queueId and offset on INVOKE_BROKER_TO_RESET_OFFSET; the
broker commits it and tells the live members). Where this differs from RocketMQ 5.3: mqadmin ignores
-b without -q and commits with UPDATE_CONSUMER_OFFSET before the broker checks the offset's range,
and skips an offset of 0; here -b/-q/-o are checked first and 0 is an offset like any other.
"""

from __future__ import annotations

import argparse

from pydantic import ValidationError

from clients.admin.brokers import MQAdminError
from clients.admin.client import DefaultMQAdminExt
from clients.cli.mqadmin.args import bool_arg, subscription_group_arg, timestamp_arg
from clients.cli.mqadmin.common import admin_of, check_broker_known, emit_json
from clients.cli.mqadmin.stats import masters_of_topic, version_desc
from clients.cli.mqadmin.verb import one_of, option, sub_command
from clients.cli.render import table
from clients.cli.support import CLIError, cluster_arg, int_in, topic_arg
from namesrv.broker.subscription.config import MAX_RETRY_TIMES, SubscriptionGroupConfig
from namesrv.protocol.admin_bodies import Connection
from namesrv.protocol.constants import MAX_QUEUE_NUMS
from namesrv.protocol.models import MessageQueue
from namesrv.protocol.types import describe_errors


def _targets(admin: DefaultMQAdminExt, broker_addr: str | None, cluster: str | None) -> list[str]:
    info = admin.examine_broker_cluster_info()
    if broker_addr is not None:
        check_broker_known(info, broker_addr)
        return [broker_addr]
    assert cluster is not None
    return admin.master_addrs_of_cluster(info, cluster)


_WHERE = one_of(option("-b", "--brokerAddr", dest="broker_addr", help="on this broker (host:port)"),
                option("-c", "--clusterName", dest="cluster", type=cluster_arg, help="on this cluster's masters"))


@sub_command("updateSubGroup", "create or update a subscription group's config on a broker or on every master "
             "of a cluster (UPDATE_AND_CREATE_SUBSCRIPTIONGROUP)",
             _WHERE,
             option("-g", "--groupName", dest="group", required=True, type=subscription_group_arg),
             option("-s", "--consumeEnable", dest="consume_enable", type=bool_arg, default=True),
             option("-m", "--consumeFromMinEnable", dest="consume_from_min_enable", type=bool_arg, default=False),
             option("-d", "--consumeBroadcastEnable", dest="consume_broadcast_enable", type=bool_arg, default=False),
             option("-o", "--consumeMessageOrderly", dest="consume_message_orderly", type=bool_arg, default=False),
             option("-q", "--retryQueueNums", dest="retry_queue_nums", type=int_in(0, MAX_QUEUE_NUMS), default=1),
             option("-r", "--retryMaxTimes", dest="retry_max_times", type=int_in(0, MAX_RETRY_TIMES), default=16),
             option("-i", "--brokerId", dest="broker_id", type=int_in(0), default=0),
             option("-w", "--whichBrokerWhenConsumeSlowly", dest="which_broker_when_consume_slowly", type=int_in(0),
                    default=1),
             option("-a", "--notifyConsumerIdsChanged", dest="notify_consumer_ids_changed_enable", type=bool_arg,
                    default=True))
def cmd_update_sub_group(args: argparse.Namespace) -> int:
    try:
        config = SubscriptionGroupConfig(
            group_name=args.group, consume_enable=args.consume_enable,
            consume_from_min_enable=args.consume_from_min_enable,
            consume_broadcast_enable=args.consume_broadcast_enable,
            consume_message_orderly=args.consume_message_orderly, retry_queue_nums=args.retry_queue_nums,
            retry_max_times=args.retry_max_times, broker_id=args.broker_id,
            which_broker_when_consume_slowly=args.which_broker_when_consume_slowly,
            notify_consumer_ids_changed_enable=args.notify_consumer_ids_changed_enable)
    except ValidationError as e:
        raise CLIError(f"invalid subscription group config: {describe_errors(e)}") from None
    with admin_of(args) as admin:
        targets = _targets(admin, args.broker_addr, args.cluster)
        for addr in targets:
            admin.create_and_update_subscription_group_config(addr, config)
            if not args.json:
                print(f"create subscription group to {addr} success.")
    if args.json:
        emit_json({"subscriptionGroupConfig": config.to_wire(), "brokers": targets})
    else:
        print(config.to_wire())
    return 0


@sub_command("deleteSubGroup", "delete a subscription group's config from a broker or every master of a "
             "cluster (DELETE_SUBSCRIPTIONGROUP)",
             _WHERE,
             option("-g", "--groupName", dest="group", required=True, type=subscription_group_arg),
             option("-r", "--removeOffset", dest="remove_offset", type=bool_arg, default=False,
                    help="true: the group's committed offsets go too"))
def cmd_delete_sub_group(args: argparse.Namespace) -> int:
    with admin_of(args) as admin:
        targets = _targets(admin, args.broker_addr, args.cluster)
        for addr in targets:
            admin.delete_subscription_group(addr, args.group, args.remove_offset)
            if not args.json:
                print(f"delete subscription group [{args.group}] from broker [{addr}] success.")
    if args.json:
        emit_json({"group": args.group, "brokers": targets, "removeOffset": args.remove_offset})
    return 0


@sub_command("producerConnection", "a producer group's clients on the masters of a topic "
             "(GET_PRODUCER_CONNECTION_LIST)",
             option("-g", "--producerGroup", dest="group", required=True, type=subscription_group_arg),
             option("-t", "--topic", required=True, type=topic_arg))
def cmd_producer_connection(args: argparse.Namespace) -> int:
    with admin_of(args) as admin:
        seen: dict[tuple[str, str], Connection] = {}
        last_error = None
        for addr in masters_of_topic(admin, args.topic):
            try:
                conns = admin.examine_producer_connection_info(addr, args.group).connection_set
            except MQAdminError as e:  # not on this broker: ask the next
                last_error = e
                continue
            for c in conns:
                seen.setdefault((c.client_id, c.client_addr), c)
    if not seen:
        raise CLIError(f"producer group {args.group!r} is not online: {last_error}")
    conns = sorted(seen.values(), key=lambda c: (c.client_id, c.client_addr))
    if args.json:
        emit_json([c.to_wire() for c in conns])
    else:
        print(table(("#Index", "#ClientId", "#ClientAddr", "#Language", "#Version"),
                    [(f"{i:04d}", c.client_id, c.client_addr, c.language, version_desc(c.version))
                     for i, c in enumerate(conns, 1)]))
    return 0


def _reset(args: argparse.Namespace, timestamp: int) -> dict[MessageQueue, int]:
    with admin_of(args) as admin:
        offsets: dict[MessageQueue, int] = {}
        if getattr(args, "queue", None) is not None:  # resetOffsetByTime -b -q [-o]: one queue
            check_broker_known(admin.examine_broker_cluster_info(), args.broker_addr)
            return admin.reset_offset_of_queue(args.broker_addr, args.topic, args.group, args.queue, args.offset,
                                               timestamp).offset_table
        for addr in masters_of_topic(admin, args.topic):
            offsets.update(admin.reset_offset_by_timestamp(addr, args.topic, args.group, timestamp,
                                                           args.force).offset_table)
    return offsets


def _print_offsets(args: argparse.Namespace, timestamp: int, offsets: dict[MessageQueue, int]) -> None:
    rows = sorted((mq.broker_name, mq.queue_id, o) for mq, o in offsets.items())
    if args.json:
        emit_json({"group": args.group, "topic": args.topic, "timestamp": timestamp, "force": args.force,
                   "offsets": [dict(zip(("brokerName", "queueId", "offset"), r, strict=True)) for r in rows]})
        return
    print(f"reset consumer offset by specified, group[{args.group}], topic[{args.topic}], force[{args.force}], "
          f"timestamp(long)[{timestamp}]")
    print(table(("#brokerName", "#queueId", "#offset"), rows))


@sub_command("resetOffsetByTime", "reset a consumer group's offsets of a topic to a time, live or stopped "
             "(INVOKE_BROKER_TO_RESET_OFFSET)",
             option("-g", "--group", dest="group", required=True, type=subscription_group_arg),
             option("-t", "--topic", required=True, type=topic_arg),
             option("-s", "--timestamp", dest="timestamp", required=True, type=timestamp_arg,
                    help="now, milliseconds since 1970, or yyyy-MM-dd#HH:mm:ss:SSS (local time)"),
             option("-f", "--force", dest="force", type=bool_arg, default=True,
                    help="true (default): also move forward; false: only back"),
             option("-b", "--broker", dest="broker_addr", help="with -q: the broker (host:port) of the one queue"),
             option("-q", "--queue", dest="queue", type=int_in(0, MAX_QUEUE_NUMS - 1),
                    help="with -b: reset only this queue (forward or back)"),
             option("-o", "--offset", dest="offset", type=int_in(0, 2**63 - 1),
                    help="with -b and -q: the queue's new offset (default: the offset at -s)"),
             timeout=10.0)
def cmd_reset_offset_by_time(args: argparse.Namespace) -> int:
    if (args.broker_addr is None) != (args.queue is None) or (args.offset is not None and args.queue is None):
        raise CLIError("-b and -q name one queue and go together; -o (its offset) needs both")
    offsets = _reset(args, args.timestamp)
    _print_offsets(args, args.timestamp, offsets)
    return 0


@sub_command("skipAccumulatedMessage", "move a consumer group past every message of a topic not consumed yet "
             "(its offsets to each queue's max)",
             option("-g", "--group", dest="group", required=True, type=subscription_group_arg),
             option("-t", "--topic", required=True, type=topic_arg),
             option("-f", "--force", dest="force", type=bool_arg, default=True),
             timeout=10.0)
def cmd_skip_accumulated_message(args: argparse.Namespace) -> int:
    offsets = _reset(args, -1)
    _print_offsets(args, -1, offsets)
    return 0


@sub_command("cloneGroupOffset", "copy a consumer group's committed offsets of a topic to another group "
             "(CLONE_GROUP_OFFSET)",
             option("-s", "--srcGroup", dest="src_group", required=True, type=subscription_group_arg),
             option("-d", "--destGroup", dest="dest_group", required=True, type=subscription_group_arg),
             option("-t", "--topic", required=True, type=topic_arg),
             option("-o", "--offline", dest="offline", type=bool_arg, default=False,
                    help="true: the source group is offline (copy whatever it committed)"))
def cmd_clone_group_offset(args: argparse.Namespace) -> int:
    with admin_of(args) as admin:
        masters = masters_of_topic(admin, args.topic)
        for addr in masters:
            admin.clone_group_offset(addr, args.src_group, args.dest_group, args.topic, args.offline)
    if args.json:
        emit_json({"srcGroup": args.src_group, "destGroup": args.dest_group, "topic": args.topic,
                   "brokers": masters})
    else:
        print(f"clone group offset success. srcGroup[{args.src_group}], destGroup={args.dest_group}, "
              f"topic[{args.topic}]")
    return 0
