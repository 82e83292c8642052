"""What a change to the route tables tells the NameServer's host (removals, changed routes)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

RemovalCause = Literal["channel", "expired", "unregister", "refused"]
"""Why a broker address left the live table: its channel closed, its heartbeats expired, it
unregistered, or its registration was refused (another address holds its id with a higher
stateVersion)."""


@dataclass(slots=True)
class RouteChanges:
    """What changed since the last drain."""

    removed: list[tuple[str, RemovalCause, int]] = field(default_factory=list)
    """(broker address, cause, its last heartbeat in ms) for every address that left the live
    table, in order."""
    topics: set[str] = field(default_factory=set)
    """Topics whose queue data changed (created, updated, removed)."""
    broker_names: set[str] = field(default_factory=set)
    """Broker groups whose addresses or filter servers changed: every topic they host changed."""
    added: set[str] = field(default_factory=set)
    """Broker addresses that joined the live table (taken from the parsed registration header)."""

    def __bool__(self) -> bool:
        return bool(self.removed or self.topics or self.broker_names or self.added)
