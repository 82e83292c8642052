"""A durable write that fails is an error to the request that waited for it, and the table in memory
is rolled back to what is on disk (issue 22, point 5): on a real full filesystem (a tiny tmpfs
mounted here, when mounting is permitted) and on a real OSError (a directory that cannot exist)."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from actors.namesrv.lifecycle import NamesrvController
from namesrv.broker.topic_config_manager import TopicConfigManager
from namesrv.common.persist import BackgroundWriter, DurableWriteError
from namesrv.protocol.broker_headers import topic_config_ext
from namesrv.protocol.codes import BrokerRequestCode, RequestCode, ResponseCode
from namesrv.protocol.models import TopicConfig
from namesrv.remoting.command import RemotingRequest, RemotingResponse
from namesrv.remoting.pipeline import RequestContext, resolve
from namesrv.routeinfo.config import NamesrvConfig
from namesrv.routeinfo.kvconfig import KVConfigManager
from tests.support.store import mounted_tmpfs

TMPFS_BYTES = 256 * 1024


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 256 KiB tmpfs of its own, so it can be filled without touching the machine's disks."""
    with mounted_tmpfs(tmp_path / "tmpfs", TMPFS_BYTES // 1024) as mnt:
        yield mnt


def fill(disk: Path) -> Path:
    """Take every free block of `disk` (a real ENOSPC for the next write); returns the filler."""
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
    try:
        with contextlib.suppress(OSError):
            while os.write(fd, b"\0" * 4096):
                pass
    finally:
        os.close(fd)
    with pytest.raises(OSError) as full:
        (disk / "probe").write_bytes(b"x" * 4096)
    assert full.value.errno == errno.ENOSPC
    (disk / "probe").unlink(missing_ok=True)
    return filler


def unwritable(tmp_path: Path) -> Path:
    """A path whose directory cannot exist (its parent is a regular file): every write raises."""
    blocker = tmp_path / "blocker"
    blocker.write_bytes(b"")
    return blocker / "kvConfig.json"


async def put(kv: KVConfigManager, writer: BackgroundWriter, key: str, value: str) -> None:
    before = writer.submitted
    kv.put_kv_config("ns", key, value)
    await writer.drained(before)


def test_full_disk_fails_the_waiting_kv_put_and_rolls_it_back(small_disk: Path) -> None:
    writer = BackgroundWriter("t")
    kv = KVConfigManager(small_disk / "kvConfig.json", writer=writer.write)

    async def scenario() -> None:
        await put(kv, writer, "kept", "1")
        filler = fill(small_disk)
        with pytest.raises(DurableWriteError, match="No space left"):
            await put(kv, writer, "lost", "x" * 1000)
        assert kv.get_kv_config("ns", "lost") is None, "the table is ahead of the disk"
        assert kv.get_kv_config("ns", "kept") == "1"
        filler.unlink()
        await put(kv, writer, "later", "2")  # the disk has room again: writes land

    asyncio.run(scenario())
    on_disk = KVConfigManager(small_disk / "kvConfig.json")
    on_disk.load()
    assert on_disk.table == kv.table == {"ns": {"kept": "1", "later": "2"}}


def test_every_change_coalesced_into_a_failed_image_is_undone_newest_first(tmp_path: Path) -> None:
    writer = BackgroundWriter("t")
    path = unwritable(tmp_path)
    kv = KVConfigManager(path, writer=writer.write)

    async def scenario() -> None:
        before = writer.submitted
        kv.put_kv_config("ns", "a", "1")
        kv.put_kv_config("ns", "a", "2")
        kv.put_kv_config("ns", "b", "3")
        # The writer thread may fail the first image before this line: a write on a path whose
        # image failed is rolled back at once (with "b"), so the delete may find nothing to delete.
        kv.delete_kv_config("ns", "b")
        kv.put_kv_config("other", "c", "4")
        with pytest.raises(DurableWriteError, match="could not write"):
            await writer.drained(before)

    asyncio.run(scenario())
    assert kv.table == {}
    assert writer.failures >= 1 and not writer.pending


def test_a_write_made_before_the_roll_back_ran_fails_with_it(tmp_path: Path) -> None:
    """An image built on changes that are being rolled back never reaches the disk."""
    writer = BackgroundWriter("t")
    kv = KVConfigManager(unwritable(tmp_path), writer=writer.write)
    kv.put_kv_config("ns", "a", "1")  # no event loop: the roll-back waits for the next write
    writer.flushed().result(timeout=10)
    assert kv.get_kv_config("ns", "a") == "1"
    since = writer.submitted
    kv.put_kv_config("ns", "b", "2")  # its image holds "a" too: it fails, and both are undone
    assert kv.table == {}
    assert writer.failure_since(since) is not None


def test_a_wait_on_one_path_is_not_failed_by_another_paths_write(tmp_path: Path) -> None:
    """A request waits for the table it must not answer ahead of (the broker's topics), not for
    another table it touched on the way (a subscription group auto-created by a pull)."""
    writer = BackgroundWriter("t")
    topics = TopicConfigManager(tmp_path / "topics.json", writer=writer.write)
    writer.flushed().result(timeout=10)
    since = writer.submitted
    writer.write(unwritable(tmp_path) / "groups.json", b"{}")
    topics.update_topic_config(TopicConfig(topic_name="Kept", read_queue_nums=4, write_queue_nums=4))
    writer.flushed().result(timeout=10)
    assert writer.failure_since(since) is not None
    assert writer.failure_since(since, topics.path) is None
    assert asyncio.run(writer.written(since, topics.path)) is None and "Kept" in topics.topic_config_table


def test_topic_changes_and_their_data_version_roll_back(tmp_path: Path) -> None:
    writer = BackgroundWriter("t")
    topics = TopicConfigManager(tmp_path / "topics.json", writer=writer.write)
    writer.flushed().result(timeout=10)
    topics.update_topic_config(TopicConfig(topic_name="Kept", read_queue_nums=4, write_queue_nums=4))
    writer.flushed().result(timeout=10)
    table, version = dict(topics.topic_config_table), topics.data_version
    topics.path = unwritable(tmp_path)

    async def scenario() -> None:
        before = writer.submitted
        topics.update_topic_config(TopicConfig(topic_name="New", read_queue_nums=2, write_queue_nums=2))
        topics.delete_topic_config("Kept")
        topics.next_version()
        with pytest.raises(DurableWriteError):
            await writer.drained(before)

    asyncio.run(scenario())
    assert topics.topic_config_table == table
    assert topics.data_version == version


def namesrv_on(disk: Path) -> NamesrvController:
    config = NamesrvConfig(kv_config_path=str(disk / "kvConfig.json"),
                           config_store_path=str(disk / "namesrv.properties"))
    return NamesrvController("ns-test", config, data_dir=disk, restarted=False)


def kv_request(code: int, key: str, value: str | None = None) -> RemotingRequest:
    ext = {"namespace": "ns", "key": key} | ({"value": value} if value is not None else {})
    return RemotingRequest(code, ext)


async def call(server: Any, request: RemotingRequest) -> RemotingResponse:
    """One request through a server's pipeline, as a Ray call goes."""
    return await resolve(server.pipeline.handle(request, RequestContext()))


def topic_request(code: int, topic: str) -> RemotingRequest:
    if code == BrokerRequestCode.UPDATE_AND_CREATE_TOPIC:
        return RemotingRequest(code, topic_config_ext(TopicConfig(topic_name=topic, read_queue_nums=4,
                                                                  write_queue_nums=4)))
    return RemotingRequest(code, {"topic": topic})


def test_namesrv_answers_system_error_for_kv_and_config_it_could_not_write(small_disk: Path) -> None:
    async def scenario() -> None:
        ns = namesrv_on(small_disk)
        ok = await call(ns, kv_request(RequestCode.PUT_KV_CONFIG, "kept", "1"))
        assert ok.code == ResponseCode.SUCCESS
        fill(small_disk)
        failed = await call(ns, kv_request(RequestCode.PUT_KV_CONFIG, "lost", "x" * 1000))
        assert failed.code == ResponseCode.SYSTEM_ERROR and "No space left" in (failed.remark or "")
        got = await call(ns, kv_request(RequestCode.GET_KV_CONFIG, "lost"))
        assert got.code == ResponseCode.QUERY_NOT_FOUND
        deleted = await call(ns, kv_request(RequestCode.DELETE_KV_CONFIG, "kept"))
        assert deleted.code == ResponseCode.SYSTEM_ERROR
        assert ns.kv.get_kv_config("ns", "kept") == "1"
        before = ns.config.order_message_enable
        update = RemotingRequest(RequestCode.UPDATE_NAMESRV_CONFIG, {},
                                 f"orderMessageEnable={str(not before).lower()}\n".encode(), wire=True)
        answer = await call(ns, update)
        assert answer.code == ResponseCode.SYSTEM_ERROR
        assert ns.config.order_message_enable == before and not ns.processor.updated_config_keys

    asyncio.run(scenario())
    assert json.loads((small_disk / "kvConfig.json").read_text())["configTable"] == {"ns": {"kept": "1"}}
    assert not (small_disk / "namesrv.properties").exists()


def test_broker_answers_system_error_for_a_topic_change_it_could_not_write(small_disk: Path) -> None:
    """Topic create / delete on a broker whose config disk is full: SYSTEM_ERROR, nothing changed,
    and a broker restarted on the same disk has exactly the topics it acknowledged."""
    from actors.broker.lifecycle import BrokerController
    from actors.namesrv.housekeeping import BrokerChannel
    from namesrv.broker.config import BrokerConfig

    def broker() -> BrokerController:
        return BrokerController("c", "b", 0, small_disk, BrokerConfig(), [], "", None, str,
                                lambda token: BrokerChannel(None, token), "broker-b")

    async def scenario() -> None:
        b = broker()
        kept = await call(b, topic_request(BrokerRequestCode.UPDATE_AND_CREATE_TOPIC, "Kept"))
        assert kept.code == ResponseCode.SUCCESS
        version = b.topics.data_version
        fill(small_disk)
        created = await call(b, topic_request(BrokerRequestCode.UPDATE_AND_CREATE_TOPIC, "Lost"))
        assert created.code == ResponseCode.SYSTEM_ERROR and "No space left" in (created.remark or "")
        deleted = await call(b, topic_request(BrokerRequestCode.DELETE_TOPIC_IN_BROKER, "Kept"))
        assert deleted.code == ResponseCode.SYSTEM_ERROR
        assert "Lost" not in b.topics.topic_config_table and "Kept" in b.topics.topic_config_table
        assert b.topics.data_version == version
        b.store.close()

    asyncio.run(scenario())
    restarted = TopicConfigManager(small_disk / "config" / "topics.json")
    assert "Kept" in restarted.topic_config_table and "Lost" not in restarted.topic_config_table
