"""From an expression string to a compiled filter: Lark parses it with the grammar, then the tree
is built into nodes with the checks RocketMQ makes while parsing (SelectorParser's
asBooleanExpression and ComparisonExpression's create* methods), each refusal a FilterParseError
that points at the offending text.
"""

from __future__ import annotations

import sys
from typing import cast

from lark import Token, Tree
from lark.exceptions import LarkError, UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken

from namesrv.filter.errors import FilterError, FilterParseError
from namesrv.filter.grammar import TERMINAL_NAMES, parser
from namesrv.filter.nodes import (
    And,
    Between,
    BooleanCast,
    BooleanConstant,
    Constant,
    Equal,
    Expr,
    In,
    Negate,
    Not,
    Or,
    Order,
    Ordering,
    Property,
    StringMatch,
    TextMatch,
)
from namesrv.filter.values import DOUBLE_MIN_VALUE, INT_MAX, LONG_MAX, JInt, JLong, compare

MAX_EXPRESSION_CHARS = 8192
"""Longer expressions are refused before parsing (RocketMQ has no limit; real ones are short)."""
MAX_DEPTH = 64
"""Deeper nesting (of parentheses, NOT, unary minus, chained comparisons) is refused: evaluation
recurses once per level. AND / OR chains of any length are one level."""

ORDERINGS: dict[str, Order] = {"gt": ">", "ge": ">=", "lt": "<", "le": "<="}
TEXT_MATCHES: dict[str, tuple[TextMatch, bool]] = {
    "contains": ("CONTAINS", False), "not_contains": ("CONTAINS", True),
    "startswith": ("STARTSWITH", False), "not_startswith": ("STARTSWITH", True),
    "endswith": ("ENDSWITH", False), "not_endswith": ("ENDSWITH", True),
}

Node = Tree[Token] | Token


def parse_expression(text: str) -> Expr:
    """Compile a SQL92 filter expression; raises FilterParseError (nothing else) when it is not one."""
    if len(text) > MAX_EXPRESSION_CHARS:
        raise FilterParseError(f"expression longer than {MAX_EXPRESSION_CHARS} characters", text, MAX_EXPRESSION_CHARS)
    try:
        tree = parser().parse(text)
    except UnexpectedInput as e:
        raise _syntax_error(e, text) from None
    except LarkError as e:  # any other refusal of the parser is still a bad expression
        raise FilterParseError(str(e), text, 0) from None
    _check_depth(tree, text)
    return _Builder(text).condition(tree)


def _syntax_error(e: UnexpectedInput, text: str) -> FilterParseError:
    if isinstance(e, UnexpectedCharacters):
        at = e.pos_in_stream or 0
        if text[at:at + 1] == "'":
            return FilterParseError("string literal not closed with '", text, at)
        return FilterParseError(f"unexpected character {text[at:at + 1]!r}", text, at)
    if isinstance(e, UnexpectedToken):
        token = e.token
        at = len(text) if token.type == "$END" else (token.start_pos or 0)
        found = "end of expression" if token.type == "$END" else f"`{token}`"
        expected = sorted(TERMINAL_NAMES.get(name, name) for name in (e.accepts or e.expected))
        return FilterParseError(f"unexpected {found}, expected {', '.join(expected)}", text, at)
    if isinstance(e, UnexpectedEOF):
        return FilterParseError("unexpected end of expression", text, len(text))
    return FilterParseError(str(e), text, 0)


