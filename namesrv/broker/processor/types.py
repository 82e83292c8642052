"""What the broker processor takes and gives besides RemotingCommands: who sent a request, which
broker answers, the outcome of a send or a pull. A processor refuses a request by raising
`namesrv.remoting.command.MQServerError` (code and remark), which the dispatcher answers."""

from __future__ import annotations

from dataclasses import dataclass

from namesrv.protocol.message.types import StoredMessage
from namesrv.store.types import AppendResult


@dataclass(slots=True)
class SendOutcome:
    results: list[AppendResult]
    msg_ids: list[str]
    """Offset message ids (store host + commit-log offset), one per stored message."""
    code: int = 0
    """SUCCESS, or FLUSH_SLAVE_TIMEOUT: stored here, not on every in-sync replica in time."""
    recall_handle: str | None = None
    """A single timed message's recall handle (namesrv.protocol.message.recall)."""


@dataclass(slots=True)
class PullOutcome:
    code: int
    status: str
    """DefaultMessageStore's GetMessageStatus name, which RocketMQ puts in the remark."""
    messages: list[StoredMessage]
    next_begin_offset: int
    min_offset: int
    max_offset: int


@dataclass(frozen=True, slots=True)
class Client:
    """Who sent a wire request: its connection's token (the channel) and its address."""

    channel: str
    peer: str


@dataclass
class BrokerIdentity:
    cluster_name: str
    broker_name: str
    broker_id: int
    broker_addr: str
