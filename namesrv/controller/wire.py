"""The controller's requests and answers on RocketMQ's wire: extFields (strings) and JSON bodies in,
a controller method call out; a `ControllerResult` in, response code, extFields and body out.

Field names and parsing follow RocketMQ 5.3's request headers (AlterSyncStateSetRequestHeader,
ElectMasterRequestHeader, BrokerHeartbeatRequestHeader, ...): a missing required field is refused
with CONTROLLER_INVALID_REQUEST and a remark naming it, as RocketMQ's checkFields does.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from namesrv.controller.codes import ControllerRequestCode as Req
from namesrv.controller.replicas_info_manager import ControllerResult
from namesrv.protocol import fastjson
from namesrv.remoting.wire_command import ext_value

CLEAN_BROKER_DATA = 1011
"""mqadmin cleanBrokerMetadata (RocketMQ's RequestCode.CLEAN_BROKER_DATA)."""


class WireRequestError(ValueError):
    """A request the controller cannot read: answered with CONTROLLER_INVALID_REQUEST."""


@dataclass(frozen=True, slots=True)
class WireCall:
    method: str
    """The controller actor's method."""
    kwargs: dict[str, Any]


def _required(ext: dict[str, str], name: str) -> str:
    value = ext.get(name)
    if value is None or value == "":
        raise WireRequestError(f"the custom field <{name}> is null")
    return value


def _int(ext: dict[str, str], name: str, required: bool = True) -> int | None:
    raw = _required(ext, name) if required else ext.get(name)
    if raw is None or raw == "":
        return None
    try:
        return int(raw)
    except ValueError:
        raise WireRequestError(f"the custom field <{name}> is not a number: {raw!r}") from None


def _bool(ext: dict[str, str], name: str) -> bool:
    return str(ext.get(name, "false")).lower() == "true"  # Boolean.parseBoolean


def _json_body(body: bytes | None, what: str) -> Any:
    if not body:
        raise WireRequestError(f"{what}: the request has no body")
    try:
        return fastjson.loads(body)
    except ValueError as e:
        raise WireRequestError(f"{what}: the body is not JSON: {e}") from None


def decode_request(code: int, ext_fields: dict[str, str] | None, body: bytes | None) -> WireCall:
    """The controller call a wire request asks for; WireRequestError when it cannot be read;
    KeyError for a code the controller does not serve."""
    ext = dict(ext_fields or {})
    if code == Req.BROKER_HEARTBEAT:
        return WireCall("heartbeat", {
            "cluster_name": ext.get("clusterName", ""), "broker_name": _required(ext, "brokerName"),
            "broker_addr": ext.get("brokerAddr", ""), "broker_id": _int(ext, "brokerId", required=False),
            "heartbeat_timeout_ms": _int(ext, "heartbeatTimeoutMills", required=False),
            "epoch": _int(ext, "epoch", required=False), "max_offset": _int(ext, "maxOffset", required=False),
            "confirm_offset": _int(ext, "confirmOffset", required=False),
            "election_priority": _int(ext, "electionPriority", required=False),
        })
    if code == Req.CONTROLLER_ALTER_SYNC_STATE_SET:
        sync = _json_body(body, "alter SyncStateSet")
        if not isinstance(sync, dict) or not isinstance(sync.get("syncStateSet"), list):
            raise WireRequestError("alter SyncStateSet: the body must be a SyncStateSet")
        try:
            members = [int(b) for b in sync["syncStateSet"]]
            set_epoch = int(sync.get("syncStateSetEpoch", 0))
        except (TypeError, ValueError) as e:
            raise WireRequestError(f"alter SyncStateSet: bad SyncStateSet: {e}") from None
        return WireCall("alter_sync_state_set", {
            "broker_name": _required(ext, "brokerName"), "master_broker_id": _int(ext, "masterBrokerId"),
            "master_epoch": _int(ext, "masterEpoch"), "new_sync_state_set": members,
            "sync_state_set_epoch": set_epoch,
        })
    if code == Req.CONTROLLER_ELECT_MASTER:
        broker_id = _int(ext, "brokerId", required=False)
        return WireCall("elect_master", {
            "broker_name": _required(ext, "brokerName"),
            "broker_id": None if broker_id is None or broker_id < 0 else broker_id,
            "designate_elect": _bool(ext, "designateElect"),
        })
    if code == Req.CONTROLLER_REGISTER_BROKER:
        return WireCall("register_broker", {
            "cluster_name": ext.get("clusterName", ""), "broker_name": _required(ext, "brokerName"),
            "broker_id": _int(ext, "brokerId"), "broker_address": _required(ext, "brokerAddress"),
        })
    if code == Req.CONTROLLER_GET_REPLICA_INFO:
        return WireCall("get_replica_info", {"broker_name": _required(ext, "brokerName")})
    if code == Req.CONTROLLER_GET_METADATA_INFO:
        return WireCall("get_metadata", {})
    if code == Req.CONTROLLER_GET_SYNC_STATE_DATA:
        names = _json_body(body, "get sync state data")
        if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
            raise WireRequestError("get sync state data: the body must be a list of broker names")
        return WireCall("get_sync_state_data", {"broker_names": names})
    if code == Req.CONTROLLER_GET_NEXT_BROKER_ID:
        return WireCall("get_next_broker_id", {"cluster_name": ext.get("clusterName", ""),
                                               "broker_name": _required(ext, "brokerName")})
    if code == Req.CONTROLLER_APPLY_BROKER_ID:
        return WireCall("apply_broker_id", {
            "cluster_name": ext.get("clusterName", ""), "broker_name": _required(ext, "brokerName"),
            "applied_broker_id": _int(ext, "appliedBrokerId"),
            "register_check_code": _required(ext, "registerCheckCode"),
        })
    if code == CLEAN_BROKER_DATA:
        raw_ids = ext.get("brokerControllerIdsToClean") or ""
        try:
            ids = [int(x) for x in raw_ids.split(";") if x.strip()] or None
        except ValueError:
            raise WireRequestError(f"Please set the option <brokerControllerIdsToClean> according to the "
                                   f"format: {raw_ids!r}") from None
        return WireCall("clean_broker_data", {"broker_name": _required(ext, "brokerName"), "broker_ids": ids,
                                              "clean_living_broker": _bool(ext, "isCleanLivingBroker")})
    raise KeyError(code)


@dataclass(frozen=True, slots=True)
class WireAnswer:
    code: int
    remark: str | None
    ext_fields: dict[str, str] | None
    body: bytes | None


def encode_result(result: ControllerResult, standard_json: bool = False) -> WireAnswer:
    """A result as RocketMQ's response: header fields as strings (nulls left out), body as fastjson."""
    ext = {k: ext_value(v) for k, v in result.header.items() if v is not None} or None
    body = None if result.body is None else fastjson.dumps(result.body, standard=standard_json)
    return WireAnswer(int(result.code), result.remark, ext, body)


def encode_broker_names(names: list[str]) -> bytes:
    """The body of GET_SYNC_STATE_DATA (a JSON list), as mqadmin sends it."""
    return json.dumps(names).encode()
