"""Request headers (RocketMQ's *RequestHeader classes) as strict pydantic models.

Strict on purpose: a brokerId sent as "0" or a topic sent as a number is a client bug, and saying so
beats guessing. Field names on the wire are RocketMQ's camelCase; snake_case is accepted too.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic.alias_generators import to_camel

from namesrv.validation import check_broker_id, check_name, check_topic


class Header(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="ignore", strict=True, frozen=True
    )


def _name(field: str):  # noqa: ANN202 - returns a pydantic validator
    return field_validator(field)(classmethod(lambda cls, v: check_name(v, to_camel(field))))


class KVConfigHeader(Header):
    namespace: str
    key: str
    value: str | None = None

    _ns = _name("namespace")

    @field_validator("key")
    @classmethod
    def _key(cls, v: str) -> str:
        if not v or len(v) > 4096:
            raise ValueError("key must be 1..4096 characters")
        return v

    @field_validator("value")
    @classmethod
    def _value(cls, v: str | None) -> str | None:
        if v is not None and len(v) > 1024 * 1024:
            raise ValueError("value must be at most 1 MiB")
        return v


class NamespaceHeader(Header):
    namespace: str

    _ns = _name("namespace")


class BrokerIdentityHeader(Header):
    cluster_name: str
    broker_addr: str
    broker_name: str
    broker_id: int = 0

    _c = _name("cluster_name")
    _a = _name("broker_addr")
    _b = _name("broker_name")

    @field_validator("broker_id")
    @classmethod
    def _id(cls, v: int) -> int:
        return check_broker_id(v)


class RegisterBrokerRequestHeader(BrokerIdentityHeader):
    ha_server_addr: str = ""
    heartbeat_timeout_millis: int | None = Field(default=None, gt=0, le=24 * 3600 * 1000)
    body_crc32: int | None = Field(default=None, ge=0, le=2**32 - 1)

    @field_validator("ha_server_addr")
    @classmethod
    def _ha(cls, v: str) -> str:
        return check_name(v, "haServerAddr") if v else v


class BrokerHeartbeatRequestHeader(BrokerIdentityHeader):
    pass


class TopicHeader(Header):
    topic: str

    @field_validator("topic")
    @classmethod
    def _topic(cls, v: str) -> str:
        return check_topic(v)


class DeleteTopicFromNamesrvRequestHeader(TopicHeader):
    cluster_name: str | None = None

    @field_validator("cluster_name")
    @classmethod
    def _cluster(cls, v: str | None) -> str | None:
        return check_name(v, "clusterName") if v else None


class BrokerNameHeader(Header):
    broker_name: str

    _b = _name("broker_name")


class ClusterHeader(Header):
    cluster: str

    _c = _name("cluster")
