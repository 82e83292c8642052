"""Transactional messages (issue 22, point 1) through the broker's processor on a real store, with
a manual clock: a prepared message is invisible until committed, a rollback discards it, the
check-back finds what is unresolved too long and gives up after transactionCheckMax, and a broker
restarted from its store knows what was resolved."""

from __future__ import annotations

import asyncio
from pathlib import Path

from namesrv.broker.transaction.service import COMMIT_TYPE, ROLLBACK_TYPE, TransactionService, committed
from namesrv.protocol.codes import BrokerRequestCode as Code
from namesrv.protocol.codes import ResponseCode
from namesrv.protocol.constants import TRANS_CHECK_MAX_TIME_TOPIC, TRANS_HALF_TOPIC
from namesrv.protocol.message.codec import decode_offset_msg_id
from namesrv.protocol.message.properties import properties_to_string
from namesrv.remoting.wire_command import RemotingCommand
from tests.support.broker import Broker


def prepare(broker: Broker, body: bytes, group: str = "PG_tx") -> tuple[int, int]:
    """A prepared send as a transactional producer makes it; (half queue offset, commit-log offset)."""
    props = {"TRAN_MSG": "true", "PGROUP": group, "UNIQ_KEY": f"U-{body.decode()}"}
    ext = {"producerGroup": group, "topic": "T", "defaultTopic": "TBW102", "defaultTopicQueueNums": 4,
           "queueId": 0, "sysFlag": 4, "bornTimestamp": 1, "flag": 0, "properties": properties_to_string(props)}
    answer = broker.call(Code.SEND_MESSAGE, ext, body)
    assert answer.code == ResponseCode.SUCCESS and answer.ext_fields is not None, answer
    return int(answer.ext_fields["queueOffset"]), decode_offset_msg_id(answer.ext_fields["msgId"])[1]


def end(broker: Broker, half: tuple[int, int], what: int, group: str = "PG_tx") -> RemotingCommand:
    return broker.call(Code.END_TRANSACTION, {"producerGroup": group, "tranStateTableOffset": half[0],
                                              "commitLogOffset": half[1], "commitOrRollback": what,
                                              "fromTransactionCheck": "false", "msgId": "m"})


def bodies(broker: Broker) -> list[bytes]:
    return [m.body for q in (0, 1) for m in broker.store.get_message("T", q, 0, 100)]


def test_a_prepared_message_is_seen_only_once_committed(tmp_path: Path) -> None:
    broker = Broker(tmp_path)
    committed, rolled_back = prepare(broker, b"commit me"), prepare(broker, b"roll me back")
    assert bodies(broker) == [], "a half message is invisible"
    assert broker.pull(0).code == ResponseCode.PULL_NOT_FOUND
    assert end(broker, committed, COMMIT_TYPE).code == ResponseCode.SUCCESS
    assert end(broker, rolled_back, ROLLBACK_TYPE).code == ResponseCode.SUCCESS
    [m] = broker.store.get_message("T", 0, 0, 10)
    assert m.body == b"commit me" and "TRAN_MSG" not in m.properties and m.sys_flag & 0xC == COMMIT_TYPE
    again = end(broker, committed, COMMIT_TYPE)
    assert again.code == ResponseCode.SUCCESS and bodies(broker) == [b"commit me"], "committed once"
    assert end(broker, rolled_back, COMMIT_TYPE).code == ResponseCode.SUCCESS and bodies(broker) == [b"commit me"]


def test_an_end_that_names_no_half_of_its_group_changes_nothing(tmp_path: Path) -> None:
    broker = Broker(tmp_path)
    half = prepare(broker, b"x")
    assert (end(broker, half, COMMIT_TYPE, group="Other").remark or "") == "The producer group wrong"
    assert end(broker, (half[0] + 1, half[1]), COMMIT_TYPE).remark == "The transaction state table offset wrong"
    broker.send(b"plain")
    [plain] = broker.store.get_message("T", 0, 0, 1)
    assert end(broker, (0, plain.commit_log_offset), COMMIT_TYPE).remark == "Find prepared transaction message failed"
    assert bodies(broker) == [b"plain"]
    assert broker.call(Code.END_TRANSACTION, {"producerGroup": "PG_tx"}).code == ResponseCode.SYSTEM_ERROR


