"""Constrained value types of the protocol, declared once, and the one way to check a loose value.

Models (headers, topic configs, register bodies) use these types as field annotations; code that
holds a single loose value (a topic a broker was sent, a name from the CLI) calls :func:`check`.
Either way a bad value fails with :class:`InvalidInput` (or pydantic's ValidationError inside a
model), worded by :func:`describe_errors` so a person can act on it.
"""

from __future__ import annotations

from functools import cache
from typing import Annotated, Any, TypeVar

from pydantic import Field, StringConstraints, TypeAdapter, ValidationError

from namesrv.protocol.constants import (
    GROUP_MAX_LENGTH,
    MAX_QUEUE_NUMS,
    NAME_MAX_LENGTH,
    NAME_REGEX,
    PERM_ALL,
    TOPIC_MAX_LENGTH,
    TOPIC_REGEX,
    TOPIC_SYS_FLAG_MAX,
)

T = TypeVar("T")


class InvalidInput(ValueError):
    """A request field is malformed; nothing was changed. `kind` is pydantic's error type when a
    constrained type refused the value (e.g. "string_too_long")."""

    def __init__(self, message: str, kind: str | None = None) -> None:
        super().__init__(message)
        self.kind = kind


TopicName = Annotated[str, StringConstraints(min_length=1, max_length=TOPIC_MAX_LENGTH, pattern=TOPIC_REGEX)]
"""A topic name: RocketMQ's ^[%|a-zA-Z0-9_-]+$, at most 127 characters."""

GroupName = Annotated[str, StringConstraints(min_length=1, max_length=GROUP_MAX_LENGTH, pattern=TOPIC_REGEX)]
"""A producer or consumer group: the topic rule, at most 255 characters."""

Name = Annotated[str, StringConstraints(min_length=1, max_length=NAME_MAX_LENGTH, pattern=NAME_REGEX)]
"""A broker, cluster, address or namespace name."""

QueueNums = Annotated[int, Field(ge=0, le=MAX_QUEUE_NUMS)]
PermValue = Annotated[int, Field(ge=0, le=PERM_ALL)]
"""Any combination of READ=4, WRITE=2, INHERIT=1."""
TopicSysFlag = Annotated[int, Field(ge=0, le=TOPIC_SYS_FLAG_MAX)]
BrokerId = Annotated[int, Field(ge=0, le=2**31)]
"""0 is the master of a broker group, anything else a slave."""
Version = Annotated[int, Field(ge=0, le=2**62)]


def _describe_one(err: Any) -> str:
    """One pydantic error as a sentence: 'is blank', 'must be within [0, 1024], got 2000', ..."""
    kind, ctx, got = err["type"], err.get("ctx") or {}, err.get("input")
    if kind == "string_type":
        return f"must be a string, got {type(got).__name__}"
    if kind == "string_too_short":
        return "is blank"
    if kind == "string_too_long":
        return f"is longer than {ctx.get('max_length')} characters"
    if kind == "string_pattern_mismatch":
        return f"{str(got)[:60]!r} has characters outside {ctx.get('pattern')}"
    if kind in ("int_type", "int_parsing", "int_from_float"):
        return f"must be an integer, got {type(got).__name__}"
    if kind in ("greater_than_equal", "less_than_equal", "greater_than", "less_than"):
        return f"is out of range ({err['msg'].lower()}), got {got!r}"
    if kind == "missing":
        return "is missing"
    if kind == "extra_forbidden":
        return "is not a known field"
    return str(err["msg"])


def describe_errors(e: ValidationError, what: str | None = None) -> str:
    """Every error of a ValidationError as '<field> <problem>', joined by '; '."""
    parts = []
    for err in e.errors(include_url=False):
        where = ".".join(str(p) for p in err["loc"]) or what or "value"
        if what and err["loc"]:
            where = f"{what}.{where}"
        parts.append(f"{where} {_describe_one(err)}")
    return "; ".join(parts)


@cache
def _adapter(tp: Any) -> TypeAdapter[Any]:
    return TypeAdapter(tp)


def check(tp: Any, value: object, what: str) -> Any:
    """`value` validated against the constrained type or model `tp` strictly (no "8" for 8), or
    :class:`InvalidInput` naming `what` and the problem."""
    try:
        return _adapter(tp).validate_python(value, strict=True)
    except ValidationError as e:
        raise InvalidInput(describe_errors(e, what), e.errors()[0]["type"]) from None


def check_topic(topic: object) -> str:
    result: str = check(TopicName, topic, "topic")
    return result


def check_name(value: object, what: str) -> str:
    result: str = check(Name, value, what)
    return result
