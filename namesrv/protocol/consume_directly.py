"""The body of CONSUME_MESSAGE_DIRECTLY's answer (309): RocketMQ's ConsumeMessageDirectlyResult, what
a client's listener did with a message handed to it once (`order`: an orderly listener ran it;
`autoCommit`: the orderly context's flag, true for a concurrent one; `consumeResult`: a CMResult;
`remark`: why it threw; `spentTimeMills`: how long the listener took, RocketMQ's spelling).

`to_wire()` is what `fastjson.dumps` writes as Java's fastjson does (keys sorted, a null remark or
result left out); `from_wire()` reads any client's JSON and refuses what is not one (InvalidInput);
`to_string()` is the Java toString that mqadmin queryMsgById prints.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from namesrv.protocol import fastjson
from namesrv.protocol.types import InvalidInput


class CMResult(enum.Enum):
    """RocketMQ's CMResult: the listener's answer as the admin sees it."""

    CR_SUCCESS = "CR_SUCCESS"
    CR_LATER = "CR_LATER"
    CR_ROLLBACK = "CR_ROLLBACK"
    CR_COMMIT = "CR_COMMIT"
    CR_THROW_EXCEPTION = "CR_THROW_EXCEPTION"
    CR_RETURN_NULL = "CR_RETURN_NULL"


def _java(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, enum.Enum):
        return str(value.value)
    return "null" if value is None else str(value)


@dataclass(frozen=True, slots=True)
class ConsumeMessageDirectlyResult:
    order: bool = False
    auto_commit: bool = True
    consume_result: CMResult | None = None
    remark: str | None = None
    spent_time_mills: int = 0

    def to_wire(self) -> dict[str, Any]:
        wire: dict[str, Any] = {"autoCommit": self.auto_commit, "order": self.order,
                                "spentTimeMills": self.spent_time_mills}
        if self.consume_result is not None:
            wire["consumeResult"] = self.consume_result.value
        if self.remark is not None:
            wire["remark"] = self.remark
        return wire

    def encode(self) -> bytes:
        return fastjson.dumps(self.to_wire())

    @classmethod
    def from_wire(cls, d: object) -> ConsumeMessageDirectlyResult:
        if not isinstance(d, Mapping):
            raise InvalidInput(f"a ConsumeMessageDirectlyResult is a JSON object, not {type(d).__name__}")
        order, auto_commit = d.get("order", False), d.get("autoCommit", True)
        if not isinstance(order, bool) or not isinstance(auto_commit, bool):
            raise InvalidInput("order and autoCommit are booleans")
        raw = d.get("consumeResult")
        try:
            result = None if raw is None else CMResult(raw)
        except ValueError:
            raise InvalidInput(f"consumeResult {str(raw)[:40]!r} is not a CMResult") from None
        remark = d.get("remark")
        if remark is not None and not isinstance(remark, str):
            raise InvalidInput("remark is not a string")
        spent = d.get("spentTimeMills", 0)
        if not isinstance(spent, int) or isinstance(spent, bool):
            raise InvalidInput("spentTimeMills is not a whole number")
        return cls(order, auto_commit, result, remark, spent)

    @classmethod
    def decode(cls, body: bytes | None) -> ConsumeMessageDirectlyResult:
        """The result of an answer's body (InvalidInput: no body, not JSON, or not one)."""
        if not body:
            raise InvalidInput("no body")
        try:
            return cls.from_wire(fastjson.loads(body))
        except fastjson.JsonError as e:
            raise InvalidInput(f"body is not JSON: {e}") from None

    def to_string(self) -> str:
        """ConsumeMessageDirectlyResult.toString, as mqadmin queryMsgById -g -d prints it."""
        return (f"ConsumeMessageDirectlyResult [order={_java(self.order)}, autoCommit={_java(self.auto_commit)}, "
                f"consumeResult={_java(self.consume_result)}, remark={_java(self.remark)}, "
                f"spentTimeMills={self.spent_time_mills}]")


def direct_result_problem(body: bytes | None) -> str | None:
    """Why `body` is not a ConsumeMessageDirectlyResult (None: it is one)."""
    try:
        ConsumeMessageDirectlyResult.decode(body)
    except InvalidInput as e:
        return str(e)[:300]
    return None
