"""Request headers (RocketMQ's *RequestHeader classes) as pydantic models over the constrained types.

Strict on the Ray path: a brokerId sent as "0" or a topic sent as a number is a client bug, and
saying so beats guessing. Over TCP every extFields value is a string (RocketMQ's header map is
Map<String, String>), so the TCP front end validates with `strict=False` and "0" is parsed as
RocketMQ parses it.

One spelling per field (`Header.from_ext`): from the wire only RocketMQ's camelCase name counts (a
snake_case key is an unknown key, ignored like any other), so a request cannot carry a second value
of a field under another name for one reader to check and another to use. The Ray path also takes
the snake_case name, but a header naming one field both ways is refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic.alias_generators import to_camel

from namesrv.protocol.types import BrokerId, InvalidInput, Name, TopicName

_RENAMED: dict[type[BaseModel], tuple[tuple[str, str], ...]] = {}


def _renamed(model: type[BaseModel]) -> tuple[tuple[str, str], ...]:
    """(field name, wire alias) of each field whose two names differ, worked out once per header."""
    pairs = _RENAMED.get(model)
    if pairs is None:
        pairs = _RENAMED[model] = tuple((name, f.alias) for name, f in model.model_fields.items()
                                        if f.alias is not None and f.alias != name)
    return pairs


class Header(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="ignore", strict=True, frozen=True
    )

    @classmethod
    def from_ext(cls, ext: Mapping[str, Any], *, wire: bool) -> Self:
        """The header of a request's extFields. `wire`: strings from TCP, read by RocketMQ's names
        only; otherwise typed values from Ray, by either name but never both (InvalidInput)."""
        if wire:
            return cls.model_validate(ext, strict=False, by_alias=True, by_name=False)
        for name, alias in _renamed(cls):
            if alias in ext and name in ext:
                raise InvalidInput(f"header field {alias} is given under two names")
        return cls.model_validate(ext, strict=True)


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
