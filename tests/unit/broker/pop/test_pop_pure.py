"""The pop's pure parts: the handle (extraInfo) round trip and its refusals, the batch ack's bit
set, the invisibility index under a manual clock, and its journal (replay, torn tail, compaction)."""

from __future__ import annotations

import asyncio
import base64
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from namesrv.broker.client.consumer_offsets import ConsumerOffsetManager
from namesrv.broker.pop import journal as journal_mod
from namesrv.broker.pop.extra_info import (
    ExtraInfo,
    decode_extra_info,
    offset_info_entry,
    parse_offset_info,
    pop_retry_topic,
    real_topic,
    retry_flag,
)
from namesrv.broker.pop.headers import BatchAck, encode_bit_set
from namesrv.broker.pop.inflight import InFlight, InflightIndex
from namesrv.broker.pop.journal import PopJournal, PopJournalError, ack_record, change_record, pop_record
from namesrv.broker.pop.state import PopState
from namesrv.common.clock import ManualClock
from namesrv.protocol.types import InvalidInput

longs = st.integers(min_value=0, max_value=10**18 - 1)
names = st.text(st.characters(min_codepoint=33, max_codepoint=126), min_size=1, max_size=40)


@given(longs, longs, longs, st.sampled_from([0, 999]), st.sampled_from(["0", "1", "2"]), names,
       st.integers(0, 65535), st.none() | longs)
def test_extra_info_round_trips(ck: int, pop_time: int, invisible: int, qid: int, retry: str, broker: str,
                                queue_id: int, offset: int | None) -> None:
    info = ExtraInfo(ck, pop_time, invisible, qid, retry, broker, queue_id, offset)
    assert decode_extra_info(info.encode()) == info
    assert info.order == (qid == 999)


@given(st.text(max_size=80))
def test_any_text_is_a_handle_or_refused_whole(text: str) -> None:
    try:
        info = decode_extra_info(text)
    except InvalidInput as e:
        assert str(e).startswith("illegal extraInfo")
    else:
        assert info.encode() == text


@pytest.mark.parametrize("text", [
    "", "1 2 3", "1 2 3 0 0 b 0 0 9", "x 2 3 0 0 b 0 0", "1 2 3 0 7 b 0 0", "1 -2 3 0 0 b 0 0",
    "1 2 3 0 0  0 0", "1 2 3 0 0 b 0 99999999999999999999", "1 2 3 0 0 b 0 ٣",
    "1 --2 3 0 0 b 0 0", "1 2 3 0 0 b 0 -", "1\t2 3 0 0 b 0 0", "1 " * 600,
])
def test_malformed_handles_are_refused(text: str) -> None:
    with pytest.raises(InvalidInput):
        decode_extra_info(text)


def test_retry_topics_and_offset_infos_as_rocketmq_spells_them() -> None:
    assert pop_retry_topic("T", "G") == "%RETRY%G_T" and retry_flag("%RETRY%G_T") == "1"
    assert retry_flag("T") == "0" and retry_flag("%RETRY%G+T") == "2"
    assert real_topic("T", "G", "1") == "%RETRY%G_T" and real_topic("%RETRY%G_T", "G", "1") == "%RETRY%G_T"
    assert real_topic("T", "G", "0") == "T" and real_topic("T", "G", "2") == "%RETRY%G+T"
    info = ";".join([offset_info_entry("T", 0, "5"), offset_info_entry("%RETRY%G_T", 0, "1,2")])
    assert info == "0 0 5;1 0 1,2" and parse_offset_info(info) == {"0@0": "5", "1@0": "1,2"}
    for bad in ("0 0", "0 0 1;0 0 2"):
        with pytest.raises(InvalidInput):
            parse_offset_info(bad)


@given(st.sets(st.integers(0, 4095), min_size=1, max_size=64))
def test_bit_sets_decode_as_java_writes_them(offsets: set[int]) -> None:
    ack = BatchAck.model_validate({"c": "G", "t": "T", "r": "0", "so": 3, "q": 0, "pt": 1, "b": encode_bit_set(
        sorted(offsets))})
    assert ack.bit_set == sorted(offsets)


def test_a_java_bitset_of_bits_0_and_9() -> None:  # BitSet{0, 9}.toByteArray() == [0x01, 0x02]
    ack = BatchAck.model_validate({"c": "G", "t": "T", "r": "0", "so": 0, "q": 0, "pt": 1,
                                   "b": base64.b64encode(b"\x01\x02").decode()})
    assert ack.bit_set == [0, 9]


def entry(offset: int, pop_time: int, invisible: int = 1000, order: bool = False) -> InFlight:
    return InFlight("G", "T", 0, offset, "T", 0, pop_time, invisible, order)


