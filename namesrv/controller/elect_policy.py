"""Who becomes master (RocketMQ's DefaultElectPolicy).

Candidates are the live members of the SyncStateSet; with `enableElectUncleanMaster`, when none of
them is alive, any live replica. Among candidates: the old master if it is still one (and no other
broker was asked for); a designated broker if it is a candidate (else nobody); otherwise the highest
epoch, then the highest max offset, then the smallest election priority number. Ties go to the
smallest brokerId (RocketMQ's TreeSet keeps an arbitrary one).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from namesrv.controller.heartbeat import LOWEST_ELECTION_PRIORITY, BrokerLiveInfo

_NO_INFO = 1 << 62
IsAlive = Callable[[int], bool]
LiveInfo = Callable[[int], BrokerLiveInfo | None]


def elect(
    sync_state_brokers: Iterable[int], all_replica_brokers: Iterable[int] | None, old_master: int | None,
    prefer_broker_id: int | None, is_alive: IsAlive, live_info: LiveInfo,
) -> int | None:
    """The new master's brokerId, or None when no candidate qualifies. `all_replica_brokers` is None
    unless unclean election is enabled."""
    chosen = _try_elect(sync_state_brokers, old_master, prefer_broker_id, is_alive, live_info)
    if chosen is None and all_replica_brokers is not None:
        chosen = _try_elect(all_replica_brokers, old_master, prefer_broker_id, is_alive, live_info)
    return chosen


def _try_elect(
    brokers: Iterable[int], old_master: int | None, prefer_broker_id: int | None, is_alive: IsAlive,
    live_info: LiveInfo,
) -> int | None:
    candidates = sorted({b for b in brokers if is_alive(b)})
    if not candidates:
        return None
    if old_master in candidates and (prefer_broker_id is None or prefer_broker_id == old_master):
        return old_master
    if prefer_broker_id is not None:
        return prefer_broker_id if prefer_broker_id in candidates else None
    return min(candidates, key=lambda b: _rank(b, live_info(b)))


def _rank(broker_id: int, info: BrokerLiveInfo | None) -> tuple[int, int, int, int]:
    if info is None:
        return (_NO_INFO, _NO_INFO, LOWEST_ELECTION_PRIORITY, broker_id)  # alive but never heard: last
    return (-info.epoch, -info.max_offset, info.election_priority, broker_id)
