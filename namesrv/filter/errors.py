"""The errors of RocketMQ's SQL92 property filter: one for an expression that does not compile (a
client's subscription refused), one for a message it cannot be evaluated over (not delivered)."""

from __future__ import annotations


class FilterError(Exception):
    """Anything the property filter refuses."""


class FilterParseError(FilterError):
    """The expression is not valid SQL92 filter syntax, or RocketMQ refuses it when compiling
    (e.g. `a > 'x'`, `a BETWEEN 5 AND 1`, `NULL = a`). `position` is the 0-based character
    offset of the offending text, `line`/`column` its 1-based place."""

    def __init__(self, reason: str, expression: str, position: int) -> None:
        position = max(0, min(position, len(expression)))
        line = expression.count("\n", 0, position) + 1
        column = position - (expression.rfind("\n", 0, position) + 1) + 1
        super().__init__(f"Invalid MessageSelector: {reason} (line {line}, column {column})")
        self.reason = reason
        self.position = position
        self.line = line
        self.column = column


class FilterEvaluationError(FilterError):
    """The expression cannot be evaluated over this message (RocketMQ's runtime exception, e.g. a
    property "abc" compared with `a > 5`): the broker logs it and does not deliver the message."""
