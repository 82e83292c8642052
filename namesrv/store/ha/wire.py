"""Replication over the broker's remoting port: the HA_TRANSFER request and its answer, pure.

RocketMQ streams its commit log to a slave over a socket of its own (the master's haListenPort,
HAConnection / HAClient, with a protocol of its own). Here a slave keeps one remoting connection to
its master's client port and asks with one request code outside RocketMQ's ranges,
`BrokerRequestCode.HA_TRANSFER` (9001: RocketMQ 5.3 uses none between 3010 and 200050), with the
same long poll as the Ray transport (actors.broker.ha.service): the request is the slave's acknowledgement.

    request  extFields: slaveId, fromOffset, maxBytes, waitMs, and for a pipelined slave ackOffset
             and stream; no body
    answer   SUCCESS, extFields offset, masterMax, waitedMs, moved, confirmOffset (what the master's
             SyncStateSet holds: a controller-mode slave serves reads up to it); body: the records
             (none: nothing new within waitMs)
             SYSTEM_ERROR with remark "<error kind>: <text>" and masterMax when the master could not
             read (a ReplicationError the slave raises; it retries from its own end)

Values travel as decimal strings (RocketMQ's HashMap<String, String>); over a Ray call into the
pipeline they may be ints. A request that does not parse is refused with a clear error and changes
nothing (not even the slave's acknowledged offset).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from namesrv.protocol.codes import ResponseCode
from namesrv.protocol.types import InvalidInput

MAX_OFFSET = 2**63 - 1
MAX_WAIT_MS = 30_000
"""The longest wait a request may ask for (the master waits at most this long either way)."""
MAX_FIELD_CHARS = 20
"""A 64-bit decimal needs at most 19 digits (and a sign)."""


@dataclass(frozen=True, slots=True)
class TransferRequest:
    slave_id: int
    from_offset: int
    max_bytes: int
    wait_ms: int
    ack_offset: int | None = None
    stream: int = 0

    def ext_fields(self) -> dict[str, str]:
        """The request's extFields as strings."""
        ext = {"slaveId": str(self.slave_id), "fromOffset": str(self.from_offset),
               "maxBytes": str(self.max_bytes), "waitMs": str(self.wait_ms)}
        if self.ack_offset is not None:
            ext["ackOffset"] = str(self.ack_offset)
            ext["stream"] = str(self.stream)
        return ext


def _int_field(ext: Mapping[str, Any], name: str, low: int, high: int, required: bool = True) -> int | None:
    value = ext.get(name)
    if value is None:
        if required:
            raise InvalidInput(f"HA_TRANSFER: {name} is missing")
        return None
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise InvalidInput(f"HA_TRANSFER: {name} must be an integer, got {type(value).__name__}")
    if isinstance(value, str):
        text = value.strip()
        if len(text) > MAX_FIELD_CHARS or not text.lstrip("-").isdigit() or not text.isascii():
            raise InvalidInput(f"HA_TRANSFER: {name} must be a decimal integer, got {value[:40]!r}")
        value = int(text)
    if not low <= value <= high:
        raise InvalidInput(f"HA_TRANSFER: {name} {value} is outside [{low}, {high}]")
    return value


def parse_transfer_request(ext: Mapping[str, Any] | None, body: bytes | None) -> TransferRequest:
    """The request a slave sent; raises InvalidInput (nothing is changed) when it does not parse."""
    if not isinstance(ext, Mapping):
        raise InvalidInput("HA_TRANSFER: extFields must be a map")
    if body:
        raise InvalidInput(f"HA_TRANSFER takes no body, got {len(body)} bytes")
    slave_id = _int_field(ext, "slaveId", 1, 2**31 - 1)
    from_offset = _int_field(ext, "fromOffset", 0, MAX_OFFSET)
    max_bytes = _int_field(ext, "maxBytes", 1, 2**31 - 1)
    wait_ms = _int_field(ext, "waitMs", 0, MAX_WAIT_MS)
    ack_offset = _int_field(ext, "ackOffset", 0, MAX_OFFSET, required=False)
    stream = _int_field(ext, "stream", 0, MAX_OFFSET, required=ack_offset is not None)
    assert slave_id is not None and from_offset is not None and max_bytes is not None and wait_ms is not None
    return TransferRequest(slave_id, from_offset, max_bytes, wait_ms, ack_offset, stream or 0)


def transfer_answer(reply: Mapping[str, Any]) -> tuple[int, str | None, dict[str, str], bytes | None]:
    """HAMasterService.transfer's reply as (code, remark, extFields, body)."""
    if "error" in reply:
        ext = {"masterMax": str(reply["master_max"])} if "master_max" in reply else {}
        return ResponseCode.SYSTEM_ERROR, f"{reply['error']}: {reply['remark']}", ext, None
    data: bytes = reply["data"]
    ext = {"offset": str(reply["offset"]), "masterMax": str(reply["master_max"]),
           "waitedMs": f"{float(reply['waited_ms']):.3f}", "moved": "true" if reply.get("moved") else "false"}
    if reply.get("confirm_offset") is not None:
        ext["confirmOffset"] = str(reply["confirm_offset"])
    return ResponseCode.SUCCESS, None, ext, data or None


def parse_transfer_answer(code: int, remark: str | None, ext: Mapping[str, str] | None,
                          body: bytes | None) -> dict[str, Any]:
    """The master's answer in the shape of the Ray transport's reply (the slave handles both alike):
    {"offset", "data", "master_max", "waited_ms", "moved", "confirm_offset"} (None when the master
    did not say), or {"error", "remark"} when the master refused or the answer does not parse."""
    fields = ext or {}
    if code != ResponseCode.SUCCESS:
        kind, _, text = (remark or "").partition(": ")
        return {"error": kind or f"code {code}", "remark": text or (remark or "")}
    try:
        offset, master_max = int(fields["offset"]), int(fields["masterMax"])
        waited = float(fields.get("waitedMs", "0"))
        confirm = int(fields["confirmOffset"]) if "confirmOffset" in fields else None
    except (KeyError, ValueError) as e:
        return {"error": "BadAnswer", "remark": f"HA_TRANSFER answer without a valid {e}"}
    if offset < 0 or master_max < 0 or (confirm is not None and not 0 <= confirm <= master_max):
        return {"error": "BadAnswer", "remark": f"HA_TRANSFER answer at offset {offset}, master end {master_max}, "
                                                f"confirm offset {confirm}"}
    return {"offset": offset, "data": body or b"", "master_max": master_max, "waited_ms": waited,
            "moved": fields.get("moved") == "true", "confirm_offset": confirm}


def peer_call_ext(call: str, slave_id: int) -> dict[str, str]:
    """What a replica's Ray call other than a transfer (`ha_connect`, `ha_metadata`,
    `ha_epoch_entries`) signs: checked as HA_TRANSFER is, so only a broker or admin account may make
    it when ACL is on (a transfer signs its request's own fields, `TransferRequest.ext_fields`)."""
    return {"haCall": call, "slaveId": str(slave_id)}
