"""The bodies of the broker's admin answers that mqadmin and the dashboard read (RocketMQ's
TopicStatsTable, ConsumeStats, ConsumerConnection, GroupList), in both directions: `to_wire()` for
`fastjson.dumps` (maps keyed by MessageQueue objects, written as Java writes them) and `from_wire()`
for what `keyed_json.loads_keyed` reads back."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from namesrv.protocol.keyed_json import JsonKey
from namesrv.protocol.models import MessageQueue
from namesrv.protocol.types import InvalidInput


def mq_of(key: object) -> MessageQueue:
    if isinstance(key, JsonKey):
        return MessageQueue.from_wire(key.fields())
    raise InvalidInput(f"offset table key is not a MessageQueue: {key!r}"[:300])


def table_of(raw: object, what: str) -> Mapping[object, Any]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise InvalidInput(f"{what} is not a map")
    return raw


def _int(d: Mapping[str, Any], name: str, default: int = 0) -> int:
    value = d.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInput(f"{name} is not an integer: {value!r}"[:200])
    return value


@dataclass(frozen=True, slots=True)
class TopicOffset:
    min_offset: int
    max_offset: int
    last_update_timestamp: int

    def to_wire(self) -> dict[str, Any]:
        return {"lastUpdateTimestamp": self.last_update_timestamp, "maxOffset": self.max_offset,
                "minOffset": self.min_offset}

    @classmethod
    def from_wire(cls, d: Mapping[str, Any]) -> TopicOffset:
        return cls(_int(d, "minOffset"), _int(d, "maxOffset"), _int(d, "lastUpdateTimestamp"))


@dataclass(slots=True)
class TopicStatsTable:
    """GET_TOPIC_STATS_INFO (202): each queue's min and max offset and when it last got a message."""

    offset_table: dict[MessageQueue, TopicOffset] = field(default_factory=dict)
    topic_put_tps: float = 0.0

    def to_wire(self) -> dict[str, Any]:
        return {"offsetTable": {mq: o.to_wire() for mq, o in self.offset_table.items()},
                "topicPutTps": self.topic_put_tps}

    @classmethod
    def from_wire(cls, d: Mapping[str, Any]) -> TopicStatsTable:
        table = {mq_of(k): TopicOffset.from_wire(v) for k, v in table_of(d.get("offsetTable"), "offsetTable").items()}
        return cls(table, float(d.get("topicPutTps") or 0.0))


@dataclass(frozen=True, slots=True)
class OffsetWrapper:
    broker_offset: int
    consumer_offset: int
    pull_offset: int = 0
    last_timestamp: int = 0

    def to_wire(self) -> dict[str, Any]:
        return {"brokerOffset": self.broker_offset, "consumerOffset": self.consumer_offset,
                "lastTimestamp": self.last_timestamp, "pullOffset": self.pull_offset}

    @classmethod
    def from_wire(cls, d: Mapping[str, Any]) -> OffsetWrapper:
        return cls(_int(d, "brokerOffset"), _int(d, "consumerOffset"), _int(d, "pullOffset"),
                   _int(d, "lastTimestamp"))


@dataclass(slots=True)
class ConsumeStats:
    """GET_CONSUME_STATS (208): per queue, the broker's max offset against the group's committed one."""

    offset_table: dict[MessageQueue, OffsetWrapper] = field(default_factory=dict)
    consume_tps: float = 0.0

    def diff_total(self) -> int:
        """The backlog: messages stored and not yet consumed (ConsumeStats.computeTotalDiff)."""
        return sum(o.broker_offset - o.consumer_offset for o in self.offset_table.values())

    def to_wire(self) -> dict[str, Any]:
        return {"consumeTps": self.consume_tps, "offsetTable": {mq: o.to_wire() for mq, o in self.offset_table.items()}}

    @classmethod
    def from_wire(cls, d: Mapping[str, Any]) -> ConsumeStats:
        table = {mq_of(k): OffsetWrapper.from_wire(v) for k, v in table_of(d.get("offsetTable"), "offsetTable").items()}
        return cls(table, float(d.get("consumeTps") or 0.0))


