"""Producer settings with RocketMQ's defaults (DefaultMQProducer's fields, the parts we model)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from namesrv.acl.plain_acl import SessionCredentials
from namesrv.client.fault import FAULT_TABLES, FaultTable
from namesrv.protocol.constants import DEFAULT_TOPIC_QUEUE_NUMS, MAX_MESSAGE_SIZE
from namesrv.protocol.message.compression import COMPRESS_MSG_BODY_OVER_HOWMUCH


class ProducerConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    send_msg_timeout_ms: int = Field(default=3000, gt=0)
    """One budget for every attempt of a sync send."""
    retry_times_when_send_failed: int = Field(default=2, ge=0)
    retry_times_when_send_async_failed: int = Field(default=2, ge=0)
    """RocketMQ 4.9's retryTimesWhenSendAsyncFailed: an async send whose attempt got no answer
    (broker dead, unreachable, timed out) tries another broker, up to this many times more, within
    the same timeout; a broker's error answer is final, as in 4.9."""
    send_latency_fault_enable: bool = False
    """Isolate a slow or failed broker for a while (MQFaultStrategy); off by default, as in
    RocketMQ's DefaultMQProducer. Without it a retry still avoids the broker that just failed."""
    fault_table: Literal["4.9", "5.x"] = "5.x"
    """Which RocketMQ version's latency -> isolation table to apply when fault tolerance is on."""
    poll_name_server_interval_ms: int = Field(default=30_000, gt=0)
    heartbeat_broker_interval_ms: int = Field(default=30_000, gt=0)
    """RocketMQ's heartbeatBrokerInterval: every broker this producer has a connection to hears from
    it this often, also while it sends nothing."""
    route_push: bool = True
    """Beyond RocketMQ: also hold a long-poll so route changes arrive at once, not at the next poll."""
    route_union: bool = True
    """Beyond RocketMQ: routes are the union of every answering NameServer's (namesrv.client.route_union),
    each pushed by a long-poll of its own, so a broker one NameServer lost while others still list it
    keeps its share of sends; False asks one NameServer at a time, as RocketMQ's producers."""
    auto_create_topic: bool = True
    """Send a topic with no route through TBW102's route (the broker creates it)."""
    default_topic_queue_nums: int = Field(default=DEFAULT_TOPIC_QUEUE_NUMS, gt=0)
    max_message_size: int = Field(default=MAX_MESSAGE_SIZE, gt=0)
    async_send_threads: int = Field(default=4, gt=0)
    compress_msg_body_over_howmuch: int = Field(default=COMPRESS_MSG_BODY_OVER_HOWMUCH, gt=0)
    """Bodies of at least this many bytes are sent zlib-deflated with sysFlag COMPRESSED_FLAG, as
    RocketMQ's producers (4 KiB); readers inflate them (over TCP; actor-call sends go plain)."""
    rocketmq_namespace: str | None = Field(default=None, min_length=1, max_length=64, pattern=r"^[a-zA-Z0-9_-]+$")
    """RocketMQ's namespace (DefaultMQProducer.namespace): topics and the group travel as
    `ns%name` and results come back without it. Not `namespace`: that is the Ray namespace."""
    broker_transport: Literal["tcp", "ray"] = "tcp"
    """How sends reach a broker: "tcp", over a remoting connection of the producer's own to each
    broker whose route address is a TCP host:port (an actor call to any other); "ray", one actor
    call per send. The route comes from the NameServer actors either way (clients/impl/broker_tcp.py)."""
    credentials: SessionCredentials | None = None
    """Sign every request with this account (NameServers and brokers with ACL on)."""

    @property
    def latency_table(self) -> FaultTable:
        return FAULT_TABLES[self.fault_table]
