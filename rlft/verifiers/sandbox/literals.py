"""Literal values in tests, read without running anything: constants, containers, a closed table of typed
constructors (set, frozenset, tuple, list, dict of a literal; float('inf'|'nan'|...); Decimal(str),
Fraction(a, b), Counter(...), OrderedDict(...), bytearray(b'...'), date(...), datetime(...)), and literal
arithmetic folded as Python would (`2.0 / 3.0`, `3 * 19`, `0 ** 0`, `'a' + 'b'`) within size caps (an int of
at most 65,536 bits, a str/bytes/list/tuple of at most 100,000 items); arithmetic that raises in Python
(`1 / 0`) is refused, since no code could pass. Anything else raises `No` (why, how to rewrite).
"""

from __future__ import annotations

import ast
import collections
import datetime
import decimal
import fractions
import operator
from typing import Any

from rlft.verifiers.sandbox.cases import FIX_CALL, short


class No(Exception):
    def __init__(self, why: str, fix: str = FIX_CALL):
        super().__init__(why)
        self.why, self.fix = why, fix



def unparse(node: ast.AST) -> str:
    try:
        return ast.unparse(node)
    except (RecursionError, ValueError, MemoryError):
        return "(too deep to show)"


def dotted(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        return f"{node.value.id}.{node.attr}"
    return ""


MAX_FOLD_BITS = 1 << 16  # an int folded from literal arithmetic (2 ** 65536 is 19,729 digits)
MAX_FOLD_ITEMS = 100_000  # a str, bytes, list or tuple folded from + or *
_FOLD = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
         ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow, ast.LShift: operator.lshift,
         ast.RShift: operator.rshift, ast.BitAnd: operator.and_, ast.BitOr: operator.or_, ast.BitXor: operator.xor}
_UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Invert: operator.invert, ast.Not: operator.not_}


def literal(node: ast.expr, in_call: bool = False) -> Any:
    """A literal value: constants, containers of literals, the constructor table, and arithmetic on literals
    folded as Python would (`2.0 / 3.0`, `3 * 19`, `0 ** 0`, `'a' + 'b'`) within size caps."""
    if isinstance(node, ast.Constant):
        if node.value is Ellipsis:
            raise No("`...` is not a value to compare")
        return node.value
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        if any(isinstance(e, ast.Starred) for e in node.elts):
            raise No("* inside a literal")
        items = [literal(e, in_call) for e in node.elts]
        return {ast.List: list, ast.Tuple: tuple, ast.Set: set}[type(node)](items)
    if isinstance(node, ast.Dict):
        if None in node.keys:
            raise No("** inside a dict literal")
        return {literal(k, in_call): literal(v, in_call) for k, v in zip(node.keys, node.values)}
    if isinstance(node, ast.Call):
        name = dotted(node.func)
        make = CONSTRUCTORS.get(name)
        if make is None or any(kw.arg is None for kw in node.keywords):
            where = "an argument" if in_call else "the expected side"
            raise No(f"{where} `{short(unparse(node), 40)}` is not a literal: it would have to run beside the code")
        return make(*(literal(a) for a in node.args), **{kw.arg: literal(kw.value) for kw in node.keywords})
    if isinstance(node, ast.BinOp) and type(node.op) in _FOLD:
        return _fold(node.op, literal(node.left, in_call), literal(node.right, in_call))
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        value = literal(node.operand, in_call)
        if not isinstance(value, (int, float, complex)) and not isinstance(node.op, ast.Not):
            raise No("a unary operator on something other than a number")
        return _UNARY[type(node.op)](value)
    where = "an argument" if in_call else "the expected side"
    raise No(f"{where} `{short(unparse(node), 40)}` is not a literal: it would have to run beside the code")


