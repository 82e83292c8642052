"""One cache of named-actor handles (a Ray lookup costs a GCS round trip; a handle is reused until
its actor is found gone, then looked up afresh: a restarted actor is a new one)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import ray


class ActorHandles:
    """Thread-safe: producers call from many threads, actors from their event loop (`aget`)."""

    def __init__(self, namespace: str) -> None:
        self.namespace = namespace
        self._handles: dict[str, Any] = {}
        self._lock = threading.Lock()

    def get(self, name: str) -> Any:
        """The handle of actor `name`; raises ValueError when no such actor lives."""
        with self._lock:
            handle = self._handles.get(name)
        if handle is None:
            handle = ray.get_actor(name, namespace=self.namespace)
            with self._lock:
                self._handles[name] = handle
        return handle

    async def aget(self, name: str) -> Any:
        """`get` from an event loop: the lookup runs off the loop."""
        with self._lock:
            handle = self._handles.get(name)
        if handle is None:
            handle = await asyncio.to_thread(self.get, name)
        return handle

    def forget(self, name: str) -> None:
        """The actor behind `name` died: the next `get` looks it up again."""
        with self._lock:
            self._handles.pop(name, None)
