"""The controller's requests read from RocketMQ's wire (string extFields, JSON bodies) and its
answers written back."""

from __future__ import annotations

import json

import pytest

from namesrv.controller.codes import ControllerRequestCode as Req
from namesrv.controller.codes import ControllerResponseCode as Code
from namesrv.controller.replicas_info_manager import ControllerResult
from namesrv.controller.wire import CLEAN_BROKER_DATA, WireCall, WireRequestError, decode_request, encode_result


def test_elect_master_header_as_mqadmin_sends_it() -> None:
    ext = {"clusterName": "DefaultCluster", "brokerName": "broker-a", "brokerId": "2", "designateElect": "true",
           "invokeTime": "1700000000000"}
    assert decode_request(Req.CONTROLLER_ELECT_MASTER, ext, None) == WireCall(
        "elect_master", {"broker_name": "broker-a", "broker_id": 2, "designate_elect": True})
    controller_trigger = {"brokerName": "broker-a", "brokerId": "-1", "designateElect": "false"}
    assert decode_request(Req.CONTROLLER_ELECT_MASTER, controller_trigger, None).kwargs["broker_id"] is None


def test_alter_sync_state_set_reads_its_body() -> None:
    ext = {"brokerName": "broker-a", "masterBrokerId": "1", "masterEpoch": "3", "invokeTime": "1"}
    body = b'{"syncStateSet":[1,2],"syncStateSetEpoch":4}'
    call = decode_request(Req.CONTROLLER_ALTER_SYNC_STATE_SET, ext, body)
    assert call.kwargs == {"broker_name": "broker-a", "master_broker_id": 1, "master_epoch": 3,
                           "new_sync_state_set": [1, 2], "sync_state_set_epoch": 4}


def test_heartbeat_optional_fields_and_sync_state_data_body() -> None:
    call = decode_request(Req.BROKER_HEARTBEAT, {"clusterName": "c", "brokerName": "b", "brokerAddr": "h:1",
                                                 "brokerId": "1", "epoch": "2", "maxOffset": "99"}, None)
    assert call.kwargs["epoch"] == 2 and call.kwargs["max_offset"] == 99 and call.kwargs["confirm_offset"] is None
    names = decode_request(Req.CONTROLLER_GET_SYNC_STATE_DATA, {}, json.dumps(["broker-a"]).encode())
    assert names == WireCall("get_sync_state_data", {"broker_names": ["broker-a"]})
    clean = decode_request(CLEAN_BROKER_DATA, {"brokerName": "b", "brokerControllerIdsToClean": "2;3"}, None)
    assert clean.kwargs == {"broker_name": "b", "broker_ids": [2, 3], "clean_living_broker": False}


@pytest.mark.parametrize(
    ("code", "ext", "body", "message"),
    [
        (Req.CONTROLLER_ELECT_MASTER, {}, None, "<brokerName> is null"),
        (Req.CONTROLLER_APPLY_BROKER_ID, {"brokerName": "b", "registerCheckCode": "x"}, None, "<appliedBrokerId>"),
        (Req.CONTROLLER_REGISTER_BROKER, {"brokerName": "b", "brokerId": "one", "brokerAddress": "a"}, None,
         "not a number"),
        (Req.CONTROLLER_ALTER_SYNC_STATE_SET, {"brokerName": "b", "masterBrokerId": "1", "masterEpoch": "1"}, None,
         "no body"),
        (Req.CONTROLLER_ALTER_SYNC_STATE_SET, {"brokerName": "b", "masterBrokerId": "1", "masterEpoch": "1"},
         b"[1]", "must be a SyncStateSet"),
        (Req.CONTROLLER_GET_SYNC_STATE_DATA, {}, b"{}", "list of broker names"),
        (CLEAN_BROKER_DATA, {"brokerName": "b", "brokerControllerIdsToClean": "1;x"}, None, "format"),
    ],
)
def test_unreadable_requests_are_refused_with_the_field_named(code: int, ext: dict[str, str], body: bytes | None,
                                                              message: str) -> None:
    with pytest.raises(WireRequestError, match=message):
        decode_request(code, ext, body)


def test_unknown_code_is_not_the_controllers() -> None:
    with pytest.raises(KeyError):
        decode_request(105, {}, None)


def test_answers_are_strings_in_the_header_and_fastjson_in_the_body() -> None:
    result = ControllerResult(header={"masterBrokerId": 2, "masterAddress": None, "masterEpoch": 3,
                                      "isLeader": True},
                              body={"syncStateSet": [2], "brokerMemberGroup": {"brokerAddrs": {2: "h:2"}}})
    answer = encode_result(result)
    assert answer.code == Code.SUCCESS
    assert answer.ext_fields == {"masterBrokerId": "2", "masterEpoch": "3", "isLeader": "true"}
    assert answer.body == b'{"brokerMemberGroup":{"brokerAddrs":{2:"h:2"}},"syncStateSet":[2]}'
    assert encode_result(result, standard_json=True).body == (
        b'{"brokerMemberGroup":{"brokerAddrs":{"2":"h:2"}},"syncStateSet":[2]}')
    refused = encode_result(ControllerResult(Code.CONTROLLER_FENCED_MASTER_EPOCH, "stale"))
    assert (refused.code, refused.remark, refused.ext_fields, refused.body) == (2000, "stale", None, None)
