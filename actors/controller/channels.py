"""The brokers' channels as the controller sees them: each broker's newest channel (its actor, handed
over with a heartbeat, or its TCP connection), watched for a definite death (the NameServers'
BrokerHousekeepingService), and how each broker was found dead.

A closed channel kills only its own incarnation: a heartbeat that arrives through a channel already
closed (sent just before the broker died) is refused, so it cannot make a dead broker look alive
again. A broker whose node Ray declared dead is only noted: its process may still run, cut off
(ray-project/ray #26405), and a master among them still takes writes until its lease runs out, so
its set waits for the heartbeat timeout, by which the lease has fenced it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from actors.namesrv.housekeeping import BrokerChannel, BrokerHousekeepingService
from namesrv.common.control_loop import ControlLoop
from namesrv.controller.heartbeat import BrokerIdentity
from namesrv.remoting.connection import Connection

log = logging.getLogger(__name__)

CLOSED_TOKENS_KEPT = 10_000
DEATHS_KEPT = 100
"""Broker deaths remembered (oldest dropped first)."""

OnDead = Callable[[BrokerIdentity], None]
"""Called once a broker's channel closed for good: the controller re-elects its set if it was the master."""


class BrokerChannels:
    def __init__(self, name: str, loop: ControlLoop, on_dead: OnDead) -> None:
        self.name = name
        self._on_dead = on_dead
        self._channels: dict[BrokerIdentity, str] = {}
        """Each broker's newest channel token."""
        self._closed_tokens: dict[str, None] = {}
        """Recently closed channels (oldest first, bounded)."""
        self.deaths: list[dict[str, Any]] = []
        """How brokers were found dead: `{"brokerName", "brokerId", "how", "atMs"}`, newest last."""
        self.housekeeping = BrokerHousekeepingService(loop, self._closed, self._in_use,
                                                      on_node_declared_dead=self._node_declared_dead)

    def is_closed(self, token: str) -> bool:
        return token in self._closed_tokens

    def bind(self, ident: BrokerIdentity, token: str) -> None:
        """`token` is `ident`'s channel from now on (a heartbeat came through it)."""
        self._channels[ident] = token

    def watch(self, ident: BrokerIdentity, channel: BrokerChannel) -> None:
        """`channel` (a broker actor) is `ident`'s from now on, watched for its actor's death."""
        self.bind(ident, channel.token)
        self.housekeeping.watch(channel)

    @property
    def watch_count(self) -> int:
        return self.housekeeping.watch_count

    def connection_closed(self, conn: Connection, reason: str) -> None:
        """A TCP connection closed: a broker's channel when a heartbeat came through it."""
        if self._in_use(conn.token):
            self._closed(conn.token, f"connection closed ({reason})")

    def record_death(self, ident: BrokerIdentity, how: str) -> None:
        self.deaths.append({"brokerName": ident.broker_name, "brokerId": ident.broker_id, "how": how,
                            "atMs": int(time.time() * 1000)})
        del self.deaths[:-DEATHS_KEPT]

    def _in_use(self, token: str) -> bool:
        return token in self._channels.values()

    def _closed(self, token: str, how: str) -> None:
        self._closed_tokens[token] = None
        while len(self._closed_tokens) > CLOSED_TOKENS_KEPT:
            del self._closed_tokens[next(iter(self._closed_tokens))]
        for ident, current in list(self._channels.items()):
            if current == token:
                del self._channels[ident]
                log.warning("%s: broker %s/%d channel %s", self.name, ident.broker_name, ident.broker_id, how)
                self.record_death(ident, f"channel {how}")
                self._on_dead(ident)

    def _node_declared_dead(self, token: str, how: str) -> None:
        """Ray declared a broker's node dead: noted, not acted on (see the module's note)."""
        for ident, current in list(self._channels.items()):
            if current == token:
                log.warning("%s: broker %s/%d %s: left to the heartbeat timeout", self.name, ident.broker_name,
                            ident.broker_id, how)
                self.record_death(ident, f"{how} (not definite: left to the heartbeat timeout)")
