"""The chaos run's transactions: a transactional producer (clients.producer.transaction) in the
driver sends half messages to the run's topics while faults happen and decides each one from the
run's seed: commit, roll back, or leave it unknown at first (RocketMQ's UNKNOW), so that the
broker's check-back asks, and is answered the same decision. A failover in between must neither
lose a commit nor apply one twice (a promoted slave that had not seen its old master's decision
would check it back again and store the message a second time), and never deliver a rollback.

What it sent (`Sent`, transactional, with the brokers its half's send tried) and every decision a
broker was told (`Decided`, acknowledged when the broker answered that it took it) go to the
history checker: H3 (a committed transaction is delivered once per half: a half send retried after
an attempt whose answer a kill lost may have stored two halves, each committed by its own broker,
as RocketMQ does) and H4 (a rolled-back one never). At the end, `finish` gives the unknown ones
until their check-back (the brokers' transaction timeout) to be decided before the final read.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from typing import Any

from clients.chaos.history import Decided, Sent
from clients.producer.transaction import (
    CheckedMessage,
    LocalTransactionState,
    TransactionListener,
    TransactionMQProducer,
)
from namesrv.client.message import Message
from namesrv.common.clock import system_clock as now_ms

log = logging.getLogger(__name__)

TX_GROUP = "chaos_tx_producer"
TX_KEY = "chaosTx"
"""The property naming a transaction's sequence number, so its check-back finds the decision."""
UNKNOWN_SHARE = 0.2
"""Transactions left unknown at first: their decision reaches the broker only through its check-back."""
CHECK_INTERVAL_S = 0.5
TX_CHECK_BACK_ALLOWANCE_S = 5.0
"""Beyond the brokers' transaction timeout, how long the deferred transactions are given at the
end of a run for their check-back (a check round, a broker restarting or a failover in between)."""


class SeededDecisions(TransactionListener):
    """Each transaction's decision drawn from the seed when it is sent; the check-back answers it."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.commit: dict[str, bool] = {}
        self.deferred: set[str] = set()
        self._lock = threading.Lock()

    def draw(self, key: str) -> None:
        with self._lock:
            self.commit[key] = self.rng.random() < 0.5
            if self.rng.random() < UNKNOWN_SHARE:
                self.deferred.add(key)

    def _state(self, key: str) -> LocalTransactionState:
        return LocalTransactionState.COMMIT_MESSAGE if self.commit[key] else LocalTransactionState.ROLLBACK_MESSAGE

    def execute_local_transaction(self, msg: Message, arg: Any) -> LocalTransactionState:
        key = msg.properties[TX_KEY]
        return LocalTransactionState.UNKNOW if key in self.deferred else self._state(key)

    def check_local_transaction(self, msg: CheckedMessage) -> LocalTransactionState:
        key = msg.properties.get(TX_KEY)
        if key is None or key not in self.commit:  # not one of this run's
            return LocalTransactionState.UNKNOW
        return self._state(key)


class RecordingProducer(TransactionMQProducer):
    """A TransactionMQProducer that keeps every END_TRANSACTION it sent, per message id."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.decided: dict[str, Decided] = {}
        self._record_lock = threading.Lock()

    def on_end(self, msg_id: str, state: LocalTransactionState, from_check: bool, taken: bool) -> None:
        with self._record_lock:
            known = self.decided.get(msg_id)
            if known is None or (taken and not known.acknowledged):
                self.decided[msg_id] = Decided(msg_id, state is LocalTransactionState.COMMIT_MESSAGE, taken)


class TransactionLane:
    """Sends `rate` transactions a second to `topics` in a thread of the driver until stopped."""

    def __init__(self, namespace: str, namesrvs: list[str], topics: list[str], rate: float, seed: int,
                 route_poll_ms: int) -> None:
        self.decisions = SeededDecisions(seed)
        self.producer = RecordingProducer(TX_GROUP, self.decisions, namesrv=namesrvs, namespace=namespace,
                                          check_interval_s=CHECK_INTERVAL_S,
                                          poll_name_server_interval_ms=route_poll_ms)
        self.topics, self.rate = topics, rate
        self.rng = random.Random(seed + 1)
        self.sent: list[Sent] = []
        self.failed_halves = 0
        self._stop = threading.Event()
        self._finished = False
        self._thread = threading.Thread(target=self._loop, name="chaos-transactions", daemon=True)

    def start(self) -> TransactionLane:
        self.producer.start()
        self._thread.start()
        return self

    def _loop(self) -> None:
        start = time.monotonic()
        for seq in range(1 << 62):
            if self._stop.wait(max(0.0, start + seq / self.rate - time.monotonic())):
                return
            key = str(seq)
            self.decisions.draw(key)
            msg = Message(self.rng.choice(self.topics), f"tx-{seq}".encode(), properties={TX_KEY: key})
            started = now_ms()
            try:
                result = self.producer.send_message_in_transaction(msg)
            except Exception as e:  # the half was not stored (its end failing is the check-back's to mend)
                log.info("chaos transaction %s: half not stored: %s", key, e)
                self.failed_halves += 1
                continue
            self.sent.append(Sent(TX_GROUP, result.send_result.msg_id, started, now_ms(), True, transactional=True,
                                  brokers_tried=tuple(result.send_result.brokers_tried)))

    def stop_sending(self) -> bool:
        """Stop sending; True when the thread ended."""
        self._stop.set()
        self._thread.join(60)
        return not self._thread.is_alive()

    def finish(self, wait_s: float) -> bool:
        """Stop sending, give the deferred transactions up to `wait_s` to be decided by their
        check-back, then stop the producer (once; a second call only reports). True when its
        threads ended."""
        stopped = self.stop_sending()
        if not self._finished:
            self._finished = True
            deadline = time.monotonic() + wait_s
            while time.monotonic() < deadline and self.undecided():
                time.sleep(CHECK_INTERVAL_S)
            self.producer.shutdown()
        return stopped

    def undecided(self) -> list[str]:
        """Sent halves no broker has taken a decision for yet."""
        taken = {d.msg_id for d in self.producer.decided.values() if d.acknowledged}
        return [s.msg_id for s in self.sent if s.acknowledged and s.msg_id not in taken]

    def decided(self) -> list[Decided]:
        return list(self.producer.decided.values())

    def figures(self) -> dict[str, Any]:
        """What was sent and decided. `undecided_at_end` splits in two: `end_unanswered`, whose END
        was sent and not answered (a kill between the broker's write and its answer: the broker may
        hold the decision, then never asks again; H3/H4 check what it did), and `never_ended`, for
        which no END was ever sent (the broker did not ask back in time)."""
        decided = self.decided()
        undecided = self.undecided()
        ended = {d.msg_id for d in decided}
        unanswered = sum(m in ended for m in undecided)
        return {"sent": len(self.sent), "halves_failed": self.failed_halves,
                "committed": sum(d.commit and d.acknowledged for d in decided),
                "rolled_back": sum(not d.commit and d.acknowledged for d in decided),
                "deferred_to_check_back": len(self.decisions.deferred), "undecided_at_end": len(undecided),
                "end_unanswered": unanswered, "never_ended": len(undecided) - unanswered}
