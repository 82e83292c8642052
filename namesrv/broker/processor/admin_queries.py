"""The read-only admin codes of a broker (RocketMQ's AdminBrokerProcessor) that mqadmin's
topicStatus, consumerProgress, consumerConnection and getBrokerConfig and the dashboard read:
GET_TOPIC_STATS_INFO (202), GET_CONSUME_STATS (208), GET_CONSUMER_CONNECTION_LIST (203),
GET_ALL_TOPIC_CONFIG (21), GET_TOPIC_CONFIG (351), QUERY_TOPIC_CONSUME_BY_WHO (300) and GET_BROKER_CONFIG (26), with
RocketMQ's body shapes (maps keyed by MessageQueue objects written as fastjson writes them); and
the message lookups of queryMsgByKey / queryMsgByUniqueKey / queryMsgById (RocketMQ's
QueryMessageProcessor): QUERY_MESSAGE (12) through the store's index and VIEW_MESSAGE_BY_ID (33).

Store reads (a queue's last store time) run off the event loop, in one go per request.

GET_PRODUCER_CONNECTION_LIST (204, mqadmin producerConnection) lists a producer group's clients
from their heartbeats (namesrv.broker.client.producer_manager).

GET_CONSUMER_RUNNING_INFO (307) and CONSUME_MESSAGE_DIRECTLY (309), which a broker answers by asking
a consumer, are namesrv.broker.processor.consumer_calls's.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

from namesrv.broker.client.consumer_manager import ConsumerManager, SubscriptionData
from namesrv.broker.client.consumer_offsets import TOPIC_GROUP_SEPARATOR, ConsumerOffsetManager
from namesrv.broker.client.producer_manager import ProducerManager
from namesrv.broker.config import BrokerConfig, rocketmq_name
from namesrv.broker.context import MayRead, anyone_may_read
from namesrv.broker.processor.types import BrokerIdentity
from namesrv.broker.read_fence import ReadFence
from namesrv.broker.topic_config_manager import TopicConfigManager
from namesrv.protocol import fastjson
from namesrv.protocol.admin_bodies import (
    Connection,
    ConsumerConnection,
    ConsumeStats,
    GroupList,
    OffsetWrapper,
    ProducerConnection,
    TopicOffset,
    TopicStatsTable,
)
from namesrv.protocol.bodies import format_properties
from namesrv.protocol.broker_headers import (
    GetConsumerListByGroupRequestHeader,
    GetConsumeStatsRequestHeader,
    GetProducerConnectionListRequestHeader,
    QueryMessageRequestHeader,
    TopicHeader,
    ViewMessageRequestHeader,
)
from namesrv.protocol.codes import BrokerRequestCode, ResponseCode
from namesrv.protocol.constants import MAX_FRAME_SIZE, UNIQUE_MSG_QUERY_FLAG
from namesrv.protocol.message.codec import encode_message_ext
from namesrv.protocol.message.types import StoredMessage
from namesrv.protocol.models import MessageQueue
from namesrv.remoting.command import RemotingRequest, RemotingResponse, error
from namesrv.remoting.pipeline import Answer, Handler, RequestContext
from namesrv.remoting.wire_command import LanguageCode, ext_value
from namesrv.store.message_store import MessageStore

DEFAULT_QUERY_MAX_NUM = 32
MAX_MSGS_NUM_BATCH = 64
"""RocketMQ's MessageStoreConfig.defaultQueryMaxNum and maxMsgsNumBatch."""
QUERY_BODY_MAX = MAX_FRAME_SIZE - 64 * 1024
"""A QUERY_MESSAGE answer stops short of a frame's limit (RocketMQ would send a frame its own
clients refuse: 64 messages of 4 MB); the newest messages are the ones kept."""
NOT_SHOWN = frozenset({"credentials"})
"""Never answered: the broker's own account carries its secret key."""


def _java(value: object) -> str:
    return value.value if hasattr(value, "value") and isinstance(value.value, str) else ext_value(value)


def _client_addr(channel: str) -> str:
    """A TCP connection's token is `tcp:<peer>#<n>`; a Ray caller's channel is its own token."""
    return channel.removeprefix("tcp:").partition("#")[0]


def _language(code: int) -> str:
    try:
        return LanguageCode(code).name
    except ValueError:
        return "OTHER"


