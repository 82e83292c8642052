"""Route data types.

Two kinds on purpose: pydantic models validate what crosses a boundary (topic configs, register
bodies); the route tables hold slotted dataclasses, because every heartbeat and every route query
touches them and pydantic's per-attribute machinery would be the hot path's main cost.
Wire forms use RocketMQ's camelCase field names.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic.alias_generators import to_camel

from namesrv.common.frozen import FrozenDict
from namesrv.protocol.constants import Perm
from namesrv.protocol.types import InvalidInput, Name, PermValue, QueueNums, TopicName, TopicSysFlag, Version, check


@dataclass(frozen=True, slots=True)
class DataVersion:
    """Version of a broker's topic table: (timestamp, counter, state_version); any difference means
    'changed'. `state_version` is RocketMQ 5's `stateVersion`: in controller mode the broker's master
    epoch, so a NameServer that hears of two brokers at one brokerName/brokerId keeps the one with
    the higher state version (see `RouteInfoManager.begin_registration`). Brokers of RocketMQ 4.x
    do not send it: it is then 0."""

    timestamp: int = 0
    counter: int = 0
    state_version: int = 0

    def next_version(self, now_ms: int, state_version: int | None = None) -> DataVersion:
        """The next version (RocketMQ's nextVersion): counter + 1, stamped `now_ms`, the state
        version given or else kept. RocketMQ's no-argument nextVersion() resets stateVersion to 0;
        its callers that matter pass the store's state machine version (the master epoch), which is
        what keeping it does here."""
        kept = self.state_version if state_version is None else state_version
        return DataVersion(timestamp=now_ms, counter=self.counter + 1, state_version=kept)

    def to_wire(self) -> dict[str, int]:
        """RocketMQ 5's JSON form (fastjson's field order: counter, stateVersion, timestamp)."""
        return {"counter": self.counter, "stateVersion": self.state_version, "timestamp": self.timestamp}

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> DataVersion:
        return cls(timestamp=int(data["timestamp"]), counter=int(data["counter"]),
                   state_version=int(data.get("stateVersion", 0)))


class _DataVersionWire(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore")

    timestamp: Version
    counter: Version
    state_version: Version = Field(default=0, alias="stateVersion")


def parse_data_version(v: object) -> DataVersion:
    """A DataVersion from its wire dict: 'timestamp' and 'counter', non-negative integers, and
    RocketMQ 5's 'stateVersion' (absent from a 4.x broker's body: 0); other keys are ignored."""
    if isinstance(v, DataVersion):
        return v
    if not isinstance(v, dict):
        raise InvalidInput("dataVersion must be a map with 'timestamp', 'counter' and optionally 'stateVersion'")
    wire = check(_DataVersionWire, v, "dataVersion")
    return DataVersion(wire.timestamp, wire.counter, wire.state_version)


class TopicConfig(BaseModel):
    """A topic as one broker holds it (RocketMQ's TopicConfig)."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, frozen=True, extra="ignore", strict=True
    )

    topic_name: TopicName
    read_queue_nums: QueueNums = 16
    write_queue_nums: QueueNums = 16
    perm: PermValue = int(Perm.READ | Perm.WRITE)
    topic_filter_type: Literal["SINGLE_TAG", "MULTI_TAG"] = "SINGLE_TAG"
    topic_sys_flag: TopicSysFlag = 0
    order: bool = False

    def to_wire(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True)

    @classmethod
    def from_wire(cls, d: object) -> TopicConfig:
        """A TopicConfig as RocketMQ writes it (GET_TOPIC_CONFIG's body, read as JSON): laxly typed,
        as fastjson writes numbers and flags; pydantic's ValidationError when it is not one."""
        return cls.model_validate(d, strict=False)


@dataclass(frozen=True, slots=True)
class MessageQueue:
    """One queue of a topic on one broker group (RocketMQ's MessageQueue): what clients send to and
    pull from, and the key of the admin bodies' offset tables."""

    topic: str
    broker_name: str
    queue_id: int

    def to_wire(self) -> dict[str, Any]:
        return {"brokerName": self.broker_name, "queueId": self.queue_id, "topic": self.topic}

    @classmethod
    def from_wire(cls, d: Mapping[str, Any]) -> MessageQueue:
        topic, broker_name, queue_id = d.get("topic"), d.get("brokerName"), d.get("queueId")
        if not isinstance(topic, str) or not isinstance(broker_name, str) or not isinstance(queue_id, int):
            raise InvalidInput(f"not a MessageQueue: {dict(d)!r}"[:300])
        return cls(topic, broker_name, queue_id)


