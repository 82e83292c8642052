"""Request headers of the broker codes the client libraries use (RocketMQ's *RequestHeader classes).

Same rules as the NameServer's headers: typed strictly on the Ray path, parsed from strings over TCP
by RocketMQ's names only (`Header.from_ext`). SEND_MESSAGE_V2 carries the same header under
one-letter keys (a = producerGroup, ..., n = brokerName); `SendMessageRequestHeader.from_v2` maps them
back, and refuses a V2 header that also spells one of those fields out.

`request_header` parses a wire request's header once and keeps it on the command: the broker's ACL
authorises that object and the processor acts on the same one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, Protocol, TypeVar

from pydantic import Field

from namesrv.protocol.codes import BrokerRequestCode
from namesrv.protocol.constants import AUTO_CREATE_TOPIC_KEY_TOPIC, DEFAULT_TOPIC_QUEUE_NUMS
from namesrv.protocol.headers import Header
from namesrv.protocol.models import TopicConfig
from namesrv.protocol.types import GroupName, InvalidInput, TopicName

V2_KEYS = {"a": "producerGroup", "b": "topic", "c": "defaultTopic", "d": "defaultTopicQueueNums", "e": "queueId",
           "f": "sysFlag", "g": "bornTimestamp", "h": "flag", "i": "properties", "j": "reconsumeTimes",
           "k": "unitMode", "l": "maxReconsumeTimes", "m": "batch", "n": "brokerName"}
"""SendMessageRequestHeaderV2's letters (l is consumeRetryTimes on the wire, maxReconsumeTimes in V1)."""
_V1_NAMES = frozenset(V2_KEYS.values())
_V2_LETTERS = {name: letter for letter, name in V2_KEYS.items()}

QueueId = int  # may be negative in a send: "any queue"
MAX_KEY_CHARS = 32 * 1024
"""A message key no longer than the properties that carry it (RocketMQ's 32 KB)."""

MAX_RECALL_HANDLE_CHARS = 2048
"""A recall handle is the base64 of a topic, a broker name, a time and a message id: well under this."""

DEFAULT_PRODUCER_GROUP = "DEFAULT_PRODUCER"
DEFAULT_CONSUMER_GROUP = "DEFAULT_CONSUMER"
"""RocketMQ's MixAll.DEFAULT_PRODUCER_GROUP / DEFAULT_CONSUMER_GROUP."""


class SendMessageRequestHeader(Header):
    producer_group: GroupName
    topic: TopicName
    default_topic: str = AUTO_CREATE_TOPIC_KEY_TOPIC
    default_topic_queue_nums: int = Field(default=DEFAULT_TOPIC_QUEUE_NUMS, gt=0, le=1024)
    queue_id: QueueId = Field(ge=-1, le=65535)
    sys_flag: int = 0
    born_timestamp: int = 0
    flag: int = 0
    properties: str | None = None
    reconsume_times: int = Field(default=0, ge=0)
    unit_mode: bool = False
    batch: bool = False
    max_reconsume_times: int | None = None

    @staticmethod
    def from_v2(ext: Mapping[str, Any]) -> dict[str, Any]:
        """The V1 field names for a V2 header's letters (other keys kept as they are). A V2 header
        that also carries a field under its V1 name is refused: one field, one value."""
        spelled_out = sorted(k for k in ext if k in _V1_NAMES)
        if spelled_out:
            raise InvalidInput(f"SEND_MESSAGE_V2 header carries {spelled_out[0]!r}: V2 fields go by their letters")
        return {V2_KEYS.get(k, k): v for k, v in ext.items()}

    @staticmethod
    def to_v2(ext: Mapping[str, str]) -> dict[str, str]:
        """A V1 header's fields under V2's letters (other keys kept as they are): how RocketMQ's
        clients send SEND_MESSAGE_V2 and every SEND_BATCH_MESSAGE."""
        return {_V2_LETTERS.get(k, k): v for k, v in ext.items()}


class PullMessageRequestHeader(Header):
    consumer_group: GroupName
    topic: TopicName
    queue_id: int
    queue_offset: int
    max_msg_nums: int = Field(gt=0)
    sys_flag: int = 0
    commit_offset: int = 0
    suspend_timeout_millis: int = Field(default=0, ge=0)
    subscription: str | None = None
    sub_version: int = 0
    expression_type: str | None = None


class ConsumerQueueHeader(Header):
    """QUERY_CONSUMER_OFFSET (and the group/topic/queue part of UPDATE_CONSUMER_OFFSET)."""

    consumer_group: GroupName
    topic: TopicName
    queue_id: int = Field(ge=0)


class QueryConsumerOffsetRequestHeader(ConsumerQueueHeader):
    set_zero_if_not_found: bool | None = None
    """RocketMQ 5: False asks for QUERY_NOT_FOUND rather than 0 when the group has no offset."""


class UpdateConsumerOffsetRequestHeader(ConsumerQueueHeader):
    commit_offset: int = Field(ge=0)


class TopicQueueHeader(Header):
    """GET_MAX_OFFSET, GET_MIN_OFFSET, GET_EARLIEST_MSG_STORETIME."""

    topic: TopicName
    queue_id: int = Field(ge=0)


