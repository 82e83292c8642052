"""What a deployment needs to restart its brokers where their data is, kept where any driver finds it.

The record lives in Ray's GCS key-value store (actors.controller.gcs_kv), under the deployment's Ray
namespace: the deployment's settings (profile, data dir, config overrides, listen host, lifetime)
and, per broker, what `Deployment.start_broker` last started it with (name, id, cluster, node id,
port, host). `launcher.connect()` reads it, so a driver that did not deploy (the `namesrv` CLI, a
notebook) restarts a dead broker on its own node with its own store, not on whatever node Ray picks
with an empty one. It answers while brokers are dead, costs no process of its own, and is lost only
with the head node (the GCS), and with it the cluster. `Deployment.teardown` deletes it; a new
deployment in a namespace where nothing runs starts a record of its own.

Values are pickled, as Ray pickled them when the record was an actor's state: the overrides are
whatever config values the deployer passed.
"""

from __future__ import annotations

import pickle
from typing import Any

from actors.controller.gcs_kv import GcsKV

KV_NAMESPACE = "rocketmq-deployment"
"""The GCS KV namespace of deployment records; keys are `<ray namespace>/settings` and
`<ray namespace>/broker/<actor name>`."""


class DeploymentRecord:
    """One deployment's record in the GCS KV."""

    def __init__(self, namespace: str, kv: GcsKV | None = None) -> None:
        self.namespace = namespace
        self.kv = kv or GcsKV(KV_NAMESPACE)

    def _key(self, *parts: str) -> str:
        return "/".join((self.namespace, *parts))

    def put_settings(self, settings: dict[str, Any]) -> None:
        self.kv.put(self._key("settings"), pickle.dumps(dict(settings)))

    def put_broker(self, actor_name: str, record: dict[str, Any]) -> None:
        self.kv.put(self._key("broker", actor_name), pickle.dumps(dict(record)))

    def get(self) -> dict[str, Any]:
        """{"settings": {...}, "brokers": {actor name: record}}; both empty when nothing is recorded."""
        raw = self.kv.get(self._key("settings"))
        settings = pickle.loads(raw) if raw is not None else {}
        brokers: dict[str, dict[str, Any]] = {}
        prefix = self._key("broker", "")
        for key in sorted(self.kv.keys(prefix)):  # by actor name: the KV lists keys in no set order
            value = self.kv.get(key)
            if value is not None:  # deleted between listing and reading
                brokers[key[len(prefix):]] = pickle.loads(value)
        return {"settings": settings, "brokers": brokers}

    def forget(self) -> int:
        """Delete the whole record; how many keys there were."""
        return self.kv.delete_prefix(self._key(""))
