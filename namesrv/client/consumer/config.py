"""Consumer settings with RocketMQ's defaults and limits (DefaultMQPushConsumer's and
DefaultLitePullConsumer's fields, the parts we model; DefaultMQPushConsumerImpl.checkConfig's
ranges). Timings a test wants short are settings here; the defaults stay RocketMQ's."""

from __future__ import annotations

import enum
import time
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from namesrv.acl.plain_acl import SessionCredentials
from namesrv.client.consume_from import ConsumeFromWhere
from namesrv.client.rebalance.strategies import AllocateMessageQueueAveragely, AllocateMessageQueueStrategy

MIB = 1024 * 1024
HALF_HOUR_MS = 30 * 60 * 1000


class MessageModel(enum.Enum):
    CLUSTERING = "CLUSTERING"
    BROADCASTING = "BROADCASTING"


def _half_an_hour_ago() -> int:
    return int(time.time() * 1000) - HALF_HOUR_MS


class ConsumerConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)

    message_model: MessageModel = MessageModel.CLUSTERING
    consume_from_where: ConsumeFromWhere = ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET
    consume_timestamp_ms: int = Field(default_factory=_half_an_hour_ago, ge=0)
    """Where CONSUME_FROM_TIMESTAMP starts (RocketMQ's consumeTimestamp: half an hour ago)."""
    allocate_message_queue_strategy: Any = Field(default_factory=AllocateMessageQueueAveragely)
    consume_thread_min: int = Field(default=20, ge=1, le=1000)
    consume_thread_max: int = Field(default=20, ge=1, le=1000)
    pull_threshold_for_queue: int = Field(default=1000, ge=1, le=65535)
    pull_threshold_size_for_queue: int = Field(default=100, ge=1, le=1024)
    """MiB cached per queue before its pulls are delayed."""
    pull_batch_size: int = Field(default=32, ge=1, le=1024)
    pull_interval_ms: int = Field(default=0, ge=0, le=65535)
    consume_message_batch_max_size: int = Field(default=1, ge=1, le=1024)
    max_reconsume_times: int = Field(default=-1, ge=-1)
    """-1: 16 for concurrent listeners (the broker's limit before %DLQ%), unbounded local retries for orderly."""
    suspend_current_queue_time_ms: int = Field(default=1000, ge=10, le=30_000)
    broker_suspend_max_time_ms: int = Field(default=15_000, gt=0)
    """How long the broker holds a pull that found nothing (long polling)."""
    consumer_timeout_ms_when_suspend: int = Field(default=30_000, gt=0)
    rebalance_interval_ms: int = Field(default=20_000, gt=0)
    """The rebalance timer (NOTIFY_CONSUMER_IDS_CHANGED rebalances at once as well)."""
    lock_interval_ms: int = Field(default=20_000, gt=0)
    """Orderly: how often the held queues' broker locks are renewed."""
    persist_consumer_offset_interval_ms: int = Field(default=5_000, gt=0)
    heartbeat_broker_interval_ms: int = Field(default=30_000, gt=0)
    pull_time_delay_ms_when_exception: int = Field(default=3_000, ge=0)
    pull_time_delay_ms_when_flow_control: int = Field(default=50, ge=0)
    offset_store_dir: str | None = None
    """Broadcasting: where each member keeps its offsets file (RocketMQ's ~/.rocketmq_offsets); None
    keeps them in memory."""
    route_union: bool = True
    """Beyond RocketMQ: each rebalance allocates from the union of every answering NameServer's route
    (namesrv.client.route_union), so members that prefer different NameServers share one queue list
    while the NameServers disagree, and from the union of the members every broker of the topic
    knows (clients.consumer.members), so one broker that forgot members does not split the group;
    False asks one NameServer at a time and one broker, as RocketMQ's consumers."""
    credentials: SessionCredentials | None = None

    @model_validator(mode="after")
    def _threads(self) -> ConsumerConfig:
        if self.consume_thread_min > self.consume_thread_max:
            raise ValueError(f"consume_thread_min ({self.consume_thread_min}) is larger than consume_thread_max "
                             f"({self.consume_thread_max})")
        if not callable(getattr(self.allocate_message_queue_strategy, "allocate", None)):
            raise ValueError("allocate_message_queue_strategy has no allocate(group, cid, mq_all, cid_all)")
        return self

    @property
    def strategy(self) -> AllocateMessageQueueStrategy:
        strategy: AllocateMessageQueueStrategy = self.allocate_message_queue_strategy
        return strategy

    @property
    def concurrent_max_reconsume_times(self) -> int:
        return 16 if self.max_reconsume_times == -1 else self.max_reconsume_times
