"""Transactions over TCP in raw frames, as a transactional producer speaks them (the PyPI client
does not expose one): a half is invisible, the broker checks an unresolved one back over the
producer's own connection, the producer's answer commits it, and one never answered is dropped
after transactionCheckMax check-backs, a copy kept in TRANS_CHECK_MAX_TIME_TOPIC."""

from __future__ import annotations

import json

import ray

from actors.deployment.spec import BrokerSpec
from clients.admin.client import AdminClient
from namesrv.common.waiting import wait_until
from namesrv.protocol.codes import BrokerRequestCode, ResponseCode
from namesrv.protocol.constants import TRANS_CHECK_MAX_TIME_TOPIC
from namesrv.protocol.message.codec import decode_offset_msg_id
from namesrv.protocol.message.properties import properties_to_string
from namesrv.remoting.client import RemotingClient, parse_namesrv_addr
from tests.support.ray_cluster import DeploymentFactory, pull_all, wait_registered_everywhere

CHECK_MAX = 3


def test_check_back_commits_an_answered_half_and_drops_an_unanswered_one(deployments: DeploymentFactory) -> None:
    dep = deployments.deploy(brokers=[BrokerSpec("broker-a")], namesrv_count=1, broker_port=0,
                             broker_overrides={"transaction_timeout_ms": 500, "transaction_check_interval_ms": 500,
                                               "transaction_check_max": CHECK_MAX})
    wait_registered_everywhere(dep)
    AdminClient(dep).create_topic("TxTopic", read_queue_nums=1, write_queue_nums=1)
    addr = next(iter(dep.brokers))
    broker = dep.brokers[addr]
    with RemotingClient(*parse_namesrv_addr(addr)[0]) as c:
        hb = {"clientID": "p1", "producerDataSet": [{"groupName": "PG_tx"}], "consumerDataSet": []}
        assert c.invoke(BrokerRequestCode.HEART_BEAT, {}, json.dumps(hb).encode()).code == ResponseCode.SUCCESS
        halves = {}
        for name in ("answered", "ignored"):
            props = properties_to_string({"TRAN_MSG": "true", "PGROUP": "PG_tx", "UNIQ_KEY": name})
            sent = c.invoke(BrokerRequestCode.SEND_MESSAGE, {"producerGroup": "PG_tx", "topic": "TxTopic",
                                                             "queueId": "0", "sysFlag": "4", "properties": props},
                            name.encode())
            assert sent.code == ResponseCode.SUCCESS and sent.ext_fields is not None
            halves[name] = (sent.ext_fields["queueOffset"], str(decode_offset_msg_id(sent.ext_fields["msgId"])[1]))
        assert pull_all(broker, "TxTopic", 0)["messages"] == []

        def checks(name: str) -> list[dict[str, str]]:
            return [ext for r in c.server_requests_after(0.2) if r.code == BrokerRequestCode.CHECK_TRANSACTION_STATE
                    and (ext := r.ext_fields or {}).get("msgId") == name]

        wait_until(lambda: checks("answered"), 30, "a check-back of the answered half")
        [check, *_] = checks("answered")
        assert (check["tranStateTableOffset"], check["commitLogOffset"]) == halves["answered"]
        c.invoke_oneway(BrokerRequestCode.END_TRANSACTION, {
            "producerGroup": "PG_tx", "tranStateTableOffset": check["tranStateTableOffset"],
            "commitLogOffset": check["commitLogOffset"], "commitOrRollback": "8", "fromTransactionCheck": "true",
            "msgId": "answered", "transactionId": check["transactionId"]})
        wait_until(lambda: pull_all(broker, "TxTopic", 0)["messages"], 30, "the committed message")
        wait_until(lambda: ray.get(broker.get_runtime_info.remote(), timeout=30)["transactions_dropped"] == 1, 60,
                   "the unanswered half dropped")
        assert len(checks("ignored")) == CHECK_MAX
    assert [m["body"] for m in pull_all(broker, "TxTopic", 0)["messages"]] == [b"answered"]
    [kept] = pull_all(broker, TRANS_CHECK_MAX_TIME_TOPIC, 0)["messages"]  # RocketMQ 5 keeps what it drops
    assert kept["body"] == b"ignored" and kept["properties"]["REAL_TOPIC"] == "TxTopic"