def test_the_index_hands_out_what_lapsed_earliest_first() -> None:
    clock = ManualClock(0)
    index = InflightIndex(clock)
    index.add(entry(0, 0, 300))
    index.add(entry(1, 0, 100))
    index.add(entry(2, 0, 200))
    assert index.next_due() == 100 and index.take_due() == []
    clock.advance(250)
    assert [e.offset for e in index.take_due()] == [1, 2]
    assert index.in_flight("G", "T", 0) == 1 and index.lowest_in_flight("G", "T", 0) == 0
    clock.advance(100)
    [due] = index.take_due()
    index.restore(due)  # could not re-deliver: due again at once
    assert [e.offset for e in index.take_due()] == [0] and len(index) == 0 and index.next_due() is None


def test_handles_match_by_pop_time_and_a_change_makes_the_old_one_stale() -> None:
    clock = ManualClock(0)
    index = InflightIndex(clock)
    index.add(entry(0, 0))
    assert index.ack(("G", "T", 0, 0), 5) is None and index.change(("G", "T", 0, 0), 5, 10) is None
    changed = index.change(("G", "T", 0, 0), 0, 5000)  # at the pop's own millisecond: a later pop time
    assert changed is not None and changed.pop_time == 1 and changed.due_at == 5001
    clock.advance(2000)
    assert index.take_due() == [] and index.ack(("G", "T", 0, 0), 0) is None
    assert index.ack(("G", "T", 0, 0), 1) == changed and len(index) == 0
    clock.advance(10_000)
    assert index.take_due() == []


def test_the_journal_replays_into_the_same_index(tmp_path: Path) -> None:
    clock = ManualClock(0)
    path = tmp_path / "pop.journal"
    j = PopJournal(path)
    index = InflightIndex(clock)
    j.load(index)
    a, b, c = entry(0, 0), entry(1, 0), entry(2, 0)
    for e in (a, b, c):
        index.add(e)
    j.append(pop_record([a, b, c], ("G", "T", 0, 3)))
    j.append(ack_record(a))
    index.ack(a.key, 0)
    clock.advance(10)
    new = index.change(b.key, 0, 9000)
    assert new is not None
    j.append(change_record(b, new))
    j.append(ack_record(c, "rev"))
    index.ack(c.key, 0)
    j.close()
    again = InflightIndex(clock)
    assert PopJournal(path).load(again) == {("G", "T", 0): 3}
    assert again.entries == index.entries == {b.key: new}


def test_a_torn_tail_is_dropped_and_a_bad_middle_refuses_the_load(tmp_path: Path) -> None:
    path = tmp_path / "pop.journal"
    j = PopJournal(path)
    j.load(InflightIndex(ManualClock(0)))
    j.append(pop_record([entry(0, 0)], None))
    j.close()
    good = path.read_bytes()
    path.write_bytes(good + b'{"op":"ack","k":["G","T",0')
    index = InflightIndex(ManualClock(0))
    PopJournal(path).load(index)
    assert len(index) == 1 and path.read_bytes() == good
    path.write_bytes(b"not json\n" + good)
    with pytest.raises(PopJournalError):
        PopJournal(path).load(InflightIndex(ManualClock(0)))


def test_state_group_commits_and_compacts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(journal_mod, "COMPACT_MIN_RECORDS", 10)
    path = tmp_path / "pop.journal"
    offsets = ConsumerOffsetManager(None)
    state = PopState(ManualClock(0), path)
    state.open(offsets)

    async def work() -> None:
        entries = [entry(i, 0) for i in range(30)]
        for e in entries:
            state.index.add(e)
        await asyncio.gather(*(state.record(pop_record([e], ("G", "T", 0, e.offset + 1))) for e in entries))
        for e in entries[:28]:
            state.index.ack(e.key, 0)
        await asyncio.gather(*(state.record(ack_record(e)) for e in entries[:28]))

    asyncio.run(work())
    state.close()
    assert len(path.read_bytes().splitlines()) < 10  # compacted: the two left and the pop offset
    again = PopState(ManualClock(0), path)
    again.open(offsets)
    assert sorted(k[3] for k in again.index.entries) == [28, 29] and offsets.query_offset("G", "T", 0) == 30
    again.close()


