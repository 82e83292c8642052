"""The values a filter expression computes with, and how RocketMQ compares them.

RocketMQ's filter runs on Java objects: literals are Integer (a decimal that fits 32 bits), Long,
Double, String or Boolean; message properties are always Strings. Comparing two different types
converts one of them the way ComparisonExpression does: a String against an Integer is parsed with
Integer.valueOf, against a Long with Long.valueOf, against a Double with Double.valueOf, against a
Boolean with Boolean.valueOf; a number against a Boolean is simply "less". A String that does not
parse is a runtime error (FilterEvaluationError), which RocketMQ turns into "not matched".
"""

from __future__ import annotations

import struct

from namesrv.filter.errors import FilterEvaluationError

INT_MIN, INT_MAX = -(2**31), 2**31 - 1
LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1
DOUBLE_MIN_VALUE = 5e-324
"""java.lang.Double.MIN_VALUE: the smallest positive double (a float literal below it is refused)."""


class JInt(int):
    """A java.lang.Integer (a decimal literal within 32 bits, or its negation)."""

    __slots__ = ()


class JLong(int):
    """A java.lang.Long: a decimal literal beyond 32 bits (RocketMQ narrows `5L` to an Integer)."""

    __slots__ = ()


Number = JInt | JLong | float
Value = bool | str | JInt | JLong | float | None
"""What an expression evaluates to: None is SQL's unknown (a missing property)."""


def is_number(v: Value) -> bool:
    return type(v) in (JInt, JLong, float)


def negate(v: Value) -> Value:
    """UnaryExpression.createNegate: numbers keep their type, anything else is unknown."""
    if isinstance(v, JInt):
        return JInt(-v)
    if isinstance(v, JLong):
        return JLong(-v)
    if isinstance(v, float):
        return -v
    return None


# ---------------------------------------------------------------------------- Java's string parsers
def parse_java_integer(text: str, lo: int, hi: int) -> int:
    """Integer.valueOf / Long.valueOf: an optional sign and at least one decimal digit (Unicode
    digits count, as Character.digit counts them), within [lo, hi]."""
    digits = text[1:] if text[:1] in ("+", "-") else text
    if not digits or not all(c.isdecimal() for c in digits):
        raise FilterEvaluationError(f"For input string: {text!r}")
    significant = "".join(str(int(c)) for c in digits).lstrip("0")
    if len(significant) > 19:  # beyond any long (and beyond what int() may be asked to parse)
        raise FilterEvaluationError(f"For input string: {text!r} (out of range)")
    value = int(significant or "0") * (-1 if text[:1] == "-" else 1)
    if not lo <= value <= hi:
        raise FilterEvaluationError(f"For input string: {text!r} (out of range)")
    return value


def _all_ascii_digits(s: str) -> bool:
    return bool(s) and all("0" <= c <= "9" for c in s)


def _valid_exponent(s: str) -> bool:
    return _all_ascii_digits(s[1:] if s[:1] in ("+", "-") else s)


def parse_java_double(text: str) -> float:
    """Double.valueOf: surrounding control characters and spaces trimmed, an optional sign, then
    NaN, Infinity, a decimal (digits with an optional point and exponent) or a hex float (0x...p...),
    with an optional f/F/d/D suffix. Stricter than Python's float(): no underscores, no inf/nan
    spellings, no Unicode digits."""
    s = text.strip("".join(chr(c) for c in range(0x21)))
    sign = -1.0 if s[:1] == "-" else 1.0
    body = s[1:] if s[:1] in ("+", "-") else s
    if body in ("NaN", "Infinity"):
        return sign * float(body.lower())
    if body[-1:] in ("f", "F", "d", "D"):
        body = body[:-1]
    if body[:2] in ("0x", "0X"):
        mantissa, p, exponent = body[2:].lower().partition("p")
        whole, _, fraction = mantissa.partition(".")
        if (p and _valid_exponent(exponent) and (whole or fraction)
                and all(c in "0123456789abcdef" for c in whole + fraction)):
            try:
                return sign * float.fromhex(f"0x{whole or '0'}.{fraction or '0'}p{exponent}")
            except OverflowError:  # Java reads a too large value as Infinity
                return sign * float("inf")
        raise FilterEvaluationError(f"For input string: {text!r}")
    mantissa, e, exponent = body.lower().partition("e")
    whole, _, fraction = mantissa.partition(".")
    if ((whole or fraction) and all(_all_ascii_digits(part) for part in (whole, fraction) if part)
            and (not e or _valid_exponent(exponent))):
        return sign * float(f"{whole or '0'}.{fraction or '0'}e{exponent or '0'}")
    raise FilterEvaluationError(f"For input string: {text!r}")


def parse_java_boolean(text: str) -> bool:
    """Boolean.valueOf: "true" in any case is true, anything else false."""
    return text.lower() == "true"


# ---------------------------------------------------------------------------- comparison
def _sign(a: float, b: float) -> int:
    return (a > b) - (a < b)


def _double_bits(d: float) -> int:
    """Double.doubleToLongBits as a signed long (every NaN is the one canonical NaN)."""
    if d != d:
        return 0x7FF8000000000000
    (bits,) = struct.unpack(">q", struct.pack(">d", d))
    return int(bits)


def compare_doubles(a: float, b: float) -> int:
    """Double.compare: numeric order, but -0.0 < 0.0 and NaN equals itself, above everything."""
    if a < b:
        return -1
    if a > b:
        return 1
    return _sign(_double_bits(a), _double_bits(b))


def _integer_range(v: JInt | JLong) -> tuple[int, int]:
    return (INT_MIN, INT_MAX) if isinstance(v, JInt) else (LONG_MIN, LONG_MAX)


def compare(lv: bool | str | Number, rv: bool | str | Number) -> int:
    """ComparisonExpression.__compare with string conversion on: the sign of lv - rv (neither is
    null). Raises FilterEvaluationError where RocketMQ throws: a String that does not parse, or a
    Boolean on the left of a String (Java fails to cast it)."""
    if type(lv) is type(rv):
        if isinstance(lv, float) and isinstance(rv, float):
            return compare_doubles(lv, rv)
        if isinstance(lv, str) and isinstance(rv, str):
            return (lv > rv) - (lv < rv)
        return _sign(lv, rv)  # type: ignore[arg-type]  # two bools or two ints of one kind
    if isinstance(lv, bool):
        if isinstance(rv, str):
            raise FilterEvaluationError(f"cannot compare boolean {lv} with string {rv!r}")
        return -1
    if isinstance(lv, (JInt, JLong)):
        if isinstance(rv, (JInt, JLong)):
            return _sign(lv, rv)
        if isinstance(rv, float):
            return compare_doubles(float(lv), rv)
        if isinstance(rv, str):
            return _sign(lv, parse_java_integer(rv, *_integer_range(lv)))
        return -1
    if isinstance(lv, float):
        if isinstance(rv, (JInt, JLong)):
            return compare_doubles(lv, float(rv))
        if isinstance(rv, str):
            return compare_doubles(lv, parse_java_double(rv))
        return -1
    # a String on the left: converted to the right side's type
    if isinstance(rv, bool):
        return _sign(parse_java_boolean(lv), rv)
    if isinstance(rv, (JInt, JLong)):
        return _sign(parse_java_integer(lv, *_integer_range(rv)), rv)
    assert isinstance(rv, float)
    return compare_doubles(parse_java_double(lv), rv)
