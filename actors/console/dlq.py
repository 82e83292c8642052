"""The messages page's dead letters: a consumer group's `%DLQ%<group>` topic, listed by store time,
and a dead letter resent to its group.

Listing: per queue of the DLQ topic (every broker of its route), the offset for the range's start
(SEARCH_OFFSET_BY_TIMESTAMP), then PULL_MESSAGE in batches of 32 — as the group, no suspend, no
offset commit — until the range's end or `DLQ_PAGE` messages (rocketmq-dashboard's
queryDlqMessageByConsumerGroup reads the same way, with a pull consumer, by time range).

Resend (the decision, see docs/console.md): rocketmq-dashboard's resendDlqMessage only asks a live
client of the group to run its listener on the message (CONSUME_MESSAGE_DIRECTLY): nothing is stored,
it needs a member online and one that answers 309, and the outcome is only shown. An operator who
"resends a dead letter to its group" expects the group to get it again, durably, and no other group
to see it: so the console stores a copy in the group's retry topic `%RETRY%<group>` (the broker
creates it on a retry's first send, as it does for send-backs), with the same body, flag, keys, tags,
client message id and user properties, RETRY_TOPIC naming the original topic (the group's consumers
hand it to the listener as that topic) and its reconsume times back at 0 (the group's full retry
budget again; failing that, back to the DLQ). Delivery properties of the dead letter's past (a delay
level, a timer, a transaction's half mark) are dropped so the copy is deliverable at once. The
dashboard's consume-directly (309) is the messages page's own action (actions.Actions.consume_directly).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from actors.console.calls import ServerCalls
from actors.console.collector import Collector
from actors.console.model import ConsoleState
from namesrv.acl.plain_acl import SessionCredentials
from namesrv.broker.schedule.delivery import DELAY, TIMER_OUT_MS, TIMER_PROPERTIES
from namesrv.protocol.broker_headers import pull_message_ext
from namesrv.protocol.codes import BrokerRequestCode, ResponseCode
from namesrv.protocol.constants import DLQ_GROUP_TOPIC_PREFIX, MASTER_ID, RETRY_GROUP_TOPIC_PREFIX
from namesrv.protocol.message.codec import decode_offset_msg_id, offset_msg_id, ray_send_ext
from namesrv.protocol.message.decoder import MessageExt, decode_messages
from namesrv.protocol.message.properties import REAL_QID, REAL_TOPIC, RETRY_TOPIC
from namesrv.protocol.types import GroupName, InvalidInput, check

DLQ_PAGE = 64
"""Dead letters listed at most per query (a bounded page: narrow the time range for older ones)."""
PULL_BATCH = 32
DEFAULT_RANGE_MS = 24 * 3600 * 1000
"""With no start given, the last day."""
"""MessageConst.PROPERTY_RETRY_TOPIC: the topic a retried (or dead) message was first sent to."""
NOT_RESENT = frozenset({DELAY, REAL_TOPIC, REAL_QID, TIMER_OUT_MS, *TIMER_PROPERTIES, "TRAN_MSG", "PGROUP"})
"""Properties of a dead letter's past deliveries that the resent copy must not carry."""


class DlqError(ValueError):
    """Bad input or a refused step: one line for the page; nothing was changed."""


@dataclass(frozen=True)
class DeadLetter:
    msg_id: str
    """The offset message id (where it is stored: what the resend and queryMsgById take)."""
    original_topic: str
    reconsume_times: int
    store_timestamp: int
    keys: str
    tags: str
    unique_key: str
    body: str


def dlq_topic(raw_group: str) -> tuple[str, str]:
    """(group, %DLQ%group) of a group name typed into a form (DlqError when it is not a name)."""
    try:
        group: str = check(GroupName, raw_group.strip(), "consumer group")
    except InvalidInput as e:
        raise DlqError(str(e)) from None
    return group, DLQ_GROUP_TOPIC_PREFIX + group


def time_range(raw_begin: str, raw_end: str, now_ms: int) -> tuple[int, int]:
    """[begin, end] in ms since the epoch from a form: blank end is now, blank begin a day before."""
    def ms(raw: str, what: str, default: int) -> int:
        raw = raw.strip()
        if not raw:
            return default
        if not raw.isdigit() or len(raw) > 18:
            raise DlqError(f"{what} must be ms since the epoch, got {raw!r}")
        return int(raw)
    end = ms(raw_end, "the end", now_ms)
    begin = ms(raw_begin, "the start", end - DEFAULT_RANGE_MS)
    if begin > end:
        raise DlqError(f"the start {begin} is after the end {end}")
    return begin, end


def dead_letter(msg_id: str, topic: str, props: dict[str, str], reconsume_times: int,
                store_timestamp: int, body: bytes) -> DeadLetter:
    """A dead letter's row: its original topic is RETRY_TOPIC's (else its own)."""
    return DeadLetter(msg_id, props.get(RETRY_TOPIC, topic), reconsume_times, store_timestamp,
                      props.get("KEYS", ""), props.get("TAGS", ""), props.get("UNIQ_KEY", ""),
                      body.decode("utf-8", errors="replace")[:1024])


def resend_copy(m: MessageExt, group: str) -> tuple[str, dict[str, str]]:
    """The retry topic and properties of a dead letter's copy for its group (see the module's note)."""
    return RETRY_GROUP_TOPIC_PREFIX + group, {k: v for k, v in m.properties.items() if k not in NOT_RESENT}


