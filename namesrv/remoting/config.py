"""Where a remoting server listens (RocketMQ's NettyServerConfig, the parts that matter here)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

DEFAULT_NAMESRV_PORT = 9876
"""RocketMQ's NameServer port; NameServer i of a deployment listens on 9876 + i by default."""

DEFAULT_BROKER_PORT = 10911
"""RocketMQ's broker listenPort; broker i of a deployment listens on 10911 + 10 * i by default."""

LOOPBACK = "127.0.0.1"
ALL_INTERFACES = "0.0.0.0"


class RemotingServerConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    listen_host: str = LOOPBACK
    """127.0.0.1 for a local deployment; 0.0.0.0 on a multi-node cluster (clients on other hosts)."""
    listen_port: int = Field(default=DEFAULT_NAMESRV_PORT, ge=0, le=65535)
    """0 takes any free port (tests run many deployments side by side)."""
    advertised_host: str | None = None
    """The host clients are told to dial; None: the listen host, or this node's IP for 0.0.0.0."""
    server_channel_max_idle_time_seconds: float = Field(default=120, gt=0)
    """A connection silent for this long is closed (RocketMQ's serverChannelMaxIdleTimeSeconds);
    brokers registered through it leave at once."""
