"""What the commit log takes and gives: messages, stored messages, append and read results."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from namesrv.protocol.message.types import StoredMessage

MAPPED_FILE_SIZE_COMMIT_LOG = 1 << 30
"""RocketMQ's mappedFileSizeCommitLog default: 1 GiB segments."""
MAPPED_FILE_SIZE_CONSUME_QUEUE = 300_000 * 20
"""RocketMQ's mappedFileSizeConsumeQueue default: 300,000 entries of 20 bytes per file."""
MIN_SEGMENT_SIZE = 4096
"""The smallest commit-log segment accepted (tests use small ones; a record must fit in one)."""

DispatchFn = Callable[[list[Any], int, int], None]
"""dispatch(record fields, commit-log offset, record size): see MessageStore.add_dispatcher."""


@dataclass(frozen=True, slots=True)
class Dispatcher:
    """RocketMQ's CommitLogDispatcher: what the store calls for every record, and how it makes
    its output durable (`flush`, before a checkpoint), forgets records cut from the log
    (`truncate(offset)`) and those retention deleted (`on_min_offset(offset)`)."""

    dispatch: DispatchFn
    flush: Callable[[], None] | None = None
    truncate: Callable[[int], object] | None = None
    on_min_offset: Callable[[int], object] | None = None
    """Retention raised the commit log's min offset to this: drop what only points below it."""
    replay_from: Callable[[], int | None] | None = None
    """At start-up: the commit-log offset this dispatcher needs records again from when it lost
    some that the store's checkpoint covers (a torn file deleted after a machine crash), else None."""
    dispatch_batch: Callable[[list[tuple[list[Any], int, int]]], None] | None = None
    """`dispatch` of a written batch's records at once, in order (the writer uses it when given)."""


class FlushDiskType(StrEnum):
    SYNC_FLUSH = "SYNC_FLUSH"
    ASYNC_FLUSH = "ASYNC_FLUSH"


@dataclass(slots=True)
class AppendResult:
    topic: str
    queue_id: int
    queue_offset: int
    commit_log_offset: int
    store_timestamp: int
    msg_id: str
    store_size: int = 0


@dataclass(slots=True)
class RecoveryReport:
    records: int = 0
    valid_bytes: int = 0
    truncated_bytes: int = 0
    reason: str | None = None
    corrupt_ranges: list[tuple[int, int, str]] = field(default_factory=list)
    """(start, end, reason) of every damaged stretch skipped in the middle of the log."""
    queues: dict[tuple[str, int], int] = field(default_factory=dict)
    scanned_from: int = 0
    """The commit-log offset the scan started at (the checkpoint's; 0: the whole log was read)."""
    consume_queue_entries_dropped: int = 0
    """Consume-queue entries cut because their records were not (whole) in the recovered log."""


@dataclass(slots=True)
class ReadResult:
    """What one capped read of a queue found (DefaultMessageStore.getMessage's result)."""

    messages: list[StoredMessage]
    """The matching messages taken, within the caps."""
    next_offset: int
    """The queue offset after the last entry looked at (taken, filtered out or lost)."""
    records: int
    """Records read (taken or filtered out); 0 with entries looked at: all lost to corruption."""


class BrokerRole(StrEnum):
    """RocketMQ's MessageStoreConfig.brokerRole: an ASYNC_MASTER acknowledges a send once it is
    stored locally; a SYNC_MASTER once every member of its SyncStateSet holds it; a SLAVE copies its
    master's log and refuses sends."""

    ASYNC_MASTER = "ASYNC_MASTER"
    SYNC_MASTER = "SYNC_MASTER"
    SLAVE = "SLAVE"


class StoreFormatError(OSError):
    """The store directory holds a layout this version does not read."""


DISK_FULL_REMARK = ("service not available now. It may be caused by one of the following reasons: the broker's disk "
                    "is full [{ratio}], messages are put to the slave, message store has been shut down, etc.")
"""RocketMQ's SendMessageProcessor remark for a store that is not writable (SERVICE_NOT_AVAILABLE)."""


class DiskFullError(OSError):
    """The store refuses writes: its disk is fuller than diskSpaceWarningLevelRatio (RocketMQ's
    runningFlags DISK_FULL); nothing of the refused write is stored."""
