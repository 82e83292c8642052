"""What the broker's request processors share (RocketMQ's BrokerController as its processors see it):
who the broker is, its config, topics, store, offsets, clients, held pulls, counters and callbacks.

One `BrokerContext` per broker, built by `namesrv.broker.processor.dispatcher.BrokerProcessor` and handed to
each processor; a processor keeps no state another one reads. Pure: no Ray, no sockets.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from namesrv.broker.client.consumer_manager import ConsumerManager
from namesrv.broker.client.consumer_offsets import ConsumerOffsetManager
from namesrv.broker.client.producer_manager import ProducerManager
from namesrv.broker.client.pull_hold import PullHoldService
from namesrv.broker.config import BrokerConfig
from namesrv.broker.metadata_log import MetadataLog
from namesrv.broker.processor.types import BrokerIdentity
from namesrv.broker.read_fence import ReadFence
from namesrv.broker.role import RoleGuard
from namesrv.broker.schedule.delivery import MESSAGE_DELAY_LEVEL, parse_delay_levels
from namesrv.broker.stats import BrokerStats
from namesrv.broker.stats_items import BrokerStatsManager
from namesrv.broker.subscription.manager import SubscriptionGroupManager
from namesrv.broker.topic_config_manager import TopicConfigManager
from namesrv.broker.transaction.service import TransactionService
from namesrv.common.clock import Clock
from namesrv.protocol import fastjson
from namesrv.protocol.codes import ResponseCode
from namesrv.remoting.command import MQServerError, RemotingRequest
from namesrv.remoting.pipeline import RequestContext
from namesrv.store.ha.epoch_cache import EpochFileCache
from namesrv.store.message_store import MessageStore

MayRead = Callable[[RemotingRequest, RequestContext, str], str | None]


def anyone_may_read(request: RemotingRequest, client: RequestContext, topic: str) -> str | None:
    return None


def _no_topic_listener(topic: str) -> None:
    return None


def _no_group_listener(group: str, channels: list[str]) -> None:
    return None


@dataclass(eq=False)
class BrokerContext:
    identity: BrokerIdentity
    config: BrokerConfig
    topics: TopicConfigManager
    store: MessageStore
    offsets: ConsumerOffsetManager
    clock: Clock
    on_topic_created: Callable[[str], None] = _no_topic_listener
    """Called with a topic a request created (a send's auto-create, a retry or DLQ topic)."""
    on_group_changed: Callable[[str, list[str]], None] = _no_group_listener
    """Called with a consumer group whose members changed, and the channels of its members."""
    may_read: MayRead = anyone_may_read
    """With ACL on: None when the request's account may SUB `topic`, else why not (for a
    resource the request does not name, only points at: a message sent back by its offset)."""
    on_parked: Callable[[], None] = lambda: None
    """Called when a send parked a delayed or timed message (the schedule service looks again)."""
    delay_levels_ms: list[int] = field(default_factory=lambda: parse_delay_levels(MESSAGE_DELAY_LEVEL))
    role: RoleGuard | None = None
    """The broker role's checks on sends and pulls (namesrv.broker.role); built from the config when None."""
    epochs: EpochFileCache | None = None
    """The broker's epoch file in controller mode (set by whoever wires the broker to the
    controller); None otherwise, and GET_BROKER_EPOCH_CACHE then answers as RocketMQ does outside
    controller mode."""
    groups: SubscriptionGroupManager | None = None
    """The consumer groups' configs (namesrv.broker.subscription); an in-memory one when None."""
    consumers: ConsumerManager = field(init=False)
    producers: ProducerManager = field(init=False)
    """Who produces to this broker, by producer group (HEART_BEAT's producerDataSet)."""
    hold: PullHoldService = field(init=False, default_factory=PullHoldService)
    stats: collections.Counter[tuple[str, str]] = field(init=False, default_factory=collections.Counter)
    """Cumulative ("sends" | "pulls" | "pulled_messages", answer code name) counts, for metrics."""
    sends_waiting: int = field(init=False, default=0)
    """Messages whose send waits for the store (its flush, under SYNC_FLUSH)."""
    broker_stats: BrokerStats = field(init=False)
    stats_items: BrokerStatsManager = field(init=False)
    """Per-topic puts and per-group gets (VIEW_BROKER_STATS_DATA, mqadmin statsAll)."""
    closed: bool = field(init=False, default=False)
    """Set when the broker shuts down: sends are refused, held pulls answered."""

    transactions: TransactionService = field(init=False)
    fence: ReadFence = field(init=False)
    metadata: MetadataLog = field(init=False)
    """Topic changes carried in the replicated log (namesrv.broker.metadata_log)."""
    """What readers may see (namesrv.broker.read_fence): the queues up to the confirm offset."""

    def __post_init__(self) -> None:
        self.consumers = ConsumerManager(self.clock)
        self.producers = ProducerManager(self.clock)
        cfg = self.config
        if self.groups is None:
            self.groups = SubscriptionGroupManager(None, self.clock, cfg.auto_create_subscription_group)
        if self.role is None:
            self.role = RoleGuard(cfg, self.identity.broker_id, self.clock)
        self.fence = ReadFence(self.store, self.role, self.hold)
        self.metadata = MetadataLog(self.store, self.topics, self.groups, self.offsets, lambda: self.guard.writable)
        self.transactions = TransactionService(self.store, self.clock, cfg.transaction_timeout_ms,
                                               cfg.transaction_check_max, cfg.transaction_check_interval_ms)
        self.broker_stats = BrokerStats(self.clock, lambda: (self.stats[("sends", "SUCCESS")],
                                                             self.stats[("pulled_messages", "")]))
        self.stats_items = BrokerStatsManager(self.clock)

    @property
    def subscription_groups(self) -> SubscriptionGroupManager:
        """The consumer groups' configs (`groups`, always set once built)."""
        assert self.groups is not None
        return self.groups

    def group_changed(self, group: str) -> None:
        """Tell a consumer group's members that its membership changed, unless its config says
        not to (notifyConsumerIdsChangedEnable, RocketMQ's DefaultConsumerIdsChangeListener)."""
        config = self.subscription_groups.get(group)
        if config is None or config.notify_consumer_ids_changed_enable:
            self.on_group_changed(group, self.consumers.channels_of(group))

    @property
    def guard(self) -> RoleGuard:
        """The role's checks (`role`, always set once built)."""
        assert self.role is not None
        return self.role


def json_body(body: bytes | None, what: str) -> dict[str, Any]:
    """A request's JSON object body; MQServerError (SYSTEM_ERROR) when missing or not an object."""
    if not body:
        raise MQServerError(ResponseCode.SYSTEM_ERROR, f"{what} body is missing")
    try:
        data = fastjson.loads(body)
    except fastjson.JsonError as e:
        raise MQServerError(ResponseCode.SYSTEM_ERROR, f"{what} body: {e}") from None
    if not isinstance(data, dict):
        raise MQServerError(ResponseCode.SYSTEM_ERROR, f"{what} body must be a JSON object")
    return data
