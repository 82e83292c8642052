"""What a deployment is made of: its brokers (`BrokerSpec`) and the cluster around them (`ClusterSpec`:
how many NameServers, their ports, profile, data directory, placement and restart policy).

Plain values, shared by the launcher that starts the actors, the registry that remembers them, and
the clients that find them again by name.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from actors.broker.actor import broker_actor_name
from namesrv.proxy.settings import DEFAULT_GRPC_PORT as DEFAULT_PROXY_PORT
from namesrv.remoting.config import DEFAULT_BROKER_PORT, DEFAULT_NAMESRV_PORT, LOOPBACK, RemotingServerConfig

DEFAULT_NAMESPACE = "namesrv"
REGISTRY_SETTINGS = ("profile", "data_dir", "detached", "namesrv_max_restarts", "broker_max_restarts",
                     "namesrv_overrides", "broker_overrides", "namesrv_port", "listen_host", "remoting_overrides",
                     "broker_port", "controller", "proxy_count", "proxy_port", "proxy_overrides", "proxy_mode",
                     "console", "console_port")
"""The ClusterSpec fields the registry keeps (actors.deployment.registry): what a restart needs besides the brokers."""
NAMESRV_PREFIX = "namesrv-"


@dataclass(frozen=True)
class BrokerSpec:
    broker_name: str
    broker_id: int = 0
    cluster: str = "DefaultCluster"
    node_id: str | None = None
    """Pin the broker to this Ray node so a restart finds its store on the same disk."""
    port: int | None = None
    """The TCP port clients dial (assigned by the Deployment); None: reachable over Ray only."""
    host: str = LOOPBACK
    """The host the broker advertises (its node's IP on a multi-node cluster)."""

    @property
    def actor_name(self) -> str:
        return broker_actor_name(self.broker_name, self.broker_id)

    @property
    def addr(self) -> str:
        """The address routes carry: host:port, or the actor name for a Ray-only broker."""
        return f"{self.host}:{self.port}" if self.port is not None else self.actor_name


@dataclass
class ClusterSpec:
    namesrv_count: int = 2
    brokers: list[BrokerSpec] = field(
        default_factory=lambda: [BrokerSpec("broker-a"), BrokerSpec("broker-b"), BrokerSpec("broker-c")]
    )
    profile: str = "default"
    namespace: str = DEFAULT_NAMESPACE
    data_dir: str = "~/namesrv-data"
    detached: bool = False
    namesrv_max_restarts: int = -1
    broker_max_restarts: int = 0
    namesrv_overrides: dict[str, Any] = field(default_factory=dict)
    broker_overrides: dict[str, Any] = field(default_factory=dict)
    namesrv_node_ids: list[str] = field(default_factory=list)
    """Place NameServer i on `namesrv_node_ids[i % len]`, softly: if that node dies, Ray restarts it
    elsewhere (a NameServer's state is rebuilt from broker registrations)."""
    namesrv_port: int | None = DEFAULT_NAMESRV_PORT
    """NameServer i serves RocketMQ's remoting protocol on namesrv_port + i; 0 takes free ports,
    None serves Ray callers only."""
    listen_host: str = LOOPBACK
    """Where the TCP servers listen: 127.0.0.1 for a local deployment, 0.0.0.0 on a multi-node one."""
    remoting_overrides: dict[str, Any] = field(default_factory=dict)
    """RemotingServerConfig fields for every NameServer (e.g. server_channel_max_idle_time_seconds)."""
    broker_port: int | None = DEFAULT_BROKER_PORT
    """Broker i (in `brokers` order) serves clients on broker_port + 10 * i; 0 takes free ports
    (kept across restarts), None serves Ray callers only."""
    proxy_count: int = 0
    """RocketMQ 5 gRPC proxies (actors.proxy) to start after the brokers; 0: none (the default here, so
    a deployment in a test or a benchmark pays for no gRPC server; `namesrv up` starts one per node)."""
    proxy_port: int | None = DEFAULT_PROXY_PORT
    """Proxy i serves gRPC on proxy_port + i; 0 takes free ports."""
    proxy_node_ids: list[str] = field(default_factory=list)
    """Place proxy i on `proxy_node_ids[i % len]`, softly (a proxy whose node dies restarts elsewhere):
    `namesrv up` starts one proxy per node by default, as Ray Serve places its proxies."""
    proxy_overrides: dict[str, Any] = field(default_factory=dict)
    """ProxyConfig fields for every proxy (namesrv.proxy.settings), e.g. min_invisible_time_ms_for_recv."""
    proxy_mode: str = "cluster"
    """"local": every TCP broker also serves a gRPC proxy of its own (RocketMQ 5's local mode) on its
    port + 2, asking its broker in process; "cluster": only the `proxy_count` proxy actors (which a
    local-mode deployment may have too)."""
    controller: bool = False
    """Start the controller (actors.controller.start) before the brokers: they run in controller mode
    (actors.broker.ha.replicas_manager) and a dead master is replaced by a slave."""
    console: bool = False
    """Start the web console (actors.console) after the brokers. Off here (a deployment in a test
    does not pay for it); `namesrv up` turns it on."""
    console_port: int = 0
    """The console's port on 127.0.0.1 (0: a free one)."""

    def namesrv_remoting(self, name: str) -> RemotingServerConfig | None:
        if self.namesrv_port is None:
            return None
        port = self.namesrv_port + self.namesrv_names.index(name) if self.namesrv_port else 0
        return RemotingServerConfig(listen_host=self.listen_host, listen_port=port, **self.remoting_overrides)

    def __post_init__(self) -> None:
        if self.proxy_mode not in ("cluster", "local"):
            raise ValueError(f"proxy_mode must be 'cluster' or 'local', got {self.proxy_mode!r}")

    def proxy_listen_port(self, index: int) -> int:
        return self.proxy_port + index if self.proxy_port else 0

    @property
    def namesrv_names(self) -> list[str]:
        return [f"{NAMESRV_PREFIX}{i}" for i in range(self.namesrv_count)]

    def namesrv_node_id(self, name: str) -> str | None:
        if not self.namesrv_node_ids or name not in self.namesrv_names:
            return None
        return self.namesrv_node_ids[self.namesrv_names.index(name) % len(self.namesrv_node_ids)]

    def proxy_node_id(self, index: int) -> str | None:
        return self.proxy_node_ids[index % len(self.proxy_node_ids)] if self.proxy_node_ids else None
