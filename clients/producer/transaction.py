"""A transactional producer over Ray (RocketMQ's TransactionMQProducer): a half message is sent,
the local transaction runs, and the broker is told to commit or roll it back; a transaction left
unknown is asked about again later (the check-back) until it commits or rolls back.

RocketMQ's broker sends CHECK_TRANSACTION_STATE down the producer's connection; a Ray driver has no
connection to send down, so this producer asks its brokers for its group's halves that are due for
a check (`BrokerActor.check_transactions`) every `check_interval_s`, and answers each from its
listener. The broker counts each as a check, and drops a half after `transactionCheckMax` as for
any producer.

    class Orders(TransactionListener):
        def execute_local_transaction(self, msg, arg): ... return LocalTransactionState.COMMIT_MESSAGE
        def check_local_transaction(self, msg): ... return LocalTransactionState.COMMIT_MESSAGE

    with TransactionMQProducer("tx_group", Orders(), namespace="namesrv") as p:
        p.send_message_in_transaction(Message("TopicTest", b"order 1"))
"""

from __future__ import annotations

import enum
import logging
import threading
from dataclasses import dataclass
from typing import Any

import ray

from actors.broker.actor import broker_actor_name
from clients.producer.producer import Producer
from namesrv.acl.plain_acl import signature
from namesrv.broker.transaction.service import COMMIT_TYPE, NOT_TYPE, PGROUP, ROLLBACK_TYPE, TRAN_MSG
from namesrv.client.errors import MQClientError, brief
from namesrv.client.message import Message
from namesrv.client.send_result import SendResult
from namesrv.protocol.broker_headers import end_transaction_ext
from namesrv.protocol.constants import MASTER_ID
from namesrv.protocol.message.codec import decode_offset_msg_id

log = logging.getLogger(__name__)


class LocalTransactionState(enum.Enum):
    COMMIT_MESSAGE = COMMIT_TYPE
    ROLLBACK_MESSAGE = ROLLBACK_TYPE
    UNKNOW = NOT_TYPE


@dataclass(frozen=True, slots=True)
class CheckedMessage:
    """A half message the broker asks about: its topic, body, properties and ids."""

    topic: str
    body: bytes
    properties: dict[str, str]
    msg_id: str
    transaction_id: str


CHECK_CALL_TIMEOUT_S = 10.0
"""How long one broker's check-back list is waited for; a broker slower than this is asked again next round."""


class TransactionListener:
    """What the application does: run its local transaction, and say later how one ended."""

    def execute_local_transaction(self, msg: Message, arg: Any) -> LocalTransactionState:
        raise NotImplementedError

    def check_local_transaction(self, msg: CheckedMessage) -> LocalTransactionState:
        raise NotImplementedError


@dataclass(frozen=True, slots=True)
class TransactionSendResult:
    send_result: SendResult
    local_transaction_state: LocalTransactionState


