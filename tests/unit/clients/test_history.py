"""The queue history checker (issue 33, point 5) on made-up histories: a clean one passes every
check, and each broken one fails exactly the check it breaks, naming the counterexample."""

from __future__ import annotations

import asyncio
import random
from dataclasses import replace
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from clients.chaos.history import Decided, History, Received, Sent, Stored, check_history, history_of_run
from clients.consumer.pull_consumer import ConsumedMessage
from namesrv.broker.transaction.service import COMMIT_TYPE
from namesrv.protocol.codes import ResponseCode
from tests.support.broker import Broker
from tests.unit.broker.test_transactions import end, prepare

Q0 = ("T", "broker-a", 0)
Q1 = ("T", "broker-a", 1)


def clean() -> History:
    """p1 sends m0..m5 one after the other, alternating queues; c1 reads them all; a transaction
    tx-c committed (held once) and tx-r rolled back (held nowhere)."""
    h = History()
    for i in range(6):
        q, off = (Q0, i // 2) if i % 2 == 0 else (Q1, i // 2)
        h.sent.append(Sent("p1", f"m{i}", 10 * i, 10 * i + 5, True, q, off))
        h.stored.append(Stored(q, off, f"m{i}"))
        h.received.append(Received("c1", q, off, f"m{i}", 10 * i + 7))
    h.sent.append(Sent("p2", "tx-c", 100, 105, True, transactional=True))
    h.sent.append(Sent("p2", "tx-r", 110, 115, True, transactional=True))
    h.decided += [Decided("tx-c", True, True), Decided("tx-r", False, True)]
    h.stored.append(Stored(Q1, 3, "tx-c"))
    return h


def failing(h: History) -> dict[str, str]:
    return {i.name.split()[0]: i.value + i.detail for i in check_history(h) if not i.ok}


def test_a_clean_history_passes_every_check() -> None:
    results = check_history(clean())
    assert [i.name.split()[0] for i in results] == ["H1", "H2", "H3", "H4", "H5"]
    assert all(i.ok for i in results), results


def test_an_acknowledged_message_held_nowhere_and_never_given_is_lost() -> None:
    h = clean()
    h.stored = [s for s in h.stored if s.msg_id != "m3"]
    h.received = [r for r in h.received if r.msg_id != "m3"]
    assert set(failing(h)) == {"H1"} and "m3" in failing(h)["H1"]
    h.received.append(Received("c1", Q1, 1, "m3", 99))  # given before retention deleted it: not lost
    assert "H1" not in failing(h)


def test_an_offset_reused_for_another_message_after_a_read_is_a_change() -> None:
    """The failure a reader gated by the confirm offset never sees: given m4 at Q0:2, then a new
    master (which never had m4) gives Q0:2 to m9."""
    h = clean()
    h.stored = [s for s in h.stored if (s.queue, s.offset) != (Q0, 2)] + [Stored(Q0, 2, "m9")]
    h.sent.append(Sent("p3", "m9", 200, 205, True, Q0, 2))
    broken = failing(h)
    assert set(broken) == {"H2"}  # m4 survives only in c1's hands (H1 counts what was given as kept)
    assert "held m9 at the end" in broken["H2"]
    h2 = clean()
    h2.received.append(Received("c2", Q0, 2, "m9", 300))  # two readers, two messages, one offset
    assert "later m9 to c2" in failing(h2)["H2"]


def test_a_committed_transaction_held_twice_or_not_at_all_breaks_h3() -> None:
    h = clean()
    h.stored.append(Stored(Q0, 3, "tx-c"))  # committed again by a promoted slave
    assert "tx-c held 2x" in failing(h)["H3"]
    h.stored = [s for s in h.stored if s.msg_id != "tx-c"]
    assert "tx-c held 0x" in failing(h)["H3"]


def test_a_commit_left_unanswered_may_be_held_once_or_not_but_never_twice() -> None:
    h = clean()
    h.decided.append(Decided("tx-u", True, False))  # the broker's answer to this commit was lost
    assert "H3" not in failing(h)  # not held: the commit may not have been taken
    h.stored.append(Stored(Q0, 4, "tx-u"))
    assert "H3" not in failing(h)  # held once: it was
    h.stored.append(Stored(Q1, 0, "tx-u"))
    assert "tx-u (commit unanswered) held 2x" in failing(h)["H3"]


def test_a_rolled_back_transaction_given_to_a_consumer_breaks_h4() -> None:
    h = clean()
    h.received.append(Received("c1", Q0, 3, "tx-r", 120))
    assert set(failing(h)) == {"H4"} and "tx-r" in failing(h)["H4"]


def test_a_later_send_at_a_lower_offset_breaks_the_order() -> None:
    h = clean()
    h.sent += [Sent("p4", "x", 500, 505, True, Q0, 5), Sent("p4", "y", 510, 515, True, Q0, 4)]
    h.stored += [Stored(Q0, 4, "y"), Stored(Q0, 5, "x")]
    assert set(failing(h)) == {"H5"} and "x@5 acknowledged, then y@4" in failing(h)["H5"]
    h2 = clean()  # overlapping sends may land in either order: not a violation
    h2.sent.append(Sent("p1", "a", 600, 700, True, Q0, 5))
    h2.sent.append(Sent("p1", "b", 650, 660, True, Q0, 4))
    assert "H5" not in failing(h2)


@settings(max_examples=50, deadline=None)
@given(st.integers(min_value=0, max_value=2**32), st.integers(min_value=1, max_value=300))
def test_sequential_sends_in_offset_order_always_pass_h5(seed: int, n: int) -> None:
    rng = random.Random(seed)
    h, t, offsets = History(), 0, {Q0: 0, Q1: 0}
    for i in range(n):
        q = rng.choice([Q0, Q1])
        end = t + rng.randint(1, 5)
        h.sent.append(Sent("p", f"m{i}", t, end, True, q, offsets[q]))
        offsets[q] += rng.randint(1, 3)
        t = end + rng.randint(1, 5)
    assert check_history(h)[-1].ok


def test_a_chaos_runs_records_make_a_history_whose_checks_see_a_loss() -> None:
    """history_of_run: the producers' send records (failed ones unacknowledged, placed nowhere),
    the live reader's deliveries and the final reads, as the chaos run hands them over."""
    def record(n: int, ok: bool = True) -> dict[str, object]:
        return {"producer": "p1", "t_ms": 10 * n, "latency_ms": 2.4, "ok": ok, "topic": "T",
                "broker_name": "broker-a" if ok else None, "queue_id": 0 if ok else None,
                "queue_offset": n if ok else None, "msg_id": f"m{n}" if ok else None}

    sends = [record(0), record(1), record(2, ok=False), record(3)]
    stored = [ConsumedMessage("T", "broker-a", 0, n, f"m{n}", b"", {}) for n in (0, 1)]
    h = history_of_run(sends, [Received("r", Q0, 0, "m0", 5)], stored)
    assert h.sent[0] == Sent("p1", "m0", 0, 2, True, Q0, 0)
    assert h.sent[2].acknowledged is False and h.sent[2].queue is None
    broken = failing(h)
    assert set(broken) == {"H1"} and "m3" in broken["H1"]


def test_a_half_committed_twice_breaks_h3_even_when_its_send_was_retried() -> None:
    """Copies of a transaction from distinct halves are RocketMQ's retried half send (see
    test_a_half_send_retried_after_a_lost_answer_is_committed_once_per_half); two copies of ONE
    half are a duplicate commit, however often its send was tried."""
    h = clean()
    h.sent = [s for s in h.sent if s.msg_id != "tx-c"]
    h.sent.append(Sent("p2", "tx-c", 100, 105, True, transactional=True, brokers_tried=("broker-a", "broker-b")))
    h.stored = [s for s in h.stored if s.msg_id != "tx-c"]
    h.stored += [Stored(Q1, 3, "tx-c", prepared_offset=7), Stored(("T", "broker-b", 0), 0, "tx-c", prepared_offset=2)]
    assert "H3" not in failing(h), "one copy per half, one half per attempt"
    h.stored.append(Stored(Q0, 9, "tx-c", prepared_offset=7))
    assert "half broker-a@7 committed more than once" in failing(h)["H3"]


def test_copies_from_more_halves_than_its_send_made_attempts_break_h3() -> None:
    h = clean()
    h.stored.append(Stored(("T", "broker-b", 0), 0, "tx-c", prepared_offset=2))  # its half was sent once
    assert "tx-c held 2x from 2 halves, its half sent 1x" in failing(h)["H3"]
    h.sent = [s for s in h.sent if s.msg_id != "tx-c"]
    h.sent.append(Sent("p2", "tx-c", 100, 105, True, transactional=True, brokers_tried=("broker-a", "broker-c")))
    assert "from 2 halves" in failing(h)["H3"], "a copy in a broker set no attempt went to"


def test_a_half_send_retried_after_a_lost_answer_is_committed_once_per_half(tmp_path: Path) -> None:
    """The chaos run's flaky H3 ("a committed transaction held twice", master kills, two broker
    sets). A producer sends a half as any sync send: an attempt on broker-a stores it, a master
    kill loses the answer, and the retry stores it again on broker-b (same msgId), which the
    producer commits. broker-a's check-back then asks about its own half, the producer answers
    COMMIT by the message's key, and broker-a commits it: two copies, one per half, each half
    committed once (RocketMQ's producer and broker do the same). Real brokers, a manual clock."""
    a, b = Broker(tmp_path / "a", transaction_timeout_ms=2_000), Broker(tmp_path / "b", transaction_timeout_ms=2_000)
    lost_answer = prepare(a, b"tx-7")  # stored on broker-a; the producer never heard so
    acked = prepare(b, b"tx-7")  # the retry on broker-b
    assert end(b, acked, COMMIT_TYPE).code == ResponseCode.SUCCESS  # the local transaction committed
    assert asyncio.run(a.processor.context.transactions.scan_for_check()) == ([], []), "not due yet"
    a.clock.advance(2_000)
    [due], _ = asyncio.run(a.processor.context.transactions.scan_for_check())
    assert (due.queue_offset, due.properties["UNIQ_KEY"]) == (lost_answer[0], "U-tx-7")
    assert end(a, lost_answer, COMMIT_TYPE).code == ResponseCode.SUCCESS  # the check-back's answer
    assert end(a, lost_answer, COMMIT_TYPE).remark == "transaction already ended", "once per half"
    stored = [ConsumedMessage("T", name, q, m.queue_offset, m.properties["UNIQ_KEY"], m.body, m.properties)
              for name, broker in (("broker-a", a), ("broker-b", b)) for q in (0, 1)
              for m in broker.store.get_message("T", q, 0, 10)]
    assert len(stored) == 2 and {m.msg_id for m in stored} == {"U-tx-7"}
    half_send = Sent("tx", "U-tx-7", 0, 5, True, transactional=True, brokers_tried=("broker-a", "broker-b"))
    h = history_of_run([], [], stored, [half_send], [Decided("U-tx-7", True, True)])
    [h3] = [i for i in check_history(h) if i.name.startswith("H3")]
    assert h3.ok and "1 held once per half of a retried half send" in h3.value, h3
    assert {s.prepared_offset for s in h.stored} == {lost_answer[0], acked[0]}
    once = history_of_run([], [], stored, [replace(half_send, brokers_tried=("broker-b",))],
                          [Decided("U-tx-7", True, True)])
    assert "U-tx-7 held 2x from 2 halves, its half sent 1x" in failing(once)["H3"]


def test_a_commit_of_a_half_send_that_failed_every_attempt_is_held_once_per_half() -> None:
    """A half send whose every attempt failed is not in the history (its producer never learned
    the msgId), yet each attempt may have stored a half, which its check-back commits."""
    h = clean()
    h.decided.append(Decided("tx-f", True, True))
    h.stored += [Stored(Q0, 5, "tx-f", prepared_offset=3), Stored(("T", "broker-b", 0), 0, "tx-f", prepared_offset=1)]
    assert "H3" not in failing(h)
    h.stored.append(Stored(Q1, 5, "tx-f", prepared_offset=3))
    assert "half broker-a@3 committed more than once" in failing(h)["H3"]
