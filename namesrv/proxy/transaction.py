"""Transactions through the proxy: the transaction id a SendMessage answers (it carries where the half
is, so any proxy can end it: RocketMQ's proxy encodes the broker and offsets the same way), the
END_TRANSACTION header an EndTransaction becomes, and the RecoverOrphanedTransactionCommand a
broker's CHECK_TRANSACTION_STATE becomes on the producer's Telemetry stream."""

from __future__ import annotations

import base64
import re
import zlib
from dataclasses import dataclass
from typing import Any

from namesrv.protocol.message.decoder import MessageExt
from namesrv.proxy.status import ProxyError

COMMIT_TYPE, ROLLBACK_TYPE, NOT_TYPE = 8, 12, 0
"""MessageSysFlag's transaction values END_TRANSACTION carries."""
RESOLUTION_TO_TYPE = {1: COMMIT_TYPE, 2: ROLLBACK_TYPE}
"""v2 TransactionResolution COMMIT / ROLLBACK; anything else leaves the half unknown."""
SOURCE_SERVER_CHECK = 2
_BROKER = re.compile(r"[A-Za-z0-9_.%|-]{1,255}")
_HIDDEN_PROPERTIES = frozenset({"TAGS", "KEYS", "UNIQ_KEY", "TRAN_MSG", "PGROUP", "REAL_TOPIC", "REAL_QID",
                                "__SHARDINGKEY", "TIMER_DELIVER_MS", "RECONSUME_TIME", "__BORNHOST",
                                "BORN_TIMESTAMP", "TRACE_CONTEXT", "CHECK_IMMUNITY_TIME_IN_SECONDS",
                                "__transactionId__", "TRANSACTION_CHECK_TIMES", "MSG_REGION", "TRACE_ON",
                                "CLUSTER"})
"""Remoting properties that travel as v2 system properties (or not at all), not as user properties."""


@dataclass(frozen=True)
class HalfLocation:
    broker_name: str
    commit_log_offset: int
    tran_state_table_offset: int

    def encode(self) -> str:
        raw = f"{self.commit_log_offset}:{self.tran_state_table_offset}:{self.broker_name}".encode()
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_transaction_id(transaction_id: str) -> HalfLocation:
    """The half a transaction id names, or INVALID_TRANSACTION_ID."""
    if not transaction_id or not transaction_id.strip():
        raise ProxyError("INVALID_TRANSACTION_ID", "transaction id cannot be empty")
    try:
        raw = base64.urlsafe_b64decode(transaction_id + "=" * (-len(transaction_id) % 4)).decode()
        clo, tsto, broker = raw.split(":", 2)
        if not (clo.isdigit() and tsto.isdigit() and clo.isascii() and tsto.isascii()) or not _BROKER.fullmatch(broker):
            raise ValueError(raw)
        return HalfLocation(broker, int(clo), int(tsto))
    except (ValueError, UnicodeDecodeError):
        raise ProxyError("INVALID_TRANSACTION_ID", f"transaction id {transaction_id[:80]!r} is not one this proxy "
                                                   "gave out") from None


def end_transaction_header(topic: str, half: HalfLocation, message_id: str, resolution: int,
                           from_check: bool) -> dict[str, str]:
    """END_TRANSACTION's header (producer group = topic, as the proxy's sends)."""
    return {"topic": topic, "producerGroup": topic, "tranStateTableOffset": str(half.tran_state_table_offset),
            "commitLogOffset": str(half.commit_log_offset),
            "commitOrRollback": str(RESOLUTION_TO_TYPE.get(resolution, NOT_TYPE)),
            "fromTransactionCheck": "true" if from_check else "false", "msgId": message_id,
            "transactionId": message_id}


def _timestamp(ms: int) -> str:
    """A Timestamp in protobuf's JSON form."""
    import datetime as dt

    t = dt.datetime.fromtimestamp(max(ms, 0) / 1000, tz=dt.UTC)
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"


def v2_message(msg: MessageExt, message_type: str) -> dict[str, Any]:
    """A stored message as a v2 Message (GrpcConverter.buildMessage), in protobuf's JSON form."""
    props = msg.properties
    sp: dict[str, Any] = {
        "message_id": props.get("UNIQ_KEY") or msg.msg_id,
        "body_digest": {"type": "CRC32", "checksum": f"{zlib.crc32(msg.body) & 0xFFFFFFFF:08X}"},
        "body_encoding": "IDENTITY", "message_type": message_type,
        "born_timestamp": _timestamp(msg.born_timestamp), "born_host": props.get("__BORNHOST", msg.born_host),
        "store_timestamp": _timestamp(msg.store_timestamp), "store_host": msg.store_host,
        "queue_id": msg.queue_id, "queue_offset": msg.queue_offset, "delivery_attempt": msg.reconsume_times + 1,
    }
    if props.get("TAGS"):
        sp["tag"] = props["TAGS"]
    if msg.keys:
        sp["keys"] = msg.keys
    if props.get("__SHARDINGKEY"):
        sp["message_group"] = props["__SHARDINGKEY"]
    if props.get("TIMER_DELIVER_MS", "").isdigit():
        sp["delivery_timestamp"] = _timestamp(int(props["TIMER_DELIVER_MS"]))
    if props.get("TRACE_CONTEXT"):
        sp["trace_context"] = props["TRACE_CONTEXT"]
    return {"topic": {"name": msg.topic}, "body": base64.b64encode(msg.body).decode(),
            "user_properties": {k: v for k, v in props.items() if k not in _HIDDEN_PROPERTIES},
            "system_properties": sp}


def recover_command(ext: dict[str, str], half: MessageExt) -> dict[str, Any]:
    """RecoverOrphanedTransactionCommand for a broker's CHECK_TRANSACTION_STATE (its header `ext`,
    its body decoded to `half`); a header without the offsets raises ProxyError."""
    try:
        loc = HalfLocation(str(ext.get("brokerName", "")), int(ext["commitLogOffset"]),
                           int(ext["tranStateTableOffset"]))
    except (KeyError, ValueError):
        raise ProxyError("BAD_REQUEST", f"check-back header without offsets: {ext!r}"[:200]) from None
    if not _BROKER.fullmatch(loc.broker_name):
        raise ProxyError("BAD_REQUEST", "check-back header without a broker name")
    return {"message": v2_message(half, "TRANSACTION"), "transaction_id": loc.encode()}