class SearchOffsetRequestHeader(TopicQueueHeader):
    timestamp: int


class GetConsumerListByGroupRequestHeader(Header):
    consumer_group: GroupName


class GetConsumerRunningInfoRequestHeader(Header):
    """GET_CONSUMER_RUNNING_INFO (307): the broker hands it on to that client, which answers."""

    consumer_group: GroupName
    client_id: str = Field(min_length=1, max_length=255)
    jstack_enable: bool = False


class ConsumeMessageDirectlyResultRequestHeader(Header):
    """CONSUME_MESSAGE_DIRECTLY (309): which client of which group runs its listener on the message
    with this offset message id. The broker adds its `brokerName` (and the topic's and group's sys
    flags) before handing it on; `topic`, optional, is the one the caller names (for the ACL)."""

    consumer_group: GroupName
    client_id: str | None = Field(default=None, max_length=255)
    msg_id: str | None = Field(default=None, max_length=64)
    broker_name: str | None = Field(default=None, max_length=255)
    topic: TopicName | None = None
    topic_sys_flag: int | None = None
    group_sys_flag: int | None = None


class TopicHeader(Header):
    """GET_TOPIC_STATS_INFO, QUERY_TOPIC_CONSUME_BY_WHO."""

    topic: TopicName


class QueryMessageRequestHeader(Header):
    """QUERY_MESSAGE (12); `_UNIQUE_KEY_QUERY: true` beside it makes `key` a unique key."""

    topic: TopicName
    key: str = Field(min_length=1, max_length=MAX_KEY_CHARS)
    max_num: int = Field(gt=0)
    begin_timestamp: int
    end_timestamp: int


class ViewMessageRequestHeader(Header):
    """VIEW_MESSAGE_BY_ID (33): a commit-log offset (the topic, optional, is for the ACL only)."""

    topic: str | None = None
    offset: int = Field(ge=0)


class ViewBrokerStatsDataRequestHeader(Header):
    """VIEW_BROKER_STATS_DATA (315): a stats set (TOPIC_PUT_NUMS, GROUP_GET_NUMS) and a key in it."""

    stats_name: str = Field(min_length=1, max_length=64)
    stats_key: str = Field(min_length=1, max_length=1024)


class GetConsumeStatsRequestHeader(Header):
    consumer_group: GroupName
    topic: TopicName | None = None


class EndTransactionRequestHeader(Header):
    topic: str | None = None
    producer_group: GroupName
    tran_state_table_offset: int = Field(ge=0)
    commit_log_offset: int = Field(ge=0)
    commit_or_rollback: int
    """0 still unknown, 8 commit, 12 roll back (MessageSysFlag's transaction values)."""
    from_transaction_check: bool = False
    msg_id: str | None = None
    transaction_id: str | None = None


class UnregisterClientRequestHeader(Header):
    client_id: str = Field(alias="clientID", min_length=1, max_length=1024)
    producer_group: GroupName | None = None
    consumer_group: GroupName | None = None


class ConsumerSendMsgBackRequestHeader(Header):
    offset: int = Field(ge=0)
    group: GroupName
    delay_level: int = 0
    origin_msg_id: str | None = None
    origin_topic: str | None = None
    unit_mode: bool = False
    max_reconsume_times: int | None = None


class RecallMessageRequestHeader(Header):
    """RECALL_MESSAGE (RocketMQ 5.3): cancel the timed message a recall handle names."""

    producer_group: GroupName | None = None
    topic: TopicName
    recall_handle: str = Field(min_length=1, max_length=MAX_RECALL_HANDLE_CHARS)


class CreateTopicRequestHeader(Header):
    """UPDATE_AND_CREATE_TOPIC (what mqadmin updateTopic sends to each broker)."""

    topic: TopicName
    default_topic: str = AUTO_CREATE_TOPIC_KEY_TOPIC
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_filter_type: Literal["SINGLE_TAG", "MULTI_TAG"] = "SINGLE_TAG"
    topic_sys_flag: int = 0
    order: bool = False


class DeleteTopicRequestHeader(Header):
    """DELETE_TOPIC_IN_BROKER."""

    topic: TopicName


H = TypeVar("H", bound=Header)


class Request(Protocol):
    """A request whose header is parsed once and kept (namesrv.remoting.command.RemotingRequest)."""

    @property
    def code(self) -> int: ...
    @property
    def ext_fields(self) -> Mapping[str, Any] | None: ...
    @property
    def body(self) -> bytes | None: ...
    header: Any


