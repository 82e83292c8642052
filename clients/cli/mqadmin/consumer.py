"""mqadmin consumerStatus: what a group's consumers say about themselves (GET_CONSUMER_RUNNING_INFO,
which the broker hands on to each client over the client's own connection; a Ray-native consumer
is answered for from its latest heartbeat).

With -i: that client's ConsumerRunningInfo in RocketMQ's text (formatString). Without -i: one line
per client of the group (its id, version and how many queues it holds), then RocketMQ's checks
(same subscription everywhere, queues a push consumer has not consumed for a minute). Where it
differs from RocketMQ 5.3's ConsumerStatusSubCommand: without -i it writes no file per client
(RocketMQ writes `<now>/<clientId>`), and a client that cannot answer is shown with its error in
place of being left out. The broker asked is -b, else the first master of the group's retry topic
that has the client online.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from clients.admin.brokers import MQAdminError
from clients.admin.client import DefaultMQAdminExt
from clients.cli.mqadmin.args import group_arg
from clients.cli.mqadmin.common import admin_of, emit_json
from clients.cli.mqadmin.stats import group_masters, version_desc
from clients.cli.mqadmin.verb import option, sub_command
from clients.cli.render import table
from clients.cli.support import CLIError
from namesrv.protocol.admin_bodies import ConsumerConnection
from namesrv.protocol.models import MessageQueue
from namesrv.protocol.running_info import (
    PROP_CONSUME_ORDERLY,
    PROP_CONSUME_TYPE,
    PROP_CONSUMER_START_TIMESTAMP,
    ConsumerRunningInfo,
)

NOT_ONLINE = "not online"


def _queue_order(item: tuple[MessageQueue, Any]) -> tuple[str, str, int]:
    return item[0].topic, item[0].broker_name, item[0].queue_id


def running_info_json(info: ConsumerRunningInfo) -> dict[str, Any]:
    """The running info as plain JSON (queues as a list: JSON has no object keys)."""
    wire = info.to_wire()
    for table_name in ("mqTable", "mqPopTable"):
        wire[table_name] = [{"messageQueue": mq.to_wire(), "processQueueInfo": pq}
                            for mq, pq in sorted(wire[table_name].items(), key=_queue_order)]
    return wire


def _ask(admin: DefaultMQAdminExt, brokers: list[str], group: str, client_id: str, jstack: bool) -> ConsumerRunningInfo:
    """From the first broker that has the client online (the last broker's refusal otherwise)."""
    last: MQAdminError | None = None
    for addr in brokers:
        try:
            return admin.get_consumer_running_info(addr, group, client_id, jstack)
        except MQAdminError as e:
            last = e
            if NOT_ONLINE not in str(e):
                break
    raise last if last is not None else MQAdminError(f"consumer group {group!r} has no broker to ask")


def _connection(admin: DefaultMQAdminExt, brokers: list[str], group: str) -> ConsumerConnection:
    for addr in brokers:
        try:
            return admin.examine_consumer_connection_info(addr, group)
        except MQAdminError:  # not online on this broker: ask the next
            continue
    raise CLIError(f"consumer group {group!r} is not online")


def _long(value: object) -> int:
    """A long of a process queue, as a number or (the C++ client writes them so) a string; 0 if neither."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    return int(value) if isinstance(value, str) and value.lstrip("-").isdigit() else 0


def _is_push(info: ConsumerRunningInfo) -> bool:
    return info.properties.get(PROP_CONSUME_TYPE) == "CONSUME_PASSIVELY"


def same_subscription(infos: dict[str, ConsumerRunningInfo], now_ms: int) -> bool:
    """RocketMQ's analyzeSubscription: push consumers started over two minutes ago subscribe alike."""
    first = next(iter(infos.values()))
    started = first.properties.get(PROP_CONSUMER_START_TIMESTAMP, "")
    if not (_is_push(first) and started.isdigit() and now_ms - int(started) > 120_000):
        return True
    key = sorted((str(s.get("topic")), str(s.get("subString"))) for s in first.subscription_set)
    return all(sorted((str(s.get("topic")), str(s.get("subString"))) for s in i.subscription_set) == key
               for i in infos.values())


def queue_warnings(client_id: str, info: ConsumerRunningInfo, now_ms: int) -> list[str]:
    """RocketMQ's analyzeProcessQueue: push queues not locked (orderly) or not consumed for a minute."""
    if not _is_push(info):
        return []
    orderly = info.properties.get(PROP_CONSUME_ORDERLY, "").lower() == "true"
    out = []
    for mq, pq in sorted(info.mq_table.items(), key=_queue_order):
        queue = f"MessageQueue [topic={mq.topic}, brokerName={mq.broker_name}, queueId={mq.queue_id}]"
        if orderly and pq.get("locked") is False:
            since = now_ms - _long(pq.get("lastLockTimestamp"))
            out.append(f"{client_id} {queue} can't lock for a while, {since}ms")
        elif not orderly and _long(pq.get("cachedMsgCount")) > 0 and _long(pq.get("lastConsumeTimestamp")) > 0:
            idle = now_ms - _long(pq.get("lastConsumeTimestamp"))
            if idle > 60_000:
                out.append(f"{client_id} {queue} can't consume for a while, maybe blocked, {idle}ms")
    return out


@sub_command("consumerStatus", "what a group's consumers say about themselves, asked through a broker "
             "(GET_CONSUMER_RUNNING_INFO); -i one client in full",
             option("-g", "--consumerGroup", dest="group", required=True, type=group_arg),
             option("-i", "--clientId", dest="client_id", default=None, help="only this client, in full"),
             option("-b", "--brokerAddr", dest="broker_addr", default=None,
                    help="ask through this broker (default: the group's masters)"),
             option("-s", "--jstack", action="store_true", help="ask the client for its thread dump too"),
             timeout=15.0)  # as mqadmin (3 x 5 s): past the broker's 10 s wait for the client
def cmd_consumer_status(args: argparse.Namespace) -> int:
    """Each client's own account of itself, asked through a broker; with -i one client in full."""
    with admin_of(args) as admin:
        brokers = [args.broker_addr] if args.broker_addr else group_masters(admin, args.group)
        if args.client_id:
            info = _ask(admin, brokers, args.group, args.client_id, args.jstack)
            if args.json:
                emit_json(running_info_json(info))
            else:
                print(info.format_string(), end="")
            return 0
        conn = _connection(admin, brokers, args.group)
        answers: dict[str, ConsumerRunningInfo | str] = {}
        for c in sorted(conn.connection_set, key=lambda c: c.client_id):
            try:
                answers[c.client_id] = _ask(admin, brokers, args.group, c.client_id, args.jstack)
            except MQAdminError as e:
                answers[c.client_id] = str(e)
    infos = {k: v for k, v in answers.items() if isinstance(v, ConsumerRunningInfo)}
    if args.json:
        emit_json({k: running_info_json(v) if isinstance(v, ConsumerRunningInfo) else {"error": v}
                   for k, v in answers.items()})
        return 0 if infos else 1
    versions = {c.client_id: version_desc(c.version) for c in conn.connection_set}
    print(table(("#Index", "#ClientId", "#Version", "#Queues"),
                [(i, k, versions[k], len(v.mq_table) if isinstance(v, ConsumerRunningInfo) else v)
                 for i, (k, v) in enumerate(answers.items(), 1)]))
    if infos:
        now = int(time.time() * 1000)
        if same_subscription(infos, now):
            print("\n\nSame subscription in the same group of consumer")
            print("\n\nRebalance OK")
            for k, v in infos.items():
                for line in queue_warnings(k, v, now):
                    print(line)
        else:
            print("\n\nWARN: Different subscription in the same group of consumer!!!")
    return 0 if infos else 1