@dataclass(frozen=True, slots=True)
class QueueData:
    """One broker group's queues for one topic. Frozen: the tables and the routes handed out share
    nothing a caller could change (a changed queue config is a new QueueData)."""

    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_sys_flag: int = 0

    def copy(self) -> QueueData:
        return QueueData(
            self.broker_name, self.read_queue_nums, self.write_queue_nums, self.perm, self.topic_sys_flag
        )

    def __reduce__(self) -> tuple[type[QueueData], tuple[str, int, int, int, int]]:
        """Pickled as its fields (see TopicRouteData.__reduce__)."""
        return QueueData, (self.broker_name, self.read_queue_nums, self.write_queue_nums, self.perm,
                           self.topic_sys_flag)

    def to_wire(self) -> dict[str, Any]:
        return {
            "brokerName": self.broker_name,
            "readQueueNums": self.read_queue_nums,
            "writeQueueNums": self.write_queue_nums,
            "perm": self.perm,
            "topicSysFlag": self.topic_sys_flag,
        }

    @classmethod
    def from_wire(cls, d: dict[str, Any]) -> QueueData:
        return cls(d["brokerName"], d["readQueueNums"], d["writeQueueNums"], d["perm"], d["topicSysFlag"])


@dataclass(frozen=True, slots=True)
class BrokerData:
    """A broker group: one name, a master (id 0) and slaves, each at an address. Frozen: the
    tables change a group's addresses in its own dict; routes carry a read-only copy
    (`frozen_copy`; one per group version, shared by the routes built at it), never the table's."""

    cluster: str
    broker_name: str
    broker_addrs: dict[int, str] = field(default_factory=dict)

    def copy(self) -> BrokerData:
        """A copy with a dict of its own (the caller may change it)."""
        return BrokerData(self.cluster, self.broker_name, dict(self.broker_addrs))

    def frozen_copy(self) -> BrokerData:
        """A copy no one can change, addresses included (a FrozenDict): what a shared route carries."""
        return BrokerData(self.cluster, self.broker_name, FrozenDict(self.broker_addrs))

    def __reduce__(self) -> tuple[type[BrokerData], tuple[str, str, dict[int, str]]]:
        """Pickled as its fields (see TopicRouteData.__reduce__)."""
        return BrokerData, (self.cluster, self.broker_name, self.broker_addrs)

    def select_broker_id(self) -> int | None:
        """The master's id, else the lowest slave's (RocketMQ's selectBrokerAddr, minus the
        randomness): where a consumer reads a broker group's queues."""
        if 0 in self.broker_addrs:
            return 0
        return min(self.broker_addrs) if self.broker_addrs else None

    def select_broker_addr(self) -> str | None:
        broker_id = self.select_broker_id()
        return self.broker_addrs[broker_id] if broker_id is not None else None

    def to_wire(self) -> dict[str, Any]:
        return {
            "cluster": self.cluster,
            "brokerName": self.broker_name,
            "brokerAddrs": dict(self.broker_addrs),
        }

    @classmethod
    def from_wire(cls, d: dict[str, Any]) -> BrokerData:
        return cls(d["cluster"], d["brokerName"], {int(k): v for k, v in d["brokerAddrs"].items()})


@dataclass(slots=True)
class BrokerLiveInfo:
    """Liveness of one broker address; `channel` fences stale channel-close events."""

    last_update_timestamp: int
    heartbeat_timeout_millis: int
    data_version: DataVersion
    channel: Any = None
    ha_server_addr: str = ""
    registration_seq: int = 0
    """Arrival order of the registration that wrote this entry (a stale one never overwrites it)."""


@dataclass(frozen=True, slots=True)
class TopicRouteData:
    """What a client gets for a topic: its queues and the addresses of the brokers that host them.

    Immutable all the way down, as the NameServer builds it: one route object per route version is
    shared by every caller (RocketMQ hands out copies), so its parts are tuples of frozen QueueData
    and of BrokerData whose addresses are a FrozenDict, and its filter servers a FrozenDict of
    tuples. Changing any of it raises (FrozenInstanceError, AttributeError or TypeError); a caller
    that wants to change a route builds its own (`dataclasses.replace`, `BrokerData.copy`). What
    the constructor is given is taken so (lists as tuples, a group's addresses as a FrozenDict)."""

    queue_datas: tuple[QueueData, ...]
    broker_datas: tuple[BrokerData, ...]
    filter_server_table: Mapping[str, tuple[str, ...]] = field(default_factory=FrozenDict)
    order_topic_conf: str | None = None

    def __post_init__(self) -> None:
        if type(self.queue_datas) is not tuple:
            object.__setattr__(self, "queue_datas", tuple(self.queue_datas))
        groups = self.broker_datas
        if type(groups) is not tuple or any(type(bd.broker_addrs) is not FrozenDict for bd in groups):
            object.__setattr__(self, "broker_datas", tuple(
                bd if type(bd.broker_addrs) is FrozenDict else bd.frozen_copy() for bd in groups))
        servers = self.filter_server_table
        if servers is not None and type(servers) is not FrozenDict:  # None: a route that says nothing of them
            object.__setattr__(self, "filter_server_table", FrozenDict({a: tuple(s) for a, s in servers.items()}))

    def __reduce__(self) -> tuple[type[TopicRouteData], tuple[Any, ...]]:
        """Pickled as its fields, rebuilt by its constructor: a route answered over Ray is pickled
        once per query, and this is ~2x cheaper both ways than the slotted dataclass's default
        (state dicts set field by field), which the frozen parts would make dearer still."""
        return TopicRouteData, (self.queue_datas, self.broker_datas, self.filter_server_table, self.order_topic_conf)

    def to_wire(self) -> dict[str, Any]:
        return {
            "queueDatas": [q.to_wire() for q in self.queue_datas],
            "brokerDatas": [b.to_wire() for b in self.broker_datas],
            "filterServerTable": self.filter_server_table,
            "orderTopicConf": self.order_topic_conf,
        }

    @classmethod
    def from_wire(cls, d: dict[str, Any]) -> TopicRouteData:
        return cls(
            tuple(QueueData.from_wire(q) for q in d["queueDatas"]),
            tuple(BrokerData.from_wire(b).frozen_copy() for b in d["brokerDatas"]),
            FrozenDict({k: tuple(v) for k, v in d.get("filterServerTable", {}).items()}),
            d.get("orderTopicConf"),
        )


