"""Where a remoting server listens (RocketMQ's NettyServerConfig, the parts that matter here)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from namesrv.protocol.constants import MAX_FRAME_SIZE

DEFAULT_NAMESRV_PORT = 9876
"""RocketMQ's NameServer port; NameServer i of a deployment listens on 9876 + i by default."""

DEFAULT_BROKER_PORT = 10911
"""RocketMQ's broker listenPort; broker i of a deployment listens on 10911 + 10 * i by default."""

LOOPBACK = "127.0.0.1"
ALL_INTERFACES = "0.0.0.0"


def host_port(addr: str) -> tuple[str, int] | None:
    """`host:port` split into its host and port; None when `addr` is not one (a Ray-only broker's
    actor name, a missing host, a port outside 1..65535). Each caller says what else it is."""
    host, sep, port = addr.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        return None
    return host, int(port)


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
    server_max_connections: int = Field(default=1024, gt=0)
    """Connections served at once; one more is closed as soon as it is accepted."""
    server_small_frame_max_length: int = Field(default=64 * 1024, ge=4096, le=MAX_FRAME_SIZE)
    """The longest frame (length field included) of a request whose code carries no big body: a
    longer one must be a registration, a send, a heartbeat... (read from its header before its body
    is), or the connection is closed. Also how far a connection may read into a frame before it
    holds a reservation of the pending-frame budget."""
    server_pending_frames_max_bytes: int = Field(default=64 * 1024 * 1024, gt=0)
    """Bytes of frames longer than the small-frame limit that may be in flight (partly read) at once,
    over all connections; a connection that would exceed it stops reading until some are done."""
