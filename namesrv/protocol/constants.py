"""Numbers and names fixed by RocketMQ's protocol, so tools that know RocketMQ read ours unchanged."""

from __future__ import annotations

from enum import IntFlag


class Perm(IntFlag):
    """Queue permission bits (RocketMQ's PermName)."""

    INHERIT = 1
    WRITE = 2
    READ = 4


PERM_ALL = int(Perm.READ | Perm.WRITE | Perm.INHERIT)
TOPIC_PERMS = {int(Perm.WRITE): "write only", int(Perm.READ): "read only",
               int(Perm.READ | Perm.WRITE): "read and write"}
"""The perms an operator gives a topic (rocketmq-dashboard's and RocketMQ mqadmin updateTopicPerm's 2, 4, 6)."""


def is_readable(perm: int) -> bool:
    return bool(perm & Perm.READ)


def is_writeable(perm: int) -> bool:
    return bool(perm & Perm.WRITE)


def perm_to_string(perm: int) -> str:
    """RocketMQ's compact form: R, W, X or '-' per bit (e.g. 'RW-')."""
    return ("R" if perm & Perm.READ else "-") + ("W" if perm & Perm.WRITE else "-") + (
        "X" if perm & Perm.INHERIT else "-"
    )


UNIQUE_MSG_QUERY_FLAG = "_UNIQUE_KEY_QUERY"
"""MixAll.UNIQUE_MSG_QUERY_FLAG: a QUERY_MESSAGE whose key is a unique key (the client message id)."""

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

TRANS_HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
TRANS_OP_HALF_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
TRANS_CHECK_MAX_TIME_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"
TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"
CHECKPOINT_TOPIC = "CHECKPOINT_TOPIC"

SYSTEM_TOPICS: frozenset[str] = frozenset(
    {
        AUTO_CREATE_TOPIC_KEY_TOPIC,
        SELF_TEST_TOPIC,
        BENCHMARK_TOPIC,
        OFFSET_MOVED_EVENT,
        SCHEDULE_TOPIC,
        TRANS_HALF_TOPIC,
        TRACE_TOPIC,
        TRANS_OP_HALF_TOPIC,
        TRANS_CHECK_MAX_TIME_TOPIC,
        CHECKPOINT_TOPIC,
    }
)
"""RocketMQ's TopicValidator system topics (with the `rmq_sys_` prefix, what `isSystemTopic` means)."""

NOT_ALLOWED_SEND_TOPICS: frozenset[str] = frozenset(
    {
        SCHEDULE_TOPIC,
        TRANS_HALF_TOPIC,
        TRANS_OP_HALF_TOPIC,
        TRANS_CHECK_MAX_TIME_TOPIC,
        SELF_TEST_TOPIC,
        OFFSET_MOVED_EVENT,
    }
)
"""The only topics a producer refuses to send to (TopicValidator's not-allowed-send set): TBW102,
BenchmarkTest, RMQ_SYS_TRACE_TOPIC and other `rmq_sys_` topics are system topics yet sendable."""

TOPIC_MAX_LENGTH = 127
GROUP_MAX_LENGTH = 255
TOPIC_REGEX = r"^[%|a-zA-Z0-9_-]+$"
"""RocketMQ's topic (and group) name rule; checked with pydantic's Rust regex, whose "$" is the end
of the text (Python's "$" would also match before a trailing newline)."""
NAME_MAX_LENGTH = 255
NAME_REGEX = r"^[A-Za-z0-9_.:%|@-]+$"
"""Broker, cluster and address names: host:port, actor names and RocketMQ-style ids all fit."""

MAX_QUEUE_NUMS = 1024
"""Upper bound accepted for read/write queue counts; RocketMQ has none, a huge value is a bug."""

TOPIC_SYS_FLAG_MAX = 3
"""Unit (1) and unit-sub (2) flags are the only topicSysFlag bits RocketMQ defines."""

MAX_MESSAGE_SIZE = 4 * 1024 * 1024
"""A message body's limit (RocketMQ's maxMessageSize, 4 MiB), on the producer and the broker."""

MAX_FRAME_SIZE = 16 * 1024 * 1024
"""RocketMQ's remoting frame limit (16 MiB); a larger frame or body is refused before decoding."""
