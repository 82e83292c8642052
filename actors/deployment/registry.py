"""What a deployment needs to restart its brokers where their data is, kept where any driver finds it.

A small actor, `deployment-registry` in the deployment's Ray namespace (detached when the deployment
is), placed softly on the head node. It holds the deployment's settings (profile, data dir, config
overrides, listen host, lifetime) and, per broker, what `Deployment.start_broker` last started it
with (name, id, cluster, node id, port, host). `launcher.connect()` reads it, so a driver that did
not deploy (the `namesrv` CLI, a notebook) restarts a dead broker on its own node with its own
store, not on whatever node Ray picks with an empty one. It answers while brokers are dead; it is
lost only with the head node, and with it the cluster.
"""

from __future__ import annotations

from typing import Any

REGISTRY_NAME = "deployment-registry"


class DeploymentRegistry:
    def __init__(self) -> None:
        self._settings: dict[str, Any] = {}
        self._brokers: dict[str, dict[str, Any]] = {}

    def put_settings(self, settings: dict[str, Any]) -> None:
        self._settings = dict(settings)

    def put_broker(self, actor_name: str, record: dict[str, Any]) -> None:
        self._brokers[actor_name] = dict(record)

    def get(self) -> dict[str, Any]:
        """{"settings": {...}, "brokers": {actor name: record}}."""
        return {"settings": dict(self._settings), "brokers": {k: dict(v) for k, v in self._brokers.items()}}
