"""What the console's forms do: create, update (queue numbers, perm) and delete a topic, send a test
message, reset a group's offset by time (or skip its backlog: reset to now), look a message up by id
or by key, have a live client of a group consume a message directly (CONSUME_MESSAGE_DIRECTLY: its
listener runs once on it; no client named, the first live member, as rocketmq-dashboard picks one).
A group's subscription-group config has its own module (groups.py). Each checks its input first (a bad one raises
`ActionError` with one line and changes nothing), then sends the same requests mqadmin would, over
the servers' `process` (ACL, processors, as a TCP frame), signed with the session's account.

These are explicit user actions (a form), not page views: the pages themselves read the collector.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from actors.console.calls import ServerCalls
from actors.console.collector import Collector
from actors.console.decode import reset_offsets, topic_config
from actors.console.model import ConsoleState
from namesrv.acl.plain_acl import SessionCredentials
from namesrv.protocol.broker_headers import topic_config_ext
from namesrv.protocol.codes import BrokerRequestCode, RequestCode, ResponseCode
from namesrv.protocol.constants import MASTER_ID, MAX_QUEUE_NUMS, TOPIC_PERMS, Perm
from namesrv.protocol.consume_directly import ConsumeMessageDirectlyResult
from namesrv.protocol.message.codec import decode_offset_msg_id, ray_send_ext
from namesrv.protocol.message.decoder import MessageExt, decode_messages
from namesrv.protocol.models import TopicConfig
from namesrv.protocol.types import GroupName, InvalidInput, check, check_topic, describe_errors
from namesrv.remoting.command import RemotingResponse

MAX_TEST_BODY = 64 * 1024


class ActionError(ValueError):
    """A refused or failed action; the message is one line for the page."""


@dataclass(frozen=True)
class MessageRow:
    msg_id: str
    topic: str
    queue_id: int
    queue_offset: int
    store_host: str
    store_timestamp: int
    keys: str
    tags: str
    properties: dict[str, str]
    body: str


def why(resp: RemotingResponse) -> str:
    try:
        name = ResponseCode(resp.code).name
    except ValueError:
        name = "code"
    return f"{name} ({resp.code}): {' '.join((resp.remark or '').split())[:300]}"


def _topic(raw: str) -> str:
    try:
        return check_topic(raw.strip())
    except InvalidInput as e:
        raise ActionError(str(e)) from None


def whole_number(raw: str, what: str, low: int, high: int) -> int:
    try:
        value = int(raw.strip())
    except (ValueError, AttributeError):
        raise ActionError(f"{what} must be a whole number, got {raw!r}") from None
    if not low <= value <= high:
        raise ActionError(f"{what} must be between {low} and {high}, got {value}")
    return value


class Actions:
    def __init__(self, collector: Collector) -> None:
        self.servers: ServerCalls = collector.servers
        self.state: ConsoleState = collector.state
        self.namesrv_names: list[str] = list(collector.namesrv_names)

    def masters(self) -> list[str]:
        masters = sorted(b.addr for b in self.state.live_brokers()
                         if b.broker_id == MASTER_ID or b.role.endswith("MASTER"))
        if not masters:
            raise ActionError("no live master broker to ask")
        return masters

    def _route_masters(self, topic: str) -> list[str]:
        """The master of every broker set of `topic`'s route (as some NameServer has it)."""
        for view in self.state.namesrvs.values():
            route = view.routes.get(topic)
            if route is not None:
                addrs = [dict(ids).get(MASTER_ID) for _name, ids in route.brokers]
                found = sorted(a for a in addrs if a)
                if found:
                    return found
        raise ActionError(f"topic {topic!r} has no route on any NameServer")

    async def create_topic(self, raw_topic: str, raw_queues: str, creds: SessionCredentials | None) -> list[str]:
        topic = _topic(raw_topic)
        queues = whole_number(raw_queues or "8", "queues", 1, MAX_QUEUE_NUMS)
        return await self._put_topic(self.masters(), topic, queues, queues, int(Perm.READ | Perm.WRITE), creds,
                                     TopicConfig(topic_name=topic))

    async def update_topic(self, raw_topic: str, raw_read: str, raw_write: str, raw_perm: str,
                           creds: SessionCredentials | None) -> list[str]:
        """An existing topic's queue numbers and perm, on the master of every broker set of its
        route (the brokers that hold it: an update does not spread a topic to other brokers). The
        rest of its config (order flag, sys flag, filter type), which UPDATE_AND_CREATE_TOPIC
        replaces too, is kept as the first of them holds it (GET_TOPIC_CONFIG)."""
        topic = _topic(raw_topic)
        if topic not in self.state.all_topics():
            raise ActionError(f"no topic {topic!r} on any NameServer")
        read = whole_number(raw_read, "read queues", 1, MAX_QUEUE_NUMS)
        write = whole_number(raw_write, "write queues", 1, MAX_QUEUE_NUMS)
        perm = whole_number(raw_perm, "perm", 0, 7)
        if perm not in TOPIC_PERMS:
            raise ActionError(f"perm must be one of {', '.join(f'{p} ({n})' for p, n in TOPIC_PERMS.items())}, "
                              f"got {perm}")
        masters = self._route_masters(topic)
        return await self._put_topic(masters, topic, read, write, perm, creds,
                                     await self._topic_config(masters[0], topic, creds))

    async def _topic_config(self, addr: str, topic: str, creds: SessionCredentials | None) -> TopicConfig:
        resp = await self.servers.call_broker(addr, self.servers.request(
            BrokerRequestCode.GET_TOPIC_CONFIG, {"topic": topic}, credentials=creds))
        config = topic_config(resp)
        if config is None:
            raise ActionError(f"read the config of {topic} on {addr}: "
                              + (why(resp) if not resp.ok else "the answer is not a topic config"))
        return config

    async def _put_topic(self, masters: list[str], topic: str, read: int, write: int, perm: int,
                         creds: SessionCredentials | None, base: TopicConfig) -> list[str]:
        """UPDATE_AND_CREATE_TOPIC on each of `masters` with `base`'s order flag, sys flag and
        filter type, the config checked first; the masters done."""
        try:
            tc = TopicConfig(topic_name=topic, read_queue_nums=read, write_queue_nums=write, perm=perm,
                             topic_filter_type=base.topic_filter_type, topic_sys_flag=base.topic_sys_flag,
                             order=base.order)
        except ValidationError as e:
            raise ActionError(f"invalid topic config: {describe_errors(e)}") from None
        done: list[str] = []
        for addr in masters:
            resp = await self.servers.call_broker(addr, self.servers.request(
                BrokerRequestCode.UPDATE_AND_CREATE_TOPIC, topic_config_ext(tc), credentials=creds))
            if not resp.ok:
                raise ActionError(f"put {topic} on {addr}: {why(resp)}" + (f" (done on {', '.join(done)})"
                                                                          if done else ""))
            done.append(addr)
        return done

    async def delete_topic(self, raw_topic: str, creds: SessionCredentials | None) -> None:
        topic = _topic(raw_topic)
        if topic not in self.state.all_topics():
            raise ActionError(f"no topic {topic!r} on any NameServer")
        for b in self.state.live_brokers():
            resp = await self.servers.call_broker(b.addr, self.servers.request(
                BrokerRequestCode.DELETE_TOPIC_IN_BROKER, {"topic": topic}, credentials=creds))
            if not resp.ok:
                raise ActionError(f"delete {topic} on {b.addr}: {why(resp)}")
        for name in self.namesrv_names:
            resp = await self.servers.call_namesrv(name, self.servers.request(
                RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": topic}, credentials=creds))
            if not resp.ok:
                raise ActionError(f"delete {topic} on {name}: {why(resp)}")

    async def send_test_message(self, raw_topic: str, body: str, key: str, tag: str,
                                creds: SessionCredentials | None) -> dict[str, Any]:
        topic = _topic(raw_topic)
        data = body.encode()
        if not data:
            raise ActionError("the message body is empty")
        if len(data) > MAX_TEST_BODY:
            raise ActionError(f"the message body is {len(data)} bytes; the console sends at most {MAX_TEST_BODY}")
        addr = self._route_masters(topic)[0]
        props = {k: v for k, v in (("KEYS", key.strip()), ("TAGS", tag.strip())) if v}
        ext = ray_send_ext(topic, 0, props, None)
        resp = await self.servers.call_broker(addr, self.servers.request(BrokerRequestCode.SEND_MESSAGE, ext, data,
                                                             credentials=creds))
        if not resp.ok:
            raise ActionError(f"send to {topic} on {addr}: {why(resp)}")
        return {"broker": addr, **{k: str(v) for k, v in resp.ext_fields.items()}}

    async def reset_offset(self, raw_group: str, raw_topic: str, raw_time: str,
                           creds: SessionCredentials | None) -> dict[str, int]:
        """INVOKE_BROKER_TO_RESET_OFFSET on every master of the topic's route: each queue to the
        first message stored at or after the time (ms since the epoch, or 'now'). A broker that does
        not know the group is passed over; none knowing it is an error."""
        group = raw_group.strip()
        if not group or any(c.isspace() for c in group):
            raise ActionError(f"invalid consumer group {raw_group!r}")
        topic = _topic(raw_topic)
        stamp = int(time.time() * 1000) if raw_time.strip().lower() == "now" else \
            whole_number(raw_time, "timestamp (ms)", 0, 2**62)
        offsets: dict[str, int] = {}
        refused: list[str] = []
        for addr in self._route_masters(topic):
            resp = await self.servers.call_broker(addr, self.servers.request(
                BrokerRequestCode.INVOKE_BROKER_TO_RESET_OFFSET,
                {"topic": topic, "group": group, "timestamp": str(stamp), "isForce": "true"}, credentials=creds))
            if not resp.ok:
                refused.append(f"{addr}: {why(resp)}")
                continue
            body = reset_offsets(resp)
            for mq, off in (body.offset_table.items() if body is not None else []):
                offsets[f"{mq.broker_name}:{mq.queue_id}"] = off
        if not offsets and refused:
            raise ActionError(f"reset {group} on {topic}: " + "; ".join(refused))
        return offsets

    async def message_by_id(self, raw_id: str, creds: SessionCredentials | None) -> MessageRow:
        try:
            host, offset = decode_offset_msg_id(raw_id.strip())
        except InvalidInput as e:
            raise ActionError(str(e)) from None
        if self.servers.broker_handle(host) is None:
            raise ActionError(f"message id {raw_id.strip()} names broker {host}, which is not a live broker here")
        resp = await self.servers.call_broker(host, self.servers.request(BrokerRequestCode.VIEW_MESSAGE_BY_ID,
                                                             {"offset": str(offset)}, credentials=creds))
        if not resp.ok:
            raise ActionError(f"no message {raw_id.strip()} on {host}: {why(resp)}")
        found = decode_messages(resp.body or b"")
        if len(found) != 1:
            raise ActionError(f"{host} answered {len(found)} messages for {raw_id.strip()}")
        return _row(found[0], raw_id.strip())

    async def messages_by_key(self, raw_topic: str, raw_key: str, creds: SessionCredentials | None) -> list[MessageRow]:
        topic = _topic(raw_topic)
        key = raw_key.strip()
        if not key:
            raise ActionError("the key to look up is empty")
        rows: list[MessageRow] = []
        for addr in self._route_masters(topic):
            resp = await self.servers.call_broker(addr, self.servers.request(BrokerRequestCode.QUERY_MESSAGE, {
                "topic": topic, "key": key, "maxNum": "64", "beginTimestamp": "0",
                "endTimestamp": str(2**63 - 1)}, credentials=creds))
            if resp.code == ResponseCode.QUERY_NOT_FOUND:
                continue
            if not resp.ok:
                raise ActionError(f"query {key} on {addr}: {why(resp)}")
            rows.extend(_row(m) for m in decode_messages(resp.body or b"")
                        if m.topic == topic and key in m.properties.get("KEYS", "").split())
        return rows


    async def consume_directly(self, raw_group: str, raw_client: str, raw_id: str,
                               creds: SessionCredentials | None) -> tuple[str, ConsumeMessageDirectlyResult]:
        """CONSUME_MESSAGE_DIRECTLY on the broker that stores the message: (the client asked, its result)."""
        try:
            group: str = check(GroupName, raw_group.strip(), "consumer group")
            host, _ = decode_offset_msg_id(raw_id.strip())
        except InvalidInput as e:
            raise ActionError(str(e)) from None
        view = self.state.groups.get(group)
        if view is None or not view.members:
            raise ActionError(f"consumer group {group!r} has no live member to hand the message to")
        client = raw_client.strip() or view.members[0]
        if client not in view.members:
            raise ActionError(f"{client!r} is not a live member of {group} (members: {', '.join(view.members)})")
        if self.servers.broker_handle(host) is None:
            raise ActionError(f"message id {raw_id.strip()} names broker {host}, which is not a live broker here")
        resp = await self.servers.call_broker(host, self.servers.request(
            BrokerRequestCode.CONSUME_MESSAGE_DIRECTLY, {"consumerGroup": group, "clientId": client,
                                                         "msgId": raw_id.strip()}, credentials=creds))
        if not resp.ok:
            raise ActionError(f"consume {raw_id.strip()} directly on {client} of {group}: {why(resp)}")
        try:
            return client, ConsumeMessageDirectlyResult.decode(resp.body)
        except InvalidInput as e:
            raise ActionError(f"{client} answered no ConsumeMessageDirectlyResult: {e}") from None


def _row(m: MessageExt, msg_id: str = "") -> MessageRow:
    from namesrv.protocol.message.codec import offset_msg_id

    body = m.body.decode("utf-8", errors="replace")
    return MessageRow(msg_id or offset_msg_id(m.store_host, m.commit_log_offset), m.topic, m.queue_id, m.queue_offset,
                      m.store_host, m.store_timestamp, m.properties.get("KEYS", ""), m.properties.get("TAGS", ""),
                      dict(m.properties), body[:4096])
