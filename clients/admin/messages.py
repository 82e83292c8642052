"""The admin client's message lookups (DefaultMQAdminExt.viewMessage, queryMessage and
queryMessageByUniqKey), a mixin of `clients.admin.client.DefaultMQAdminExt`:

- `view_message(msg_id)`: the offset message id names the broker (its store host) and the
  commit-log offset; VIEW_MESSAGE_BY_ID goes to that broker.
- `query_message(topic, key, ...)`: QUERY_MESSAGE to the master (else any member) of every broker
  group of the topic's route; a broker that has none answers QUERY_NOT_FOUND and is skipped, one
  that cannot be asked fails the query (RocketMQ's MQAdminImpl logs it and goes on: a partial answer
  here would look like a missing message). Each message is checked against the key as RocketMQ's
  client does; the index's last update is the newest of the brokers'.
- `consume_message_directly(group, client_id, msg_id, topic)`: CONSUME_MESSAGE_DIRECTLY to the
  broker that stores the message (its offset message id's host; with `topic`, a client message id is
  looked up first, as DefaultMQAdminExt.consumeMessageDirectly sends the offset id): the broker hands
  it to that client, whose listener runs once on it; the client's ConsumeMessageDirectlyResult.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from clients.admin.transport import AdminTransport, ServerUnreachable, describe
from namesrv.protocol.codes import BrokerRequestCode, ResponseCode
from namesrv.protocol.constants import MASTER_ID, UNIQUE_MSG_QUERY_FLAG
from namesrv.protocol.consume_directly import ConsumeMessageDirectlyResult
from namesrv.protocol.message.codec import decode_offset_msg_id, offset_msg_id
from namesrv.protocol.message.decoder import MessageExt
from namesrv.protocol.models import TopicRouteData
from namesrv.protocol.types import InvalidInput
from namesrv.remoting.command import RemotingResponse

FOREVER = 2**63 - 1
"""Long.MAX_VALUE: queryMsgByKey's default end timestamp."""


@dataclass(slots=True)
class QueryResult:
    """RocketMQ's QueryResult: the newest index update among the brokers asked, and the messages."""

    index_last_update_timestamp: int = 0
    message_list: list[MessageExt] = field(default_factory=list)


class MessageQueryError(RuntimeError):
    """Raised as the client's MQAdminError (the mixin's host sets `error`)."""


class MessageQueries:
    transport: AdminTransport
    error: type[Exception] = MessageQueryError

    def examine_topic_route_info(self, topic: str) -> TopicRouteData:
        raise NotImplementedError

    def transport_call(self, broker_addr: str, code: int, ext: dict[str, Any]) -> RemotingResponse:
        """One request to a broker, answered whatever its code; unreachable raises `error`."""
        return self._ask(broker_addr, code, ext)

    def _ask(self, broker_addr: str, code: int, ext: dict[str, Any]) -> RemotingResponse:
        try:
            return self.transport.call_broker(broker_addr, code, ext)
        except ServerUnreachable as e:
            raise self.error(f"broker {broker_addr}: {e}") from None
        except InvalidInput as e:  # an answer body that is not messages
            raise self.error(f"broker {broker_addr}: bad answer: {e}") from None

    def view_message(self, msg_id: str) -> MessageExt:
        """The message of an offset message id (mqadmin queryMsgById)."""
        try:
            broker_addr, offset = decode_offset_msg_id(msg_id.strip())
        except InvalidInput as e:
            raise self.error(str(e)) from None
        resp = self._ask(broker_addr, BrokerRequestCode.VIEW_MESSAGE_BY_ID, {"offset": str(offset)})
        if not resp.ok:
            raise self.error(f"broker {broker_addr}: no message {msg_id}: {describe(resp)}")
        found = resp.payload if isinstance(resp.payload, list) else []
        if len(found) != 1 or not isinstance(found[0], MessageExt):
            raise self.error(f"broker {broker_addr}: the answer for {msg_id} is not one message")
        return found[0]

    def query_message(self, topic: str, key: str, max_num: int = 64, begin: int = 0, end: int = FOREVER,
                      unique_key: bool = False) -> QueryResult:
        """Messages of `topic` with `key` among their KEYS (or, with `unique_key`, whose client
        message id is `key`) stored within [begin, end]: up to `max_num` from each broker group."""
        if not key.strip():
            raise self.error("the key to query is empty")
        route = self.examine_topic_route_info(topic)
        ext: dict[str, Any] = {"topic": topic, "key": key, "maxNum": str(max_num), "beginTimestamp": str(begin),
                               "endTimestamp": str(end)}
        if unique_key:
            ext[UNIQUE_MSG_QUERY_FLAG] = "true"
        result = QueryResult()
        for bd in sorted(route.broker_datas, key=lambda b: b.broker_name):
            addr = bd.broker_addrs.get(MASTER_ID) or next(iter(sorted(bd.broker_addrs.values())), None)
            if addr is None:
                continue
            resp = self._ask(addr, BrokerRequestCode.QUERY_MESSAGE, ext)
            if resp.code == ResponseCode.QUERY_NOT_FOUND:
                continue
            if not resp.ok:
                raise self.error(f"broker {addr}: query by key failed: {describe(resp)}")
            stamp = resp.ext_fields.get("indexLastUpdateTimestamp", "0")
            result.index_last_update_timestamp = max(result.index_last_update_timestamp,
                                                     int(stamp) if str(stamp).isdigit() else 0)
            for m in resp.payload if isinstance(resp.payload, list) else []:
                if m.topic == topic and (m.unique_key == key if unique_key else key in m.keys):
                    result.message_list.append(m)
        return result

    def consume_message_directly(self, group: str, client_id: str, msg_id: str,
                                 topic: str | None = None) -> ConsumeMessageDirectlyResult:
        """Have one client of `group` run its listener once on a stored message (mqadmin queryMsgById
        -g -d): an offset message id, or with `topic` a client message id (its oldest match)."""
        msg_id = msg_id.strip()
        try:
            broker_addr, _ = decode_offset_msg_id(msg_id)
        except InvalidInput as e:
            if topic is None:
                raise self.error(f"{e}; give the topic to look {msg_id!r} up as a client message id") from None
            found = sorted(self.query_message(topic, msg_id, 32, 0, FOREVER, unique_key=True).message_list,
                           key=lambda m: m.store_timestamp)
            if not found:
                raise self.error(f"no message of topic {topic!r} has the message id {msg_id!r}") from None
            broker_addr, msg_id = found[0].store_host, offset_msg_id(found[0].store_host, found[0].commit_log_offset)
        ext = {"consumerGroup": group, "clientId": client_id, "msgId": msg_id} | ({"topic": topic} if topic else {})
        resp = self._ask(broker_addr, BrokerRequestCode.CONSUME_MESSAGE_DIRECTLY, ext)
        if not resp.ok:
            raise self.error(f"broker {broker_addr}: consume {msg_id} directly on {client_id} of {group} failed: "
                             f"{describe(resp)}")
        if not isinstance(resp.payload, ConsumeMessageDirectlyResult):
            raise self.error(f"broker {broker_addr}: the answer for {msg_id} is not a ConsumeMessageDirectlyResult")
        return resp.payload