class DeadLetters:
    def __init__(self, collector: Collector) -> None:
        self.servers: ServerCalls = collector.servers
        self.state: ConsoleState = collector.state

    def _known(self, raw_group: str) -> tuple[str, str]:
        group, topic = dlq_topic(raw_group)
        if group not in self.state.groups:
            raise DlqError(f"no consumer group {group!r} on any broker")
        return group, topic

    def _queues(self, topic: str) -> list[tuple[str, int]]:
        """(master address, queue id) of every readable queue of `topic`'s route; none: no DLQ yet."""
        for view in self.state.namesrvs.values():
            route = view.routes.get(topic)
            if route is None:
                continue
            masters = {name: dict(ids).get(MASTER_ID) for name, ids in route.brokers}
            return [(addr, q) for qr in route.queues if (addr := masters.get(qr.broker_name))
                    for q in range(qr.read_queue_nums)]
        return []

    async def list(self, raw_group: str, raw_begin: str, raw_end: str,
                   creds: SessionCredentials | None) -> tuple[list[DeadLetter], bool]:
        """The group's dead letters stored within the range, newest first; True when the page is
        full (there may be more)."""
        group, topic = self._known(raw_group)
        begin, end = time_range(raw_begin, raw_end, int(time.time() * 1000))
        rows: list[DeadLetter] = []
        for addr, queue_id in self._queues(topic):
            resp = await self.servers.call_broker(addr, self.servers.request(
                BrokerRequestCode.SEARCH_OFFSET_BY_TIMESTAMP,
                {"topic": topic, "queueId": str(queue_id), "timestamp": str(begin)}, credentials=creds))
            if not resp.ok:
                raise DlqError(f"{topic} queue {queue_id} on {addr}: {resp.remark}")
            offset = int(resp.ext_fields.get("offset", 0))
            while len(rows) < DLQ_PAGE:
                resp = await self.servers.call_broker(addr, self.servers.request(
                    BrokerRequestCode.PULL_MESSAGE, pull_message_ext(topic, queue_id, offset, PULL_BATCH, group),
                    credentials=creds))
                if resp.code != ResponseCode.SUCCESS:
                    if resp.code == ResponseCode.NO_PERMISSION:
                        raise DlqError(f"{topic} on {addr}: {resp.remark}")
                    break  # no more (PULL_NOT_FOUND, OFFSET_MOVED, ...)
                messages = getattr(resp.payload, "messages", [])
                if not messages:
                    break
                past_end = False
                for s in messages:
                    if s.store_timestamp > end:
                        past_end = True
                        break
                    if s.store_timestamp >= begin and len(rows) < DLQ_PAGE:
                        rows.append(dead_letter(offset_msg_id(addr, s.commit_log_offset), s.topic,
                                                s.properties, s.reconsume_times, s.store_timestamp, s.body))
                offset = int(resp.ext_fields.get("nextBeginOffset", offset + len(messages)))
                if past_end:
                    break
        rows.sort(key=lambda r: r.store_timestamp, reverse=True)
        return rows, len(rows) >= DLQ_PAGE

    async def dead_letter_of(self, raw_group: str, raw_id: str,
                             creds: SessionCredentials | None) -> tuple[str, str, MessageExt]:
        """(group, the broker that stores it, the message) of a dead letter of the group, by its
        offset message id; DlqError when the id is malformed or names a message not in the DLQ."""
        group, topic = self._known(raw_group)
        msg_id = raw_id.strip()
        try:
            host, offset = decode_offset_msg_id(msg_id)
        except InvalidInput as e:
            raise DlqError(str(e)) from None
        if self.servers.broker_handle(host) is None:
            raise DlqError(f"message id {msg_id} names broker {host}, which is not a live broker here")
        resp = await self.servers.call_broker(host, self.servers.request(
            BrokerRequestCode.VIEW_MESSAGE_BY_ID, {"offset": str(offset)}, credentials=creds))
        if not resp.ok:
            raise DlqError(f"no message {msg_id} on {host}: {resp.remark}")
        found = decode_messages(resp.body or b"")
        if len(found) != 1:
            raise DlqError(f"{host} answered {len(found)} messages for {msg_id}")
        if found[0].topic != topic:
            raise DlqError(f"message {msg_id} is in {found[0].topic}, not in {topic}: nothing resent")
        return group, host, found[0]

    async def resend(self, raw_group: str, raw_id: str, creds: SessionCredentials | None) -> str:
        """Store a copy of the dead letter in its group's retry topic, on the broker that holds it;
        the page's notice."""
        group, host, m = await self.dead_letter_of(raw_group, raw_id, creds)
        topic, props = resend_copy(m, group)
        ext = ray_send_ext(topic, 0, props, None) | {"flag": str(m.flag)}
        resp = await self.servers.call_broker(host, self.servers.request(
            BrokerRequestCode.SEND_MESSAGE, ext, m.body, credentials=creds))
        if not resp.ok:
            raise DlqError(f"resend to {topic} on {host}: {resp.remark}")
        return (f"resent {raw_id.strip()} to {group} (via {topic}, original topic {props.get(RETRY_TOPIC, '?')}): "
                f"msgId {resp.ext_fields.get('msgId', '?')}")
