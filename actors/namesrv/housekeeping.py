"""Channel watches (RocketMQ's BrokerHousekeepingService), done with Ray: a broker's channel is a
long-pending `wait_closed(token)` call on its actor, which fails the moment the actor dies.

A channel is watched from the first registration made through it until it closes; the callback
then removes whatever broker still uses that channel. Channels carry a token unique to one broker
incarnation, so the close of an earlier incarnation's channel never removes a fresh registration at
the same address (RocketMQ #5374, #11043).

Only a definite end removes a broker: the broker closed the channel (graceful shutdown), Ray says
the actor is dead (`ActorDiedError`; for the controller, not when Ray says so only because it declared
the actor's node dead: `on_node_declared_dead`), or the actor now runs another incarnation (Ray restarted it:
`wait_closed` answers at once that the token is not its own). Any other failure of the call
(`ActorUnavailableError` while a node's connection flaps, a timeout, an error raised inside the
call) says nothing about the broker: the watch is re-armed after a back-off, and the expiry scan
decides, from the broker's own heartbeats, whether it is gone. A re-armed watch ends by itself once
no broker uses its channel any more (the scan removed it).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ray.exceptions import ActorDiedError

from namesrv.common.control_loop import ControlLoop

log = logging.getLogger(__name__)

REARM_MIN_S = 0.1
REARM_MAX_S = 5.0
"""Back-off between re-armed watches of a channel whose call failed transiently (doubling)."""

SUPERSEDED = "superseded"
"""What a broker's `wait_closed(token)` answers when `token` is not its current incarnation's."""


@dataclass(frozen=True, slots=True)
class BrokerChannel:
    """What a broker hands the NameServer when it registers: a handle to watch and who it is.

    `token` is unique per broker incarnation (address + a random id drawn at start), so events
    from an earlier incarnation at the same address can be told apart and ignored.
    """

    handle: Any
    token: str


ChannelClosed = Callable[[str, str], None]
"""Called with (channel token, how it closed) once a watched channel is gone."""

ChannelInUse = Callable[[str], bool]
"""Whether any broker is still registered through the channel with this token."""


NODE_DIED = "its node has died"
"""Ray's words (ActorDiedErrorContext) when an actor is declared dead because the GCS declared its node
dead: health checks failed, which a raylet cut off by a partition also fails while its workers run on
(ray-project/ray #26405)."""


def died_with_its_node(e: ActorDiedError) -> bool:
    """Whether Ray declared the actor dead because its node was declared dead (not because the actor's
    process ended): the actor may well still run."""
    return NODE_DIED in str(e)


class BrokerHousekeepingService:
    def __init__(self, loop: ControlLoop, on_channel_closed: ChannelClosed,
                 channel_in_use: ChannelInUse = lambda token: True,
                 on_node_declared_dead: ChannelClosed | None = None) -> None:
        """`on_node_declared_dead`: where a channel goes whose actor Ray declared dead with its node,
        when that must not count as a definite end (the controller: a broker on a cut-off node may still
        run as master, so its set waits for the heartbeat timeout, by which its lease has fenced it).
        None: such a channel closes like any other (the NameServers: a route, not a role)."""
        self._loop = loop
        self._on_closed = on_channel_closed
        self._on_node_dead = on_node_declared_dead
        self._in_use = channel_in_use
        self._watched: set[str] = set()
        self.transient_errors = 0
        """Watch calls that failed without saying the broker is gone (each re-armed the watch)."""

    def watch(self, channel: BrokerChannel) -> None:
        """Start watching `channel` unless it is watched already."""
        if channel.token in self._watched:
            return
        self._watched.add(channel.token)
        self._loop.spawn(f"watch-{channel.token}", self._watch(channel))

    def is_watched(self, token: str) -> bool:
        return token in self._watched

    @property
    def watch_count(self) -> int:
        return len(self._watched)

    async def _watch(self, channel: BrokerChannel) -> None:
        delay = REARM_MIN_S
        try:
            while True:
                try:
                    answer = await channel.handle.wait_closed.remote(channel.token)
                    how = "superseded by a new incarnation" if answer == SUPERSEDED else "closed"
                    break
                except ActorDiedError as e:
                    if self._on_node_dead is not None and died_with_its_node(e):
                        self._on_node_dead(channel.token, "declared dead with its node by Ray")
                        return
                    how = f"died ({type(e).__name__})"
                    break
                except Exception as e:  # transient: says nothing about the broker; the scan decides
                    self.transient_errors += 1
                    if not self._in_use(channel.token):
                        log.info("channel %s: watch ended (%s), no broker uses it any more",
                                 channel.token, type(e).__name__)
                        return
                    log.warning("channel %s: watch failed transiently (%s: %s); re-armed in %.1f s",
                                channel.token, type(e).__name__, e, delay)
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, REARM_MAX_S)
                    if not self._in_use(channel.token):
                        return
        finally:
            self._watched.discard(channel.token)
        self._on_closed(channel.token, how)
