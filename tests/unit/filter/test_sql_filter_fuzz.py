"""Fuzzing the SQL92 filter: any text is either compiled or refused with the filter's own error;
expressions built from the grammar never hit a syntax error; compiled ones evaluate to TRUE, FALSE
or unknown (or RocketMQ's evaluation error, never anything else); and well-typed expressions agree
with a small reference evaluator written here from SQL's three-valued logic."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from namesrv.filter import FilterEvaluationError, FilterParseError, SqlFilter, compile_sql92

FUZZ = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])

TOKENS = ["a", "b", "TAGS", "x1", "$p", "_q", "1", "0", "42", "5L", "2147483648", "9223372036854775808", "1.5",
          ".5", "5.", "1e3", "0.0", "'s'", "'it''s'", "''", "'", "TRUE", "false", "Null", "AND", "or", "NOT", "IS",
          "BETWEEN", "in", "CONTAINS", "startswith", "ENDSWITH", "=", "<>", ">", ">=", "<", "<=", "(", ")", ",", "+",
          "-", "--", "/*", "*/", "\n", "!", "#", "like", "."]

PROPERTY_VALUES = st.one_of(
    st.text(max_size=6), st.integers(-(2**40), 2**40).map(str), st.floats(allow_nan=True).map(repr),
    st.sampled_from(["true", "TRUE", "false", "NaN", "Infinity", "-0.0", " 7 ", "1e3", "x", "0x1p99999", "0x1.8p1"]),
    st.tuples(st.sampled_from(["", "-", "0" * 5000]), st.integers(1, 6000)).map(lambda t: t[0] + "9" * t[1]),
)
"""Property values: any text, numbers in every spelling Java reads, and digit runs past Python's int limit."""
PROPERTIES = st.dictionaries(st.sampled_from(["a", "b", "TAGS", "x1", "$p", "_q", "A"]), PROPERTY_VALUES, max_size=6)


def _outcome(f: SqlFilter, props: dict[str, str]) -> Any:
    try:
        value = f.evaluate(props)
    except FilterEvaluationError:
        assert f.matches(props) is False
        return "error"
    assert value in (True, False, None) and type(value) in (bool, type(None))
    assert f.matches(props) is (value is True)
    return value


@FUZZ
@given(st.one_of(st.text(max_size=120), st.lists(st.sampled_from(TOKENS), max_size=25).map(" ".join),
                 st.tuples(st.sampled_from(["a = ", "a > ", "a = 1.", "a BETWEEN 1 AND "]), st.integers(1, 9000)).map(
                     lambda t: t[0] + "7" * t[1])), PROPERTIES)
def test_any_text_compiles_or_is_refused_with_the_filters_error(text: str, props: dict[str, str]) -> None:
    try:
        f = compile_sql92(text)
    except FilterParseError as e:
        assert 0 <= e.position <= len(text)
        return
    _outcome(f, props)


# ---------------------------------------------------------------------------- from the grammar
def _keyword(word: str) -> st.SearchStrategy[str]:
    """A keyword in any mix of cases."""
    return st.lists(st.booleans(), min_size=len(word), max_size=len(word)).map(
        lambda ups: "".join(c.upper() if up else c.lower() for c, up in zip(word, ups, strict=True)))


STRING_LITERAL = st.text(alphabet="ab' x\u00e9", max_size=5).map(lambda s: "'" + s.replace("'", "''") + "'")
LITERAL = st.one_of(
    STRING_LITERAL, st.integers(0, 2**64).map(str), st.integers(1, 2**31).map(lambda i: f"{i}L"),
    st.floats(min_value=0, allow_nan=False, allow_infinity=False).map(lambda f: repr(f) if "e" in repr(f) or
                                                                      "." in repr(f) else f"{f}.0"),
    _keyword("TRUE"), _keyword("FALSE"), _keyword("NULL"),
)
PROPERTY = st.sampled_from(["a", "b", "TAGS", "x1", "$p", "_q", "A", "andy", "nullable"])


