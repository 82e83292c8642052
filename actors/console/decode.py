"""Answers of the servers' `process` (a `RemotingResponse`) as the console's data: the typed
payload when the server attached one, else the body decoded as RocketMQ's JSON. Ray-free; a
refusal is None (or an empty result) and the caller shows why."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from actors.console.model import QueueRoute, RouteView
from namesrv.broker.subscription.config import SubscriptionGroupConfig
from namesrv.protocol import fastjson
from namesrv.protocol.admin_bodies import ConsumerConnection, ConsumeStats, ProducerConnection, ResetOffsetBody
from namesrv.protocol.keyed_json import loads_keyed
from namesrv.protocol.models import TopicConfig, TopicList, TopicRouteData
from namesrv.remoting.command import RemotingResponse


def topic_list(resp: RemotingResponse) -> set[str] | None:
    if not resp.ok:
        return None
    if isinstance(resp.payload, TopicList):
        return set(resp.payload.topic_list)
    if not resp.body:
        return set()
    return {str(t) for t in fastjson.loads(resp.body).get("topicList", [])}


def topic_config(resp: RemotingResponse) -> TopicConfig | None:
    """GET_TOPIC_CONFIG's topic config (None when the answer is not one: the caller says why)."""
    if not resp.ok:
        return None
    if isinstance(resp.payload, TopicConfig):
        return resp.payload
    try:
        return TopicConfig.from_wire(fastjson.loads(resp.body or b""))
    except (ValueError, ValidationError):
        return None


def route_view(version: int, route: TopicRouteData) -> RouteView:
    queues = tuple(sorted((QueueRoute(q.broker_name, q.read_queue_nums, q.write_queue_nums, q.perm)
                           for q in route.queue_datas), key=lambda q: q.broker_name))
    brokers = tuple(sorted((bd.broker_name, tuple(sorted(bd.broker_addrs.items()))) for bd in route.broker_datas))
    return RouteView(version, queues, brokers)


def runtime_kv(resp: RemotingResponse) -> dict[str, str]:
    if not resp.ok or not resp.body:
        return {}
    table = fastjson.loads(resp.body).get("table", {})
    return {str(k): str(v) for k, v in table.items()}


def subscription_groups(resp: RemotingResponse) -> dict[str, SubscriptionGroupConfig | None]:
    """GET_ALL_SUBSCRIPTIONGROUP_CONFIG's table: group -> its config (None when it does not read
    as one: the group is still listed)."""
    if not resp.ok:
        return {}
    data: Any = resp.payload if isinstance(resp.payload, dict) else (fastjson.loads(resp.body) if resp.body else {})
    table = data.get("subscriptionGroupTable") or {}
    configs: dict[str, SubscriptionGroupConfig | None] = {}
    for g, wire in sorted(table.items()):
        try:
            configs[str(g)] = SubscriptionGroupConfig.model_validate(wire)
        except ValidationError:
            configs[str(g)] = None
    return configs


def consume_stats(resp: RemotingResponse) -> ConsumeStats | None:
    if not resp.ok or not resp.body:
        return None
    return ConsumeStats.from_wire(loads_keyed(resp.body))


def consumer_connection(resp: RemotingResponse) -> ConsumerConnection | None:
    if not resp.ok or not resp.body:
        return None
    return ConsumerConnection.from_wire(loads_keyed(resp.body))


def producer_connection(resp: RemotingResponse) -> ProducerConnection | None:
    if not resp.ok:
        return None
    if isinstance(resp.payload, ProducerConnection):
        return resp.payload
    return ProducerConnection.from_wire(loads_keyed(resp.body)) if resp.body else None


def reset_offsets(resp: RemotingResponse) -> ResetOffsetBody | None:
    if not resp.ok or not resp.body:
        return None
    return ResetOffsetBody.from_wire(loads_keyed(resp.body))