@dataclass(frozen=True, slots=True)
class Connection:
    client_id: str
    client_addr: str
    language: str
    version: int

    def to_wire(self) -> dict[str, Any]:
        return {"clientAddr": self.client_addr, "clientId": self.client_id, "language": self.language,
                "version": self.version}

    @classmethod
    def from_wire(cls, d: Mapping[str, Any]) -> Connection:
        return cls(str(d.get("clientId", "")), str(d.get("clientAddr", "")), str(d.get("language", "")),
                   _int(d, "version"))


@dataclass(slots=True)
class ResetOffsetBody:
    """INVOKE_BROKER_TO_RESET_OFFSET's answer and RESET_CONSUMER_CLIENT_OFFSET's body: the offset
    each queue of the topic is reset to (RocketMQ's ResetOffsetBody, a map keyed by MessageQueue)."""

    offset_table: dict[MessageQueue, int] = field(default_factory=dict)

    def to_wire(self) -> dict[str, Any]:
        return {"offsetTable": dict(self.offset_table)}

    def to_wire_for_c(self) -> dict[str, Any]:
        """ResetOffsetBodyForC, what RocketMQ sends a C++ client: a list of MessageQueueForC."""
        return {"offsetTable": [{"brokerName": mq.broker_name, "offset": o, "queueId": mq.queue_id, "topic": mq.topic}
                                for mq, o in sorted(self.offset_table.items(), key=lambda e: e[0].queue_id)]}

    @classmethod
    def from_wire(cls, d: Mapping[str, Any]) -> ResetOffsetBody:
        return cls({mq_of(k): int(v) for k, v in table_of(d.get("offsetTable"), "offsetTable").items()})


@dataclass(slots=True)
class ProducerConnection:
    """GET_PRODUCER_CONNECTION_LIST (204): the producer group's clients."""

    connection_set: list[Connection] = field(default_factory=list)

    def to_wire(self) -> dict[str, Any]:
        return {"connectionSet": [c.to_wire() for c in self.connection_set]}

    @classmethod
    def from_wire(cls, d: Mapping[str, Any]) -> ProducerConnection:
        connections = d.get("connectionSet") or []
        if not isinstance(connections, list):
            raise InvalidInput("connectionSet is not a list")
        return cls([Connection.from_wire(c) for c in connections if isinstance(c, dict)])


@dataclass(slots=True)
class ConsumerConnection:
    """GET_CONSUMER_CONNECTION_LIST (203): the group's clients and what they subscribe to."""

    connection_set: list[Connection] = field(default_factory=list)
    subscription_table: dict[str, dict[str, Any]] = field(default_factory=dict)
    consume_type: str = "CONSUME_PASSIVELY"
    message_model: str = "CLUSTERING"
    consume_from_where: str = "CONSUME_FROM_LAST_OFFSET"

    def to_wire(self) -> dict[str, Any]:
        return {"connectionSet": [c.to_wire() for c in self.connection_set],
                "consumeFromWhere": self.consume_from_where, "consumeType": self.consume_type,
                "messageModel": self.message_model, "subscriptionTable": self.subscription_table}

    @classmethod
    def from_wire(cls, d: Mapping[str, Any]) -> ConsumerConnection:
        connections = d.get("connectionSet") or []
        if not isinstance(connections, list):
            raise InvalidInput("connectionSet is not a list")
        return cls([Connection.from_wire(c) for c in connections if isinstance(c, dict)],
                    {str(k): v for k, v in table_of(d.get("subscriptionTable"), "subscriptionTable").items()},
                    str(d.get("consumeType", "")), str(d.get("messageModel", "")), str(d.get("consumeFromWhere", "")))


@dataclass(slots=True)
class GroupList:
    """QUERY_TOPIC_CONSUME_BY_WHO (300): the consumer groups of a topic."""

    group_list: list[str] = field(default_factory=list)

    def to_wire(self) -> dict[str, Any]:
        return {"groupList": sorted(self.group_list)}

    @classmethod
    def from_wire(cls, d: Mapping[str, Any]) -> GroupList:
        groups = d.get("groupList") or []
        if not isinstance(groups, list):
            raise InvalidInput("groupList is not a list")
        return cls([str(g) for g in groups])
