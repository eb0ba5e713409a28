"""Values that cross the sandbox wall, and the one equality the parent judges them with.

The wire format is JSON of tagged lists, in both directions (arguments in, the result out):
  ["n"] None  ["b", bool]  ["i", hex]  ["f", repr]  ["c", repr]  ["s", str]  ["u", hex] a str holding lone
  surrogates (UTF-8, surrogatepass: JSON would merge two of them into one character)  ["y", hex] bytes (bytearray too)
  ["l"|"t"|"S"|"F", [items]] list, tuple, set, frozenset   ["d", [[key, value], ...]] dict (dict subclasses,
  dict_keys/dict_items as sets)
and, only where the case's expected value holds one (`extras`), the typed values
  ["Q", [num hex, den hex]] Fraction  ["D", str] Decimal  ["K", pairs] Counter  ["O", pairs] OrderedDict
  ["T", iso] datetime.date  ["W", iso] datetime.datetime (naive).

`decode` builds plain stdlib values under hard bounds (nodes, depth, hash collisions, digits of a
Fraction, length of a Decimal), so a report built to be slow costs the parent no more than its bounded
size. `matches` is the equality: Python's own `==` (or the case's operator) between the decoded result
and the expected value, both built by the parent from the stdlib types above, never an object of the
code's; with a tolerance, numbers compare with `math.isclose` (recursively through lists and tuples).
Any error while comparing (Decimal's InvalidOperation, a TypeError of `<`) fails that case only.
"""

from __future__ import annotations

import datetime
import decimal
import fractions
import math
import operator
from collections import Counter, OrderedDict
from typing import Any

MAX_NODES = 200_000  # values in one decoded result
MAX_DEPTH = 100
MAX_COLLISIONS = 64  # keys sharing one hash: ints k * (2**61 - 1) would make a set quadratic to build
EXTRA_TAGS = {"Q": fractions.Fraction, "D": decimal.Decimal, "K": Counter, "O": OrderedDict,
              "T": datetime.date, "W": datetime.datetime}
_CONTAINERS = {"l": list, "t": tuple, "S": set, "F": frozenset}


class Refused(ValueError):
    """A value the parent will not build (unknown tag, a typed value the case did not ask for, too big)."""


def encode(v: Any, depth: int = 0) -> list:
    """The parent's encoding of a trusted value (a case's arguments); the child has its own copy.

    >>> encode((1, "a", None))
    ['t', [['i', '1'], ['s', 'a'], ['n']]]
    """
    if depth > MAX_DEPTH:
        raise Refused("nested too deep")
    if v is None:
        return ["n"]
    if isinstance(v, bool):
        return ["b", v]
    if isinstance(v, int):
        return ["i", format(v, "x")]
    if isinstance(v, float):
        return ["f", repr(v)]
    if isinstance(v, complex):
        return ["c", repr(v)]
    if isinstance(v, str):
        try:
            v.encode("utf-8")
        except UnicodeEncodeError:
            return ["u", v.encode("utf-8", "surrogatepass").hex()]
        return ["s", v]
    if isinstance(v, (bytes, bytearray)):
        return ["y", bytes(v).hex()]
    if isinstance(v, fractions.Fraction):
        return ["Q", [format(v.numerator, "x"), format(v.denominator, "x")]]
    if isinstance(v, decimal.Decimal):
        return ["D", str(v)]
    if isinstance(v, datetime.datetime):
        return ["W", v.isoformat()]
    if isinstance(v, datetime.date):
        return ["T", v.isoformat()]
    for kind, tag in ((Counter, "K"), (OrderedDict, "O"), (dict, "d")):
        if isinstance(v, kind):
            return [tag, [[encode(k, depth + 1), encode(x, depth + 1)] for k, x in v.items()]]
    for tag, kind in _CONTAINERS.items():
        if isinstance(v, kind):
            return [tag, [encode(x, depth + 1) for x in v]]
    raise Refused(f"{type(v).__name__} is not plain data")


def extras_of(v: Any) -> frozenset[str]:
    """The typed tags (Fraction, Decimal, ...) that `v` holds: the only ones a result may use."""
    found: set[str] = set()
    stack = [v]
    while stack:
        x = stack.pop()
        for tag, kind in EXTRA_TAGS.items():
            if type(x) is kind:
                found.add(tag)
        if isinstance(x, dict):
            stack.extend(x.keys())
            stack.extend(x.values())
        elif isinstance(x, (list, tuple, set, frozenset)):
            stack.extend(x)
    return frozenset(found)


def digits_of(v: Any) -> int:
    """Hex digits of the largest Fraction part or Decimal string in `v`: a result's may be a few times that."""
    if isinstance(v, fractions.Fraction):
        return max(len(format(abs(v.numerator), "x")), len(format(v.denominator, "x")))
    if isinstance(v, decimal.Decimal):
        return len(str(v))
    if isinstance(v, dict):
        return max([0, *(digits_of(x) for x in (*v.keys(), *v.values()))])
    if isinstance(v, (list, tuple, set, frozenset)):
        return max([0, *(digits_of(x) for x in v)])
    return 0


def decode(enc: Any, extras: frozenset[str] = frozenset(), digits: int = 64) -> Any:
    """The value an encoding stands for; Refused for anything outside the format or its bounds.

    >>> decode(["l", [["i", "ff"], ["s", "x"]]])
    [255, 'x']
    >>> try:
    ...     decode(["D", "1.5"])
    ... except Refused as exc:
    ...     print(exc)
    a Decimal where the expected value has none
    """
    budget = [MAX_NODES]
    return _decode(enc, extras, max(digits, 16) * 4 + 64, budget, 0)


