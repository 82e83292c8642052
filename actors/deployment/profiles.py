"""Timing profiles: `default` is RocketMQ's numbers; `fast` shrinks every period for tests and demos.

A profile is typed end to end: the NameServer and broker configs it holds are the very models the
actors receive (Ray pickles them), validated once here.

The NameServer's 'not ready' window after a restart is not a number of its own but follows from
the brokers' timing (`not_ready_window_ms`): every broker the NameServer knew must get the chance
to register again before a route may be answered without it.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from namesrv.broker.config import BrokerConfig
from namesrv.routeinfo.config import NamesrvConfig


class TimingProfile(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    namesrv: NamesrvConfig = Field(default_factory=NamesrvConfig)
    broker: BrokerConfig = Field(default_factory=BrokerConfig)
    route_poll_interval_ms: int = Field(default=30_000, gt=0)
    """Producers' route refresh (pollNameServerInterval)."""

    def namesrv_config(self, **overrides: Any) -> NamesrvConfig:
        return NamesrvConfig.model_validate(self.namesrv.model_dump() | overrides)

    def broker_config(self, **overrides: Any) -> BrokerConfig:
        return BrokerConfig.model_validate(self.broker.model_dump() | overrides)


def not_ready_window_ms(broker: BrokerConfig, actor_restart_ms: int) -> int:
    """The longest a restarted NameServer keeps refusing route queries (it opens as soon as every
    broker it knew has registered again):

        window = register period + register timeout + actor restart

    A broker whose registration failed while the NameServer was down retries only one period
    later; that call may take up to the registration timeout; and a broker restarted together
    with the NameServer (its node was lost) registers only once Ray has restarted its actor,
    which is also when a broker that dropped its handle finds the re-created NameServer again.
    Default profile: 30 s + 6 s + 10 s = 46 s (RocketMQ's NameServer waits 45 s); fast: 0.5 s +
    1 s + 3 s = 4.5 s."""
    return broker.effective_register_period_ms() + broker.register_broker_timeout_ms + actor_restart_ms


DEFAULT_ACTOR_RESTART_MS = 10_000
FAST_ACTOR_RESTART_MS = 3_000
"""Allowance for Ray restarting an actor (a new worker process), in the not-ready window."""

_DEFAULT_BROKER = BrokerConfig()
DEFAULT = TimingProfile(
    name="default",
    namesrv=NamesrvConfig(not_ready_window_ms=not_ready_window_ms(_DEFAULT_BROKER, DEFAULT_ACTOR_RESTART_MS)),
    broker=_DEFAULT_BROKER,
)

_FAST_BROKER = BrokerConfig(
    register_name_server_period_ms=500,
    register_initial_delay_ms=0,
    register_broker_timeout_ms=1_000,
    allow_short_register_period=True,
    controller_heartbeat_interval_ms=500,
    controller_master_lease_ms=2_500,
)
FAST = TimingProfile(
    name="fast",
    namesrv=NamesrvConfig(
        scan_not_active_broker_initial_delay_ms=200,
        scan_not_active_broker_interval_ms=200,
        broker_channel_expired_time_ms=2_000,
        not_ready_window_ms=not_ready_window_ms(_FAST_BROKER, FAST_ACTOR_RESTART_MS),
    ),
    broker=_FAST_BROKER,
    route_poll_interval_ms=1_000,
)

PROFILES = {p.name: p for p in (DEFAULT, FAST)}


def get_profile(name: str) -> TimingProfile:
    try:
        return PROFILES[name]
    except KeyError:
        raise ValueError(f"unknown timing profile {name!r}; choose from {sorted(PROFILES)}") from None


def replication_overrides(slaves: int, broker_role: str | None) -> dict[str, Any]:
    """Broker settings for a deployment with `slaves` slaves per broker set (`namesrv up --slaves`):
    the masters' role (SYNC_MASTER by default when there are slaves, as issue 21 asks; RocketMQ's own
    default is ASYNC_MASTER) and slaves that serve reads (slaveReadEnable), so a consumer keeps
    reading a broker set whose master died."""
    if broker_role is not None and broker_role not in ("SYNC_MASTER", "ASYNC_MASTER"):
        raise ValueError(f"broker role must be SYNC_MASTER or ASYNC_MASTER, not {broker_role!r}")
    if slaves <= 0:
        return {"broker_role": broker_role} if broker_role else {}
    return {"broker_role": broker_role or "SYNC_MASTER", "slave_read_enable": True}
