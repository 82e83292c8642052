"""RocketMQ's SQL92 filter grammar (its JavaCC SelectorParser.jj, itself ActiveMQ's JMS selector
less LIKE, arithmetic, hex and octal literals, plus 5.x's CONTAINS / STARTSWITH / ENDSWITH), as a
Lark LALR(1) grammar. The precedence is the .jj file's, lowest first:

    OR  <  AND  <  = <> IS [NOT] NULL  <  > >= < <= [NOT] BETWEEN/IN/CONTAINS/STARTSWITH/ENDSWITH
        <  unary + - NOT  <  literals, properties, ( ... )

so, as in RocketMQ, `NOT a = 1` reads `(NOT a) = 1`: write `NOT (a = 1)`. Keywords and the
exponent of a number ignore case; property names keep it. Unlike the .jj parser, which stops after
the first complete expression and ignores what follows, the whole input must be one expression.
"""

from __future__ import annotations

from functools import cache

from lark import Lark

GRAMMAR = r"""
?start: or_expr

?or_expr: and_expr (_OR and_expr)*
?and_expr: equality (_AND equality)*

?equality: comparison
    | equality _EQ comparison                           -> eq
    | equality _NE comparison                           -> ne
    | equality _IS NULL                                 -> is_null
    | equality _IS _NOT NULL                            -> is_not_null

?comparison: unary
    | comparison _GT unary                              -> gt
    | comparison _GE unary                              -> ge
    | comparison _LT unary                              -> lt
    | comparison _LE unary                              -> le
    | comparison _CONTAINS string                       -> contains
    | comparison _NOT _CONTAINS string                  -> not_contains
    | comparison _STARTSWITH string                     -> startswith
    | comparison _NOT _STARTSWITH string                -> not_startswith
    | comparison _ENDSWITH string                       -> endswith
    | comparison _NOT _ENDSWITH string                  -> not_endswith
    | comparison _BETWEEN unary _AND unary              -> between
    | comparison _NOT _BETWEEN unary _AND unary         -> not_between
    | comparison _IN _LPAR string (_COMMA string)* _RPAR      -> in_list
    | comparison _NOT _IN _LPAR string (_COMMA string)* _RPAR -> not_in_list

?unary: _PLUS unary
    | _MINUS unary                                      -> negate
    | _NOT unary                                        -> not_
    | primary

?primary: literal
    | ID                                                -> property
    | _LPAR or_expr _RPAR

literal: STRING | DECIMAL | FLOAT | TRUE | FALSE | NULL
string: STRING

_OR: "or"i
_AND: "and"i
_NOT: "not"i
_IS: "is"i
_BETWEEN: "between"i
_IN: "in"i
_CONTAINS: "contains"i
_STARTSWITH: "startswith"i
_ENDSWITH: "endswith"i
TRUE: "true"i
FALSE: "false"i
NULL: "null"i

_EQ: "="
_NE: "<>"
_GT: ">"
_GE: ">="
_LT: "<"
_LE: "<="
_LPAR: "("
_RPAR: ")"
_COMMA: ","
_PLUS: "+"
_MINUS: "-"

ID: /[a-zA-Z_$][a-zA-Z0-9_$]*/
STRING: /'(?:''|[^'])*'/
DECIMAL: /(?:0|[1-9][0-9]*[lL]?)(?![0-9])/
FLOAT.2: /[0-9]+\.[0-9]*(?:[eE][+-]?[0-9]+)?|\.[0-9]+(?:[eE][+-]?[0-9]+)?|[0-9]+[eE][+-]?[0-9]+/

WHITESPACE: /[ \t\n\r\f]+/
LINE_COMMENT: /--[^\n\r]*/
BLOCK_COMMENT: /\/\*(?:[^*]|\*+[^*\/])*\*+\//
%ignore WHITESPACE
%ignore LINE_COMMENT
%ignore BLOCK_COMMENT
"""

TERMINAL_NAMES = {
    "_OR": "OR", "_AND": "AND", "_NOT": "NOT", "_IS": "IS", "_BETWEEN": "BETWEEN", "_IN": "IN",
    "_CONTAINS": "CONTAINS", "_STARTSWITH": "STARTSWITH", "_ENDSWITH": "ENDSWITH",
    "_EQ": "`=`", "_NE": "`<>`", "_GT": "`>`", "_GE": "`>=`", "_LT": "`<`", "_LE": "`<=`", "_LPAR": "`(`",
    "_RPAR": "`)`", "_COMMA": "`,`", "_PLUS": "`+`", "_MINUS": "`-`", "ID": "a property name",
    "STRING": "a 'string'", "DECIMAL": "an integer", "FLOAT": "a decimal number", "$END": "the end",
}
"""How an error message names each terminal."""


@cache
def parser() -> Lark:
    """The one LALR parser (built on first use; Lark parsers are reentrant)."""
    return Lark(GRAMMAR, parser="lalr", lexer="basic", propagate_positions=True, maybe_placeholders=False)