def _check_depth(tree: Node, text: str) -> None:
    """Refuse nesting deeper than MAX_DEPTH, walking without recursion."""
    stack: list[tuple[Node, int]] = [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise FilterParseError(f"expression nested deeper than {MAX_DEPTH} levels", text, _pos(node))
        if isinstance(node, Tree):
            stack.extend((child, depth + 1) for child in node.children)


def _pos(node: Node) -> int:
    if isinstance(node, Token):
        return node.start_pos or 0
    return node.meta.start_pos if not node.meta.empty else 0


class _Builder:
    """Builds the node tree, making RocketMQ's parse-time checks."""

    def __init__(self, text: str) -> None:
        self.text = text

    def fail(self, reason: str, at: Node) -> FilterParseError:
        return FilterParseError(reason, self.text, _pos(at))

    def condition(self, node: Node) -> Expr:
        """asBooleanExpression: a condition, or a bare property cast to one."""
        expr = self.build(node)
        if expr.is_boolean:
            return expr
        if isinstance(expr, Property):
            return BooleanCast(expr)
        raise self.fail(f"{self.source(node)} is not a condition", node)

    def source(self, node: Node) -> str:
        """The text of `node`, quoted for a message."""
        if isinstance(node, Token):
            return f"`{node}`"
        if node.meta.empty:
            return "the expression"
        return f"`{self.text[node.meta.start_pos:node.meta.end_pos]}`"

    def build(self, node: Node) -> Expr:
        if isinstance(node, Token):  # only a bare literal reaches here as a token
            raise self.fail(f"unexpected {self.source(node)}", node)
        kind = str(node.data)
        kids = node.children
        if kind == "literal":
            return self.literal(cast(Token, kids[0]))
        if kind == "property":
            return Property(str(kids[0]))
        if kind == "or_expr":
            return Or(tuple(self.condition(k) for k in kids))
        if kind == "and_expr":
            return And(tuple(self.condition(k) for k in kids))
        if kind == "not_":
            return Not(self.condition(kids[0]))
        if kind == "negate":
            return Negate(self.build(kids[0]))
        if kind in ("eq", "ne"):
            equal = self.equal(kids[0], kids[1])
            return equal if kind == "eq" else Not(equal)
        if kind in ("is_null", "is_not_null"):
            is_null = Equal(self.build(kids[0]), BooleanConstant(None))
            return is_null if kind == "is_null" else Not(is_null)
        if kind in ORDERINGS:
            return self.ordering(ORDERINGS[kind], kids[0], kids[1])
        if kind in TEXT_MATCHES:
            match, negated = TEXT_MATCHES[kind]
            return StringMatch(match, negated, self.build(kids[0]), self.string(kids[1]))
        if kind in ("between", "not_between"):
            return self.between(kind == "not_between", kids[0], kids[1], kids[2])
        if kind in ("in_list", "not_in_list"):
            operand = self.build(kids[0])
            if not isinstance(operand, Property):
                raise self.fail(f"IN needs a property on its left, not {self.source(kids[0])}", kids[0])
            return In(operand, frozenset(self.string(k) for k in kids[1:]), kind == "not_in_list")
        raise self.fail(f"unexpected {kind}", node)  # the grammar has no other rule

    def literal(self, token: Token) -> Expr:
        text = str(token)
        if token.type == "STRING":
            return Constant(text[1:-1].replace("''", "'"))
        if token.type == "DECIMAL":
            digits = text.rstrip("lL")
            if len(digits) > 19 or int(digits) > LONG_MAX:  # the grammar allows no leading zeros
                raise self.fail(f"{text} is out of the range of a long", token)
            value = int(digits)
            return Constant(JInt(value) if value <= INT_MAX else JLong(value))
        if token.type == "FLOAT":
            number = float(text)
            if number > sys.float_info.max:
                raise self.fail(f"{text} is greater than {sys.float_info.max}", token)
            if number < DOUBLE_MIN_VALUE:
                raise self.fail(f"{text} is less than {DOUBLE_MIN_VALUE} (RocketMQ refuses a zero decimal)", token)
            return Constant(number)
        return BooleanConstant({"TRUE": True, "FALSE": False}.get(token.type))

    def string(self, node: Node) -> str:
        token = cast(Token, cast(Tree[Token], node).children[0])
        return str(token)[1:-1].replace("''", "'")

    def equal(self, left_node: Node, right_node: Node) -> Expr:
        """createEqual: NULL cannot be compared with '='; TRUE/FALSE/NULL = a non-boolean literal is refused."""
        left, right = self.build(left_node), self.build(right_node)
        for expr, node in ((left, left_node), (right, right_node)):
            if isinstance(expr, Constant) and expr.value is None:
                raise self.fail("NULL cannot be compared with '=' or '<>': use IS [NOT] NULL", node)
        if isinstance(left, Constant) and isinstance(right, Constant) and left.is_boolean and not right.is_boolean:
            raise self.fail(f"{self.source(left_node)} cannot be compared with {self.source(right_node)}", left_node)
        return Equal(left, right)

    def ordering(self, op: Order, left_node: Node, right_node: Node) -> Expr:
        left, right = self.build(left_node), self.build(right_node)
        self.check_orderable(left, left_node)
        self.check_orderable(right, right_node)
        return Ordering(op, left, right)

    def check_orderable(self, expr: Expr, node: Node) -> None:
        """checkLessThanOperand: only numbers (literals), properties and unary minus can be ordered."""
        if (isinstance(expr, Constant) and not isinstance(expr.value, (JInt, JLong, float))) or expr.is_boolean:
            raise self.fail(f"{self.source(node)} cannot be compared with > >= < <= (only numbers can)", node)

    def between(self, negated: bool, value_node: Node, low_node: Node, high_node: Node) -> Expr:
        """createBetween / createNotBetween: constant bounds must not be NULL nor the wrong way
        round; value and bounds must be orderable (they become operands of >= and <=)."""
        value, low, high = self.build(value_node), self.build(low_node), self.build(high_node)
        if not negated and isinstance(low, Constant) and isinstance(high, Constant):
            if low.value is None or high.value is None:
                raise self.fail("the bounds of BETWEEN cannot be NULL", low_node)
            try:
                wrong_way = compare(high.value, low.value) < 0
            except FilterError:
                wrong_way = False  # mixed bounds: refused below, as operands of >= and <=
            if wrong_way:
                raise self.fail(f"BETWEEN {self.source(low_node)} AND {self.source(high_node)}: the first bound is "
                                "greater than the second", low_node)
        for expr, node in ((value, value_node), (low, low_node), (value, value_node), (high, high_node)):
            self.check_orderable(expr, node)
        return Between(value, low, high, negated)
