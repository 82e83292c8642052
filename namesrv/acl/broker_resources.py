"""What a broker request needs of the plain ACL (RocketMQ's PlainAccessValidator.parse), read from
the request's typed header: the object the processor acts on, not the raw extFields.

A topic maps to the permission the request needs on it; a group is its retry topic
(`%RETRY%group`), as RocketMQ keys group permissions. A send to a retry topic needs SUB on that
group (a consumer re-sending to its own group), any other send PUB on its topic; a pull, an offset
query or commit, a pop, an ack (each of a batch) or a change of invisible time SUB on the topic and
the group; a recall PUB on its topic; reading a group's config SUB on the group; a heartbeat SUB
on every group and topic it subscribes to; a query by key or a topic's config (351) SUB on its
topic; a view by offset SUB on the topic it names, and the processor checks the topic of the
message it finds (RocketMQ's PlainAccessValidator checks only the topic the request names); asking
a member for its running info (307, mqadmin consumerStatus) SUB on its group (RocketMQ 5's
@RocketMQAction: GROUP, GET); consuming a message directly (309) SUB on the group and on the topic
it names (RocketMQ 5's @RocketMQAction on its header), and again the processor checks the found
message's topic. A reply is a send to its reply topic; an offset reset or clone needs SUB on the
topic and on the groups it touches. Creating or deleting a subscription group is admin only
(plain_acl.BROKER_ADMIN_CODES, as RocketMQ's Permission.needAdminPerm).

Only called once the request's signature is checked: parsing happens after authentication.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from namesrv.acl.plain_acl import PUB, SUB
from namesrv.broker.pop.headers import AckMessageRequestHeader, PopMessageRequestHeader, batch_ack_body
from namesrv.protocol import fastjson
from namesrv.protocol.broker_headers import (
    CloneGroupOffsetRequestHeader,
    ConsumeMessageDirectlyResultRequestHeader,
    ConsumerQueueHeader,
    ConsumerSendMsgBackRequestHeader,
    GetConsumerListByGroupRequestHeader,
    GetConsumerRunningInfoRequestHeader,
    GetSubscriptionGroupConfigRequestHeader,
    PullMessageRequestHeader,
    QueryMessageRequestHeader,
    RecallMessageRequestHeader,
    Request,
    ResetOffsetRequestHeader,
    SendMessageRequestHeader,
    TopicHeader,
    TopicQueueHeader,
    UnregisterClientRequestHeader,
    UpdateConsumerOffsetRequestHeader,
    ViewMessageRequestHeader,
    request_header,
)
from namesrv.protocol.codes import SEND_CODES, BrokerRequestCode
from namesrv.protocol.constants import RETRY_GROUP_TOPIC_PREFIX
from namesrv.protocol.headers import Header
from namesrv.protocol.types import InvalidInput

REPLY_CODES = frozenset({BrokerRequestCode.SEND_REPLY_MESSAGE, BrokerRequestCode.SEND_REPLY_MESSAGE_V2})

WIRE_HEADERS: dict[int, type[Header]] = {
    BrokerRequestCode.SEND_MESSAGE: SendMessageRequestHeader,
    BrokerRequestCode.SEND_MESSAGE_V2: SendMessageRequestHeader,
    BrokerRequestCode.SEND_BATCH_MESSAGE: SendMessageRequestHeader,
    BrokerRequestCode.PULL_MESSAGE: PullMessageRequestHeader,
    BrokerRequestCode.CONSUMER_SEND_MSG_BACK: ConsumerSendMsgBackRequestHeader,
    BrokerRequestCode.UNREGISTER_CLIENT: UnregisterClientRequestHeader,
    BrokerRequestCode.GET_CONSUMER_LIST_BY_GROUP: GetConsumerListByGroupRequestHeader,
    BrokerRequestCode.QUERY_CONSUMER_OFFSET: ConsumerQueueHeader,
    BrokerRequestCode.UPDATE_CONSUMER_OFFSET: UpdateConsumerOffsetRequestHeader,
    BrokerRequestCode.QUERY_MESSAGE: QueryMessageRequestHeader,
    BrokerRequestCode.VIEW_MESSAGE_BY_ID: ViewMessageRequestHeader,
    BrokerRequestCode.SEND_REPLY_MESSAGE: SendMessageRequestHeader,
    BrokerRequestCode.SEND_REPLY_MESSAGE_V2: SendMessageRequestHeader,
    BrokerRequestCode.INVOKE_BROKER_TO_RESET_OFFSET: ResetOffsetRequestHeader,
    BrokerRequestCode.CLONE_GROUP_OFFSET: CloneGroupOffsetRequestHeader,
    BrokerRequestCode.POP_MESSAGE: PopMessageRequestHeader,
    BrokerRequestCode.ACK_MESSAGE: AckMessageRequestHeader,
    BrokerRequestCode.CHANGE_MESSAGE_INVISIBLETIME: AckMessageRequestHeader,
    BrokerRequestCode.RECALL_MESSAGE: RecallMessageRequestHeader,
    BrokerRequestCode.GET_SUBSCRIPTIONGROUP_CONFIG: GetSubscriptionGroupConfigRequestHeader,
    BrokerRequestCode.CONSUME_MESSAGE_DIRECTLY: ConsumeMessageDirectlyResultRequestHeader,
    BrokerRequestCode.GET_CONSUMER_RUNNING_INFO: GetConsumerRunningInfoRequestHeader,
    BrokerRequestCode.GET_TOPIC_CONFIG: TopicHeader,
}
"""The header model the broker's processor reads for each code the ACL looks into."""



