"""RocketMQ's SQL92 property filter, pure: what compiles, what RocketMQ refuses when compiling (with
the position of the offending text), and what an expression evaluates to over a message's
properties, case by case from RocketMQ's filter module (ComparisonExpression, LogicExpression,
UnaryExpression and its 5.x CONTAINS / STARTSWITH / ENDSWITH)."""

from __future__ import annotations

import pytest

from namesrv.filter import (
    MAX_DEPTH,
    MAX_EXPRESSION_CHARS,
    FilterEvaluationError,
    FilterParseError,
    compile_sql92,
    is_tag_type,
)
from namesrv.filter.values import compare, parse_java_double, parse_java_integer

PROPS = {"a": "5", "b": "x", "f": "2.5", "t": "true", "big": "5000000000", "TAGS": "TagA", "q": "it's",
         "neg": "-3", "nan": "NaN", "sp": " 7 "}

ERROR = "error"
"""RocketMQ throws while evaluating: the message is not delivered."""

CASES = [
    # numbers: a property is parsed as the literal's type (Integer, Long or Double)
    ("a = 5", True), ("a > 4", True), ("a >= 5", True), ("a < 5", False), ("a <= 5", True), ("a <> 5", False),
    ("a = 5.0", True), ("a > 4.5", True), ("f > 2.0", True), ("f > 2", ERROR), ("f = 2.5", True),
    ("big > 4", ERROR), ("big > 4000000000", True), ("big = 5000000000", True), ("a > -1", True),
    ("neg < -2", True), ("neg = -3", True), ("a > 5L", False), ("sp = 7", ERROR), ("sp = 7.0", True),
    ("nan > 1.0", True), ("nan = 1.0", False),
    # two properties: parsed as doubles for ordering, compared as strings for =
    ("a > f", True), ("f > a", False), ("a = f", False), ("b > a", ERROR), ("a = b", False), ("c = d", True),
    # strings: only = and <>, and a non-number against a number is an error
    ("b = 'x'", True), ("b <> 'x'", False), ("b = 'y'", False), ("b = 1", ERROR), ("b = 1 OR TRUE", ERROR),
    ("TRUE OR b = 1", True), ("q = 'it''s'", True), ("TAGS = 'TagA'", True), ("'axb' CONTAINS 'x'", True),
    # booleans: a property against TRUE/FALSE is parsed by Boolean.valueOf
    ("t = TRUE", True), ("t = FALSE", False), ("b = FALSE", True), ("b = TRUE", False), ("TRUE", True),
    ("FALSE", False), ("NULL", None), ("a", False), ("c", None), ("1 = TRUE", False), ("TRUE = t", ERROR),
    # null: a missing property makes a comparison unknown, and only TRUE delivers
    ("c = 1", None), ("c > 1", None), ("1 < c", None), ("1 = c", False), ("NOT (c = 1)", None),
    ("c IS NULL", True), ("a IS NULL", False), ("a IS NOT NULL", True), ("c IS NOT NULL", False),
    ("c = 1 AND a = 5", None), ("c = 1 AND a = 6", False), ("c = 1 OR a = 5", True), ("c = 1 OR a = 6", None),
    ("NULL IS NULL", True), ("1 IS NULL", False),
    # precedence: NOT binds tighter than comparisons, AND tighter than OR
    ("NOT a = 1", False), ("NOT c = 1", None), ("a = 1 OR a = 5 AND b = 'x'", True),
    ("(a = 1 OR a = 5) AND b = 'y'", False), ("NOT (a = 1) AND NOT (b = 'y')", True), ("NOT NOT TRUE", True),
    ("- -5 = a", True), ("+5 = a", True), ("-a > 1", None),
    # BETWEEN and IN
    ("a BETWEEN 1 AND 5", True), ("a BETWEEN 6 AND 9", False), ("a NOT BETWEEN 1 AND 5", False),
    ("a NOT BETWEEN 6 AND 9", True), ("c BETWEEN 1 AND 5", None), ("b BETWEEN 1 AND 5", ERROR),
    ("a BETWEEN 1 AND 5.5", True), ("a BETWEEN -1 AND 1", False), ("a BETWEEN f AND big", True),
    ("b IN ('x', 'y')", True), ("b IN ('y')", False), ("b NOT IN ('y')", True), ("b NOT IN ('x')", False),
    ("c IN ('x')", None), ("c NOT IN ('x')", None), ("a IN ('5')", True), ("(b) IN ('x')", True),
    # 5.x text matching: FALSE (never unknown) for a missing value or an empty text, even with NOT
    ("b CONTAINS 'x'", True), ("b NOT CONTAINS 'x'", False), ("TAGS STARTSWITH 'Tag'", True),
    ("TAGS ENDSWITH 'A'", True), ("TAGS NOT STARTSWITH 'X'", True), ("TAGS NOT ENDSWITH 'A'", False),
    ("c CONTAINS 'x'", False), ("c NOT CONTAINS 'x'", False), ("b CONTAINS ''", False),
    ("b NOT CONTAINS ''", False), ("NOT (c CONTAINS 'x')", True), ("a CONTAINS '5'", True),
    ("(a = 5) CONTAINS 'T'", False),
    # keywords in any case, properties as written, comments and whitespace
    ("a between 1 and 5 and b in ('x') or false", True), ("A = 5", None), ("a = 5 -- the rest", True),
    ("a /* five */ = 5", True), ("a\t=\n5", True), ("now = 1", None),
]


