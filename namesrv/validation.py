"""Name and value checks shared by the NameServer, the broker and the producer.

Every check raises :class:`InvalidInput` with a message a person can act on; callers turn it into an
error response before touching any table.
"""

from __future__ import annotations

from namesrv.constants import (
    MAX_QUEUE_NUMS,
    NAME_MAX_LENGTH,
    NAME_PATTERN,
    PERM_ALL,
    SYSTEM_TOPICS,
    TOPIC_MAX_LENGTH,
    TOPIC_PATTERN,
    TOPIC_SYS_FLAG_MAX,
)


class InvalidInput(ValueError):
    """A request field is malformed; nothing was changed."""


def check_topic(topic: object) -> str:
    if not isinstance(topic, str):
        raise InvalidInput(f"topic must be a string, got {type(topic).__name__}")
    if not topic:
        raise InvalidInput("topic is blank")
    if len(topic) > TOPIC_MAX_LENGTH:
        raise InvalidInput(f"topic is longer than {TOPIC_MAX_LENGTH} characters: {topic[:40]}...")
    if not TOPIC_PATTERN.match(topic):
        raise InvalidInput(f"topic {topic!r} has characters outside ^[%|a-zA-Z0-9_-]+$")
    return topic


def check_not_system_topic(topic: str) -> str:
    """Users may not send to or create reserved topics (RocketMQ's TopicValidator)."""
    if topic in SYSTEM_TOPICS or topic.startswith("rmq_sys_"):
        raise InvalidInput(f"topic {topic!r} is a reserved system topic")
    return topic


def check_name(value: object, what: str) -> str:
    """Broker, cluster, address and namespace names."""
    if not isinstance(value, str):
        raise InvalidInput(f"{what} must be a string, got {type(value).__name__}")
    if not value:
        raise InvalidInput(f"{what} is blank")
    if len(value) > NAME_MAX_LENGTH:
        raise InvalidInput(f"{what} is longer than {NAME_MAX_LENGTH} characters")
    if not NAME_PATTERN.match(value):
        raise InvalidInput(f"{what} {value!r} has characters outside ^[A-Za-z0-9_.:%|@-]+$")
    return value


def check_queue_nums(value: object, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidInput(f"{what} must be an integer, got {type(value).__name__}")
    if value < 0 or value > MAX_QUEUE_NUMS:
        raise InvalidInput(f"{what} must be within [0, {MAX_QUEUE_NUMS}], got {value}")
    return value


def check_perm(value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidInput(f"perm must be an integer, got {type(value).__name__}")
    if value < 0 or value & ~PERM_ALL:
        raise InvalidInput(f"perm {value} has bits other than READ=4, WRITE=2, INHERIT=1")
    return value


def check_topic_sys_flag(value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidInput(f"topicSysFlag must be an integer, got {type(value).__name__}")
    if value < 0 or value > TOPIC_SYS_FLAG_MAX:
        raise InvalidInput(f"topicSysFlag must be within [0, {TOPIC_SYS_FLAG_MAX}], got {value}")
    return value


def check_broker_id(value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidInput(f"brokerId must be an integer, got {type(value).__name__}")
    if value < 0 or value > 2**31:
        raise InvalidInput(f"brokerId must be within [0, 2^31], got {value}")
    return value