def test_a_transactional_batch_is_refused(tmp_path: Path) -> None:
    from namesrv.protocol.message.codec import BatchEntry, encode_batch

    broker = Broker(tmp_path)
    props = properties_to_string({"TRAN_MSG": "true", "PGROUP": "PG_tx"})
    ext = {"producerGroup": "PG_tx", "topic": "T", "queueId": 0, "properties": props}
    answer = broker.call(Code.SEND_BATCH_MESSAGE, ext, encode_batch([BatchEntry(0, b"a", {}), BatchEntry(0, b"b", {})]))
    assert answer.code == ResponseCode.MESSAGE_ILLEGAL and broker.store.max_offset(TRANS_HALF_TOPIC, 0) == 0


def test_unresolved_halves_are_checked_back_then_dropped(tmp_path: Path) -> None:
    broker = Broker(tmp_path, transaction_timeout_ms=6_000, transaction_check_max=2,
                    transaction_check_interval_ms=1_000)
    txn = broker.processor.context.transactions
    waiting = prepare(broker, b"waiting")
    resolved = prepare(broker, b"resolved")
    end(broker, resolved, ROLLBACK_TYPE)
    assert txn.due_for_check() == ([], [])
    broker.clock.advance(6_000)
    to_check, _ = txn.due_for_check()
    assert [h.queue_offset for h in to_check] == [waiting[0]]
    txn.checked(waiting[0])
    assert txn.due_for_check() == ([], []), "once per check interval"
    broker.clock.advance(1_000)
    txn.checked(txn.due_for_check()[0][0].queue_offset)
    broker.clock.advance(1_000)
    to_check, to_drop = txn.due_for_check()
    assert to_check == [] and [h.queue_offset for h in to_drop] == [waiting[0]], "after transactionCheckMax"


def test_a_ray_native_producer_is_handed_its_own_groups_due_halves_once_per_interval(tmp_path: Path) -> None:
    broker = Broker(tmp_path, transaction_timeout_ms=6_000, transaction_check_interval_ms=1_000)
    txn = broker.processor.context.transactions
    mine = prepare(broker, b"mine", group="PG_mine")
    prepare(broker, b"theirs", group="PG_theirs")
    assert asyncio.run(txn.due_for_group("PG_mine")) == [], "not due before the transaction timeout"
    broker.clock.advance(6_000)
    assert [h.queue_offset for h in asyncio.run(txn.due_for_group("PG_mine"))] == [mine[0]]
    assert asyncio.run(txn.due_for_group("PG_mine")) == [], "counted as checked: not again within the interval"
    assert [h.body for h in asyncio.run(txn.due_for_group("PG_theirs"))] == [b"theirs"]
    assert txn.state.checks == {mine[0]: 1, mine[0] + 1: 1}


def test_a_restarted_broker_knows_what_was_resolved(tmp_path: Path) -> None:
    broker = Broker(tmp_path)
    first, second = prepare(broker, b"first"), prepare(broker, b"second")
    end(broker, first, COMMIT_TYPE)
    broker.store.close()
    again = Broker(tmp_path)
    txn: TransactionService = again.processor.context.transactions
    assert txn.state.is_resolved(first[0]) and not txn.state.is_resolved(second[0])
    assert end(again, first, COMMIT_TYPE).code == ResponseCode.SUCCESS
    assert bodies(again) == [b"first"], "not committed a second time after the restart"
    assert end(again, second, COMMIT_TYPE).code == ResponseCode.SUCCESS and bodies(again) == [b"first", b"second"]


