"""Start or find the controller actor (one per Ray namespace), with a profile's timing.

`start_controller` creates it detached with unlimited restarts, softly on the head node (where the
GCS that holds its state lives), or returns the running one; `get_controller` finds it by name.
"""

from __future__ import annotations

from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from actors.controller.actor import CONTROLLER_NAME, ControllerActor
from actors.controller.gcs_kv import KV_NAMESPACE
from actors.runtime.ray_info import SOFT_PLACEMENT_MEMORY, head_node_id
from namesrv.controller.config import ControllerConfig
from namesrv.remoting.config import RemotingServerConfig

CONTROLLER_PROFILES: dict[str, ControllerConfig] = {
    "default": ControllerConfig(),
    "fast": ControllerConfig(
        broker_heartbeat_timeout_ms=3_000,
        scan_not_active_broker_interval_ms=200,
        scan_inactive_master_interval_ms=200,
    ),
}
"""`default` is RocketMQ's timing (heartbeat timeout 10 s, scans every 5 s); `fast` for tests and demos
(3 s: six of the fast brokers' 500 ms heartbeats, so a loaded machine's stall does not fail a live master over)."""



def controller_config(profile: str, **overrides: Any) -> ControllerConfig:
    try:
        base = CONTROLLER_PROFILES[profile]
    except KeyError:
        raise ValueError(f"unknown timing profile {profile!r}; choose from {sorted(CONTROLLER_PROFILES)}") from None
    return ControllerConfig.model_validate(base.model_dump() | overrides)


def start_controller(namespace: str | None = None, config: ControllerConfig | None = None,
                     name: str = CONTROLLER_NAME, detached: bool = True, kv_namespace: str = KV_NAMESPACE,
                     remoting: RemotingServerConfig | None = None) -> Any:
    """The controller actor of `namespace` (the driver's by default), started if it is not running;
    `remoting`: also over TCP (RocketMQ's controller port is 9878)."""
    options: dict[str, Any] = {
        "name": name, "num_cpus": 0, "max_restarts": -1, "get_if_exists": True,
        "lifetime": "detached" if detached else None,
    }
    namespace = namespace or ray.get_runtime_context().namespace
    options["namespace"] = namespace
    head = head_node_id()
    if head is not None:
        options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(head, soft=True)
        options["memory"] = SOFT_PLACEMENT_MEMORY  # a zero-resource request ignores soft affinity
    return ray.remote(ControllerActor).options(**options).remote(namespace, name, config, kv_namespace, remoting)


def get_controller(namespace: str | None = None, name: str = CONTROLLER_NAME) -> Any:
    return ray.get_actor(name, namespace=namespace)
