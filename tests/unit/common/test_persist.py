"""Crash-safe writes, and the writer thread that keeps them off an event loop."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from namesrv.broker.topic_config_manager import TopicConfigManager
from namesrv.common.persist import BackgroundWriter, atomic_write
from namesrv.protocol.models import TopicConfig
from namesrv.routeinfo.kvconfig import KVConfigManager


def test_atomic_write_replaces_whole_files_and_leaves_no_temp(tmp_path: Path) -> None:
    target = tmp_path / "sub" / "table.json"
    atomic_write(target, b"one")
    atomic_write(target, b"two")
    assert target.read_bytes() == b"two"
    assert [p.name for p in target.parent.iterdir()] == ["table.json"]


def test_background_writer_writes_in_its_own_thread_and_newest_content_wins(tmp_path: Path) -> None:
    writer = BackgroundWriter("t")
    target = tmp_path / "kv.json"
    callers = {threading.get_ident()}
    for i in range(50):
        writer.write(target, str(i).encode())
    writer.flushed().result(timeout=10)
    assert not writer.pending
    assert target.read_bytes() == b"49"
    assert writer._thread is not None and writer._thread.ident not in callers
    assert 1 <= writer.writes <= 50, "writes to one path coalesce"


def test_flushed_covers_exactly_what_was_submitted_before_it(tmp_path: Path) -> None:
    writer = BackgroundWriter("t")
    done = writer.flushed()
    assert done.done(), "nothing submitted: already flushed"
    writer.write(tmp_path / "a", b"a")
    writer.write(tmp_path / "b", b"b")
    writer.flushed().result(timeout=10)
    assert (tmp_path / "a").read_bytes() == b"a" and (tmp_path / "b").read_bytes() == b"b"


def test_a_failed_write_is_counted_and_the_next_one_still_lands(tmp_path: Path) -> None:
    writer = BackgroundWriter("t")
    blocker = tmp_path / "file"
    blocker.write_bytes(b"")
    writer.write(blocker / "under-a-file.json", b"x")  # a directory that cannot exist
    writer.flushed().result(timeout=10)
    assert writer.failures == 1
    writer.write(tmp_path / "ok.json", b"y")
    writer.flushed().result(timeout=10)
    assert (tmp_path / "ok.json").read_bytes() == b"y" and writer.failures == 1


@pytest.mark.parametrize("through_writer", [False, True])
def test_kv_and_topic_config_persist_through_the_given_writer(tmp_path: Path, through_writer: bool) -> None:
    writer = BackgroundWriter("t")
    kw = {"writer": writer.write} if through_writer else {}
    kv = KVConfigManager(tmp_path / "kv.json", **kw)
    kv.put_kv_config("ORDER_TOPIC_CONFIG", "T", "broker-a:4")
    topics = TopicConfigManager(tmp_path / "topics.json", **kw)
    topics.update_topic_config(TopicConfig(topic_name="T", read_queue_nums=2, write_queue_nums=2))
    writer.flushed().result(timeout=10)
    assert json.loads((tmp_path / "kv.json").read_text())["configTable"] == {"ORDER_TOPIC_CONFIG": {"T": "broker-a:4"}}
    assert "T" in json.loads((tmp_path / "topics.json").read_text())["topicConfigTable"]
    if through_writer:
        assert 2 <= writer.writes <= 3  # the topic table's first two images may coalesce
    else:
        assert writer.writes == 0


def test_drained_since_waits_only_for_writes_submitted_after_the_mark(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A request that wrote nothing is answered at once, even while another's write is on its way."""
    import asyncio

    from namesrv.common import persist

    disk_free = threading.Event()
    real_write = persist.atomic_write

    def slow_disk(path: Path, data: bytes) -> None:  # the real write, held until the test lets it go
        disk_free.wait(10)
        real_write(path, data)

    monkeypatch.setattr(persist, "atomic_write", slow_disk)
    writer = BackgroundWriter("t")
    before = writer.submitted
    writer.write(tmp_path / "kv.json", b"kv")
    after = writer.submitted

    async def requests() -> None:
        await asyncio.wait_for(writer.drained(after), 1)  # wrote nothing itself: no wait
        assert writer.pending
        writing = asyncio.ensure_future(writer.drained(before))  # the request that wrote
        await asyncio.sleep(0)
        assert not writing.done(), "answered before its write was on disk"
        disk_free.set()
        await asyncio.wait_for(writing, 10)

    asyncio.run(requests())
    assert (tmp_path / "kv.json").read_bytes() == b"kv" and not writer.pending
