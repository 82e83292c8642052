"""mqadmin's controller verbs without a cluster: the broker's GET_BROKER_EPOCH_CACHE handler over
its wire encoding, RocketMQ's printouts, the options (RocketMQ's and the issue's electMaster forms),
and TCP header values typed back."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from clients.admin.brokers import MQAdminError
from clients.admin.controller import ControllerAnswer, _typed_header, require_ok
from clients.cli.main import build_parser, main
from clients.cli.mqadmin.controller import elect_text, epoch_text, metadata_text, sync_state_text
from namesrv.controller.codes import ControllerRequestCode as Req
from namesrv.controller.codes import ControllerResponseCode as Code
from namesrv.protocol.codes import ResponseCode
from namesrv.store.ha.epoch_cache import EpochFileCache
from tests.support.broker import Broker


def test_a_broker_in_controller_mode_answers_its_epoch_cache(tmp_path: Path) -> None:
    broker = Broker(tmp_path)
    epochs = EpochFileCache(tmp_path / "epochs")
    epochs.append_entry(1, 0)
    broker.send(b"x" * 100)
    end_of_first = broker.store.size_bytes()
    epochs.append_entry(3, end_of_first)
    broker.send(b"y" * 50)
    broker.processor.context.epochs = epochs
    answer = broker.call(Req.GET_BROKER_EPOCH_CACHE)
    assert answer.code == ResponseCode.SUCCESS
    body = json.loads(answer.body or b"")
    max_offset = broker.store.size_bytes()
    assert body == {"clusterName": "DefaultCluster", "brokerName": "broker-a", "brokerId": 0,
                    "maxOffset": max_offset,
                    "epochList": [{"epoch": 1, "startOffset": 0, "endOffset": end_of_first},
                                  {"epoch": 3, "startOffset": end_of_first, "endOffset": max_offset}]}


def test_outside_controller_mode_the_answer_is_rocketmqs(tmp_path: Path) -> None:
    answer = Broker(tmp_path).call(Req.GET_BROKER_EPOCH_CACHE)
    assert answer.code == ResponseCode.SYSTEM_ERROR
    assert answer.remark == "this request only for controllerMode "


REPLICAS = {"broker-a": {
    "masterBrokerId": 1, "masterAddress": "h:1", "masterEpoch": 2, "syncStateSetEpoch": 3,
    "inSyncReplicas": [{"brokerName": "broker-a", "brokerId": 1, "brokerAddress": "h:1", "alive": True}],
    "notInSyncReplicas": [{"brokerName": "broker-a", "brokerId": 2, "brokerAddress": "h:2", "alive": False}]}}


def test_the_printouts_are_rocketmqs() -> None:
    assert sync_state_text(REPLICAS) == (
        "\n#brokerName\tbroker-a\n#MasterBrokerId\t1\n#MasterAddr\th:1\n#MasterEpoch\t2\n#SyncStateSetEpoch\t3\n"
        "#SyncStateSetNums\t1\n"
        "\nInSyncReplica:\tReplicaIdentity{brokerName='broker-a', brokerId=1, brokerAddress='h:1', alive=true}\n"
        "\nNotInSyncReplica:\tReplicaIdentity{brokerName='broker-a', brokerId=2, brokerAddress='h:2', alive=false}\n")
    no_master = {"b": {"masterBrokerId": None, "masterAddress": None, "masterEpoch": 4, "syncStateSetEpoch": 4,
                       "inSyncReplicas": [], "notInSyncReplicas": []}}
    assert "#MasterBrokerId\tnull\n#MasterAddr\tnull\n" in sync_state_text(no_master)
    meta = {"group": "ctl", "controllerLeaderId": "ctl", "controllerLeaderAddress": "h:9878", "isLeader": True,
            "peers": "ctl:h:9878;"}
    assert metadata_text(meta) == ("\n#ControllerGroup\tctl\n#ControllerLeaderId\tctl\n#ControllerLeaderAddress\t"
                                   "h:9878\n#Peer:\tctl:h:9878\n")
    header = {"masterBrokerId": 2, "masterAddress": "h:2", "masterEpoch": 5, "syncStateSetEpoch": 6}
    body = {"syncStateSet": [2], "brokerMemberGroup": {"cluster": "C", "brokerName": "broker-a",
                                                         "brokerAddrs": {"10": "h:10", "2": "h:2", "1": "h:1"}}}
    assert elect_text("C", "broker-a", header, body) == (
        "\n#ClusterName\tC\n#BrokerName\tbroker-a\n#BrokerMasterAddr\th:2\n#MasterEpoch\t5\n#SyncStateSetEpoch\t6\n"
        "\t#Broker\t1\th:1\n\t#Broker\t2\th:2\n\t#Broker\t10\th:10\n")
    cache = {"clusterName": "C", "brokerName": "broker-a", "brokerId": 1, "maxOffset": 900,
             "epochList": [{"epoch": 1, "startOffset": 0, "endOffset": 300},
                           {"epoch": 2, "startOffset": 300, "endOffset": 9223372036854775807}]}
    assert epoch_text("h:1", cache) == (
        "\n#clusterName\tC\n#brokerName\tbroker-a\n#brokerAddr\th:1\n#brokerId\t1"
        "\n#Epoch: EpochEntry{epoch=1, startOffset=0, endOffset=300}"
        "\n#Epoch: EpochEntry{epoch=2, startOffset=300, endOffset=900}\n")


def test_tcp_header_strings_are_typed_back_and_refusals_raise() -> None:
    assert _typed_header({"masterEpoch": "3", "masterBrokerId": "2", "masterAddress": "h:1", "isLeader": "true"}) == {
        "masterEpoch": 3, "masterBrokerId": 2, "masterAddress": "h:1", "isLeader": True}
    refused = ControllerAnswer(Code.CONTROLLER_MASTER_STILL_EXIST, "The old master 1 is still alive")
    with pytest.raises(MQAdminError, match=r"CONTROLLER_MASTER_STILL_EXIST \(2011\): The old master 1"):
        require_ok(refused, "elect master", "h:9878")


def test_elect_master_takes_rocketmqs_options_and_the_issues() -> None:
    parser = build_parser()
    rocketmq = parser.parse_args(["electMaster", "-a", "h:9878", "-c", "C", "-bn", "broker-a", "-b", "2"])
    assert (rocketmq.broker_name, rocketmq.b, rocketmq.broker_id, rocketmq.cluster) == ("broker-a", "2", None, "C")
    issue = parser.parse_args(["electMaster", "-b", "broker-a", "--broker-id", "2"])
    assert (issue.b, issue.broker_id) == ("broker-a", "2")


@pytest.mark.parametrize(("argv", "words"), [
    (["electMaster", "-a", "127.0.0.1:1", "-b", "2"], "name the broker set"),
    (["electMaster", "-a", "127.0.0.1:1", "-bn", "broker-a", "-b", "two"], "bad broker name or id"),
    (["electMaster", "-a", "127.0.0.1:1", "-b", "broker-a", "--broker-id", "-1"], "ids are >= 0"),
    (["getControllerMetaData", "-a", "nohost"], "-a 'nohost'"),
    (["getControllerMetaData", "-n", "127.0.0.1:1"], "need the controller's address"),
    (["getControllerMetaData", "-a", "127.0.0.1:1", "--timeout", "0.5"], "controller at 127.0.0.1:1"),
])
def test_bad_controller_arguments_are_one_line(argv: list[str], words: str, capsys: pytest.CaptureFixture[str]
                                               ) -> None:
    assert main(argv) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and words in err[0], err


def test_get_sync_state_set_needs_a_broker_or_a_cluster(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(["getSyncStateSet", "-a", "127.0.0.1:1"])
    assert e.value.code == 2
    assert "one of the arguments -b/--brokerName -c/--clusterName is required" in capsys.readouterr().err