@pytest.mark.parametrize(("expression", "expected"), CASES, ids=[c[0] for c in CASES])
def test_evaluation_follows_rocketmq(expression: str, expected: bool | str | None) -> None:
    f = compile_sql92(expression)
    if expected == ERROR:
        with pytest.raises(FilterEvaluationError):
            f.evaluate(PROPS)
        assert f.matches(PROPS) is False, "an evaluation error delivers nothing"
    else:
        assert f.evaluate(PROPS) is expected
        assert f.matches(PROPS) is (expected is True)


REFUSED: list[tuple[str, int, str]] = [
    # (expression, where the error points, a word of the reason)
    ("a > 'x'", 4, "cannot be compared"), ("'x' < a", 0, "cannot be compared"), ("a > TRUE", 4, "cannot be compared"),
    ("a > (b = 1)", 5, "cannot be compared"), ("a = NULL", 4, "IS [NOT] NULL"), ("NULL <> a", 0, "IS [NOT] NULL"),
    ("TRUE = 1", 0, "cannot be compared"), ("a BETWEEN 5 AND 1", 10, "greater"), ("a BETWEEN 1 AND NULL", 10, "NULL"),
    ("a BETWEEN 'x' AND 'y'", 10, "cannot be compared"), ("1", 0, "not a condition"), ("'x'", 0, "not a condition"),
    ("a AND 1", 6, "not a condition"), ("-a", 0, "not a condition"), ("NOT 1", 4, "not a condition"),
    ("1 IN ('x')", 0, "IN needs a property"), ("a IN (1)", 6, "expected a 'string'"), ("a IN ()", 6, "expected"),
    ("a CONTAINS x", 11, "expected a 'string'"), ("a > 0.0", 4, "zero"), ("a = 1e999", 4, "greater than"),
    ("a = 9223372036854775808", 4, "range of a long"), ("a = " + "1" * 5000, 4, "range of a long"),
    ("a = 1 b", 6, "unexpected `b`"), ("(a = 1", 6, "`)`"),
    ("a = ", 4, "end of expression"), ("", 0, "end of expression"), ("a = #", 4, "unexpected character '#'"),
    ("a = 'x", 4, "not closed"), ("a == 1", 3, "unexpected `=`"), ("a != 1", 2, "'!'"), ("and = 1", 0, "`and`"),
    ("a LIKE 'x%'", 2, "unexpected `LIKE`"), ("a = 1 AND", 9, "end of expression"), ("a = 007", 4, "unexpected"),
    ("a.b = 1", 1, "'.'"), ("a =\n  #", 6, "'#'"),
]


@pytest.mark.parametrize(("expression", "position", "reason"), REFUSED, ids=[r[0][:40] for r in REFUSED])
def test_refused_expressions_say_why_and_where(expression: str, position: int, reason: str) -> None:
    with pytest.raises(FilterParseError) as e:
        compile_sql92(expression)
    assert e.value.position == position, str(e.value)
    assert reason in str(e.value)
    assert str(e.value).startswith("Invalid MessageSelector: ")


def test_an_error_position_has_a_line_and_column() -> None:
    with pytest.raises(FilterParseError) as e:
        compile_sql92("a = 1 AND\n  b > 'x'")
    assert (e.value.line, e.value.column) == (2, 7)
    assert "(line 2, column 7)" in str(e.value)


