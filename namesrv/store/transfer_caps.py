"""How much one pull may take from the store (RocketMQ's DefaultMessageStore.isTheBatchFull).

A pull stops before the message that would take it past a count or a byte cap; the caps depend on
where the message is: RocketMQ deems a message "in memory" when it lies within the newest
`accessMessageInMemoryMaxRatio` (40 %) of physical memory's worth of commit log (the page cache
likely holds it), and "on disk" otherwise. The same estimate holds here: the commit log is one
file read with pread through the page cache. In memory: 32 messages and 256 KiB at most; on disk:
8 messages and 64 KiB. The first message is always taken, whatever its size (so one larger than a
cap is still delivered, alone). The caps are checked against each record's size kept in the
queue index, before its body is read, so a pull never holds more than a cap's worth of bodies.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass

MAX_PULL_BYTES = 8 * 1024 * 1024
"""A pull's total at most, whatever the caps (RocketMQ's maxTotalMsgSize for a pull)."""
MAX_SCAN_ENTRIES = 800
"""Queue entries one pull looks at, at most (RocketMQ's maxFilterMessageSize, 16,000 bytes of
20-byte consume-queue units), however large its maxMsgNums: messages filtered out by tag are read
and dropped one by one, never held."""


@functools.cache
def physical_memory_bytes() -> int:
    """The machine's physical memory (RocketMQ's StoreUtil.TOTAL_PHYSICAL_MEMORY_SIZE)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # not a POSIX system: assume 8 GiB
        return 8 << 30


@dataclass(frozen=True, slots=True)
class TransferCaps:
    count_in_memory: int = 32
    bytes_in_memory: int = 256 * 1024
    count_on_disk: int = 8
    bytes_on_disk: int = 64 * 1024
    memory_ratio_percent: int = 40
    max_bytes: int = MAX_PULL_BYTES

    def in_memory_window(self) -> int:
        """Bytes at the log's tail deemed in memory (RocketMQ's estimateInMemByCommitOffset)."""
        return physical_memory_bytes() * self.memory_ratio_percent // 100

    def batch_full(self, size: int, max_nums: int, buffer_total: int, message_total: int, in_memory: bool) -> bool:
        """Whether a message of `size` bytes would go past a cap, with `message_total` messages of
        `buffer_total` bytes taken already (isTheBatchFull, one message per queue entry)."""
        if buffer_total == 0 or message_total == 0:
            return False
        if message_total + 1 > max_nums or buffer_total + size > self.max_bytes:
            return True
        if in_memory:
            return buffer_total + size > self.bytes_in_memory or message_total > self.count_in_memory - 1
        return buffer_total + size > self.bytes_on_disk or message_total > self.count_on_disk - 1


DEFAULT_CAPS = TransferCaps()
