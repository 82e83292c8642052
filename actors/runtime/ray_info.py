"""What Ray tells an actor about itself, asked without Ray's deprecation warnings reaching the user."""

from __future__ import annotations

import warnings

import ray

from namesrv.remoting.config import ALL_INTERFACES, RemotingServerConfig

SOFT_PLACEMENT_MEMORY = 1024 * 1024
"""What an actor placed by *soft* node affinity asks for: Ray places a request for no resources at all
on a random node, ignoring a soft affinity (only hard affinity is special-cased), so it asks for a
token 1 MiB of memory."""
_RAY_OWN_ACTOR_ID_WARNING = r"(?s).*Use get_actor_id\(\) instead"


def was_restarted() -> bool:
    """Whether Ray restarted the calling actor (its constructor runs again after a crash).

    Ray's `RuntimeContext.was_current_actor_reconstructed` is current API, but it reads Ray's own
    deprecated `actor_id` property inside itself, so every actor asking it printed "Use
    get_actor_id() instead" into the driver's terminal. Only that one warning, raised inside Ray
    for this call, is silenced here; any other warning still shows."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=_RAY_OWN_ACTOR_ID_WARNING, category=DeprecationWarning)
        return bool(ray.get_runtime_context().was_current_actor_reconstructed)


def head_node_id() -> str | None:
    """The head node's id (where the GCS lives), None when Ray does not say."""
    return next((n["NodeID"] for n in ray.nodes() if n["Alive"] and "node:__internal_head__" in n["Resources"]),
                None)


def advertised_host(host: str) -> str:
    """The host clients on other nodes dial for a server listening on `host`: on every interface (or
    an unnamed host), its node's IP, as RocketMQ advertises its local address."""
    return ray.util.get_node_ip_address() if host in (ALL_INTERFACES, "", "::") else host


def advertised_address(remoting: RemotingServerConfig, port: int) -> str:
    """`host:port` a TCP server of this config advertises for its bound `port`: its advertised host,
    else its listen host, as `advertised_host` resolves it."""
    return f"{advertised_host(remoting.advertised_host or remoting.listen_host)}:{port}"
