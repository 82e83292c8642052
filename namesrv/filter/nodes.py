"""Compiled filter expressions and their evaluation over a message's properties, with RocketMQ's
three-valued logic: a missing property is null, a comparison with null is null (unknown), AND/OR
treat null as SQL does, and only a result of exactly TRUE delivers the message.

Each class mirrors one of RocketMQ's expression classes (filter/expression/*.java); `is_boolean`
marks the ones that are BooleanExpressions there, which the compile-time checks look at.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from namesrv.filter.values import Value, compare, negate, parse_java_double

Properties = Mapping[str, str]


class Expr:
    is_boolean = False

    def evaluate(self, props: Properties) -> Value:
        raise NotImplementedError


@dataclass(frozen=True, slots=True)
class Constant(Expr):
    """A literal: a string, Integer, Long or Double (ConstantExpression)."""

    value: Value

    def evaluate(self, props: Properties) -> Value:
        return self.value


@dataclass(frozen=True, slots=True)
class BooleanConstant(Constant):
    """TRUE, FALSE or NULL (BooleanConstantExpression)."""

    is_boolean = True


@dataclass(frozen=True, slots=True)
class Property(Expr):
    name: str

    def evaluate(self, props: Properties) -> Value:
        return props.get(self.name)


@dataclass(frozen=True, slots=True)
class Negate(Expr):
    operand: Expr

    def evaluate(self, props: Properties) -> Value:
        return negate(self.operand.evaluate(props))


@dataclass(frozen=True, slots=True)
class BooleanCast(Expr):
    """A bare property used as a condition: TRUE only if it is a Boolean, which a property (a
    string) never is; null when missing."""

    operand: Expr
    is_boolean = True

    def evaluate(self, props: Properties) -> Value:
        v = self.operand.evaluate(props)
        if v is None:
            return None
        return v if isinstance(v, bool) else False


@dataclass(frozen=True, slots=True)
class Not(Expr):
    operand: Expr
    is_boolean = True

    def evaluate(self, props: Properties) -> Value:
        v = self.operand.evaluate(props)
        return None if v is None else not v


@dataclass(frozen=True, slots=True)
class _Junction(Expr):
    """SQL's three-valued AND / OR over n operands: the first operand equal to `decisive` decides
    (the rest unevaluated), else null if any operand is null, else `not decisive`."""

    operands: tuple[Expr, ...]
    is_boolean = True
    decisive = False

    def evaluate(self, props: Properties) -> Value:
        unknown = False
        for operand in self.operands:
            v = operand.evaluate(props)
            if v is self.decisive:
                return self.decisive
            unknown = unknown or v is None
        return None if unknown else not self.decisive


class And(_Junction):
    """a AND b AND ...: FALSE at the first FALSE, else null if any is null, else TRUE."""

    __slots__ = ()
    decisive = False


class Or(_Junction):
    """a OR b OR ...: TRUE at the first TRUE, else null if any is null, else FALSE."""

    __slots__ = ()
    decisive = True


@dataclass(frozen=True, slots=True)
class Equal(Expr):
    """`=` and IS NULL: null if only the left side is null, FALSE if only the right is, TRUE if
    both are; otherwise compared (a string against a number is parsed as that number)."""

    left: Expr
    right: Expr
    is_boolean = True

    def evaluate(self, props: Properties) -> Value:
        lv = self.left.evaluate(props)
        rv = self.right.evaluate(props)
        if lv is None or rv is None:
            if lv is None and rv is None:
                return True
            return None if lv is None else False
        return compare(lv, rv) == 0


Order = Literal[">", ">=", "<", "<="]


def ordered(op: Order, lv: Value, rv: Value) -> Value:
    """lv op rv for `>`, `>=`, `<`, `<=`: null if a side is null; two strings are both parsed as
    doubles; otherwise converted as `=` converts them."""
    if lv is None or rv is None:
        return None
    if isinstance(lv, str) and isinstance(rv, str):
        sign = compare(parse_java_double(lv), parse_java_double(rv))
    else:
        sign = compare(lv, rv)
    if op == ">":
        return sign > 0
    if op == ">=":
        return sign >= 0
    if op == "<":
        return sign < 0
    return sign <= 0


@dataclass(frozen=True, slots=True)
class Ordering(Expr):
    op: Order
    left: Expr
    right: Expr
    is_boolean = True

    def evaluate(self, props: Properties) -> Value:
        lv = self.left.evaluate(props)
        if lv is None:  # the right side is not evaluated
            return None
        return ordered(self.op, lv, self.right.evaluate(props))


@dataclass(frozen=True, slots=True)
class Between(Expr):
    """value [NOT] BETWEEN low AND high: RocketMQ's `value >= low AND value <= high` (NOT: `value <
    low OR value > high`), in that order and with that short-circuit, but the value is evaluated
    once (evaluation is pure), so nested BETWEENs cost linear, not exponential, time."""

    value: Expr
    low: Expr
    high: Expr
    negated: bool
    is_boolean = True

    def evaluate(self, props: Properties) -> Value:
        v = self.value.evaluate(props)
        first = None if v is None else ordered("<" if self.negated else ">=", v, self.low.evaluate(props))
        if first is self.negated:  # TRUE decides the NOT BETWEEN's OR, FALSE the BETWEEN's AND
            return first
        second = None if v is None else ordered(">" if self.negated else "<=", v, self.high.evaluate(props))
        if second is self.negated:
            return second
        return None if first is None or second is None else not self.negated


TextMatch = Literal["CONTAINS", "STARTSWITH", "ENDSWITH"]


@dataclass(frozen=True, slots=True)
class StringMatch(Expr):
    """[NOT] CONTAINS / STARTSWITH / ENDSWITH 'text' (RocketMQ 5.x): FALSE, never null, when the
    value is missing or not a string or the text is empty, even with NOT."""

    kind: TextMatch
    negated: bool
    operand: Expr
    text: str
    is_boolean = True

    def evaluate(self, props: Properties) -> Value:
        if not self.text:
            return False
        v = self.operand.evaluate(props)
        if not isinstance(v, str):
            return False
        if self.kind == "CONTAINS":
            found = self.text in v
        elif self.kind == "STARTSWITH":
            found = v.startswith(self.text)
        else:
            found = v.endswith(self.text)
        return found != self.negated


@dataclass(frozen=True, slots=True)
class In(Expr):
    """property [NOT] IN ('a', 'b'): null when the property is missing."""

    operand: Property
    values: frozenset[str]
    negated: bool
    is_boolean = True

    def evaluate(self, props: Properties) -> Value:
        v = self.operand.evaluate(props)
        if not isinstance(v, str):
            return None
        return (v in self.values) != self.negated
