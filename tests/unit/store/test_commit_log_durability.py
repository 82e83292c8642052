"""MessageStore durability beyond a single record: directories made durable when the store is created,
recovery of a large log in bounded memory with a corrupt record in the middle, and closing the log
under concurrent senders (a send racing a broker's shutdown ends with an answer, never a hang).
"""

from __future__ import annotations

import asyncio
import os
import threading
import tracemalloc
from pathlib import Path

import pytest

import namesrv.store.message_store as store_mod
from namesrv.common.clock import ManualClock
from namesrv.protocol.message.types import MessageInner
from namesrv.store.message_store import MessageStore
from namesrv.store.records import HEADER
from namesrv.store.types import AppendResult, FlushDiskType


def log_file(path: Path) -> Path:
    return path / "commitlog" / "00000000000000000000"  # the first segment


def test_creating_a_store_fsyncs_the_parent_of_every_new_directory(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[Path] = []
    real = store_mod._fsync_dir

    def recording(path: Path) -> None:
        synced.append(Path(path))
        real(path)

    monkeypatch.setattr(store_mod, "_fsync_dir", recording)
    store = tmp_path / "data" / "broker-a-0" / "store"
    log = MessageStore(store, FlushDiskType.SYNC_FLUSH, ManualClock())
    log.close()

    # Each new directory's name lives in its parent; the log file's name lives in `store`.
    assert set(synced) == {tmp_path, tmp_path / "data", tmp_path / "data" / "broker-a-0", store}
    synced.clear()
    MessageStore(store, FlushDiskType.SYNC_FLUSH, ManualClock()).close()
    assert synced == [], "reopening an existing store creates nothing, so syncs no directory"


def test_recovery_of_a_large_log_with_a_corrupt_middle_stays_in_bounded_memory(tmp_path: Path) -> None:
    body = os.urandom(64 * 1024)
    log = MessageStore(tmp_path, FlushDiskType.ASYNC_FLUSH, ManualClock())
    starts = []
    for i in range(640):  # ~40 MiB of records
        starts.append(log_file(tmp_path).stat().st_size if i == 320 else 0)
        log.append(MessageInner("T", i % 4, body, {"i": str(i)}))
    log.close()
    corrupt_at = starts[320]
    with open(log_file(tmp_path), "r+b") as f:  # one flipped payload byte in record 320
        f.seek(corrupt_at + HEADER.size + 100)
        byte = f.read(1)
        f.seek(corrupt_at + HEADER.size + 100)
        f.write(bytes([byte[0] ^ 0xFF]))
    size = log_file(tmp_path).stat().st_size
    (tmp_path / "checkpoint").unlink()  # as after a crash before any checkpoint: the whole log is scanned

    tracemalloc.start()
    try:
        again = MessageStore(tmp_path, FlushDiskType.SYNC_FLUSH, ManualClock())
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    assert peak < 8 * 1024 * 1024, f"recovery of a {size >> 20} MiB log peaked at {peak >> 20} MiB"
    rep = again.recovery
    assert rep.records == 639 and rep.truncated_bytes == 0
    [(start, end, reason)] = rep.corrupt_ranges
    assert (start, reason) == (corrupt_at, "bad checksum") and end > start
    # Every record after the damaged one stays readable, at its own queue offset.
    later = again.get_message("T", 0, 81, 1000)  # record i is queue (i % 4), offset i // 4; 320 -> (0, 80)
    assert [m.properties["i"] for m in later] == [str(i) for i in range(324, 640, 4)]
    assert [m.properties["i"] for m in again.get_message("T", 0, 79, 3)] == ["316", "324"], "only the lost one is gone"
    again.close()


def test_close_under_concurrent_senders_answers_every_one_and_keeps_every_acknowledged(tmp_path: Path) -> None:
    log = MessageStore(tmp_path, FlushDiskType.SYNC_FLUSH, ManualClock())
    n = 400

    async def send_all() -> list[AppendResult | BaseException]:
        sends: list[asyncio.Future[AppendResult]] = []
        closer = threading.Thread(target=log.close)  # as the broker's shutdown does, off the loop
        for i in range(n):  # senders keep arriving while batches are written and the log closes
            sends.append(asyncio.ensure_future(log.put(MessageInner("T", i % 4, f"m{i}".encode()))))
            await asyncio.sleep(0)
            if not closer.is_alive() and closer.ident is None and any(f.done() for f in sends):
                closer.start()
        if closer.ident is None:  # no batch finished while sending: close after the first one
            await asyncio.wait(sends, return_when=asyncio.FIRST_COMPLETED)
            closer.start()
        await asyncio.to_thread(closer.join)
        # No sender is left waiting: each gets its result or an error.
        return list(await asyncio.wait_for(asyncio.gather(*sends, return_exceptions=True), timeout=30))

    outcomes = asyncio.run(send_all())
    acked = [o for o in outcomes if isinstance(o, AppendResult)]
    refused = [o for o in outcomes if not isinstance(o, AppendResult)]
    assert acked and len(acked) + len(refused) == n
    assert all(isinstance(e, OSError) and "closed" in str(e) for e in refused), refused[:3]

    again = MessageStore(tmp_path, FlushDiskType.SYNC_FLUSH, ManualClock())
    stored = {(m.queue_id, m.queue_offset): m.body for q in range(4) for m in again.get_message("T", q, 0, n)}
    assert stored == {(r.queue_id, r.queue_offset): stored.get((r.queue_id, r.queue_offset)) for r in acked}
    assert len(stored) == len(acked), "exactly the acknowledged messages are on disk"
    again.close()


def test_put_after_close_is_refused_at_once(tmp_path: Path) -> None:
    log = MessageStore(tmp_path, FlushDiskType.SYNC_FLUSH, ManualClock())

    async def scenario() -> None:
        await log.put(MessageInner("T", 0, b"before"))
        log.close()
        with pytest.raises(OSError, match="closed"):
            await asyncio.wait_for(log.put(MessageInner("T", 0, b"after")), timeout=10)

    asyncio.run(scenario())
    with pytest.raises(OSError, match="closed"):
        log.append(MessageInner("T", 0, b"after, sync"))