@dataclass(slots=True)
class ClusterInfo:
    broker_addr_table: dict[str, BrokerData]
    cluster_addr_table: dict[str, set[str]]

    def to_wire(self) -> dict[str, Any]:
        return {
            "brokerAddrTable": {k: v.to_wire() for k, v in self.broker_addr_table.items()},
            "clusterAddrTable": {k: sorted(v) for k, v in self.cluster_addr_table.items()},
        }

    @classmethod
    def from_wire(cls, d: dict[str, Any]) -> ClusterInfo:
        return cls(
            {k: BrokerData.from_wire(v) for k, v in d["brokerAddrTable"].items()},
            {k: set(v) for k, v in d["clusterAddrTable"].items()},
        )


@dataclass(slots=True)
class RegisterBrokerResult:
    """What a slave learns from registering: its master's address and HA address (None for a master
    or while the master is not live). The order-topic KV table travels in the response body."""

    ha_server_addr: str | None = None
    master_addr: str | None = None
    refused: str | None = None
    """Why the registration was refused (another address holds the id with a higher stateVersion);
    None when it was applied."""


@dataclass(slots=True)
class TopicList:
    """A list of topic names (RocketMQ's TopicList); `broker_addr` only for the system topic list."""

    topic_list: list[str]
    broker_addr: str | None = None

    def to_wire(self) -> dict[str, Any]:
        wire: dict[str, Any] = {"topicList": list(self.topic_list)}
        if self.broker_addr is not None:
            wire["brokerAddr"] = self.broker_addr
        return wire


@dataclass(slots=True)
class ConfigProperties:
    """A NameServer's configuration as RocketMQ's camelCase keys to string values."""

    properties: dict[str, str]

    def to_wire(self) -> dict[str, str]:
        return dict(self.properties)


@dataclass(slots=True)
class KVTable:
    """One KV namespace's entries (RocketMQ's KVTable)."""

    table: dict[str, str]

    def to_wire(self) -> dict[str, Any]:
        return {"table": dict(self.table)}


class TopicConfigSerializeWrapper(BaseModel):
    """The register body's topic part: the broker's whole topic table and its version."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore", strict=True)

    topic_config_table: dict[str, TopicConfig] = Field(default_factory=dict)
    data_version: DataVersion = Field(default_factory=DataVersion)

    @field_validator("data_version", mode="before")
    @classmethod
    def _version(cls, v: object) -> DataVersion:
        return parse_data_version(v)

    @field_validator("topic_config_table")
    @classmethod
    def _keys_match(cls, v: dict[str, TopicConfig]) -> dict[str, TopicConfig]:
        for name, tc in v.items():
            if name != tc.topic_name:
                raise ValueError(f"topicConfigTable key {name!r} differs from topicName {tc.topic_name!r}")
        return v


class QueueDataBody(BaseModel):
    """One group's queues as a request carries them (validated; becomes a `QueueData`)."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore", strict=True)

    broker_name: Name
    read_queue_nums: QueueNums
    write_queue_nums: QueueNums
    perm: PermValue
    topic_sys_flag: TopicSysFlag = 0

    def to_queue_data(self) -> QueueData:
        return QueueData(self.broker_name, self.read_queue_nums, self.write_queue_nums, self.perm, self.topic_sys_flag)


class RegisterTopicBody(BaseModel):
    """REGISTER_TOPIC_IN_NAMESRV body: a TopicRouteData of which only `queueDatas` is read."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore", strict=True)

    queue_datas: list[QueueDataBody] | None = Field(default=None, max_length=10_000)
