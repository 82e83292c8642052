"""Which brokers are alive, from their heartbeats (RocketMQ's DefaultBrokerHeartbeatManager).

A broker heartbeats every second with its epoch, max offset and election priority; it is inactive
once silent for longer than its timeout (10 s by default). `scan_not_active` (run periodically by
the actor) drops expired brokers and returns them; `on_broker_dead` is the hook for a definite death
the Ray layer observed (an actor that died), which needs no timeout. Time is an injected clock.

One difference from RocketMQ: a heartbeat's figures replace the previous ones even when lower. A
returning old master truncates its log, and the election must see the offset it really holds.
"""

from __future__ import annotations

from dataclasses import dataclass

from namesrv.common.clock import Clock
from namesrv.controller.config import ControllerConfig

LOWEST_ELECTION_PRIORITY = 2**31 - 1
"""A broker that sends no priority (Integer.MAX_VALUE): a smaller number is a stronger candidate."""


@dataclass(frozen=True, slots=True)
class BrokerIdentity:
    broker_name: str
    broker_id: int


@dataclass(slots=True)
class BrokerLiveInfo:
    cluster_name: str
    broker_name: str
    broker_addr: str
    broker_id: int
    last_update_ms: int
    heartbeat_timeout_ms: int
    epoch: int = -1
    max_offset: int = -1
    confirm_offset: int = -1
    election_priority: int = LOWEST_ELECTION_PRIORITY

    def expired(self, now_ms: int) -> bool:
        return now_ms - self.last_update_ms > self.heartbeat_timeout_ms


class BrokerHeartbeatManager:
    def __init__(self, config: ControllerConfig, clock: Clock) -> None:
        self.config = config
        self.clock = clock
        self.live: dict[BrokerIdentity, BrokerLiveInfo] = {}

    def on_broker_heartbeat(
        self, cluster_name: str, broker_name: str, broker_addr: str, broker_id: int, *,
        heartbeat_timeout_ms: int | None = None, epoch: int | None = None, max_offset: int | None = None,
        confirm_offset: int | None = None, election_priority: int | None = None,
    ) -> BrokerLiveInfo:
        if heartbeat_timeout_ms is not None and heartbeat_timeout_ms <= 0:
            raise ValueError(f"heartbeatTimeoutMills must be positive, got {heartbeat_timeout_ms}")
        key = BrokerIdentity(broker_name, broker_id)
        info = BrokerLiveInfo(
            cluster_name, broker_name, broker_addr, broker_id, self.clock(),
            heartbeat_timeout_ms or self.config.broker_heartbeat_timeout_ms,
            -1 if epoch is None else epoch, -1 if max_offset is None else max_offset,
            -1 if confirm_offset is None else confirm_offset,
            LOWEST_ELECTION_PRIORITY if election_priority is None else election_priority,
        )
        self.live[key] = info
        return info

    def is_broker_active(self, broker_name: str, broker_id: int) -> bool:
        info = self.live.get(BrokerIdentity(broker_name, broker_id))
        return info is not None and not info.expired(self.clock())

    def get_live_info(self, broker_name: str, broker_id: int) -> BrokerLiveInfo | None:
        return self.live.get(BrokerIdentity(broker_name, broker_id))

    def scan_not_active(self) -> list[BrokerIdentity]:
        """Drop every broker whose heartbeat expired; returns them (scanNotActiveBroker)."""
        now = self.clock()
        gone = [key for key, info in self.live.items() if info.expired(now)]
        for key in gone:
            del self.live[key]
        return gone

    def on_broker_dead(self, broker_name: str, broker_id: int) -> bool:
        """A definite death (its actor died): inactive at once. True if it was alive until now."""
        return self.live.pop(BrokerIdentity(broker_name, broker_id), None) is not None

    def active_brokers(self, broker_name: str) -> list[BrokerLiveInfo]:
        now = self.clock()
        return [i for k, i in sorted(self.live.items(), key=lambda kv: kv[0].broker_id)
                if k.broker_name == broker_name and not i.expired(now)]