def _decode(enc: Any, extras: frozenset[str], digits: int, budget: list[int], depth: int) -> Any:
    budget[0] -= 1
    if budget[0] < 0 or depth > MAX_DEPTH:
        raise Refused("value too large or nested too deep")
    if not isinstance(enc, list) or not enc or not isinstance(enc[0], str):
        raise Refused("malformed value")
    tag, arg = enc[0], (enc[1] if len(enc) == 2 else None)
    if tag == "n" and len(enc) == 1:
        return None
    if tag == "b" and isinstance(arg, bool):
        return arg
    if len(tag) == 1 and tag in "ifcsyu" and isinstance(arg, str):
        if tag == "i":
            return int(arg, 16)  # hex: linear, no 4,300-digit limit
        if tag == "f":
            return float(arg)
        if tag == "c":
            return complex(arg)
        if tag == "u":  # a str with lone surrogates: its UTF-8 (surrogatepass) in hex, never merged into pairs
            return bytes.fromhex(arg).decode("utf-8", "surrogatepass")
        return arg if tag == "s" else bytes.fromhex(arg)
    if tag in _CONTAINERS and isinstance(arg, list):
        items = [_decode(x, extras, digits, budget, depth + 1) for x in arg]
        return _CONTAINERS[tag](few_collisions(items) if tag in "SF" else items)
    if tag in ("d", "K", "O") and isinstance(arg, list):
        if tag != "d" and tag not in extras:
            raise Refused(f"a {EXTRA_TAGS[tag].__name__} where the expected value has none")
        pairs = []
        for pair in arg:
            if not (isinstance(pair, list) and len(pair) == 2):
                raise Refused("malformed dict")
            pairs.append((_decode(pair[0], extras, digits, budget, depth + 1),
                          _decode(pair[1], extras, digits, budget, depth + 1)))
        few_collisions([k for k, _ in pairs])
        return {"d": dict, "K": Counter, "O": OrderedDict}[tag](dict(pairs) if tag == "K" else pairs)
    if tag in EXTRA_TAGS:
        if tag not in extras:
            raise Refused(f"a {EXTRA_TAGS[tag].__name__} where the expected value has none")
        return _typed(tag, arg, digits)
    raise Refused(f"unknown or malformed tag {str(tag)[:20]!r}")


def _typed(tag: str, arg: Any, digits: int) -> Any:
    if tag == "Q":
        if not (isinstance(arg, list) and len(arg) == 2 and all(isinstance(p, str) for p in arg)):
            raise Refused("malformed Fraction")
        if max(len(arg[0]), len(arg[1])) > digits:  # gcd is quadratic in the digits
            raise Refused("Fraction parts far larger than the expected value's")
        num, den = int(arg[0], 16), int(arg[1], 16)
        if den <= 0:
            raise Refused("Fraction denominator must be positive")
        return fractions.Fraction(num, den)
    if not isinstance(arg, str):
        raise Refused("malformed value")
    if tag == "D":
        if len(arg) > digits:
            raise Refused("Decimal far longer than the expected value")
        try:
            return decimal.Decimal(arg)
        except decimal.InvalidOperation as exc:
            raise Refused("malformed Decimal") from exc
    if len(arg) > 40:
        raise Refused("malformed date")
    return (datetime.date if tag == "T" else datetime.datetime).fromisoformat(arg)


def few_collisions(keys: list) -> list:
    hashes = [hash(k) for k in keys]
    if len(hashes) - len(set(hashes)) > MAX_COLLISIONS:
        raise Refused("too many keys with equal hashes")
    return keys


OPS = {"==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le, ">": operator.gt,
       ">=": operator.ge, "in": lambda a, b: a in b, "not in": lambda a, b: a not in b,
       "is": operator.is_, "is not": operator.is_not}
WRAPPERS = {"set": set, "frozenset": frozenset, "sorted": sorted, "list": list, "tuple": tuple}


def matches(result: Any, op: str, expected: Any, result_first: bool = True,
            tol: tuple[float, float] | None = None) -> bool:
    """The verdict of one case: `result OP expected` (or `expected OP result`) on decoded plain values.

    `is`/`is not` only ever meet None, True or False (the converter refuses any other `is`), so identity
    here is the singletons' identity. `truth` is `bool(result) == expected`.

    >>> matches(2.0, "==", 2), matches([0.1 + 0.2], "==", [0.3], tol=(1e-9, 0.0)), matches(1, "is", True)
    (True, True, False)
    """
    if op == "truth":
        return bool(result) is expected
    if tol is not None:
        close = _close(result, expected, tol)
        return close if op == "==" else not close
    a, b = (result, expected) if result_first else (expected, result)
    return bool(OPS[op](a, b))


def _close(a: Any, b: Any, tol: tuple[float, float]) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        if math.isnan(a) or math.isnan(b):
            return False
        return math.isclose(a, b, rel_tol=tol[0], abs_tol=tol[1])
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)) and type(a) is type(b):
        return len(a) == len(b) and all(_close(x, y, tol) for x, y in zip(a, b))
    return a == b


def same_output(got: bytes, want: str) -> bool:
    """A program case: stdout equals the expected text line by line, ignoring trailing spaces on each line
    and trailing empty lines (what judges of APPS, CodeContests and LiveCodeBench accept).

    >>> same_output(b"3 \\n4\\n\\n", "3\\n4")
    True
    """
    try:
        text = got.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return _lines(text) == _lines(want)


def _lines(text: str) -> list[str]:
    lines = [line.rstrip() for line in text.replace("\r\n", "\n").split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return lines
