"""RocketMQ's request and response codes: the numbers on the wire, named as RocketMQ names them."""

from __future__ import annotations

from enum import IntEnum


class RequestCode(IntEnum):
    """NameServer request codes (RocketMQ's numbers; one processor handler each)."""

    PUT_KV_CONFIG = 100
    GET_KV_CONFIG = 101
    DELETE_KV_CONFIG = 102
    REGISTER_BROKER = 103
    UNREGISTER_BROKER = 104
    GET_ROUTEINFO_BY_TOPIC = 105
    GET_BROKER_CLUSTER_INFO = 106
    WIPE_WRITE_PERM_OF_BROKER = 205
    GET_ALL_TOPIC_LIST_FROM_NAMESERVER = 206
    DELETE_TOPIC_IN_NAMESRV = 216
    REGISTER_TOPIC_IN_NAMESRV = 217
    """RocketMQ 5: a broker (enableSingleTopicRegister) registers one created or updated topic."""
    GET_KVLIST_BY_NAMESPACE = 219
    GET_TOPICS_BY_CLUSTER = 224
    GET_SYSTEM_TOPIC_LIST_FROM_NS = 304
    UPDATE_NAMESRV_CONFIG = 318
    GET_NAMESRV_CONFIG = 319
    QUERY_DATA_VERSION = 322
    ADD_WRITE_PERM_OF_BROKER = 327
    BROKER_HEARTBEAT = 904


class BrokerRequestCode(IntEnum):
    """Broker request codes the client libraries use (RocketMQ's numbers)."""

    SEND_MESSAGE = 10
    PULL_MESSAGE = 11
    QUERY_MESSAGE = 12
    """mqadmin queryMsgByKey / queryMsgByUniqueKey: messages of a topic by key in a time range."""
    UPDATE_AND_CREATE_TOPIC = 17
    """mqadmin updateTopic: create or update one topic on this broker, then register it."""
    QUERY_CONSUMER_OFFSET = 14
    GET_ALL_TOPIC_CONFIG = 21
    """mqadmin / dashboard: the broker's whole topic table and its DataVersion."""
    UPDATE_BROKER_CONFIG = 25
    """mqadmin updateBrokerConfig: change broker settings (a properties body): brokerPermission and the
    retention settings (namesrv.broker.config_update.LIVE_KEYS)."""
    UPDATE_CONSUMER_OFFSET = 15
    GET_BROKER_CONFIG = 26
    """mqadmin getBrokerConfig: every setting as Java properties text, under RocketMQ's names."""
    GET_BROKER_RUNTIME_INFO = 28
    """mqadmin clusterList / brokerStatus and the dashboard: the broker's runtime figures (a KVTable)."""
    SEARCH_OFFSET_BY_TIMESTAMP = 29
    GET_MAX_OFFSET = 30
    GET_MIN_OFFSET = 31
    GET_EARLIEST_MSG_STORETIME = 32
    VIEW_MESSAGE_BY_ID = 33
    """mqadmin queryMsgById: one message by its commit-log offset (from the offset message id)."""
    HEART_BEAT = 34
    UNREGISTER_CLIENT = 35
    CONSUMER_SEND_MSG_BACK = 36
    END_TRANSACTION = 37
    """Producer -> broker, oneway: commit or roll back a prepared (half) message."""
    CHECK_TRANSACTION_STATE = 39
    """Broker -> producer, oneway: a half is still unresolved; answer with END_TRANSACTION."""
    GET_CONSUMER_LIST_BY_GROUP = 38
    NOTIFY_CONSUMER_IDS_CHANGED = 40
    """Broker -> client, oneway: the group's members changed, rebalance now."""
    LOCK_BATCH_MQ = 41
    UNLOCK_BATCH_MQ = 42
    CHECK_CLIENT_CONFIG = 46
    UPDATE_AND_CREATE_SUBSCRIPTIONGROUP = 200
    """mqadmin updateSubGroup: create or replace a consumer group's config (a SubscriptionGroupConfig body)."""
    GET_ALL_SUBSCRIPTIONGROUP_CONFIG = 201
    """Every consumer group's config on the broker (a SubscriptionGroupWrapper)."""
    GET_TOPIC_STATS_INFO = 202
    """mqadmin topicStatus: each queue's min/max offset and last store time (a TopicStatsTable)."""
    GET_CONSUMER_CONNECTION_LIST = 203
    """mqadmin consumerConnection: a group's clients and subscriptions (a ConsumerConnection)."""
    GET_PRODUCER_CONNECTION_LIST = 204
    """mqadmin producerConnection: a producer group's clients (a ProducerConnection)."""
    DELETE_SUBSCRIPTIONGROUP = 207
    """mqadmin deleteSubGroup: drop a consumer group's config (and, with cleanOffset, its offsets)."""
    GET_CONSUME_STATS = 208
    """mqadmin consumerProgress: a group's committed offset against each queue's max (ConsumeStats)."""
    DELETE_TOPIC_IN_BROKER = 215
    """mqadmin deleteTopic's first step: drop the topic on this broker, then register."""
    RESET_CONSUMER_CLIENT_OFFSET = 220
    """Broker -> consumer, oneway: jump to these offsets (a ResetOffsetBody)."""
    INVOKE_BROKER_TO_RESET_OFFSET = 222
    """mqadmin resetOffsetByTime: the broker finds each queue's offset for a time and resets the group."""
    QUERY_TOPIC_CONSUME_BY_WHO = 300
    """mqadmin / dashboard: the consumer groups of a topic (a GroupList)."""
    GET_CONSUMER_RUNNING_INFO = 307
    """mqadmin consumerStatus: the broker asks the client over its own connection (ConsumerRunningInfo)."""
    CONSUME_MESSAGE_DIRECTLY = 309
    """mqadmin queryMsgById -g -d / the dashboard: the broker hands a stored message to one client of a
    group, which runs its listener on it once and answers a ConsumeMessageDirectlyResult."""
    SEND_MESSAGE_V2 = 310
    CLONE_GROUP_OFFSET = 314
    """mqadmin cloneGroupOffset: copy one group's committed offsets to another."""
    VIEW_BROKER_STATS_DATA = 315
    """mqadmin statsAll: one topic's puts or one group's gets over a minute, an hour, a day."""
    SEND_BATCH_MESSAGE = 320
    SEND_REPLY_MESSAGE = 324
    """A responder's reply to a request-reply message: the broker pushes it to the requester."""
    SEND_REPLY_MESSAGE_V2 = 325
    """SEND_REPLY_MESSAGE with SEND_MESSAGE_V2's one-letter header."""
    PUSH_REPLY_MESSAGE_TO_CLIENT = 326
    """Broker -> requester, awaiting its answer: the reply to its request (ReplyMessageRequestHeader)."""
    GET_TOPIC_CONFIG = 351
    """One topic's config on this broker (RocketMQ 5's TopicConfigAndQueueMapping; what an update keeps)."""
    GET_SUBSCRIPTIONGROUP_CONFIG = 352
    """One consumer group's config (created with the defaults on first use, as findSubscriptionGroupConfig)."""
    RECALL_MESSAGE = 370
    """RocketMQ 5.3: cancel a timed message before it is due, by the recall handle its send answered."""
    POP_MESSAGE = 200050
    """RocketMQ 5 pop: messages of a topic made invisible to the group for invisibleTime (namesrv.broker.pop)."""
    ACK_MESSAGE = 200051
    """A popped message is done: it never comes back (by its extraInfo)."""
    CHANGE_MESSAGE_INVISIBLETIME = 200053
    """A popped message stays invisible for a new invisibleTime from now (a new handle)."""
    BATCH_ACK_MESSAGE = 200151
    """ACK_MESSAGE of many messages in one body (BatchAckMessageRequestBody)."""
    HA_TRANSFER = 9001
    """Not RocketMQ's (it has no remoting code for HA; 5.3 uses none between 3010 and 200050): a
    slave's replication long poll on its master's client port (namesrv.store.ha.wire)."""


