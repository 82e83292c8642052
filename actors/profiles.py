"""Timing profiles: `default` is RocketMQ's numbers; `fast` shrinks every period for tests and demos."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from namesrv.broker_config import BrokerConfig
from namesrv.config import NamesrvConfig


@dataclass(frozen=True)
class TimingProfile:
    name: str
    namesrv: dict[str, Any] = field(default_factory=dict)
    broker: dict[str, Any] = field(default_factory=dict)
    route_poll_interval_ms: int = 30_000
    """Producers' route refresh (pollNameServerInterval)."""

    def namesrv_config(self, **overrides: Any) -> NamesrvConfig:
        return NamesrvConfig(**(self.namesrv | overrides))

    def broker_config(self, **overrides: Any) -> BrokerConfig:
        return BrokerConfig(**(self.broker | overrides))


DEFAULT = TimingProfile("default")

FAST = TimingProfile(
    "fast",
    namesrv={
        "scan_not_active_broker_initial_delay_ms": 200,
        "scan_not_active_broker_interval_ms": 200,
        "broker_channel_expired_time_ms": 2_000,
        "not_ready_window_ms": 500,
    },
    broker={
        "register_name_server_period_ms": 500,
        "register_initial_delay_ms": 0,
        "register_broker_timeout_ms": 1_000,
        "allow_short_register_period": True,
    },
    route_poll_interval_ms=1_000,
)

PROFILES = {p.name: p for p in (DEFAULT, FAST)}


def get_profile(name: str) -> TimingProfile:
    try:
        return PROFILES[name]
    except KeyError:
        raise ValueError(f"unknown timing profile {name!r}; choose from {sorted(PROFILES)}") from None
