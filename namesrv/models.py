"""Route data types.

Two kinds on purpose: pydantic models validate what crosses a boundary (topic configs, register
bodies); the route tables hold slotted dataclasses, because every heartbeat and every route query
touches them and pydantic's per-attribute machinery would be the hot path's main cost.
Wire forms use RocketMQ's camelCase field names.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic.alias_generators import to_camel

from namesrv.constants import Perm
from namesrv.validation import (
    InvalidInput,
    check_perm,
    check_queue_nums,
    check_topic,
    check_topic_sys_flag,
)


@dataclass(frozen=True, slots=True)
class DataVersion:
    """Version of a broker's topic table: (timestamp, counter); any difference means 'changed'."""

    timestamp: int = 0
    counter: int = 0

    def next_version(self, now_ms: int) -> DataVersion:
        return DataVersion(timestamp=now_ms, counter=self.counter + 1)

    def to_wire(self) -> dict[str, int]:
        return {"timestamp": self.timestamp, "counter": self.counter}

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> DataVersion:
        return cls(timestamp=int(data["timestamp"]), counter=int(data["counter"]))


def parse_data_version(v: object) -> DataVersion:
    """A DataVersion from its wire dict, refusing anything but two non-negative integers."""
    if isinstance(v, DataVersion):
        return v
    if not isinstance(v, dict) or set(v) != {"timestamp", "counter"}:
        raise InvalidInput("dataVersion must be a map with exactly 'timestamp' and 'counter'")
    ts, counter = v["timestamp"], v["counter"]
    for name, x in (("timestamp", ts), ("counter", counter)):
        if not isinstance(x, int) or isinstance(x, bool) or not 0 <= x <= 2**62:
            raise InvalidInput(f"dataVersion.{name} must be an integer within [0, 2^62], got {x!r}")
    return DataVersion(ts, counter)


class TopicConfig(BaseModel):
    """A topic as one broker holds it (RocketMQ's TopicConfig)."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, frozen=True, extra="forbid", strict=True
    )

    topic_name: str
    read_queue_nums: int = 16
    write_queue_nums: int = 16
    perm: int = int(Perm.READ | Perm.WRITE)
    topic_filter_type: str = "SINGLE_TAG"
    topic_sys_flag: int = 0
    order: bool = False

    @field_validator("topic_name")
    @classmethod
    def _topic(cls, v: str) -> str:
        return check_topic(v)

    @field_validator("read_queue_nums", "write_queue_nums")
    @classmethod
    def _queues(cls, v: int) -> int:
        return check_queue_nums(v, "queue nums")

    @field_validator("perm")
    @classmethod
    def _perm(cls, v: int) -> int:
        return check_perm(v)

    @field_validator("topic_sys_flag")
    @classmethod
    def _sys_flag(cls, v: int) -> int:
        return check_topic_sys_flag(v)

    @field_validator("topic_filter_type")
    @classmethod
    def _filter_type(cls, v: str) -> str:
        if v not in ("SINGLE_TAG", "MULTI_TAG"):
            raise ValueError(f"topicFilterType must be SINGLE_TAG or MULTI_TAG, got {v!r}")
        return v

    def to_wire(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True)


@dataclass(slots=True)
class QueueData:
    """One broker group's queues for one topic."""

    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_sys_flag: int = 0

    @classmethod
    def from_topic_config(cls, broker_name: str, tc: TopicConfig) -> QueueData:
        return cls(broker_name, tc.read_queue_nums, tc.write_queue_nums, tc.perm, tc.topic_sys_flag)

    def copy(self) -> QueueData:
        return QueueData(
            self.broker_name, self.read_queue_nums, self.write_queue_nums, self.perm, self.topic_sys_flag
        )

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


@dataclass(slots=True)
class BrokerData:
    """A broker group: one name, a master (id 0) and slaves, each at an address."""

    cluster: str
    broker_name: str
    broker_addrs: dict[int, str] = field(default_factory=dict)

    def copy(self) -> BrokerData:
        return BrokerData(self.cluster, self.broker_name, dict(self.broker_addrs))

    def select_broker_addr(self) -> str | None:
        """The master's address, else any slave's (RocketMQ's selectBrokerAddr, minus the randomness)."""
        addr = self.broker_addrs.get(0)
        if addr is None and self.broker_addrs:
            addr = self.broker_addrs[min(self.broker_addrs)]
        return addr

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


@dataclass(slots=True)
class TopicRouteData:
    """What a client gets for a topic: its queues and the addresses of the brokers that host them."""

    queue_datas: list[QueueData]
    broker_datas: list[BrokerData]
    filter_server_table: dict[str, list[str]] = field(default_factory=dict)
    order_topic_conf: str | None = None

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
            [QueueData.from_wire(q) for q in d["queueDatas"]],
            [BrokerData.from_wire(b) for b in d["brokerDatas"]],
            {k: list(v) for k, v in d.get("filterServerTable", {}).items()},
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
    """What a broker learns from registering: its master (slaves only) and the order-topic KV."""

    ha_server_addr: str | None = None
    master_addr: str | None = None
    kv_table: dict[str, str] = field(default_factory=dict)


class TopicConfigSerializeWrapper(BaseModel):
    """The register body's topic part: the broker's whole topic table and its version."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid", strict=True)

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


class RegisterBrokerBody(BaseModel):
    """REGISTER_BROKER body: topic table + DataVersion, and the broker's filter servers."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid", strict=True)

    topic_config_serialize_wrapper: TopicConfigSerializeWrapper = Field(
        default_factory=TopicConfigSerializeWrapper
    )
    filter_server_list: list[str] = Field(default_factory=list)
