"""mqadmin's message verbs: queryMsgById (VIEW_MESSAGE_BY_ID on the broker the offset message id
names), queryMsgByKey and queryMsgByUniqueKey (QUERY_MESSAGE on every broker group of the topic's
route), in mqadmin's shapes.

Where they differ from RocketMQ 5.3's tools: the body is printed (`Message Body:`, UTF-8 with bad
bytes replaced) instead of being written to a file under /tmp/rocketmq/msgbodys; there is no message
track (which consumer groups consumed it) nor resend by a producer (-s). queryMsgById takes
offset message ids, and with -t a client message id too (as RocketMQ 5's viewMessage).

`queryMsgById -i ID -g GROUP -d CLIENT_ID` pushes each message to that client of the group
(CONSUME_MESSAGE_DIRECTLY): its listener runs once on it, nothing is committed, and the result is
printed as RocketMQ prints it (`ConsumeMessageDirectlyResult [order=..., consumeResult=CR_SUCCESS,
...]`). RocketMQ's tool first asks the client's running info and refuses a client that is not a push
consumer; here the client's own answer says so (a lite pull consumer answers "The Consumer Group
<group> not exist in this consumer"), one request fewer.
"""

from __future__ import annotations

import argparse
import datetime
from typing import Any

from clients.admin.client import DefaultMQAdminExt
from clients.admin.messages import FOREVER
from clients.cli.mqadmin.common import admin_of, emit_json
from clients.cli.mqadmin.verb import option, sub_command
from clients.cli.support import CLIError, int_in, topic_arg
from namesrv.protocol.message.codec import decode_offset_msg_id
from namesrv.protocol.message.decoder import MessageExt
from namesrv.protocol.types import InvalidInput

FIELD = "{:<20} {}"


def human_time(ms: int) -> str:
    """UtilAll.timeMillisToHumanString2: `2024-05-01 12:00:00,123`, local time."""
    t = datetime.datetime.fromtimestamp(ms / 1000)
    return f"{t:%Y-%m-%d %H:%M:%S},{ms % 1000:03d}"


def java_map(props: dict[str, str]) -> str:
    """A Java HashMap's toString (`{a=1, b=2}`), keys sorted (Java's order is its hash order)."""
    return "{" + ", ".join(f"{k}={v}" for k, v in sorted(props.items())) + "}"


def message_json(m: MessageExt) -> dict[str, Any]:
    return {"offsetMsgId": m.msg_id, "uniqueKey": m.unique_key, "topic": m.topic, "tags": m.tags, "keys": m.keys,
            "queueId": m.queue_id, "queueOffset": m.queue_offset, "commitLogOffset": m.commit_log_offset,
            "reconsumeTimes": m.reconsume_times, "bornTimestamp": m.born_timestamp,
            "storeTimestamp": m.store_timestamp, "bornHost": m.born_host, "storeHost": m.store_host,
            "sysFlag": m.sys_flag, "properties": m.properties, "body": m.body.decode("utf-8", "replace")}


def message_text(m: MessageExt, first: tuple[str, str]) -> str:
    """printMsg / showMessage: one `label value` line per field (`first`: OffsetID or Message ID)."""
    rows = [first, ("Topic:", m.topic), ("Tags:", f"[{m.tags or 'null'}]"),
            ("Keys:", f"[{' '.join(m.keys) or 'null'}]"), ("Queue ID:", m.queue_id), ("Queue Offset:", m.queue_offset),
            ("CommitLog Offset:", m.commit_log_offset), ("Reconsume Times:", m.reconsume_times),
            ("Born Timestamp:", human_time(m.born_timestamp)), ("Store Timestamp:", human_time(m.store_timestamp)),
            ("Born Host:", m.born_host), ("Store Host:", m.store_host), ("System Flag:", m.sys_flag),
            ("Properties:", java_map(m.properties)), ("Message Body:", m.body.decode("utf-8", "replace"))]
    return "\n".join(FIELD.format(label, value) for label, value in rows)


def _by_id(admin: DefaultMQAdminExt, msg_id: str, topic: str | None) -> MessageExt:
    """An offset message id, or with a topic a client message id (as RocketMQ 5's viewMessage:
    a string that is not an offset id is looked up as a unique key)."""
    try:
        decode_offset_msg_id(msg_id)
    except InvalidInput:
        if topic is None:
            raise CLIError(f"{msg_id!r} is not an offset message id (32 hex digits); "
                           "give -t TOPIC to look it up as a client message id") from None
        found = sorted(admin.query_message(topic, msg_id, 32, 0, FOREVER, unique_key=True).message_list,
                       key=lambda m: m.store_timestamp)
        if not found:
            raise CLIError(f"no message of topic {topic!r} has the message id {msg_id!r}") from None
        return found[0]
    return admin.view_message(msg_id)