def _grammar_expression(leaf: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    def extend(sub: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
        p = sub.map(lambda s: f"({s})")  # any expression is a primary once in parentheses
        strings = st.lists(STRING_LITERAL, min_size=1, max_size=3).map(", ".join)
        return st.one_of(
            st.tuples(p, st.sampled_from(["OR", "AND", "=", "<>", ">", ">=", "<", "<="]), p).map(" ".join),
            st.tuples(p, _keyword("IS"), st.sampled_from(["", "NOT "]), _keyword("NULL")).map(
                lambda t: f"{t[0]} {t[1]} {t[2]}{t[3]}"),
            st.tuples(p, st.sampled_from(["", "NOT "]), st.sampled_from(["CONTAINS", "STARTSWITH", "ENDSWITH"]),
                      STRING_LITERAL).map(lambda t: f"{t[0]} {t[1]}{t[2]} {t[3]}"),
            st.tuples(p, st.sampled_from(["", "NOT "]), p, p).map(lambda t: f"{t[0]} {t[1]}BETWEEN {t[2]} AND {t[3]}"),
            st.tuples(p, st.sampled_from(["", "NOT "]), strings).map(lambda t: f"{t[0]} {t[1]}IN ({t[2]})"),
            st.tuples(st.sampled_from(["NOT ", "-", "+", "- "]), p).map("".join),
        )
    return st.recursive(leaf, extend, max_leaves=12)


@FUZZ
@given(_grammar_expression(st.one_of(LITERAL, PROPERTY)), PROPERTIES)
def test_expressions_from_the_grammar_parse_and_evaluate(text: str, props: dict[str, str]) -> None:
    try:
        f = compile_sql92(text)
    except FilterParseError as e:
        # well-formed by construction: only RocketMQ's compile checks or the limits may refuse it
        assert "unexpected" not in e.reason and "not closed" not in e.reason, (text, str(e))
        return
    _outcome(f, props)


# ---------------------------------------------------------------------------- differential
NUMERIC = ["n1", "n2"]
TEXTUAL = ["s1", "s2"]
Ast = tuple[Any, ...]


def _text(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


SMALL_TEXT = st.text(alphabet="ab'", max_size=3)
INT = st.integers(-(2**31) + 1, 2**31 - 1)


def _conditions() -> st.SearchStrategy[Ast]:
    leaves = st.one_of(
        st.tuples(st.just("cmp"), st.sampled_from(NUMERIC), st.sampled_from(["=", "<>", ">", ">=", "<", "<="]), INT),
        st.tuples(st.just("eq"), st.sampled_from(TEXTUAL), st.booleans(), SMALL_TEXT),
        st.tuples(st.just("in"), st.sampled_from(TEXTUAL), st.lists(SMALL_TEXT, min_size=1, max_size=3),
                  st.booleans()),
        st.tuples(st.just("null"), st.sampled_from(NUMERIC + TEXTUAL), st.booleans()),
        st.tuples(st.just("between"), st.sampled_from(NUMERIC), INT, INT, st.booleans()).map(
            lambda t: (t[0], t[1], min(t[2], t[3]), max(t[2], t[3]), t[4])),
        st.tuples(st.just("match"), st.sampled_from(["CONTAINS", "STARTSWITH", "ENDSWITH"]),
                  st.sampled_from(TEXTUAL), SMALL_TEXT.filter(bool), st.booleans()),
        st.tuples(st.just("bool"), st.booleans()),
    )
    return st.recursive(leaves, lambda sub: st.one_of(
        st.tuples(st.just("not"), sub),
        st.tuples(st.sampled_from(["and", "or"]), st.lists(sub, min_size=2, max_size=4).map(tuple)),
    ), max_leaves=10)


def render(ast: Ast, parent: str = "") -> str:
    """SQL text with only the parentheses precedence needs (OR inside AND, NOT's operand)."""
    kind = ast[0]
    if kind == "cmp":
        literal = str(ast[3]) if ast[3] >= 0 else f"-{-ast[3]}"
        return f"{ast[1]} {ast[2]} {literal}"
    if kind == "eq":
        return f"{ast[1]} {'=' if ast[2] else '<>'} {_text(ast[3])}"
    if kind == "in":
        return f"{ast[1]} {'NOT ' if ast[3] else ''}IN ({', '.join(_text(s) for s in ast[2])})"
    if kind == "null":
        return f"{ast[1]} IS {'NOT ' if ast[2] else ''}NULL"
    if kind == "between":
        lo, hi = (str(v) if v >= 0 else f"-{-v}" for v in ast[2:4])
        return f"{ast[1]} {'NOT ' if ast[4] else ''}BETWEEN {lo} AND {hi}"
    if kind == "match":
        return f"{ast[2]} {'NOT ' if ast[4] else ''}{ast[1]} {_text(ast[3])}"
    if kind == "bool":
        return "TRUE" if ast[1] else "FALSE"
    if kind == "not":
        return f"NOT ({render(ast[1])})"
    text = f" {kind.upper()} ".join(render(a, kind) for a in ast[1])
    return f"({text})" if kind == "or" and parent == "and" else text


def reference(ast: Ast, props: dict[str, str]) -> bool | None:
    """SQL's three-valued logic, written plainly (numeric properties here always hold integers)."""
    kind = ast[0]
    if kind == "cmp":
        v = props.get(ast[1])
        if v is None:
            return None
        n, op, lit = int(v), ast[2], ast[3]
        return {"=": n == lit, "<>": n != lit, ">": n > lit, ">=": n >= lit, "<": n < lit, "<=": n <= lit}[op]
    if kind == "eq":
        v = props.get(ast[1])
        return None if v is None else (v == ast[3]) == ast[2]
    if kind == "in":
        v = props.get(ast[1])
        return None if v is None else (v in ast[2]) != ast[3]
    if kind == "null":
        return (props.get(ast[1]) is None) != ast[2]
    if kind == "between":
        v = props.get(ast[1])
        return None if v is None else (ast[2] <= int(v) <= ast[3]) != ast[4]
    if kind == "match":
        v = props.get(ast[2])
        if v is None:
            return False  # RocketMQ: FALSE, not unknown, even negated
        found = {"CONTAINS": ast[3] in v, "STARTSWITH": v.startswith(ast[3]), "ENDSWITH": v.endswith(ast[3])}[ast[1]]
        return found != ast[4]
    if kind == "bool":
        return bool(ast[1])
    if kind == "not":
        r = reference(ast[1], props)
        return None if r is None else not r
    results = [reference(a, props) for a in ast[1]]
    decisive = kind == "or"  # TRUE decides an OR, FALSE an AND
    if decisive in results:
        return decisive
    return None if None in results else not decisive


REFERENCE_PROPERTIES = st.fixed_dictionaries({}, optional={
    "n1": INT.map(str), "n2": INT.map(str), "s1": SMALL_TEXT, "s2": SMALL_TEXT})


@FUZZ
@given(_conditions(), REFERENCE_PROPERTIES)
def test_well_typed_expressions_agree_with_a_reference_evaluator(ast: Ast, props: dict[str, str]) -> None:
    text = render(ast)
    assert compile_sql92(text).evaluate(props) is reference(ast, props), text


def test_the_reference_renderer_needs_its_parentheses() -> None:
    """The differential test exercises precedence: AND binds tighter than OR."""
    ast = ("and", (("or", (("bool", True), ("bool", False))), ("bool", False)))
    assert render(ast) == "(TRUE OR FALSE) AND FALSE"
    assert compile_sql92(render(ast)).evaluate({}) is False
    assert compile_sql92("TRUE OR FALSE AND FALSE").evaluate({}) is True
