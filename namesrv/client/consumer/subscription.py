"""What a consumer subscribes to (RocketMQ's MessageSelector and SubscriptionData, client side): a
tag expression (`TagA || TagB`, `*`) or a SQL92 expression over the message's properties.

The broker filters first (by tag hash, or by the SQL92 expression when its property filter is on);
the client then keeps only the messages whose tag is in the set, as RocketMQ's
PullAPIWrapper.processPullResult does (two tags may share a hash)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from namesrv.broker.client.consumer_manager import parse_tags
from namesrv.client.errors import MQClientError
from namesrv.filter import SQL92, TAG, FilterParseError, compile_sql92
from namesrv.store.queue.consume_queue import tag_hash

SUB_ALL = "*"


@dataclass(frozen=True)
class MessageSelector:
    expression_type: str
    expression: str

    @classmethod
    def by_tag(cls, expression: str | None) -> MessageSelector:
        return cls(TAG, expression.strip() if expression and expression.strip() else SUB_ALL)

    @classmethod
    def by_sql(cls, expression: str) -> MessageSelector:
        """Refused at once (MQClientError) when the expression does not compile."""
        try:
            compile_sql92(expression)
        except FilterParseError as e:
            raise MQClientError(f"bad SQL92 expression {expression!r}: {e}") from None
        return cls(SQL92, expression)


@dataclass(frozen=True)
class Subscription:
    topic: str
    selector: MessageSelector
    sub_version: int = 0
    tags: frozenset[str] = frozenset()

    @classmethod
    def of(cls, topic: str, selector: MessageSelector) -> Subscription:
        tags = parse_tags(selector.expression) if selector.expression_type == TAG else frozenset()
        return cls(topic, selector, time.time_ns() // 1000, tags)

    def to_wire(self) -> dict[str, Any]:
        """SubscriptionData as a heartbeat carries it."""
        tags = sorted(self.tags)
        return {"topic": self.topic, "subString": self.selector.expression, "tagsSet": tags,
                "codeSet": [tag_hash({"TAGS": t}) for t in tags], "subVersion": self.sub_version,
                "classFilterMode": False, "expressionType": self.selector.expression_type}

    def accepts(self, tags: str | None) -> bool:
        """The client's own tag check (SQL92 subscriptions are the broker's to filter)."""
        return not self.tags or (tags is not None and tags in self.tags)
