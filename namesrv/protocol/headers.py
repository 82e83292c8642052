"""Request headers (RocketMQ's *RequestHeader classes) as pydantic models over the constrained types.

Strict on the Ray path: a brokerId sent as "0" or a topic sent as a number is a client bug, and
saying so beats guessing. Over TCP every extFields value is a string (RocketMQ's header map is
Map<String, String>), so the TCP front end validates with `strict=False` and "0" is parsed as
RocketMQ parses it. Field names on the wire are RocketMQ's camelCase; snake_case is accepted too.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic.alias_generators import to_camel

from namesrv.protocol.types import BrokerId, Name, TopicName


class Header(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="ignore", strict=True, frozen=True
    )


class KVConfigHeader(Header):
    namespace: Name
    key: str = Field(min_length=1, max_length=4096)
    value: str | None = Field(default=None, max_length=1024 * 1024)


class NamespaceHeader(Header):
    namespace: Name


class BrokerIdentityHeader(Header):
    cluster_name: Name
    broker_addr: Name
    broker_name: Name
    broker_id: BrokerId = 0


class RegisterBrokerRequestHeader(BrokerIdentityHeader):
    ha_server_addr: Name | Literal[""] = ""
    heartbeat_timeout_millis: int | None = Field(default=None, gt=0, le=24 * 3600 * 1000)
    body_crc32: int | None = Field(default=None, ge=0, le=2**32 - 1)
    compressed: bool = False
    """The body is RocketMQ's deflated registration format (brokers with compressedRegister=true)."""


class BrokerHeartbeatRequestHeader(BrokerIdentityHeader):
    pass


class TopicHeader(Header):
    topic: TopicName


class GetRouteInfoRequestHeader(Header):
    """Any string is a route query: a name no topic can have simply has no route (TOPIC_NOT_EXIST),
    as in RocketMQ, whose header only requires the field to be present."""

    topic: str


class RegisterTopicRequestHeader(TopicHeader):
    pass


class DeleteTopicFromNamesrvRequestHeader(TopicHeader):
    cluster_name: Name | None = None
    """Delete the topic from this cluster's brokers only; blank or None: from every broker."""

    @field_validator("cluster_name", mode="before")
    @classmethod
    def _blank_means_every_cluster(cls, v: object) -> object:
        return None if v == "" else v


class BrokerNameHeader(Header):
    broker_name: Name


class ClusterHeader(Header):
    cluster: Name
