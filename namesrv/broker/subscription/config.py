"""A consumer group's config on a broker (RocketMQ's SubscriptionGroupConfig), its name rule, and
the system groups every broker holds from its start (SubscriptionGroupManager.init).

The wire form is RocketMQ's camelCase JSON (fastjson's), read back by the same model; a bad name
or setting is refused with a sentence (`SubscriptionGroupError`) and nothing changes.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

from namesrv.protocol.constants import GROUP_MAX_LENGTH, MASTER_ID, MAX_QUEUE_NUMS
from namesrv.protocol.types import describe_errors

TOOLS_CONSUMER_GROUP = "TOOLS_CONSUMER"
FILTERSRV_CONSUMER_GROUP = "FILTERSRV_CONSUMER"
SELF_TEST_CONSUMER_GROUP = "SELF_TEST_C_GROUP"
ONS_HTTP_PROXY_GROUP = "CID_ONS-HTTP-PROXY"
CID_ONSAPI_PULL_GROUP = "CID_ONSAPI_PULL"
CID_ONSAPI_PERMISSION_GROUP = "CID_ONSAPI_PERMISSION"
CID_ONSAPI_OWNER_GROUP = "CID_ONSAPI_OWNER"
CID_SYS_RMQ_TRANS = "CID_RMQ_SYS_TRANS"
CID_RMQ_SYS_PREFIX = "CID_RMQ_SYS_"

SYSTEM_GROUPS = (TOOLS_CONSUMER_GROUP, FILTERSRV_CONSUMER_GROUP, SELF_TEST_CONSUMER_GROUP, ONS_HTTP_PROXY_GROUP,
                 CID_ONSAPI_PULL_GROUP, CID_ONSAPI_PERMISSION_GROUP, CID_ONSAPI_OWNER_GROUP, CID_SYS_RMQ_TRANS)
"""The groups SubscriptionGroupManager.init puts in every broker's table; none can be deleted."""

_GROUP_CHARS = re.compile(r"[%|a-zA-Z0-9_-]+")
MAX_RETRY_TIMES = 2**31 - 1


class SubscriptionGroupError(ValueError):
    """A group name or setting a broker refuses (INVALID_PARAMETER); nothing was changed."""


def is_system_group(group: str) -> bool:
    return group in SYSTEM_GROUPS or group.startswith(CID_RMQ_SYS_PREFIX)


def group_problem(group: str) -> str | None:
    """RocketMQ's TopicValidator.validateGroup remark for a bad group name; None when it is fine."""
    if not group.strip():
        return "The specified group is blank."
    if not _GROUP_CHARS.fullmatch(group):
        return f"The specified group: {group}, contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$"
    if len(group) > GROUP_MAX_LENGTH:
        return f"The specified group: {group}, is longer than group max length: {GROUP_MAX_LENGTH}"
    return None


class SubscriptionGroupConfig(BaseModel):
    """RocketMQ's SubscriptionGroupConfig, its defaults (4.9 / 5.3)."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, frozen=True, extra="ignore",
                              strict=True)

    group_name: str
    consume_enable: bool = True
    """False: the group's pulls are refused (NO_PERMISSION)."""
    consume_from_min_enable: bool = True
    consume_broadcast_enable: bool = True
    """False: a broadcasting member's pulls are refused."""
    consume_message_orderly: bool = False
    retry_queue_nums: int = Field(default=1, ge=0, le=MAX_QUEUE_NUMS)
    """Queues of the group's %RETRY% topic; 0: a failed message is dropped, not retried."""
    retry_max_times: int = Field(default=16, ge=0, le=MAX_RETRY_TIMES)
    """Reconsumptions before the DLQ, when a send-back does not say."""
    broker_id: int = Field(default=MASTER_ID, ge=0)
    which_broker_when_consume_slowly: int = Field(default=1, ge=0)
    notify_consumer_ids_changed_enable: bool = True
    """False: the broker does not tell the members when the group's membership changes."""
    group_sys_flag: int = Field(default=0, ge=0)
    consume_timeout_minute: int = Field(default=15, ge=0)

    def to_wire(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True)


def parse_group_config(data: object) -> SubscriptionGroupConfig:
    """A config from its wire dict (or a model), its name checked by RocketMQ's rule and its
    settings by their ranges; SubscriptionGroupError with a sentence otherwise."""
    if isinstance(data, SubscriptionGroupConfig):
        data = data.to_wire()
    if not isinstance(data, dict):
        raise SubscriptionGroupError("a subscription group config must be a JSON object")
    name = data.get("groupName", data.get("group_name"))
    if not isinstance(name, str):
        raise SubscriptionGroupError("a subscription group config needs a groupName")
    problem = group_problem(name)
    if problem is not None:
        raise SubscriptionGroupError(problem)
    try:
        return SubscriptionGroupConfig.model_validate(data)
    except ValidationError as e:
        raise SubscriptionGroupError(f"subscription group {name}: {describe_errors(e)}") from None


def system_group_configs() -> list[SubscriptionGroupConfig]:
    return [SubscriptionGroupConfig(group_name=g) for g in SYSTEM_GROUPS]