NAMESRV_LARGE_REQUEST_CODES = frozenset({RequestCode.REGISTER_BROKER, RequestCode.REGISTER_TOPIC_IN_NAMESRV,
                                         RequestCode.UPDATE_NAMESRV_CONFIG, RequestCode.PUT_KV_CONFIG})
"""NameServer requests whose frames may be big (a registration's topic table, a config or KV value);
every other request (a route query above all) is tiny."""

SEND_CODES = frozenset({BrokerRequestCode.SEND_MESSAGE, BrokerRequestCode.SEND_MESSAGE_V2,
                        BrokerRequestCode.SEND_BATCH_MESSAGE})
"""The broker codes that store messages."""

BROKER_LARGE_REQUEST_CODES = SEND_CODES | {BrokerRequestCode.HEART_BEAT, BrokerRequestCode.LOCK_BATCH_MQ,
                                           BrokerRequestCode.UNLOCK_BATCH_MQ, BrokerRequestCode.SEND_REPLY_MESSAGE,
                                           BrokerRequestCode.SEND_REPLY_MESSAGE_V2}
"""Broker requests whose frames may be big: messages, and client bodies listing many groups or queues."""


class ResponseCode(IntEnum):
    SUCCESS = 0
    SYSTEM_ERROR = 1
    SYSTEM_BUSY = 2
    REQUEST_CODE_NOT_SUPPORTED = 3
    FLUSH_DISK_TIMEOUT = 10
    SLAVE_NOT_AVAILABLE = 11
    FLUSH_SLAVE_TIMEOUT = 12
    MESSAGE_ILLEGAL = 13
    SERVICE_NOT_AVAILABLE = 14
    NO_PERMISSION = 16
    TOPIC_NOT_EXIST = 17
    PULL_NOT_FOUND = 19
    PULL_RETRY_IMMEDIATELY = 20
    PULL_OFFSET_MOVED = 21
    QUERY_NOT_FOUND = 22
    SUBSCRIPTION_PARSE_FAILED = 23
    SUBSCRIPTION_NOT_EXIST = 24
    SUBSCRIPTION_NOT_LATEST = 25
    SUBSCRIPTION_GROUP_NOT_EXIST = 26
    FILTER_DATA_NOT_EXIST = 27
    INVALID_PARAMETER = 29
    CONSUMER_NOT_ONLINE = 206
    CONSUME_MSG_TIMEOUT = 207
    NO_MESSAGE = 208
    """A pop found nothing, or an ack/change named no message in flight."""
    POLLING_FULL = 209
    POLLING_TIMEOUT = 210
    ILLEGAL_OPERATION = 604
    """A request the broker will not carry out as asked (a recall handle that does not decode or match)."""