def test_a_replica_knows_its_masters_decisions_as_they_arrive(tmp_path: Path) -> None:
    """Issue 33, point 2: a slave's transaction state was loaded once at its start, so a promoted
    slave checked back halves its old master had resolved, and a producer answering COMMIT stored the
    message twice. The op records come with the replicated log; the replica replays them before any
    check-back scan and any END_TRANSACTION."""
    master = Broker(tmp_path / "master", transaction_timeout_ms=1_000)
    replica = Broker(tmp_path / "replica", transaction_timeout_ms=1_000)
    halves = [prepare(master, b"c%d" % i) for i in range(3)] + [prepare(master, b"r%d" % i) for i in range(2)]
    open_half = prepare(master, b"undecided")
    for h in halves[:3]:
        end(master, h, COMMIT_TYPE)
    for h in halves[3:]:
        end(master, h, ROLLBACK_TYPE)
    t = master.store.read_raw(0, 1 << 20)
    replica.store.append_raw(t.offset, t.data)  # the replica was started before any of it
    replica.clock.advance(10_000)
    to_check, to_drop = asyncio.run(replica.processor.context.transactions.scan_for_check())
    assert [h.queue_offset for h in to_check] == [open_half[0]] and to_drop == []
    before = bodies(replica)
    assert sorted(before) == [b"c0", b"c1", b"c2"]
    for h in halves:  # a producer answering a check-back on the new master: already decided
        assert end(replica, h, COMMIT_TYPE).remark == "transaction already ended"
    assert bodies(replica) == before, "nothing committed twice"


def test_a_truncated_replica_forgets_decisions_that_were_cut(tmp_path: Path) -> None:
    master = Broker(tmp_path / "master")
    replica = Broker(tmp_path / "replica")
    half = prepare(master, b"cut-decision")
    point = master.store.size_bytes()
    end(master, half, ROLLBACK_TYPE)  # its op record: the unreplicated tail
    t = master.store.read_raw(0, 1 << 20)
    replica.store.append_raw(t.offset, t.data)
    txn = replica.processor.context.transactions
    txn.catch_up()
    assert txn.state.is_resolved(half[0])
    asyncio.run(replica.store.truncate(point))  # its listeners: the decisions cut are forgotten
    assert not txn.state.is_resolved(half[0])


def test_a_half_checked_back_too_often_is_kept_in_the_check_max_time_topic(tmp_path: Path) -> None:
    broker = Broker(tmp_path, transaction_timeout_ms=1_000, transaction_check_max=1)
    txn = broker.processor.context.transactions
    half = prepare(broker, b"orphan")
    broker.clock.advance(1_000)
    [due], _ = txn.due_for_check()
    txn.checked(due.queue_offset)
    broker.clock.advance(60_000)
    _, [dropped] = txn.due_for_check()
    copy = txn.discard_copy(dropped)
    assert copy.topic == TRANS_CHECK_MAX_TIME_TOPIC and copy.queue_id == 0 and copy.body == b"orphan"
    assert copy.properties["REAL_TOPIC"] == "T" and copy.properties["TRANSACTION_CHECK_TIMES"] == "1"
    assert copy.properties["PGROUP"] == "PG_tx" and dropped.queue_offset == half[0]


def test_a_commit_torn_by_a_crash_is_not_committed_twice_by_its_check_back(tmp_path: Path) -> None:
    """A commit is two writes, the message then its op record. A broker killed between them (or a
    promoted slave that copied only the first) holds the committed message with the half still
    unresolved; the check-back's COMMIT then writes only the op record (the chaos run's history
    check H3 saw such a message held twice after a master kill)."""
    broker = Broker(tmp_path)
    half = prepare(broker, b"torn")
    txn = broker.processor.context.transactions
    [stored] = broker.store.get_message(TRANS_HALF_TOPIC, 0, half[0], 1)

    async def first_write_only() -> None:  # the message of the commit, and no op record
        await broker.store.put(committed(stored))
    asyncio.run(first_write_only())
    assert bodies(broker) == [b"torn"] and not txn.state.is_resolved(half[0])
    assert txn.committed_already(stored, "T")
    answer = end(broker, half, COMMIT_TYPE)  # the check-back's answer
    assert answer.code == ResponseCode.SUCCESS and bodies(broker) == [b"torn"], "committed once"
    assert txn.state.is_resolved(half[0]), "the op record written: never checked back again"
    other = prepare(broker, b"whole")
    assert not txn.committed_already(broker.store.get_message(TRANS_HALF_TOPIC, 0, other[0], 1)[0], "T")
    assert end(broker, other, COMMIT_TYPE).code == ResponseCode.SUCCESS
    assert sorted(bodies(broker)) == [b"torn", b"whole"]
