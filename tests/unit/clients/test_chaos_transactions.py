"""The chaos run's transactions (clients.chaos.transactions) without Ray: the seed decides every
transaction the same way twice, a check-back answers what the transaction decided (also one left
unknown at first), and the recorded decision of a message is the one a broker took."""

from __future__ import annotations

from clients.chaos.history import Decided
from clients.chaos.transactions import TX_KEY, RecordingProducer, SeededDecisions
from clients.producer.transaction import CheckedMessage, LocalTransactionState
from namesrv.client.message import Message

COMMIT, ROLLBACK, UNKNOW = (LocalTransactionState.COMMIT_MESSAGE, LocalTransactionState.ROLLBACK_MESSAGE,
                            LocalTransactionState.UNKNOW)


def drawn(seed: int, n: int = 200) -> SeededDecisions:
    d = SeededDecisions(seed)
    for i in range(n):
        d.draw(str(i))
    return d


def checked(key: str | None) -> CheckedMessage:
    return CheckedMessage("T", b"", {TX_KEY: key} if key is not None else {}, "id", "id")


def test_the_seed_decides_and_the_check_back_answers_the_decision() -> None:
    a, b = drawn(7), drawn(7)
    assert a.commit == b.commit and a.deferred == b.deferred, "the same seed, the same decisions"
    assert a.commit != drawn(8).commit
    assert 0 < sum(a.commit.values()) < 200 and 0 < len(a.deferred) < 200, "commits, rollbacks and deferred ones"
    for key, commit in a.commit.items():
        executed = a.execute_local_transaction(Message("T", b"", properties={TX_KEY: key}), None)
        answered = a.check_local_transaction(checked(key))
        assert answered is (COMMIT if commit else ROLLBACK)
        assert executed is (UNKNOW if key in a.deferred else answered)
    assert a.check_local_transaction(checked("not-sent")) is UNKNOW
    assert a.check_local_transaction(checked(None)) is UNKNOW, "a half of another producer of the group"


def test_a_message_keeps_the_decision_a_broker_took() -> None:
    p = RecordingProducer("g", SeededDecisions(0))
    p.on_end("m1", COMMIT, False, False)  # the end was lost with a broker
    assert p.decided["m1"] == Decided("m1", True, False)
    p.on_end("m1", COMMIT, True, True)  # the check-back's end was taken
    assert p.decided["m1"] == Decided("m1", True, True)
    p.on_end("m1", COMMIT, True, False)  # a later, refused one changes nothing
    assert p.decided["m1"] == Decided("m1", True, True)
    p.on_end("m2", ROLLBACK, False, True)
    assert p.decided["m2"] == Decided("m2", False, True)