class AdminQueries:
    def __init__(self, identity: BrokerIdentity, config: BrokerConfig, topics: TopicConfigManager, store: MessageStore,
                 fence: ReadFence, offsets: ConsumerOffsetManager, consumers: Callable[[], ConsumerManager],
                 store_dir: str, may_read: MayRead = anyone_may_read,
                 producers: Callable[[], ProducerManager] | None = None) -> None:
        """`fence` bounds what the queries show to what readers may see (namesrv.broker.read_fence);
        `consumers()` is the broker processor's live consumer table; `may_read` the ACL's check
        of a topic the request does not name (the topic of the message VIEW_MESSAGE_BY_ID finds)."""
        self.may_read = may_read
        self.identity = identity
        self.config = config
        self.topics = topics
        self.store = store
        self.fence = fence
        self.offsets = offsets
        self.consumers = consumers
        self.producers = producers if producers is not None else (lambda: ProducerManager(lambda: 0))
        """The broker processor's live producer table (an empty one when not given)."""
        self.store_dir = store_dir
        self.handlers: dict[int, Handler] = {
            BrokerRequestCode.GET_TOPIC_STATS_INFO: self.get_topic_stats_info,
            BrokerRequestCode.GET_CONSUME_STATS: self.get_consume_stats,
            BrokerRequestCode.GET_CONSUMER_CONNECTION_LIST: self.get_consumer_connection_list,
            BrokerRequestCode.GET_PRODUCER_CONNECTION_LIST: self.get_producer_connection_list,
            BrokerRequestCode.GET_ALL_TOPIC_CONFIG: self.get_all_topic_config,
            BrokerRequestCode.GET_TOPIC_CONFIG: self.get_topic_config,
            BrokerRequestCode.QUERY_TOPIC_CONSUME_BY_WHO: self.query_topic_consume_by_who,
            BrokerRequestCode.GET_BROKER_CONFIG: self.get_broker_config,
            BrokerRequestCode.QUERY_MESSAGE: self.query_message,
            BrokerRequestCode.VIEW_MESSAGE_BY_ID: self.view_message_by_id,
        }

    # ------------------------------------------------------------------ store figures
    def _last_store_time(self, topic: str, queue_id: int, offset: int) -> int:
        found = self.store.get_message(topic, queue_id, offset, 1) if offset >= 0 else []
        return found[0].store_timestamp if found else 0

    def mq_of(self, topic: str, queue_id: int) -> MessageQueue:
        return MessageQueue(topic, self.identity.broker_name, queue_id)

    def get_topic_stats_info(self, request: RemotingRequest, ctx: RequestContext) -> Answer:
        topic = TopicHeader.from_ext(request.ext_fields, wire=True).topic
        tc = self.topics.topic_config_table.get(topic)
        if tc is None:
            return error(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist")
        return self._topic_stats(topic, max(tc.write_queue_nums, tc.read_queue_nums))

    async def _topic_stats(self, topic: str, queues: int) -> RemotingResponse:
        def collect() -> TopicStatsTable:
            table = TopicStatsTable()
            for q in range(queues):
                low, high = max(0, self.store.min_offset(topic, q)), max(0, self.fence.max_offset(topic, q))
                stamp = self._last_store_time(topic, q, high - 1) if high > 0 else 0
                table.offset_table[self.mq_of(topic, q)] = TopicOffset(low, high, stamp)
            return table
        return RemotingResponse(body=fastjson.dumps((await asyncio.to_thread(collect)).to_wire()))

    def get_consume_stats(self, request: RemotingRequest, ctx: RequestContext) -> Answer:
        h = GetConsumeStatsRequestHeader.from_ext(request.ext_fields, wire=True)
        group = h.consumer_group
        topics = {h.topic} if h.topic else set(self._topics_of_group(group))
        manager = self.consumers()
        if manager.groups.get(group) and manager.groups[group].subscriptions:  # as RocketMQ: only what it subscribes
            topics = {t for t in topics if manager.subscription(group, t) is not None}
        return self._consume_stats(group, sorted(topics))

    def _topics_of_group(self, group: str) -> list[str]:
        suffix = f"{TOPIC_GROUP_SEPARATOR}{group}"
        return [key[: -len(suffix)] for key in self.offsets.table if key.endswith(suffix)]

    async def _consume_stats(self, group: str, topics: list[str]) -> RemotingResponse:
        def collect() -> ConsumeStats:
            stats = ConsumeStats()
            for topic in topics:
                tc = self.topics.topic_config_table.get(topic)
                for q in range(tc.read_queue_nums if tc is not None else 0):
                    broker_offset = max(0, self.fence.max_offset(topic, q))
                    consumer_offset = max(0, self.offsets.query_offset(group, topic, q))
                    stamp = self._last_store_time(topic, q, consumer_offset - 1)
                    stats.offset_table[self.mq_of(topic, q)] = OffsetWrapper(broker_offset, consumer_offset,
                                                                           consumer_offset, stamp)
            return stats
        return RemotingResponse(body=fastjson.dumps((await asyncio.to_thread(collect)).to_wire()))

    # ------------------------------------------------------------------ messages by key and by id
    def query_message(self, request: RemotingRequest, ctx: RequestContext) -> Answer:
        """QUERY_MESSAGE: the messages of a topic filed under a key (or, with `_UNIQUE_KEY_QUERY`,
        a unique key: maxNum becomes defaultQueryMaxNum as in RocketMQ), in RocketMQ's pull-body
        layout, with the index's last update in the header; none is QUERY_NOT_FOUND. maxNum is
        capped at maxMsgsNumBatch (64), as RocketMQ's store caps it."""
        h = QueryMessageRequestHeader.from_ext(request.ext_fields, wire=True)
        max_num = h.max_num
        if str((request.ext_fields or {}).get(UNIQUE_MSG_QUERY_FLAG, "")).lower() == "true":
            max_num = DEFAULT_QUERY_MAX_NUM
        return self._query_message(h.topic, h.key, min(max_num, MAX_MSGS_NUM_BATCH), h.begin_timestamp,
                                   h.end_timestamp)

    async def _query_message(self, topic: str, key: str, max_num: int, begin: int, end: int) -> RemotingResponse:
        matches = await asyncio.to_thread(self.store.query_message, topic, key, max_num, begin, end)
        readable_end = self.fence.readable_end()
        found = [m for m in matches if m.commit_log_offset + m.store_size <= readable_end]
        stamp, phy = self.store.index.last_update()
        ext = {"indexLastUpdateTimestamp": str(stamp), "indexLastUpdatePhyoffset": str(phy)}
        if not found:
            return RemotingResponse(ResponseCode.QUERY_NOT_FOUND, "can not find message, maybe time range not correct",
                                    ext_fields=ext)
        parts: list[bytes] = []
        total = 0
        for m in found:  # newest first, as many as one frame holds (at least one: a message always fits)
            part = encode_message_ext(m, self.identity.broker_addr)
            if parts and total + len(part) > QUERY_BODY_MAX:
                break
            parts.append(part)
            total += len(part)
        return RemotingResponse(ext_fields=ext, body=b"".join(parts))

    def view_message_by_id(self, request: RemotingRequest, ctx: RequestContext) -> Answer:
        """VIEW_MESSAGE_BY_ID: the one message at a commit-log offset (the client decoded it from
        the offset message id), or SYSTEM_ERROR when no message starts there or it is not readable
        yet (past what the SyncStateSet holds, as a pull and QUERY_MESSAGE)."""
        offset = ViewMessageRequestHeader.from_ext(request.ext_fields, wire=True).offset
        return self._view_message(request, ctx, offset)

    async def _view_message(self, request: RemotingRequest, ctx: RequestContext, offset: int) -> RemotingResponse:
        found = await readable_message(self.store, self.fence, self.may_read, request, ctx, offset)
        if isinstance(found, RemotingResponse):
            return found
        return RemotingResponse(body=encode_message_ext(found, self.identity.broker_addr))

    # ------------------------------------------------------------------ clients and groups
    def get_consumer_connection_list(self, request: RemotingRequest, ctx: RequestContext) -> Answer:
        group = GetConsumerListByGroupRequestHeader.from_ext(request.ext_fields, wire=True).consumer_group
        info = self.consumers().groups.get(group)
        if info is None or not info.channels:
            return error(ResponseCode.CONSUMER_NOT_ONLINE, f"the consumer group[{group}] not online")
        body = ConsumerConnection(
            [Connection(c.client_id, _client_addr(c.channel), _language(c.language), c.version)
             for c in info.channels.values()],
            {t: _subscription_wire(s) for t, s in info.subscriptions.items()},
            info.consume_type, info.message_model, info.consume_from_where)
        return RemotingResponse(body=fastjson.dumps(body.to_wire()))

    def get_producer_connection_list(self, request: RemotingRequest, ctx: RequestContext) -> Answer:
        """mqadmin producerConnection: the group's live producers; a group with none is RocketMQ's
        SYSTEM_ERROR "the producer group[...] not exist"."""
        group = GetProducerConnectionListRequestHeader.from_ext(request.ext_fields, wire=request.wire).producer_group
        channels = self.producers().channels_of(group)
        if not channels:
            return error(ResponseCode.SYSTEM_ERROR, f"the producer group[{group}] not exist")
        body = ProducerConnection([Connection(c.client_id, _client_addr(c.channel), _language(c.language), c.version)
                                   for c in channels])
        return RemotingResponse(body=fastjson.dumps(body.to_wire()), payload=body)

    def query_topic_consume_by_who(self, request: RemotingRequest, ctx: RequestContext) -> Answer:
        topic = TopicHeader.from_ext(request.ext_fields, wire=True).topic
        online = {g for g, info in self.consumers().groups.items() if topic in info.subscriptions}
        committed = {key.partition(TOPIC_GROUP_SEPARATOR)[2] for key in self.offsets.table
                     if key.partition(TOPIC_GROUP_SEPARATOR)[0] == topic}
        return RemotingResponse(body=fastjson.dumps(GroupList(sorted(online | committed)).to_wire()))

    # ------------------------------------------------------------------ configuration
    def get_all_topic_config(self, request: RemotingRequest, ctx: RequestContext) -> Answer:
        table = {name: tc.to_wire() for name, tc in self.topics.topic_config_table.items()}
        body = {"dataVersion": self.topics.data_version.to_wire(), "topicConfigTable": table}
        return RemotingResponse(ext_fields={"totalTopicNum": str(len(table))}, body=fastjson.dumps(body))

    def get_topic_config(self, request: RemotingRequest, ctx: RequestContext) -> Answer:
        """GET_TOPIC_CONFIG (351): one topic's config as RocketMQ 5 writes it (a TopicConfigAndQueueMapping
        with no mapping: this broker has no static topics, so `lo` asks for nothing more)."""
        topic = TopicHeader.from_ext(request.ext_fields, wire=True).topic
        tc = self.topics.topic_config_table.get(topic)
        if tc is None:
            return error(ResponseCode.TOPIC_NOT_EXIST, f"No topic in this broker. topic: {topic}")
        return RemotingResponse(body=fastjson.dumps(tc.to_wire()), payload=tc)

    def broker_config(self) -> dict[str, str]:
        """Every setting under RocketMQ's name (the broker's secret never among them)."""
        host, _, port = self.identity.broker_addr.rpartition(":")
        props = {"brokerClusterName": self.identity.cluster_name, "brokerName": self.identity.broker_name,
                 "brokerId": str(self.identity.broker_id), "brokerIP1": host or self.identity.broker_addr,
                 "listenPort": port if port.isdigit() else "0", "storePathRootDir": self.store_dir}
        for name, value in self.config.model_dump().items():
            if name not in NOT_SHOWN and value is not None:
                props[rocketmq_name(name)] = _java(value)
        return props

    def get_broker_config(self, request: RemotingRequest, ctx: RequestContext) -> Answer:
        version = json.dumps(self.topics.data_version.to_wire(), separators=(",", ":"))
        return RemotingResponse(ext_fields={"version": version}, body=format_properties(self.broker_config()))


async def readable_message(store: MessageStore, fence: ReadFence, may_read: MayRead, request: RemotingRequest,
                           ctx: RequestContext, offset: int) -> StoredMessage | RemotingResponse:
    """The message at a commit-log offset as the caller may see it (VIEW_MESSAGE_BY_ID, and the one
    CONSUME_MESSAGE_DIRECTLY hands a consumer), read off the event loop; or the refusal: SYSTEM_ERROR
    when no message starts there or it is not readable yet (past what the SyncStateSet holds, as a
    pull), NO_PERMISSION when the caller may not read its topic."""
    found = await asyncio.to_thread(store.get_by_commit_offset, offset)
    if found is None or found.commit_log_offset + found.store_size > fence.readable_end():
        return error(ResponseCode.SYSTEM_ERROR, f"can not find message by the offset, {offset}")
    denied = may_read(request, ctx, found.topic)
    if denied is not None:
        return error(ResponseCode.NO_PERMISSION, denied)
    return found


def _subscription_wire(sub: SubscriptionData) -> dict[str, Any]:
    return {"classFilterMode": False, "codeSet": [], "expressionType": sub.expression_type,
            "subString": sub.sub_string, "subVersion": sub.sub_version, "tagsSet": sorted(sub.tags_set),
            "topic": sub.topic}
