"""Who consumes from this broker (RocketMQ's ConsumerManager), fed by HEART_BEAT.

Per consumer group: its client channels (one per client id and connection) with their last
heartbeat, and its subscriptions. A channel leaves when its connection closes, when the client
unregisters, or after 120 s without a heartbeat; every change of a group's membership is reported
so the broker can tell the group's other members to rebalance (NOTIFY_CONSUMER_IDS_CHANGED).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from namesrv.common.clock import Clock
from namesrv.filter import FilterParseError, SqlFilter, compile_sql92, is_tag_type

log = logging.getLogger(__name__)

CHANNEL_EXPIRED_MS = 120_000
"""A client silent for this long is gone (RocketMQ's channelExpiredTimeout)."""


@dataclass(slots=True)
class SubscriptionData:
    topic: str
    sub_string: str = "*"
    tags_set: frozenset[str] = frozenset()
    sub_version: int = 0
    expression_type: str = "TAG"
    sql: SqlFilter | None = None
    """The compiled expression of a SQL92 subscription (None when it did not compile)."""
    filter_error: str | None = None
    """Why a non-TAG subscription has no compiled filter (its expression or type was refused)."""

    @classmethod
    def build(cls, topic: str, sub_string: str, expression_type: str | None, sub_version: int = 0,
              tags: frozenset[str] | None = None) -> SubscriptionData:
        """A TAG subscription's tag set, or a SQL92 one compiled (FilterAPI.build + ConsumerFilterManager.build)."""
        if is_tag_type(expression_type):
            return cls(topic, sub_string, tags if tags else parse_tags(sub_string), sub_version)
        assert expression_type is not None
        sub = cls(topic, sub_string, frozenset(), sub_version, expression_type)
        if expression_type != "SQL92":
            sub.filter_error = f"unknown expression type {expression_type!r} (TAG or SQL92)"
            return sub
        try:
            sub.sql = compile_sql92(sub_string)
        except FilterParseError as e:
            sub.filter_error = str(e)
        return sub

    @classmethod
    def from_wire(cls, d: dict[str, Any]) -> SubscriptionData:
        sub = str(d.get("subString") or "*")
        tags = d.get("tagsSet")
        version = d.get("subVersion")
        return cls.build(str(d.get("topic", "")), sub, str(d.get("expressionType") or "TAG"),
                         version if isinstance(version, int) else 0,
                         frozenset(str(t) for t in tags) if isinstance(tags, list) else None)

    def matches(self, tags: str | None) -> bool:
        """TAG filtering: everything for '*', else the message's tag must be one of the set."""
        return not self.tags_set or (tags is not None and tags in self.tags_set)

    def accepts(self, properties: Mapping[str, str]) -> bool:
        """Deliver a stored message? TAG subscriptions look at its tag, SQL92 ones evaluate their
        expression over its properties (TAGS, KEYS and the rest included, as RocketMQ does)."""
        if is_tag_type(self.expression_type):
            return self.matches(properties.get("TAGS"))
        if self.sql is None:
            return False
        try:
            return self.sql.matches(properties)
        except Exception:  # as RocketMQ (which catches Throwable): logged, not delivered, the pull goes on
            log.exception("filter %r failed on properties %r", self.sub_string, dict(properties))
            return False


def parse_tags(expression: str | None) -> frozenset[str]:
    """'TagA || TagB' -> {TagA, TagB}; '*' or blank -> empty (every tag)."""
    if expression is None or expression.strip() in ("", "*"):
        return frozenset()
    return frozenset(t.strip() for t in expression.split("||") if t.strip())


@dataclass(slots=True)
class ClientChannel:
    client_id: str
    channel: str
    language: int
    version: int
    last_update: int
    running_info: bytes | None = None
    """A Ray-native consumer's ConsumerRunningInfo from its latest heartbeat (what 307 answers for it)."""


@dataclass(slots=True)
class ConsumerGroupInfo:
    group: str
    consume_type: str = "CONSUME_PASSIVELY"
    message_model: str = "CLUSTERING"
    consume_from_where: str = "CONSUME_FROM_LAST_OFFSET"
    subscriptions: dict[str, SubscriptionData] = field(default_factory=dict)
    channels: dict[str, ClientChannel] = field(default_factory=dict)


class ConsumerManager:
    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.groups: dict[str, ConsumerGroupInfo] = {}

    def register_consumer(self, group: str, client: ClientChannel, consume_type: str, message_model: str,
                          consume_from_where: str, subscriptions: list[SubscriptionData]) -> bool:
        """Record a heartbeat; True when the group's membership changed (a new member)."""
        info = self.groups.get(group)
        if info is None:
            info = self.groups[group] = ConsumerGroupInfo(group)
        info.consume_type, info.message_model, info.consume_from_where = consume_type, message_model, consume_from_where
        changed = client.channel not in info.channels
        client.last_update = self.clock()
        info.channels[client.channel] = client
        info.subscriptions = {s.topic: s for s in subscriptions}
        return changed

    def unregister_consumer(self, group: str, channel: str) -> bool:
        info = self.groups.get(group)
        if info is None or info.channels.pop(channel, None) is None:
            return False
        if not info.channels:
            del self.groups[group]
        return True

    def do_channel_close(self, channel: str) -> list[str]:
        """A connection closed: the groups it was a member of (each lost a member)."""
        return [g for g in list(self.groups) if self.unregister_consumer(g, channel)]

    def scan_not_active(self, expired_ms: int = CHANNEL_EXPIRED_MS) -> list[str]:
        now = self.clock()
        changed = []
        for group, info in list(self.groups.items()):
            for channel, c in list(info.channels.items()):
                if now - c.last_update > expired_ms and self.unregister_consumer(group, channel):
                    changed.append(group)
        return changed

    def consumer_ids(self, group: str) -> list[str]:
        info = self.groups.get(group)
        return sorted({c.client_id for c in info.channels.values()}) if info else []

    def channels_of(self, group: str) -> list[str]:
        info = self.groups.get(group)
        return list(info.channels) if info else []

    def subscription(self, group: str, topic: str) -> SubscriptionData | None:
        info = self.groups.get(group)
        return info.subscriptions.get(topic) if info else None