def request_header(cmd: Request, model: type[H]) -> H:
    """`cmd`'s header as `model`, parsed from its extFields once (SEND_MESSAGE_V2 by its letters, and
    SEND_BATCH_MESSAGE when it comes with them)
    and kept on the command, so whoever reads it next gets the same object. Raises
    ValidationError or InvalidInput on a bad header."""
    if type(cmd.header) is model:
        cached: H = cmd.header
        return cached
    ext: Mapping[str, Any] = cmd.ext_fields or {}
    if model is SendMessageRequestHeader and (
            cmd.code in (BrokerRequestCode.SEND_MESSAGE_V2, BrokerRequestCode.SEND_REPLY_MESSAGE_V2)
            # RocketMQ's clients send a batch with V2's letters (MQClientAPIImpl.sendMessage), this
            # project's with the V1 names: a batch header naming its topic by letter is V2
            or (cmd.code == BrokerRequestCode.SEND_BATCH_MESSAGE and "b" in ext)):
        ext = SendMessageRequestHeader.from_v2(ext)
    header = model.from_ext(ext, wire=True)
    cmd.header = header
    return header


# ---------------------------------------------------------------------------- Ray-path requests
# A Ray caller signs (ACL) exactly the extFields the broker's Ray method builds from its arguments:
# both sides build them here.
def topic_config_ext(tc: TopicConfig) -> dict[str, str]:
    """UPDATE_AND_CREATE_TOPIC's header for a whole topic config (what an update keeps: its filter
    type, sys flag and order flag too), as mqadmin updateTopic sends it; what a Ray caller of the
    broker's `create_topic` signs."""
    return {"topic": tc.topic_name, "defaultTopic": AUTO_CREATE_TOPIC_KEY_TOPIC,
            "readQueueNums": str(tc.read_queue_nums), "writeQueueNums": str(tc.write_queue_nums),
            "perm": str(tc.perm), "topicFilterType": tc.topic_filter_type, "topicSysFlag": str(tc.topic_sys_flag),
            "order": "true" if tc.order else "false"}


def send_message_ext(topic: str, queue_id: int, properties: str, default_topic: str = AUTO_CREATE_TOPIC_KEY_TOPIC,
                     default_topic_queue_nums: int = DEFAULT_TOPIC_QUEUE_NUMS,
                     producer_group: str = DEFAULT_PRODUCER_GROUP) -> dict[str, str]:
    """SEND_MESSAGE's header for a Ray-native send (`properties`: MessageDecoder's string form)."""
    return {"producerGroup": producer_group, "topic": topic, "defaultTopic": default_topic,
            "defaultTopicQueueNums": str(default_topic_queue_nums), "queueId": str(queue_id), "sysFlag": "0",
            "flag": "0", "properties": properties}


def pull_message_ext(topic: str, queue_id: int, offset: int, max_nums: int,
                     consumer_group: str = DEFAULT_CONSUMER_GROUP) -> dict[str, str]:
    """PULL_MESSAGE's header for a Ray-native pull of every message (no suspend, no offset commit)."""
    return {"consumerGroup": consumer_group, "topic": topic, "queueId": str(queue_id), "queueOffset": str(offset),
            "maxMsgNums": str(max_nums), "sysFlag": "0", "commitOffset": "0", "suspendTimeoutMillis": "0",
            "subscription": "*", "subVersion": "0"}


def broker_permission_body(perm: int) -> bytes:
    """UPDATE_BROKER_CONFIG's body setting brokerPermission (Java properties text)."""
    return f"brokerPermission={perm}\n".encode()


def end_transaction_ext(producer_group: str, tran_state_table_offset: int, commit_log_offset: int,
                        commit_or_rollback: int, from_transaction_check: bool = False) -> dict[str, str]:
    """END_TRANSACTION's header for a Ray-native transactional producer (what it signs)."""
    return {"producerGroup": producer_group, "tranStateTableOffset": str(tran_state_table_offset),
            "commitLogOffset": str(commit_log_offset), "commitOrRollback": str(commit_or_rollback),
            "fromTransactionCheck": "true" if from_transaction_check else "false"}


class GetSubscriptionGroupConfigRequestHeader(Header):
    """GET_SUBSCRIPTIONGROUP_CONFIG (352)."""

    group: GroupName


class DeleteSubscriptionGroupRequestHeader(Header):
    """DELETE_SUBSCRIPTIONGROUP (207); the name is checked by the subscription group rule itself
    (namesrv.broker.subscription.config.group_problem), which words RocketMQ's remark."""

    group_name: str = Field(max_length=4096)
    clean_offset: bool = False


class GetProducerConnectionListRequestHeader(Header):
    """GET_PRODUCER_CONNECTION_LIST (204)."""

    producer_group: GroupName


class ResetOffsetRequestHeader(Header):
    """INVOKE_BROKER_TO_RESET_OFFSET (222) and RESET_CONSUMER_CLIENT_OFFSET (220): the group's
    offsets of `topic` at `timestamp` (ms; -1: each queue's max offset); with `queueId` (RocketMQ
    5), that queue alone, to `offset` when given (not -1)."""

    topic: TopicName
    group: GroupName
    timestamp: int = Field(ge=-1)
    is_force: bool = False
    queue_id: int = Field(default=-1, ge=-1, le=65535)
    offset: int | None = Field(default=None, ge=-1)


class CloneGroupOffsetRequestHeader(Header):
    """CLONE_GROUP_OFFSET (314): srcGroup's offsets (of `topic`, or of every topic it has) to destGroup."""

    src_group: GroupName
    dest_group: GroupName
    topic: TopicName | None = None
    offline: bool = False
