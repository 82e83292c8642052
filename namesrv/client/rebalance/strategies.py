"""RocketMQ's AllocateMessageQueueStrategy implementations, as pure functions of (group, member,
every queue, every member).

Every member of a group computes its own share from the same two lists: the members
(GET_CONSUMER_LIST_BY_GROUP, sorted) and the topic's queues (sorted by topic, broker, queue id), so
the shares never overlap as long as all members use the same strategy. `allocate` expects both lists
sorted as RocketMQ's RebalanceImpl sorts them; `sorted_queues` gives the queue order.

The results are RocketMQ's, member for member and queue for queue (tests/unit/client/test_rebalance.py
checks them against the rules of each Java class); a group mixing these consumers with RocketMQ's
clients shares its queues without overlap for that reason.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from namesrv.protocol.models import MessageQueue

log = logging.getLogger(__name__)

MACHINE_ROOM_SEPARATOR = "@"
"""A broker name `room@name` says which machine room the broker is in (ByMachineRoom)."""


class AllocationError(ValueError):
    """The allocation was asked with an empty member id, no queues or no members (RocketMQ's
    IllegalArgumentException from AbstractAllocateMessageQueueStrategy.check)."""


def sorted_queues(queues: Iterable[MessageQueue]) -> list[MessageQueue]:
    """Queues in RocketMQ's MessageQueue.compareTo order: topic, broker name, queue id."""
    return sorted(queues, key=lambda mq: (mq.topic, mq.broker_name, mq.queue_id))


def _member_index(group: str, current_cid: str, mq_all: Sequence[MessageQueue], cid_all: Sequence[str]) -> int | None:
    """The member's position among `cid_all`, None when it is not (yet) one of them; refuses an
    empty member id, queue list or member list as RocketMQ does."""
    if not current_cid:
        raise AllocationError("currentCID is empty")
    if not mq_all:
        raise AllocationError("mqAll is null or mqAll empty")
    if not cid_all:
        raise AllocationError("cidAll is null or cidAll empty")
    try:
        return list(cid_all).index(current_cid)
    except ValueError:
        log.info("[BUG] ConsumerGroup: %s The consumerId: %s not in cidAll: %s", group, current_cid, list(cid_all))
        return None


class AllocateMessageQueueStrategy(Protocol):
    @property
    def name(self) -> str:
        """RocketMQ's getName()."""
        ...

    def allocate(self, group: str, current_cid: str, mq_all: Sequence[MessageQueue],
                 cid_all: Sequence[str]) -> list[MessageQueue]:
        """The queues `current_cid` consumes of `mq_all`, the group's members being `cid_all`."""
        ...


@dataclass(frozen=True)
class AllocateMessageQueueAveragely:
    """Contiguous blocks (the default): with q queues and c members, the first q % c members take
    q // c + 1 queues, the others q // c; with fewer queues than members, the first q members take
    one each and the rest none."""

    name: str = "AVG"

    def allocate(self, group: str, current_cid: str, mq_all: Sequence[MessageQueue],
                 cid_all: Sequence[str]) -> list[MessageQueue]:
        index = _member_index(group, current_cid, mq_all, cid_all)
        if index is None:
            return []
        base, extra = divmod(len(mq_all), len(cid_all))
        # members before `index` took base + 1 each if they are among the first `extra`, else base
        start = index * base + min(index, extra)
        size = base + (1 if index < extra else 0)
        return list(mq_all[start:start + size])


@dataclass(frozen=True)
class AllocateMessageQueueAveragelyByCircle:
    """Dealt round the members like cards: member i takes queues i, i + c, i + 2c, ..."""

    name: str = "AVG_BY_CIRCLE"

    def allocate(self, group: str, current_cid: str, mq_all: Sequence[MessageQueue],
                 cid_all: Sequence[str]) -> list[MessageQueue]:
        index = _member_index(group, current_cid, mq_all, cid_all)
        if index is None:
            return []
        return list(mq_all[index::len(cid_all)])


@dataclass(frozen=True)
class AllocateMessageQueueByConfig:
    """A fixed list of queues, whatever the group holds (each member is given its own list)."""

    message_queue_list: tuple[MessageQueue, ...] = ()
    name: str = "CONFIG"

    def allocate(self, group: str, current_cid: str, mq_all: Sequence[MessageQueue],
                 cid_all: Sequence[str]) -> list[MessageQueue]:
        return list(self.message_queue_list)


@dataclass(frozen=True)
class AllocateMessageQueueByMachineRoom:
    """Only the queues of brokers named `room@name` whose room is one of `consume_idcs`; those are
    cut into equal blocks of q // c per member, the q % c left over going one each to the first
    members. Queues of other rooms (and of brokers without a room) get no owner here."""

    consume_idcs: frozenset[str] = field(default_factory=frozenset)
    name: str = "MACHINE_ROOM"

    def allocate(self, group: str, current_cid: str, mq_all: Sequence[MessageQueue],
                 cid_all: Sequence[str]) -> list[MessageQueue]:
        index = _member_index(group, current_cid, mq_all, cid_all)
        if index is None:
            return []
        in_rooms = [mq for mq in mq_all if _room(mq.broker_name) in self.consume_idcs]
        block, left_over = divmod(len(in_rooms), len(cid_all))
        mine = in_rooms[index * block:(index + 1) * block]
        if index < left_over:
            mine.append(in_rooms[block * len(cid_all) + index])
        return mine


def _room(broker_name: str) -> str | None:
    """The room of `room@name` (Java's String.split: trailing empty parts dropped, so `room@` has none)."""
    parts = broker_name.split(MACHINE_ROOM_SEPARATOR)
    while parts and not parts[-1]:
        parts.pop()
    return parts[0] if len(parts) == 2 else None


STRATEGIES: dict[str, Callable[[], AllocateMessageQueueStrategy]] = {
    "AVG": AllocateMessageQueueAveragely,
    "AVG_BY_CIRCLE": AllocateMessageQueueAveragelyByCircle,
}
"""The strategies that need no settings, by RocketMQ's getName()."""