def _fold(op: ast.operator, a: Any, b: Any) -> Any:
    """`a OP b` on literal values, refused where the result would be huge or Python would raise."""
    number = (int, float, complex)
    seq = (str, bytes, list, tuple)
    if isinstance(a, number) and isinstance(b, number):
        if isinstance(a, int) and isinstance(b, int):
            bits = max(a.bit_length(), b.bit_length(), 1)
            if isinstance(op, ast.Pow) and b > 0 and bits * b > MAX_FOLD_BITS:
                raise No("literal arithmetic with a result over 65,536 bits")
            if isinstance(op, ast.LShift) and b > MAX_FOLD_BITS:
                raise No("literal arithmetic with a result over 65,536 bits")
            if isinstance(op, ast.Mult) and a.bit_length() + b.bit_length() > MAX_FOLD_BITS:
                raise No("literal arithmetic with a result over 65,536 bits")
        elif isinstance(op, (ast.LShift, ast.RShift, ast.BitAnd, ast.BitOr, ast.BitXor)):
            raise No("a bit operator on something other than ints")
        elif isinstance(op, ast.Pow) and isinstance(b, int) and abs(b) > MAX_FOLD_BITS and isinstance(a, complex):
            raise No("literal arithmetic too large to fold")
    elif isinstance(op, ast.Add) and isinstance(a, seq) and type(a) is type(b):
        if len(a) + len(b) > MAX_FOLD_ITEMS:
            raise No("literal concatenation over 100,000 items")
    elif isinstance(op, ast.Mult) and (isinstance(a, seq) and type(b) is int or isinstance(b, seq) and type(a) is int):
        n, s = (b, a) if isinstance(a, seq) else (a, b)
        if len(s) * max(n, 0) > MAX_FOLD_ITEMS:
            raise No("literal repetition over 100,000 items")
    else:
        raise No(f"literal arithmetic `{type(op).__name__}` on {type(a).__name__} and {type(b).__name__}")
    try:
        return _FOLD[type(op)](a, b)
    except (ArithmeticError, ValueError, TypeError) as exc:
        raise No(f"the literal arithmetic raises {type(exc).__name__} in Python, so no code can pass") from exc


def _float(x: Any) -> float:
    if not isinstance(x, (str, int, float)) or isinstance(x, bool) or (isinstance(x, str) and len(x) > 100):
        raise No("float(...) of something other than a number or a short string")
    return float(x)


def _decimal(x: Any) -> decimal.Decimal:
    if not isinstance(x, (str, int)) or isinstance(x, bool) or len(str(x)) > 1000:
        raise No("Decimal(...) of something other than a string or int of at most 1,000 characters")
    return decimal.Decimal(x)


def _fraction(*args: Any) -> fractions.Fraction:
    if not all(isinstance(a, (int, str)) and not isinstance(a, bool) and len(str(a)) <= 1000 for a in args):
        raise No("Fraction(...) of something other than ints or a string")
    return fractions.Fraction(*args)


def _bytes(x: Any) -> bytes:
    if not isinstance(x, bytes):
        raise No("bytearray(...) of something other than a bytes literal")
    return x


def _checked(kind: type, accepts: tuple) -> Any:
    def make(*args: Any, **kwargs: Any) -> Any:
        if len(args) > 1 or (args and not isinstance(args[0], accepts)) or (kwargs and kind is not Counter):
            raise No(f"{kind.__name__}(...) of something other than a literal container")
        return kind(*args, **kwargs)
    return make


def _date(kind: type) -> Any:
    def make(*args: Any) -> Any:
        if not all(type(a) is int for a in args) or not 3 <= len(args) <= 7:
            raise No(f"{kind.__name__}(...) needs int arguments")
        return kind(*args)
    return make


Counter, OrderedDict = collections.Counter, collections.OrderedDict
_ITERABLE = (list, tuple, set, frozenset, dict, str, bytes)
CONSTRUCTORS = {
    "set": _checked(set, _ITERABLE), "frozenset": _checked(frozenset, _ITERABLE),
    "tuple": _checked(tuple, _ITERABLE), "list": _checked(list, _ITERABLE), "dict": _checked(dict, (list, tuple, dict)),
    "float": _float, "bytearray": _bytes, "Decimal": _decimal, "decimal.Decimal": _decimal,
    "Fraction": _fraction, "fractions.Fraction": _fraction,
    "Counter": _checked(Counter, (dict, list, tuple, str)), "collections.Counter": _checked(Counter, (dict, list, str)),
    "OrderedDict": _checked(OrderedDict, (list, tuple, dict)),
    "collections.OrderedDict": _checked(OrderedDict, (list, tuple, dict)),
    "date": _date(datetime.date), "datetime.date": _date(datetime.date),
    "datetime": _date(datetime.datetime), "datetime.datetime": _date(datetime.datetime),
}
