"""The store's checkpoint (RocketMQ's StoreCheckpoint): how far into the commit log everything the
dispatchers built (consume queues, and any index added) is on disk, so a restart re-reads and
re-dispatches only the log after it.

Written with write, fsync, rename (namesrv.common.persist.atomic_write): a reader finds the old checkpoint
or the new one, never half of one. It only ever names an offset whose records, and every
dispatcher's output for them, were fsynced before it was written.

Where we differ from RocketMQ 5.3: RocketMQ's checkpoint holds timestamps (physicMsgTimestamp,
logicsMsgTimestamp, indexMsgTimestamp) and an abnormal recovery searches the commit-log files for
the first one stored before the smallest of them; ours holds the commit-log offset itself, so
recovery starts exactly there (the timestamps are kept alongside for operators).
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass
from pathlib import Path

from namesrv.common.persist import atomic_write

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Checkpoint:
    physic_offset: int = 0
    """Every record before this commit-log offset is on disk and dispatched durably."""
    physic_msg_timestamp: int = 0
    """Store time of the last record before `physic_offset` (RocketMQ's physicMsgTimestamp)."""
    min_physic_offset: int = 0
    """The commit log's first kept offset when written (what retention had deleted below)."""


class StoreCheckpoint:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.current = self._load()

    def _load(self) -> Checkpoint:
        try:
            raw = json.loads(self.path.read_bytes())
            return Checkpoint(int(raw["physicOffset"]), int(raw.get("physicMsgTimestamp", 0)),
                              int(raw.get("minPhysicOffset", 0)))
        except FileNotFoundError:
            return Checkpoint()
        except (ValueError, KeyError, TypeError) as e:  # unreadable: recover from the log's start
            log.error("store checkpoint %s unreadable (%s): recovering from the commit log's start", self.path, e)
            return Checkpoint()

    def write(self, cp: Checkpoint) -> None:
        d = asdict(cp)
        atomic_write(self.path, json.dumps({"physicOffset": d["physic_offset"],
                                            "physicMsgTimestamp": d["physic_msg_timestamp"],
                                            "minPhysicOffset": d["min_physic_offset"]}).encode())
        self.current = cp