def header_resources(code: int, header: Header | None) -> dict[str, int]:
    """The resources named by a request's typed header."""
    retry = RETRY_GROUP_TOPIC_PREFIX
    if code in SEND_CODES | REPLY_CODES and isinstance(header, (SendMessageRequestHeader, TopicQueueHeader)):
        return {header.topic: SUB if header.topic.startswith(retry) else PUB}
    if isinstance(header, RecallMessageRequestHeader):  # cancelling a send: PUB, as RocketMQ's @RocketMQAction
        return {header.topic: PUB}
    if isinstance(header, ResetOffsetRequestHeader):  # moving a group's offsets: SUB on both, as a commit
        return {header.topic: SUB, retry + header.group: SUB}
    if isinstance(header, CloneGroupOffsetRequestHeader):
        return ({header.topic: SUB} if header.topic else {}) | {retry + header.src_group: SUB,
                                                                 retry + header.dest_group: SUB}
    if isinstance(header, (PullMessageRequestHeader, PopMessageRequestHeader, AckMessageRequestHeader)):
        return {header.topic: SUB, retry + header.consumer_group: SUB}
    if isinstance(header, ConsumerQueueHeader):  # QUERY_CONSUMER_OFFSET, UPDATE_CONSUMER_OFFSET
        return {header.topic: SUB, retry + header.consumer_group: SUB}
    if isinstance(header, (ConsumerSendMsgBackRequestHeader, GetSubscriptionGroupConfigRequestHeader)):
        return {retry + header.group: SUB}
    if isinstance(header, (QueryMessageRequestHeader, TopicHeader)):  # a query by key; a topic's config (351)
        return {header.topic: SUB}
    if isinstance(header, ConsumeMessageDirectlyResultRequestHeader):  # the message's topic: once it is read
        return {retry + header.consumer_group: SUB} | ({header.topic: SUB} if header.topic else {})
    if isinstance(header, ViewMessageRequestHeader):  # the message's own topic is checked once it is read
        return {header.topic: SUB} if header.topic else {}
    if isinstance(header, GetConsumerRunningInfoRequestHeader):  # a member's subscriptions and queues: the group's
        return {retry + header.consumer_group: SUB}
    if isinstance(header, (UnregisterClientRequestHeader, GetConsumerListByGroupRequestHeader)):
        return {retry + header.consumer_group: SUB} if header.consumer_group else {}
    return {}


def heartbeat_resources(heartbeat: Mapping[str, Any]) -> dict[str, int]:
    out: dict[str, int] = {}
    for consumer in heartbeat.get("consumerDataSet") or []:
        if not isinstance(consumer, dict):
            continue
        out[RETRY_GROUP_TOPIC_PREFIX + str(consumer.get("groupName", ""))] = SUB
        for sub in consumer.get("subscriptionDataSet") or []:
            if isinstance(sub, dict):
                out[str(sub.get("topic", ""))] = SUB
    return out


def wire_resources(cmd: Request) -> dict[str, int]:
    """What a wire request needs, from the header the processor will act on (parsed here, once,
    and kept on `cmd`). Raises ValidationError or InvalidInput on a header or heartbeat that does
    not parse: such a request is refused, never let through unchecked."""
    model = WIRE_HEADERS.get(cmd.code)
    resources = header_resources(cmd.code, request_header(cmd, model) if model is not None else None)
    if cmd.code == BrokerRequestCode.HEART_BEAT and cmd.body:
        try:
            heartbeat = fastjson.loads(cmd.body)
        except fastjson.JsonError as e:
            raise InvalidInput(f"heartbeat body: {e}") from None
        if isinstance(heartbeat, dict):
            resources |= heartbeat_resources(heartbeat)
    if cmd.code == BrokerRequestCode.BATCH_ACK_MESSAGE:  # each ack as ACK_MESSAGE: SUB on its topic and group
        try:
            body = batch_ack_body(fastjson.loads(cmd.body or b"null"))
        except fastjson.JsonError as e:
            raise InvalidInput(f"batch ack body: {e}") from None
        for ack in body.acks:
            resources |= {ack.topic: SUB, RETRY_GROUP_TOPIC_PREFIX + ack.consumer_group: SUB}
    return resources
