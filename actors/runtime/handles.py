"""One cache of named-actor handles (a Ray lookup costs a GCS round trip; a handle is reused until
its actor is found gone, then looked up afresh: a restarted actor is a new one)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import ray

ACTOR_PING_TIMEOUT_S = 5.0


def is_tcp_address(addr: str) -> bool:
    """`host:port` (a broker serving TCP); otherwise a Ray-only broker's address is its actor name."""
    _, sep, port = addr.rpartition(":")
    return bool(sep) and port.isdigit()


class ActorHandles:
    """Thread-safe: producers call from many threads, actors from their event loop (`aget`)."""

    def __init__(self, namespace: str) -> None:
        self.namespace = namespace
        self._handles: dict[str, Any] = {}
        self._addr_to_actor: dict[str, str] = {}
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
            for addr in [a for a, n in self._addr_to_actor.items() if n == name]:
                del self._addr_to_actor[addr]

    def broker_actor(self, broker_name: str, addr: str) -> str:
        """The actor name of the broker of set `broker_name` at route address `addr`: the address
        itself for a Ray-only broker; for a TCP one, found among the set's actors
        (`<brokerName>-<n>`) by asking each its address, then cached. After a failover the master
        (brokerId 0 in routes) is whichever replica the controller chose, so the name cannot be
        derived from the id. Blocking; raises ValueError when no live actor has that address."""
        if not is_tcp_address(addr):
            return addr
        with self._lock:
            known = self._addr_to_actor.get(addr)
        if known is not None:
            return known
        prefix = f"{broker_name}-"
        for entry in ray.util.list_named_actors(all_namespaces=True):
            name = entry["name"]
            if entry["namespace"] != self.namespace or not name.startswith(prefix) or not name[len(prefix):].isdigit():
                continue
            try:
                found = ray.get(self.get(name).ping.remote(), timeout=ACTOR_PING_TIMEOUT_S)
            except Exception:  # dead, restarting or not a broker: not this address
                self.forget(name)
                continue
            with self._lock:
                self._addr_to_actor[found] = name
            if found == addr:
                return name
        raise ValueError(f"no live broker actor of {broker_name} serves {addr}")