@sub_command("queryMsgById", "a message by its offset message id (VIEW_MESSAGE_BY_ID)",
             option("-i", "--msgId", dest="msg_id", required=True, help="offset message id(s), comma-separated"),
             option("-t", "--topic", type=topic_arg, default=None,
                    help="look an id that is not an offset message id up as a client message id in this topic"),
             option("-g", "--consumerGroup", dest="group", default=None,
                    help="with -d: push the message to this group's client (CONSUME_MESSAGE_DIRECTLY)"),
             option("-d", "--clientId", dest="client_id", default=None,
                    help="with -g: the client whose listener runs once on the message"))
def cmd_query_msg_by_id(args: argparse.Namespace) -> int:
    ids = [msg_id.strip() for msg_id in args.msg_id.split(",") if msg_id.strip()]
    if not ids:
        raise CLIError("no message id given")
    if (args.group is None) != (args.client_id is None):
        raise CLIError("give both -g CONSUMER_GROUP and -d CLIENT_ID to push a message to a client")
    if args.group is not None:
        return _push_to_client(args, ids)
    with admin_of(args) as admin:
        found = [_by_id(admin, msg_id, args.topic) for msg_id in ids]
    if args.json:
        emit_json([message_json(m) for m in found])
    else:
        print("\n\n".join(message_text(m, ("OffsetID:", m.msg_id)) for m in found))
    return 0


def _push_to_client(args: argparse.Namespace, ids: list[str]) -> int:
    """QueryMsgByIdSubCommand.pushMsg: each message to the client, its result printed."""
    with admin_of(args) as admin:
        results = [(msg_id, admin.consume_message_directly(args.group, args.client_id, msg_id, args.topic))
                   for msg_id in ids]
    if args.json:
        emit_json([{"msgId": msg_id} | result.to_wire() for msg_id, result in results])
    else:
        print("\n".join(result.to_string() for _, result in results))
    return 0


@sub_command("queryMsgByKey", "a topic's messages by key (QUERY_MESSAGE)",
             option("-t", "--topic", required=True, type=topic_arg),
             option("-k", "--msgKey", dest="key", required=True, help="the message key (one of its KEYS)"),
             option("-b", "--beginTimestamp", dest="begin", type=int, default=0, help="ms, default 0"),
             option("-e", "--endTimestamp", dest="end", type=int, default=FOREVER, help="ms, default Long.MAX_VALUE"),
             option("-m", "--maxNum", dest="max_num", type=int_in(1), default=64,
                    help="messages per broker at most (default 64)"))
def cmd_query_msg_by_key(args: argparse.Namespace) -> int:
    if args.begin > args.end:
        raise CLIError(f"begin timestamp {args.begin} is after end timestamp {args.end}")
    with admin_of(args) as admin:
        result = admin.query_message(args.topic, args.key, args.max_num, args.begin, args.end)
    if args.json:
        emit_json({"indexLastUpdateTimestamp": result.index_last_update_timestamp,
                   "messages": [message_json(m) for m in result.message_list]})
        return 0
    print(f"{'#Message ID':<50} {'#QID':>4} {'#Offset':>40}")
    for m in result.message_list:
        print(f"{m.msg_id:<50} {m.queue_id:>4} {m.queue_offset:>40}")
    return 0


@sub_command("queryMsgByUniqueKey", "a message by its client message id (QUERY_MESSAGE, unique key)",
             option("-t", "--topic", required=True, type=topic_arg),
             option("-i", "--msgId", dest="msg_id", required=True, help="the client message id (UNIQ_KEY)"),
             option("-a", "--showAll", dest="show_all", action="store_true", help="every match (at most 32)"))
def cmd_query_msg_by_unique_key(args: argparse.Namespace) -> int:
    with admin_of(args) as admin:
        result = admin.query_message(args.topic, args.msg_id, 32, 0, FOREVER, unique_key=True)
    found = sorted(result.message_list, key=lambda m: m.store_timestamp)
    if not found:
        raise CLIError(f"no message of topic {args.topic!r} has the unique key {args.msg_id!r}")
    shown = found if args.show_all else found[:1]
    if args.json:
        emit_json([message_json(m) for m in shown])
    else:
        print("\n\n".join(message_text(m, ("Message ID:", m.unique_key)) for m in shown))
    return 0
