"""Controller settings with RocketMQ 5.3's defaults (ControllerConfig, the parts we model)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class ControllerConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    enable_elect_unclean_master: bool = False
    """Off: only SyncStateSet members may become master (no acknowledged message lost). On: when no
    member is alive, any live replica may be chosen (it may lack the newest messages)."""
    broker_heartbeat_timeout_ms: int = Field(default=10_000, gt=0)
    """A broker silent for longer is inactive (DEFAULT_BROKER_CHANNEL_EXPIRED_TIME); a heartbeat may
    carry its own timeout (heartbeatTimeoutMills), as in RocketMQ."""
    scan_not_active_broker_interval_ms: int = Field(default=5_000, gt=0)
    """How often the heartbeat table is scanned for expired brokers (scanNotActiveBrokerInterval)."""
    scan_inactive_master_interval_ms: int = Field(default=5_000, gt=0)
    """How often broker sets whose master is gone are re-elected (scanInactiveMasterInterval)."""
    election_grace_ms: int | None = Field(default=None, ge=0)
    """After the controller (re)starts its heartbeat table is empty: elections triggered by a missing
    heartbeat wait this long (None: one heartbeat timeout) so every live broker is heard first. Not in
    RocketMQ, whose new leader may depose a master that has not yet heartbeated to it. Definite deaths
    (a Ray actor death) and manual elections do not wait."""
    snapshot_every_events: int = Field(default=64, gt=0)
    """Compact the event log into a snapshot after this many events."""

    def effective_election_grace_ms(self) -> int:
        return self.broker_heartbeat_timeout_ms if self.election_grace_ms is None else self.election_grace_ms


FIRST_BROKER_CONTROLLER_ID = 1
"""Controller-assigned brokerIds start at 1 (MixAll.FIRST_BROKER_CONTROLLER_ID); whichever replica
is master registers with the NameServers as brokerId 0 (MixAll.MASTER_ID)."""
