"""The consumer-group page's config form: a group's subscription-group config (RocketMQ's
SubscriptionGroupConfig) edited and sent to every live master as UPDATE_AND_CREATE_SUBSCRIPTIONGROUP
(200), as mqadmin updateSubGroup -c and rocketmq-dashboard's consumer config dialog do.

The form edits what the dashboard's dialog edits: consumeEnable, consumeBroadcastEnable,
consumeMessageOrderly, retryQueueNums, retryMaxTimes, brokerId and whichBrokerWhenConsumeSlowly.
Every other field (consumeFromMinEnable, notifyConsumerIdsChanged, groupSysFlag,
consumeTimeoutMinute) keeps what each broker holds (RocketMQ's defaults where it holds none yet).
Every broker's config is built and checked by the brokers' own rule (`parse_group_config`: the
name, the ranges) before the first is sent, so a bad input changes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from actors.console.actions import ActionError, Actions, whole_number, why
from namesrv.acl.plain_acl import SessionCredentials
from namesrv.broker.subscription.config import (
    MAX_RETRY_TIMES,
    SubscriptionGroupConfig,
    SubscriptionGroupError,
    parse_group_config,
)
from namesrv.protocol import fastjson
from namesrv.protocol.codes import BrokerRequestCode
from namesrv.protocol.constants import MAX_QUEUE_NUMS

JAVA_INT_MAX = 2**31 - 1
SWITCHES = ("consumeEnable", "consumeBroadcastEnable", "consumeMessageOrderly")
"""The form's true/false settings (wire names)."""
NUMBERS: dict[str, tuple[int, int]] = {
    "retryQueueNums": (0, MAX_QUEUE_NUMS),
    "retryMaxTimes": (0, MAX_RETRY_TIMES),
    "brokerId": (0, JAVA_INT_MAX),
    "whichBrokerWhenConsumeSlowly": (0, JAVA_INT_MAX),
}
"""The form's whole-number settings (wire names) and their ranges (mqadmin updateSubGroup's)."""


def form_settings(form: Mapping[str, str]) -> dict[str, Any]:
    """The settings a config form gives (wire names -> bool / int); ActionError when one is
    missing, not true/false, not a whole number or out of its range."""
    settings: dict[str, Any] = {}
    for name in SWITCHES:
        raw = form.get(name, "").strip().lower()
        if raw not in ("true", "false"):
            raise ActionError(f"{name} must be true or false, got {form.get(name, '')!r}")
        settings[name] = raw == "true"
    for name, (low, high) in NUMBERS.items():
        settings[name] = whole_number(form.get(name, ""), name, low, high)
    return settings


def group_config(raw_group: str, settings: Mapping[str, Any],
                 held: SubscriptionGroupConfig | None) -> SubscriptionGroupConfig:
    """The config a broker gets: what it holds (`held`, else RocketMQ's defaults) with `settings`
    over it, checked as a broker checks it (ActionError with its sentence otherwise)."""
    group = raw_group.strip()
    base = held.to_wire() if held is not None else {"groupName": group}
    try:
        return parse_group_config(base | dict(settings) | {"groupName": group})
    except SubscriptionGroupError as e:
        raise ActionError(str(e)) from None


class GroupConfigs:
    def __init__(self, actions: Actions) -> None:
        self.actions = actions

    async def update(self, raw_group: str, form: Mapping[str, str],
                     creds: SessionCredentials | None) -> list[str]:
        """The group's config updated (or created) on every live master; the masters done."""
        settings = form_settings(form)
        group = raw_group.strip()
        view = self.actions.state.groups.get(group)
        held = view.configs if view is not None else {}
        configs = {addr: group_config(raw_group, settings, held.get(addr)) for addr in self.actions.masters()}
        servers = self.actions.servers
        done: list[str] = []
        for addr, config in configs.items():
            resp = await servers.call_broker(addr, servers.request(
                BrokerRequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, None, fastjson.dumps(config.to_wire()),
                credentials=creds))
            if not resp.ok:
                raise ActionError(f"update {group} on {addr}: {why(resp)}"
                                  + (f" (done on {', '.join(done)})" if done else ""))
            done.append(addr)
            if view is not None:
                view.configs[addr] = config  # shown at once; the collector's next tick confirms it
        return done
