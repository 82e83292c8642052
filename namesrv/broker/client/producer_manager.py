"""Who produces to this broker (RocketMQ's ProducerManager), fed by HEART_BEAT's producerDataSet.

Per producer group: its client channels (one per connection) with client id, language, version and
last heartbeat. A channel leaves when its connection closes, when the client unregisters, or after
120 s without a heartbeat (the consumers' expiry, namesrv.broker.client.consumer_manager). The
broker asks a producer of a half message's group about it (CHECK_TRANSACTION_STATE) and mqadmin
producerConnection lists a group (GET_PRODUCER_CONNECTION_LIST).
"""

from __future__ import annotations

from dataclasses import dataclass

from namesrv.broker.client.consumer_manager import CHANNEL_EXPIRED_MS
from namesrv.common.clock import Clock


@dataclass(slots=True)
class ProducerChannel:
    client_id: str
    channel: str
    language: int
    version: int
    last_update: int


class ProducerManager:
    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.groups: dict[str, dict[str, ProducerChannel]] = {}

    def register_producer(self, group: str, client: ProducerChannel) -> bool:
        """Record a heartbeat; True when the channel is new to the group."""
        members = self.groups.setdefault(group, {})
        new = client.channel not in members
        client.last_update = self.clock()
        members[client.channel] = client
        return new

    def unregister_producer(self, group: str, channel: str) -> bool:
        members = self.groups.get(group)
        if members is None or members.pop(channel, None) is None:
            return False
        if not members:
            del self.groups[group]
        return True

    def do_channel_close(self, channel: str) -> list[str]:
        """A connection closed: the groups it produced for."""
        return [g for g in list(self.groups) if self.unregister_producer(g, channel)]

    def scan_not_active(self, expired_ms: int = CHANNEL_EXPIRED_MS) -> list[str]:
        now = self.clock()
        gone = []
        for group, members in list(self.groups.items()):
            for channel, c in list(members.items()):
                if now - c.last_update > expired_ms and self.unregister_producer(group, channel):
                    gone.append(group)
        return gone

    def channels_of(self, group: str) -> list[ProducerChannel]:
        """The group's live channels, most recently heard first."""
        return sorted(self.groups.get(group, {}).values(), key=lambda c: -c.last_update)

    def find_channel(self, client_id: str) -> str | None:
        """The channel of a producer client by its id, the most recently heard if it has several
        (RocketMQ's findChannel: the requester of a request-reply message); None when unknown."""
        found = [c for members in self.groups.values() for c in members.values() if c.client_id == client_id]
        return max(found, key=lambda c: c.last_update).channel if found else None
