"""The Ray-native transactional producer (issue 22, point 1): a committed local transaction's
message is delivered, a rolled-back one never is, and one left unknown is committed by the
check-back the producer answers from its listener, even while another broker it used cannot be asked."""

from __future__ import annotations

import pytest

from actors.deployment.spec import BrokerSpec
from clients.admin.client import AdminClient
from clients.producer.transaction import (
    CheckedMessage,
    LocalTransactionState,
    TransactionListener,
    TransactionMQProducer,
)
from namesrv.client.message import Message
from namesrv.common.waiting import wait_until
from tests.support.ray_cluster import DeploymentFactory, pull_all, wait_registered_everywhere


class Orders(TransactionListener):
    def __init__(self) -> None:
        self.checked: list[str] = []

    def execute_local_transaction(self, msg: Message, arg: object) -> LocalTransactionState:
        return {b"commit": LocalTransactionState.COMMIT_MESSAGE, b"rollback": LocalTransactionState.ROLLBACK_MESSAGE,
                }.get(bytes(msg.body), LocalTransactionState.UNKNOW)

    def check_local_transaction(self, msg: CheckedMessage) -> LocalTransactionState:
        self.checked.append(msg.body.decode())
        return LocalTransactionState.COMMIT_MESSAGE


@pytest.mark.timeout(180)
def test_commit_rollback_and_a_check_back(deployments: DeploymentFactory) -> None:
    dep = deployments.deploy(brokers=[BrokerSpec("broker-a")], namesrv_count=1,
                             broker_overrides={"transaction_timeout_ms": 500, "transaction_check_interval_ms": 500})
    wait_registered_everywhere(dep)
    AdminClient(dep).create_topic("TxRay", read_queue_nums=1, write_queue_nums=1)
    broker = next(iter(dep.brokers.values()))
    listener = Orders()
    with TransactionMQProducer("PG_ray_tx", listener, namespace=dep.spec.namespace, check_interval_s=0.3) as p:
        # a broker set it sent halves to earlier that cannot be asked now (gone, or not routed yet):
        # asked first in every round, it must not keep the check-back from the live one
        p._brokers.add("broker-0-gone")
        states = [p.send_message_in_transaction(Message("TxRay", body)).local_transaction_state
                  for body in (b"commit", b"rollback", b"unknown")]
        assert states == [LocalTransactionState.COMMIT_MESSAGE, LocalTransactionState.ROLLBACK_MESSAGE,
                          LocalTransactionState.UNKNOW]
        wait_until(lambda: len(pull_all(broker, "TxRay", 0)["messages"]) == 2, 60, "the unknown one checked back")
    assert sorted(m["body"] for m in pull_all(broker, "TxRay", 0)["messages"]) == [b"commit", b"unknown"]
    assert listener.checked == ["unknown"], "only the unresolved half is checked back, once"