@pytest.mark.parametrize("sync_acks", [True, False])
def test_acks_are_fsynced_before_their_answer_only_under_sync_flush(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                    sync_acks: bool) -> None:
    """A pop's record is always fsynced before it is answered; an ack's too under SYNC_FLUSH, under
    ASYNC_FLUSH it is written (the file holds it) and fsynced by `flush`."""
    path = tmp_path / "pop.journal"
    state = PopState(ManualClock(0), path, sync_acks=sync_acks)
    state.open(ConsumerOffsetManager(None))
    synced: list[int] = []
    monkeypatch.setattr(journal_mod.os, "fsync", lambda fd: synced.append(fd))

    async def work() -> tuple[int, int, int]:
        e = entry(0, 0)
        state.index.add(e)
        await state.record(pop_record([e], ("G", "T", 0, 1)))
        after_pop = len(synced)
        state.index.ack(e.key, 0)
        await state.record(ack_record(e))
        after_ack = len(synced)
        assert b'"op":"ack"' in path.read_bytes(), "written before it is answered"
        await state.flush()
        return after_pop, after_ack, len(synced)

    after_pop, after_ack, after_flush = asyncio.run(work())
    assert after_pop == 1
    assert (after_ack, after_flush) == ((2, 2) if sync_acks else (1, 2))
    state.close()


def test_the_acl_asks_sub_on_the_topic_and_the_group_of_every_pop_code() -> None:
    from namesrv.acl.broker_resources import wire_resources
    from namesrv.acl.plain_acl import SUB
    from namesrv.protocol.codes import BrokerRequestCode as Code
    from namesrv.remoting.command import RemotingRequest

    want = {"T": SUB, "%RETRY%G": SUB}
    pop = {"consumerGroup": "G", "topic": "T", "queueId": "-1", "maxMsgNums": "1", "invisibleTime": "1",
           "pollTime": "0", "bornTime": "0", "initMode": "0"}
    ack = {"consumerGroup": "G", "topic": "T", "queueId": "0", "offset": "0", "extraInfo": "0 1 2 0 0 b 0 0"}
    assert wire_resources(RemotingRequest(Code.POP_MESSAGE, pop)) == want
    assert wire_resources(RemotingRequest(Code.ACK_MESSAGE, ack)) == want
    assert wire_resources(RemotingRequest(Code.CHANGE_MESSAGE_INVISIBLETIME, ack | {"invisibleTime": "5"})) == want
    body = b'{"acks": [{"c": "G", "t": "T", "r": "0", "so": 0, "q": 0, "pt": 1, "b": "AQ=="}, ' \
           b'{"c": "H", "t": "U", "r": "1", "so": 0, "q": 0, "pt": 1, "b": "AQ=="}]}'
    assert wire_resources(RemotingRequest(Code.BATCH_ACK_MESSAGE, {}, body)) == want | {"U": SUB, "%RETRY%H": SUB}
    with pytest.raises(InvalidInput):
        wire_resources(RemotingRequest(Code.BATCH_ACK_MESSAGE, {}, b'{"acks": 5}'))


def test_a_restored_entry_can_wait_and_keeps_its_handle() -> None:
    clock = ManualClock(0)
    index = InflightIndex(clock)
    index.add(entry(0, 0, 100))
    index.add(entry(1, 0, 200))
    clock.advance(300)
    first, second = index.take_due()
    index.restore(first, not_before=1300)
    index.restore(second)
    assert index.next_due() == 200 and [e.offset for e in index.take_due()] == [1]
    assert index.take_due() == [] and index.next_due() == 1300
    assert index.find(first.key, 0) == first  # the handle still names it
    clock.advance(1000)
    assert index.take_due() == [first]


def test_revive_reads_runs_past_the_transfer_caps_and_marks_what_the_store_lacks(tmp_path: Path) -> None:
    """read_entries: 40 consecutive offsets of one queue (past a read's 32-message cap), entries of
    a second queue out of order, one the store never had: each entry gets its own message, in the
    entries' order, and None where there is none."""
    from namesrv.broker.pop.revive import read_entries
    from namesrv.protocol.message.types import MessageInner
    from namesrv.store.message_store import MessageStore
    from namesrv.store.types import FlushDiskType

    store = MessageStore(tmp_path / "store", FlushDiskType.ASYNC_FLUSH)

    async def fill() -> None:
        for i in range(40):
            await store.put(MessageInner("T", 0, f"q0-{i}".encode()))
        for i in range(3):
            await store.put(MessageInner("T", 1, f"q1-{i}".encode()))
    asyncio.run(fill())

    def entry(queue_id: int, offset: int) -> InFlight:
        return InFlight("G", "T", queue_id, offset, "T", 0, 0, 1000, False)
    entries = [entry(1, 2), *(entry(0, o) for o in range(40)), entry(1, 0), entry(1, 9)]
    got = read_entries(store, entries)
    assert [m.body.decode() if m else None for m in got] == ["q1-2", *(f"q0-{o}" for o in range(40)), "q1-0", None]
    store.close()
