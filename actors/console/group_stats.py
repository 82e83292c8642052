"""Consumer groups and watched producer groups, once per stats tick.

A consumer group is asked on the brokers that host it (its members' or its config's): its consume
stats (offsets, TPS) everywhere, its connection (subscriptions, model) where it has members; each
queue's owner is what the default allocation gives the members. A producer group is asked only once
someone watches it (the producers page), on every live broker."""

from __future__ import annotations

import asyncio
import logging

from actors.console.calls import ServerCalls
from actors.console.decode import consume_stats, consumer_connection, producer_connection, subscription_groups
from actors.console.model import ConsoleState, GroupView, ProducerView, QueueOffset
from namesrv.broker.subscription.config import SubscriptionGroupConfig
from namesrv.client.rebalance.strategies import AllocateMessageQueueAveragely
from namesrv.protocol.codes import BrokerRequestCode
from namesrv.protocol.constants import MASTER_ID
from namesrv.protocol.models import MessageQueue

log = logging.getLogger(__name__)

GROUP_CONCURRENCY = 16
"""Groups whose stats are asked for at once in a refresh."""


class ConsumerGroups:
    def __init__(self, state: ConsoleState, calls: ServerCalls) -> None:
        self.state = state
        self.calls = calls

    async def refresh(self) -> None:
        hosts: dict[str, set[str]] = {}
        configs: dict[str, dict[str, SubscriptionGroupConfig]] = {}
        for b in self.state.live_brokers():
            for g in b.consumer_groups:
                hosts.setdefault(g, set()).add(b.addr)
            if b.broker_id != MASTER_ID:
                continue
            try:
                configured = subscription_groups(await self.calls.call_broker(b.addr, self.calls.request(
                    BrokerRequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)))
            except Exception as e:
                log.info("subscription groups of %s: %s", b.addr, type(e).__name__)
                continue
            for g, config in configured.items():
                hosts.setdefault(g, set()).add(b.addr)
                if config is not None:
                    configs.setdefault(g, {})[b.addr] = config
        limit = asyncio.Semaphore(GROUP_CONCURRENCY)

        async def one(group: str, addrs: set[str]) -> GroupView:
            async with limit:
                return await self._group(group, sorted(addrs), configs.get(group, {}))
        views = await asyncio.gather(*(one(g, a) for g, a in sorted(hosts.items())))
        for v in views:
            self.state.record(self.state.lag_history, v.group, v.lag)
        self.state.groups = {v.group: v for v in views}

    async def _group(self, group: str, addrs: list[str], configs: dict[str, SubscriptionGroupConfig]) -> GroupView:
        view = GroupView(group, configs=configs)
        members: set[str] = set()
        subs: set[str] = set()
        for addr in addrs:
            b = self.state.brokers[addr]
            members.update(b.consumer_groups.get(group, []))
            try:
                stats = consume_stats(await self.calls.call_broker(addr, self.calls.request(
                    BrokerRequestCode.GET_CONSUME_STATS, {"consumerGroup": group})))
                if stats is not None:
                    view.consume_tps += stats.consume_tps
                    view.offsets.extend(QueueOffset(mq.topic, mq.broker_name, mq.queue_id, o.broker_offset,
                                                    o.consumer_offset) for mq, o in stats.offset_table.items())
                if group in b.consumer_groups:
                    conn = consumer_connection(await self.calls.call_broker(addr, self.calls.request(
                        BrokerRequestCode.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": group})))
                    if conn is not None:
                        subs.update(conn.subscription_table)
                        view.message_model, view.consume_type = conn.message_model, conn.consume_type
            except Exception as e:
                view.error = f"{addr}: {type(e).__name__}"
        view.members = sorted(members)
        view.subscriptions = sorted(subs)
        view.offsets = with_owners(group, sorted(view.offsets, key=lambda q: (q.topic, q.broker_name, q.queue_id)),
                                   view.members)
        return view


class ProducerGroups:
    def __init__(self, state: ConsoleState, calls: ServerCalls) -> None:
        self.state = state
        self.calls = calls
        self.watched: set[str] = set()

    async def watch(self, group: str) -> None:
        """Keep `group` on the producers page from now on (its view asked at once)."""
        self.watched.add(group)
        self.state.producers[group] = await self.view(group)

    async def refresh(self) -> None:
        for group in sorted(self.watched):
            self.state.producers[group] = await self.view(group)

    async def view(self, group: str) -> ProducerView:
        view = ProducerView(group)
        for b in self.state.live_brokers():
            try:
                conn = producer_connection(await self.calls.call_broker(b.addr, self.calls.request(
                    BrokerRequestCode.GET_PRODUCER_CONNECTION_LIST, {"producerGroup": group})))
            except Exception as e:
                view.error = f"{b.addr}: {type(e).__name__}"
                continue
            for c in conn.connection_set if conn is not None else []:
                view.connections.append((b.actor_name or b.addr, c.client_id, c.client_addr, c.version))
        return view


def with_owners(group: str, offsets: list[QueueOffset], members: list[str]) -> list[QueueOffset]:
    """Each queue's owner as the default strategy (AllocateMessageQueueAveragely) assigns it among
    the members, per topic (what the members' rebalance computes from the same inputs)."""
    if not members:
        return offsets
    strategy = AllocateMessageQueueAveragely()
    cids = sorted(members)
    owner: dict[tuple[str, str, int], str] = {}
    for topic in sorted({q.topic for q in offsets}):
        mqs = sorted((MessageQueue(q.topic, q.broker_name, q.queue_id) for q in offsets if q.topic == topic),
                     key=lambda m: (m.broker_name, m.queue_id))
        for cid in cids:
            for mq in strategy.allocate(group, cid, mqs, cids):
                owner[(mq.topic, mq.broker_name, mq.queue_id)] = cid
    return [QueueOffset(q.topic, q.broker_name, q.queue_id, q.broker_offset, q.consumer_offset,
                        owner.get((q.topic, q.broker_name, q.queue_id), "")) for q in offsets]
