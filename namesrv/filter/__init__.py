"""RocketMQ's SQL92 property filter (brokers with `enable_property_filter`): a consumer subscribes
with an expression over message properties, e.g. `a > 5 AND region IN ('eu', 'us')`, and gets only
the messages for which it is TRUE.

`compile_sql92(text)` parses (with a Lark LALR grammar, see grammar.py) and checks an expression as
RocketMQ's SelectorParser does, caching the result by text; `SqlFilter.matches(properties)`
evaluates it over a message's properties (all strings) with RocketMQ's semantics (nodes.py,
values.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache

from namesrv.filter.compiler import MAX_DEPTH, MAX_EXPRESSION_CHARS, parse_expression
from namesrv.filter.errors import FilterError, FilterEvaluationError, FilterParseError
from namesrv.filter.nodes import Expr
from namesrv.filter.values import Value

SQL92 = "SQL92"
TAG = "TAG"
CACHE_SIZE = 256
"""Compiled expressions (and refusals) kept, by expression text (RocketMQ keeps 100)."""

__all__ = [
    "CACHE_SIZE", "MAX_DEPTH", "MAX_EXPRESSION_CHARS", "SQL92", "TAG", "FilterError", "FilterEvaluationError",
    "FilterParseError", "SqlFilter", "compile_sql92", "is_tag_type",
]


def is_tag_type(expression_type: str | None) -> bool:
    """ExpressionType.isTagType: no type, an empty one or TAG."""
    return expression_type is None or expression_type in ("", TAG)


@dataclass(frozen=True, slots=True)
class SqlFilter:
    expression: str
    root: Expr

    def evaluate(self, properties: Mapping[str, str]) -> Value:
        """TRUE, FALSE or None (unknown); raises FilterEvaluationError where RocketMQ throws."""
        return self.root.evaluate(properties)

    def matches(self, properties: Mapping[str, str]) -> bool:
        """Deliver the message? Only when the expression is TRUE; an evaluation error is a no, as
        in RocketMQ's ExpressionMessageFilter."""
        try:
            return self.root.evaluate(properties) is True
        except FilterEvaluationError:
            return False


@lru_cache(maxsize=CACHE_SIZE)
def _compiled(expression: str) -> SqlFilter | FilterParseError:
    try:
        return SqlFilter(expression, parse_expression(expression))
    except FilterParseError as e:
        return e


def compile_sql92(expression: str) -> SqlFilter:
    """The compiled filter for `expression`; raises FilterParseError if it is not a valid one."""
    if len(expression) > MAX_EXPRESSION_CHARS:  # not parsed, not cached
        parse_expression(expression)
    result = _compiled(expression)
    if isinstance(result, FilterParseError):
        raise result.with_traceback(None)
    return result