def test_input_size_and_nesting_are_bounded() -> None:
    with pytest.raises(FilterParseError, match="longer than"):
        compile_sql92("a = 1 OR " * (MAX_EXPRESSION_CHARS // 9) + "a = 2")
    compile_sql92(" OR ".join(f"a = {i}" for i in range(500)))  # long chains are flat: accepted
    compile_sql92("(" * 2000 + "a = 1" + ")" * 2000)  # parentheses alone do not nest the tree
    with pytest.raises(FilterParseError, match="nested deeper"):
        compile_sql92("NOT " * MAX_DEPTH + "a")
    with pytest.raises(FilterParseError, match="nested deeper"):
        compile_sql92("a = " + "- " * 500 + "1")


def test_compiled_expressions_and_refusals_are_cached_by_text() -> None:
    assert compile_sql92("a = 1 AND b = 'cached'") is compile_sql92("a = 1 AND b = 'cached'")
    errors = []
    for _ in range(2):
        with pytest.raises(FilterParseError) as e:
            compile_sql92("a = 'cached")
        errors.append(e.value)
    assert errors[0] is errors[1]
    assert len(_frames(errors[1])) < 6, "a cached error does not pile up tracebacks"


def _frames(e: BaseException) -> list[object]:
    tb = e.__traceback__
    out = []
    while tb is not None:
        out.append(tb)
        tb = tb.tb_next
    return out


def test_tag_type_is_none_empty_or_tag() -> None:
    assert is_tag_type(None) and is_tag_type("") and is_tag_type("TAG")
    assert not is_tag_type("SQL92") and not is_tag_type("tag")


@pytest.mark.parametrize(("text", "value"), [
    ("5", 5.0), ("-5", -5.0), ("+5.5", 5.5), (".5", 0.5), ("5.", 5.0), ("1e3", 1000.0), ("1E-3", 0.001),
    ("2.5f", 2.5), ("2.5D", 2.5), (" 7 ", 7.0), ("\t7\n", 7.0), ("Infinity", float("inf")),
    ("-Infinity", float("-inf")), ("0x1.8p1", 3.0), ("0X10P0", 16.0),
    ("-0x1p99999", float("-inf")), ("1e99999", float("inf")), ("1e-99999", 0.0),
])
def test_double_value_of_accepts_what_java_does(text: str, value: float) -> None:
    assert parse_java_double(text) == value


@pytest.mark.parametrize("text", ["", "abc", "1_000", "inf", "nan", "infinity", "1e", "e5", ".", "1.2.3",
                                  "\u0661", "0x1.8", "NaNd", "5 5", "--5", "1e5e5", "\u00a05"])
def test_double_value_of_refuses_what_java_does(text: str) -> None:
    with pytest.raises(FilterEvaluationError):
        parse_java_double(text)


def test_integer_value_of_range_and_digits() -> None:
    assert parse_java_integer("2147483647", -(2**31), 2**31 - 1) == 2**31 - 1
    assert parse_java_integer("-0", -1, 1) == 0
    assert parse_java_integer("\u0661\u0662", 0, 100) == 12, "Java's Character.digit takes any Unicode digit"
    assert parse_java_integer("0" * 5000 + "42", 0, 100) == 42, "leading zeros are no limit"
    for bad in ("2147483648", "", "+", "1.0", " 1", "1_0", "0x1", "9" * 5000):
        with pytest.raises(FilterEvaluationError):
            parse_java_integer(bad, -(2**31), 2**31 - 1)


def test_doubles_order_as_java_compares_them() -> None:
    nan = float("nan")
    assert compare(nan, nan) == 0 and compare(nan, float("inf")) == 1
    assert compare(-0.0, 0.0) == -1
    assert compare(1.0, 2.0) == -1


class CountingProperties(dict[str, str]):
    """Message properties that count how often the filter reads them."""

    reads = 0

    def get(self, key: str, default: object = None) -> object:  # type: ignore[override]
        self.reads += 1
        return super().get(key, default)


def test_nested_betweens_read_their_value_once() -> None:
    """RocketMQ expands BETWEEN into `v >= low AND v <= high`, evaluating v twice: nested thirty
    deep that is 2**30 reads (and compiles). Here each value is compiled and evaluated once."""
    expression = "a BETWEEN 1 AND 2"
    for _ in range(30):
        expression = f"-({expression}) NOT BETWEEN -1 AND 2"
    props = CountingProperties(a="1")
    assert compile_sql92(expression).evaluate(props) is None  # a negated condition is no number
    assert props.reads == 1
    props = CountingProperties(a="1")
    assert compile_sql92("a BETWEEN 0 AND 2 AND a NOT BETWEEN 5 AND 6").evaluate(props) is True
    assert props.reads == 2