class TransactionMQProducer(Producer):
    def __init__(self, group: str, listener: TransactionListener, *args: Any, check_interval_s: float = 1.0,
                 **kwargs: Any) -> None:
        super().__init__(group, *args, **kwargs)
        self.listener = listener
        self.check_interval_s = check_interval_s
        self._brokers: set[str] = set()
        """Broker names this producer sent halves to: where its check-backs come from."""
        self._stop = threading.Event()
        self._checker: threading.Thread | None = None

    def start(self) -> TransactionMQProducer:
        super().start()
        self._stop.clear()
        self._checker = threading.Thread(target=self._check_loop, name=f"{self.group}-tx-check", daemon=True)
        self._checker.start()
        return self

    def shutdown(self) -> None:
        self._stop.set()
        if self._checker is not None:
            self._checker.join(timeout=10)
            self._checker = None
        super().shutdown()

    def _auth(self, ext: dict[str, str]) -> dict[str, str] | None:
        return signature(ext, None, self.config.credentials)

    def _broker(self, broker_name: str) -> Any:
        """The master of `broker_name` as the cached route names it (after a failover, whichever
        replica is brokerId 0), else `broker_actor_name(X, 0)`."""
        instance = self._ready()[0]
        addr = instance.find_broker_address_in_publish(broker_name)
        name = instance.transport.actor_of(broker_name, addr) if addr is not None \
            else broker_actor_name(broker_name, MASTER_ID)
        return ray.get_actor(name, namespace=self.namespace)

    # ------------------------------------------------------------------ sending
    def send_message_in_transaction(self, msg: Message, arg: Any = None) -> TransactionSendResult:
        """Send `msg` as a half message, run the local transaction, then commit or roll it back
        (UNKNOW, or a listener that raised: left for the check-back)."""
        msg.properties[TRAN_MSG] = "true"
        msg.properties[PGROUP] = self.group
        result = self.send(msg)
        if result.send_status != "SEND_OK":
            raise MQClientError(f"half message not stored: {result.send_status}")
        self._brokers.add(result.message_queue.broker_name)
        try:
            state = self.listener.execute_local_transaction(msg, arg)
        except Exception:
            log.exception("local transaction of %s failed: left for the check-back", result.msg_id)
            state = LocalTransactionState.UNKNOW
        try:
            self._end(result.message_queue.broker_name, result.msg_id, result.queue_offset,
                      decode_offset_msg_id(result.offset_msg_id)[1], state, from_check=False)
        except Exception as e:  # as RocketMQ: the half is stored, so the check-back decides it
            log.warning("local transaction of %s ended %s, but telling the broker failed: %s", result.msg_id,
                        state.name, brief(e))
        return TransactionSendResult(result, state)

    def _end(self, broker_name: str, msg_id: str, tran_state_table_offset: int, commit_log_offset: int,
             state: LocalTransactionState, from_check: bool) -> None:
        if state is LocalTransactionState.UNKNOW:
            return
        ext = end_transaction_ext(self.group, tran_state_table_offset, commit_log_offset, state.value, from_check)
        taken = False
        try:
            resp = ray.get(self._broker(broker_name).end_transaction.remote(
                self.group, tran_state_table_offset, commit_log_offset, state.value, from_check, self._auth(ext)),
                timeout=self.config.send_msg_timeout_ms / 1000)
            taken = resp.ok
            if not resp.ok:
                log.warning("end of transaction at %s refused: %s %s", broker_name, resp.code, resp.remark)
        finally:
            self.on_end(msg_id, state, from_check, taken)

    def on_end(self, msg_id: str, state: LocalTransactionState, from_check: bool, taken: bool) -> None:
        """Called after every END_TRANSACTION this producer sent (`taken`: the broker answered that it
        took the decision; False when it refused or did not answer). Does nothing here: a subclass
        counts or records decisions (the chaos run's history does)."""

    # ------------------------------------------------------------------ check-back
    def check_once(self) -> int:
        """Ask every broker this producer used for its halves due for a check; answer each from the
        listener. Returns how many were answered commit or rollback. A broker that cannot be asked
        (restarting, paused, failed over and not yet routed, or refusing: its ACL's NO_PERMISSION)
        or an END it did not take is logged and asked again next round; the other brokers are still
        asked in this one."""
        answered = 0
        for broker_name in sorted(self._brokers):
            auth = self._auth({"producerGroup": self.group})
            try:
                halves = ray.get(self._broker(broker_name).check_transactions.remote(self.group, auth),
                                 timeout=CHECK_CALL_TIMEOUT_S)
            except Exception as e:
                log.warning("transaction check-back at %s failed: %s (asked again next round)", broker_name, brief(e))
                continue
            for half in halves:
                checked = CheckedMessage(half["topic"], half["body"], half["properties"], half["msgId"],
                                         half["msgId"])
                try:
                    state = self.listener.check_local_transaction(checked)
                except Exception:
                    log.exception("check of transaction %s failed: asked again later", checked.msg_id)
                    continue
                try:
                    self._end(broker_name, half["msgId"], half["tranStateTableOffset"], half["commitLogOffset"],
                              state, from_check=True)
                except Exception as e:
                    log.warning("the checked end of %s at %s failed: %s (asked again later)", checked.msg_id,
                                broker_name, brief(e))
                    continue
                answered += state is not LocalTransactionState.UNKNOW
        return answered

    def _check_loop(self) -> None:
        while not self._stop.wait(self.check_interval_s):
            try:
                self.check_once()
            except Exception:  # the listener's or this producer's own fault: the next round asks again
                log.warning("transaction check-back round failed", exc_info=True)
