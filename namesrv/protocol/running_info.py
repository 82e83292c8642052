"""The body of GET_CONSUMER_RUNNING_INFO (307): RocketMQ's ConsumerRunningInfo, what a consumer
says about itself (its properties, subscriptions, each queue's process state, per-topic rates).

`to_wire()` is what `fastjson.dumps` writes as Java's fastjson does (mqTable keyed by MessageQueue
objects, keys sorted, a null jstack left out); `from_wire()` reads what `keyed_json.loads_keyed`
gives back, from any client (a field a client leaves out is empty). The process-queue and status
entries stay the client's own objects: each client fills what it has, and nothing is made up for
the rest. `format_string()` is the text mqadmin consumerStatus prints (RocketMQ's formatString).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from namesrv.protocol.admin_bodies import mq_of, table_of
from namesrv.protocol.fastjson import JsonError
from namesrv.protocol.keyed_json import loads_keyed
from namesrv.protocol.models import MessageQueue
from namesrv.protocol.types import InvalidInput

PROP_NAMESERVER_ADDR = "PROP_NAMESERVER_ADDR"
PROP_THREADPOOL_CORE_SIZE = "PROP_THREADPOOL_CORE_SIZE"
PROP_CONSUME_ORDERLY = "PROP_CONSUMEORDERLY"
PROP_CONSUME_TYPE = "PROP_CONSUME_TYPE"
PROP_CLIENT_VERSION = "PROP_CLIENT_VERSION"
PROP_CONSUMER_START_TIMESTAMP = "PROP_CONSUMER_START_TIMESTAMP"
"""ConsumerRunningInfo's property names."""


def _java_text(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None else str(value)


@dataclass(slots=True)
class ConsumerRunningInfo:
    properties: dict[str, str] = field(default_factory=dict)
    subscription_set: list[dict[str, Any]] = field(default_factory=list)
    mq_table: dict[MessageQueue, dict[str, Any]] = field(default_factory=dict)
    """Each queue's ProcessQueueInfo (commitOffset, cachedMsgCount, lastPullTimestamp, ...)."""
    mq_pop_table: dict[MessageQueue, dict[str, Any]] = field(default_factory=dict)
    status_table: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Per topic: ConsumeStatus (pullRT, pullTPS, consumeRT, consumeOKTPS, ...)."""
    user_consumer_info: dict[str, str] = field(default_factory=dict)
    jstack: str | None = None

    def to_wire(self) -> dict[str, Any]:
        wire: dict[str, Any] = {
            "mqPopTable": dict(self.mq_pop_table), "mqTable": dict(self.mq_table),
            "properties": dict(self.properties), "statusTable": dict(self.status_table),
            "subscriptionSet": list(self.subscription_set), "userConsumerInfo": dict(self.user_consumer_info)}
        if self.jstack is not None:
            wire["jstack"] = self.jstack
        return wire

    @classmethod
    def from_wire(cls, d: object) -> ConsumerRunningInfo:
        if not isinstance(d, Mapping):
            raise InvalidInput(f"a ConsumerRunningInfo is a JSON object, not {type(d).__name__}")
        subs = d.get("subscriptionSet") or []
        if not isinstance(subs, list) or not all(isinstance(s, dict) for s in subs):
            raise InvalidInput("subscriptionSet is not a list of objects")
        jstack = d.get("jstack")
        return cls({str(k): _java_text(v) for k, v in table_of(d.get("properties"), "properties").items()},
                   [dict(s) for s in subs], _queues(d.get("mqTable"), "mqTable"),
                   _queues(d.get("mqPopTable"), "mqPopTable"), _objects(d.get("statusTable"), "statusTable"),
                   {str(k): _java_text(v) for k, v in table_of(d.get("userConsumerInfo"), "userConsumerInfo").items()},
                   None if jstack is None else str(jstack))

    def format_string(self) -> str:
        """The text of RocketMQ's ConsumerRunningInfo.formatString (its sections and columns)."""
        out = ["#Consumer Properties#"]
        out += [f"{k:<40}: {v}" for k, v in self.properties.items()]
        out += ["", "", "#Consumer Subscription#"]
        for i, s in enumerate(sorted(self.subscription_set, key=lambda s: str(s.get("topic"))), 1):
            out.append(f"{i:03d} Topic: {s.get('topic', '')!s:<40} ClassFilter: "
                       f"{_java_text(s.get('classFilterMode', False)):<8} SubExpression: {s.get('subString', '')}")
        head = f"{'#Topic':<64}  {'#Broker Name':<32}  {'#QID':<4}  "
        out += ["", "", "#Consumer Offset#", f"{head}{'#Consumer Offset':<20}"]
        queues = sorted(self.mq_table.items(), key=lambda kv: (kv[0].topic, kv[0].broker_name, kv[0].queue_id))
        for mq, pq in queues:
            offset = _java_text(pq.get("commitOffset"))
            out.append(f"{mq.topic:<32}  {mq.broker_name:<32}  {mq.queue_id:<4}  {offset:<20}")
        out += ["", "", "#Consumer MQ Detail#", f"{head}#ProcessQueueInfo"]
        for mq, pq in queues:
            out.append(f"{mq.topic:<64}  {mq.broker_name:<32}  {mq.queue_id:<4}  {_process_queue_text(pq)}")
        out += ["", "", "#Consumer RT&TPS#", f"{'#Topic':<64}  {'#Pull RT':>14} {'#Pull TPS':>14} {'#Consume RT':>14} "
                f"{'#ConsumeOK TPS':>14} {'#ConsumeFailed TPS':>18} {'#ConsumeFailedMsgsInHour':>25}"]
        for topic, st in sorted(self.status_table.items()):
            rates = [_float(st.get(k)) for k in ("pullRT", "pullTPS", "consumeRT", "consumeOKTPS")]
            out.append(f"{topic:<32}  " + " ".join(f"{r:14.2f}" for r in rates)
                       + f" {_float(st.get('consumeFailedTPS')):18.2f} {int(_float(st.get('consumeFailedMsgs'))):25d}")
        out += ["", "", "#User Consume Info#"] + [f"{k:<40}: {v}" for k, v in self.user_consumer_info.items()]
        if self.jstack is not None:
            out += ["", "", "#Consumer jstack#", self.jstack]
        return "\n".join(out) + "\n"


def _process_queue_text(pq: Mapping[str, Any]) -> str:
    """ProcessQueueInfo's toString: the fields the client sent, in its order."""
    return "ProcessQueueInfo [" + ", ".join(f"{k}={_java_text(v)}" for k, v in pq.items()) + "]"


def _float(value: object) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0


def _objects(raw: object, what: str) -> dict[str, dict[str, Any]]:
    table = table_of(raw, what)
    if not all(isinstance(v, dict) for v in table.values()):
        raise InvalidInput(f"{what} values are not objects")
    return {str(k): dict(v) for k, v in table.items()}


def _queues(raw: object, what: str) -> dict[MessageQueue, dict[str, Any]]:
    table = table_of(raw, what)
    if not all(isinstance(v, dict) for v in table.values()):
        raise InvalidInput(f"{what} values are not objects")
    return {mq_of(k): dict(v) for k, v in table.items()}


def running_info_problem(body: bytes | None) -> str | None:
    """Why `body` is not a ConsumerRunningInfo (None: it is one)."""
    if not body:
        return "no body"
    try:
        ConsumerRunningInfo.from_wire(loads_keyed(body))
    except (JsonError, InvalidInput) as e:
        return str(e)[:300]
    return None
