"""Ray's GCS internal key-value store as the controller's `KVStore` (namesrv/controller/event_log.py).

The GCS runs on the head node: what is stored here outlives any actor, worker or other node, and is
lost only with the head node itself unless the cluster runs GCS fault tolerance (external Redis).
"""

from __future__ import annotations

from ray.experimental import internal_kv

KV_NAMESPACE = "rocketmq-controller"
"""The GCS KV namespace; keys are `<ray namespace>/<actor name>/...` within it."""


class GcsKV:
    """The event log's store: Ray's GCS internal KV, in one KV namespace."""

    def __init__(self, namespace: str = KV_NAMESPACE) -> None:
        self.namespace = namespace

    def get(self, key: str) -> bytes | None:
        value = internal_kv._internal_kv_get(key, namespace=self.namespace)
        return None if value is None else bytes(value)

    def put(self, key: str, value: bytes) -> None:
        internal_kv._internal_kv_put(key, value, overwrite=True, namespace=self.namespace)

    def put_if_absent(self, key: str, value: bytes) -> bool:
        already_exists = internal_kv._internal_kv_put(key, value, overwrite=False, namespace=self.namespace)
        return not already_exists

    def keys(self, prefix: str) -> list[str]:
        return [k.decode() for k in internal_kv._internal_kv_list(prefix, namespace=self.namespace)]

    def delete(self, key: str) -> None:
        internal_kv._internal_kv_del(key, namespace=self.namespace)

    def delete_prefix(self, prefix: str) -> int:
        """Delete every key starting with `prefix`; how many there were."""
        keys = self.keys(prefix)
        for key in keys:
            self.delete(key)
        return len(keys)
