"""A master's answers to a pipelined slave (HAMasterService.transfer with `ack_offset`), on a real
commit log, no Ray: requests of one stream in flight together get consecutive batches, never the
same one twice; each acknowledges only what it says the slave holds; a new stream starts again from
where it asks (nothing a lost answer carried is skipped); the slave assembles the same log."""

from __future__ import annotations

import asyncio
from pathlib import Path

from actors.broker.ha.master import HAMasterService
from namesrv.broker.client.consumer_offsets import ConsumerOffsetManager
from namesrv.broker.config import BrokerConfig
from namesrv.broker.role import RoleGuard
from namesrv.broker.topic_config_manager import TopicConfigManager
from namesrv.common.clock import ManualClock
from namesrv.protocol.message.types import MessageInner
from namesrv.store.message_store import MessageStore
from namesrv.store.types import BrokerRole, FlushDiskType


def master(tmp_path: Path) -> tuple[HAMasterService, MessageStore, RoleGuard]:
    clock = ManualClock()
    config = BrokerConfig(broker_role=BrokerRole.SYNC_MASTER, slave_timeout_ms=5_000)
    store = MessageStore(tmp_path / "m", FlushDiskType.SYNC_FLUSH, clock)
    guard = RoleGuard(config, 0, clock)
    return HAMasterService(store, guard, TopicConfigManager(None, clock), ConsumerOffsetManager(None), config), \
        store, guard


async def put(store: MessageStore, i: int) -> int:
    r = await store.put(MessageInner("T", i % 2, b"x" * 50, {}, f"id{i}"))
    return r.commit_log_offset + r.store_size


def test_requests_in_flight_get_consecutive_batches_and_a_new_stream_restarts(tmp_path: Path) -> None:
    async def scenario() -> None:
        svc, store, guard = master(tmp_path)
        first = await put(store, 0)
        # Two requests of stream 7, both from 0 (the slave holds nothing): the first gets [0, first),
        # the second waits, since the cursor says [0, first) went to the first.
        a = await svc.transfer(1, 0, 1 << 20, 5_000, None, 0, 7)
        assert (a["offset"], len(a["data"])) == (0, first)
        waiting = asyncio.create_task(svc.transfer(1, 0, 1 << 20, 5_000, None, 0, 7))
        await asyncio.sleep(0.05)
        assert not waiting.done()
        second = await put(store, 1)  # wakes it at once with the new record only
        b = await asyncio.wait_for(waiting, 5)
        assert (b["offset"], b["offset"] + len(b["data"])) == (first, second)
        assert guard.sync.acks[1] == 0  # what the slave said it holds, not what it was sent
        # The slave appended both and asks on: its acknowledgement wakes a send waiting for `second`.
        guard.sync.members.add(1)
        send = asyncio.create_task(guard.replicated(second))
        await asyncio.sleep(0)
        poll = asyncio.create_task(svc.transfer(1, second, 1 << 20, 5_000, None, second, 7))
        assert await asyncio.wait_for(send, 5) == 0
        # A new stream (the slave lost an answer) asks again from what it holds: sent again.
        again = await svc.transfer(1, first, 1 << 20, 5_000, None, first, 8)
        assert (again["offset"], again["offset"] + len(again["data"])) == (first, second)
        poll.cancel()
        store.close()

    asyncio.run(scenario())


def test_pipelined_copy_is_the_masters_log(tmp_path: Path) -> None:
    async def scenario() -> None:
        svc, store, _ = master(tmp_path)
        for i in range(40):
            await put(store, i)
        slave = MessageStore(tmp_path / "s", FlushDiskType.SYNC_FLUSH, ManualClock())
        received: dict[int, bytes] = {}
        nxt = 0
        while nxt < store.size_bytes():  # three in flight, small batches, appended in offset order
            replies = await asyncio.gather(*(svc.transfer(1, nxt, 300, 0, None, slave.size_bytes(), 1)
                                             for _ in range(3)))
            for r in replies:
                if r["data"]:
                    received[r["offset"]] = r["data"]
                    nxt = max(nxt, r["offset"] + len(r["data"]))
            while received and min(received) <= slave.size_bytes():
                off = min(received)
                slave.append_raw(off, received.pop(off))
        assert slave.size_bytes() == store.size_bytes()
        end = store.size_bytes()
        assert slave.commit_log.files.pread(0, end) == store.commit_log.files.pread(0, end)
        slave.close()
        store.close()

    asyncio.run(scenario())
