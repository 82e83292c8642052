"""Readers of the commit log never wait for its disk I/O (issue 22, point 8): while a writer is
inside its write (here held at the store-time read the write does first, under the same lock as
its write() and fsync), the max offset, size, queue table, search by time and reads all answer,
and see only what is already durable."""

from __future__ import annotations

import threading
from pathlib import Path

from namesrv.common.clock import ManualClock
from namesrv.protocol.message.types import MessageInner
from namesrv.store.message_store import MessageStore


class HeldClock(ManualClock):
    """A manual clock a test can hold: the next read blocks until released (a writer stuck inside
    its write, as it would be in a slow fsync)."""

    def __init__(self) -> None:
        super().__init__()
        self.hold = False
        self.entered = threading.Event()
        self.release = threading.Event()

    def __call__(self) -> int:
        if self.hold:
            self.entered.set()
            self.release.wait(30)
        return self.now_ms


def test_readers_answer_while_a_writer_is_inside_its_write(tmp_path: Path) -> None:
    clock = HeldClock()
    log = MessageStore(tmp_path / "store", clock=clock)
    log.append(MessageInner("T", 0, b"durable"))
    size = log.size_bytes()
    clock.hold = True
    writer = threading.Thread(target=log.append, args=(MessageInner("T", 0, b"in flight"),))
    writer.start()
    assert clock.entered.wait(30), "the writer never reached its write"
    answers: dict[str, object] = {}

    def read_everything() -> None:
        answers["max_offset"] = log.max_offset("T", 0)
        answers["size"] = log.size_bytes()
        answers["queues"] = log.queues()
        answers["search"] = log.search_offset_by_timestamp("T", 0, clock.now_ms + 1)
        answers["earliest"] = log.earliest_store_time()
        answers["read"] = [m.body for m in log.read_messages("T", 0, 0, 32).messages]

    reader = threading.Thread(target=read_everything)
    reader.start()
    reader.join(30)
    waited = reader.is_alive()
    clock.hold = False
    clock.release.set()
    writer.join(30)
    reader.join(30)
    assert not waited, "a reader waited for the writer's disk I/O"
    assert answers == {"max_offset": 1, "size": size, "queues": {("T", 0): 1}, "search": 1,
                       "earliest": clock.now_ms, "read": [b"durable"]}, "readers see only what is durable"
    assert log.max_offset("T", 0) == 2 and [m.body for m in log.get_message("T", 0, 0)] == [b"durable", b"in flight"]
    log.close()
