"""Numbers and names fixed by RocketMQ's protocol, so tools that know RocketMQ read ours unchanged."""

from __future__ import annotations

import re
from enum import IntEnum, IntFlag


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
    GET_KVLIST_BY_NAMESPACE = 219
    GET_TOPICS_BY_CLUSTER = 224
    GET_SYSTEM_TOPIC_LIST_FROM_NS = 304
    UPDATE_NAMESRV_CONFIG = 318
    GET_NAMESRV_CONFIG = 319
    QUERY_DATA_VERSION = 322
    ADD_WRITE_PERM_OF_BROKER = 327
    BROKER_HEARTBEAT = 904


class ResponseCode(IntEnum):
    SUCCESS = 0
    SYSTEM_ERROR = 1
    SYSTEM_BUSY = 2
    REQUEST_CODE_NOT_SUPPORTED = 3
    FLUSH_DISK_TIMEOUT = 10
    MESSAGE_ILLEGAL = 13
    SERVICE_NOT_AVAILABLE = 14
    NO_PERMISSION = 16
    TOPIC_NOT_EXIST = 17
    QUERY_NOT_FOUND = 22


class Perm(IntFlag):
    """Queue permission bits (RocketMQ's PermName)."""

    INHERIT = 1
    WRITE = 2
    READ = 4


PERM_ALL = int(Perm.READ | Perm.WRITE | Perm.INHERIT)


def is_readable(perm: int) -> bool:
    return bool(perm & Perm.READ)


def is_writeable(perm: int) -> bool:
    return bool(perm & Perm.WRITE)


def perm_to_string(perm: int) -> str:
    """RocketMQ's compact form: R, W, X or '-' per bit (e.g. 'RW-')."""
    return ("R" if perm & Perm.READ else "-") + ("W" if perm & Perm.WRITE else "-") + (
        "X" if perm & Perm.INHERIT else "-"
    )


MASTER_ID = 0
"""brokerId 0 is the master of a broker group; any other id is a slave."""

AUTO_CREATE_TOPIC_KEY_TOPIC = "TBW102"
DEFAULT_TOPIC_QUEUE_NUMS = 4
"""A producer taking TBW102's route uses at most this many queues (defaultTopicQueueNums)."""

ORDER_TOPIC_CONFIG_NAMESPACE = "ORDER_TOPIC_CONFIG"

SELF_TEST_TOPIC = "SELF_TEST_TOPIC"
BENCHMARK_TOPIC = "BenchmarkTest"
OFFSET_MOVED_EVENT = "OFFSET_MOVED_EVENT"
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
RMQ_SYS_PREFIX = "rmq_sys_"
RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"
DLQ_GROUP_TOPIC_PREFIX = "%DLQ%"

SYSTEM_TOPICS: frozenset[str] = frozenset(
    {
        AUTO_CREATE_TOPIC_KEY_TOPIC,
        SELF_TEST_TOPIC,
        BENCHMARK_TOPIC,
        OFFSET_MOVED_EVENT,
        SCHEDULE_TOPIC,
        "RMQ_SYS_TRANS_HALF_TOPIC",
        "RMQ_SYS_TRACE_TOPIC",
        "RMQ_SYS_TRANS_OP_HALF_TOPIC",
        "TRANS_CHECK_MAX_TIME_TOPIC",
    }
)

TOPIC_MAX_LENGTH = 127
# \Z, not $: in Python "$" also matches before a trailing newline, so "Topic\n" would pass.
TOPIC_PATTERN = re.compile(r"^[%|a-zA-Z0-9_-]+\Z")
NAME_MAX_LENGTH = 255
NAME_PATTERN = re.compile(r"^[A-Za-z0-9_.:%|@\-]+\Z")
"""Broker, cluster and address names: host:port, actor names and RocketMQ-style ids all fit."""

MAX_QUEUE_NUMS = 1024
"""Upper bound accepted for read/write queue counts; RocketMQ has none, a huge value is a bug."""

TOPIC_SYS_FLAG_MAX = 3
"""Unit (1) and unit-sub (2) flags are the only topicSysFlag bits RocketMQ defines."""

DEFAULT_MAX_BODY_SIZE = 16 * 1024 * 1024
"""RocketMQ's default frame limit (16 MiB); a larger body is refused before decoding."""
