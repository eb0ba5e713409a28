"""Values that cross the sandbox wall, and the one equality the parent judges them with.

The wire format is JSON of tagged lists, in both directions (arguments in, the result out):
  ["n"] None  ["b", bool]  ["i", hex]  ["f", repr]  ["c", repr]  ["s", str]  ["u", hex] a str holding lone
  surrogates (UTF-8, surrogatepass: JSON would merge two of them into one character)  ["y", hex] bytes (bytearray too)
  ["l"|"t"|"S"|"F", [items]] list, tuple, set, frozenset   ["d", [[key, value], ...]] dict (dict subclasses,
  dict_keys/dict_items as sets)
and the typed values (any result may hold them: Python's `==` decides, so a Counter equals a dict with
its items and a Fraction(1, 2) equals 0.5; their size is bounded by the expected value's, `digits`)
  ["Q", [num hex, den hex]] Fraction  ["D", str] Decimal  ["K", pairs] Counter  ["O", pairs] OrderedDict
  ["T", iso] datetime.date  ["W", iso] datetime.datetime (naive).

`decode` builds plain stdlib values under hard bounds (nodes, depth, hash collisions, digits of a
Fraction, length of a Decimal), so a report built to be slow costs the parent no more than its bounded
size. `matches` is the equality: Python's own `==` (or the case's operator) between the decoded result
and the expected value, both built by the parent from the stdlib types above, never an object of the
code's. The test's own tolerance functions are evaluated with their real semantics on those values:
`abs(result - x) < tol` as written (`<` is `<`; inf - inf is nan, which passes nothing), `math.isclose`
itself (a complex result raises, as in Python), pytest.approx's rule (`approx_eq`: scalars, flat sequences,
flat dicts, its own max(rel * |expected|, abs) tolerance) and numpy's isclose/allclose (`np_isclose`:
|a - b| <= atol + rtol * |b|, asymmetric, broadcast of a scalar). JSON cases' rel_tol/abs_tol compare
with `math.isclose` recursively through lists. Any error while comparing (Decimal's InvalidOperation, a
TypeError of `<`, math.isclose of a complex) fails that case only.
"""

from __future__ import annotations

import cmath
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


ALL_EXTRAS = frozenset(EXTRA_TAGS)


def decode(enc: Any, extras: frozenset[str] = ALL_EXTRAS, digits: int = 64) -> Any:
    """The value an encoding stands for; Refused for anything outside the format or its bounds.

    >>> decode(["l", [["i", "ff"], ["s", "x"]]])
    [255, 'x']
    >>> try:
    ...     decode(["D", "1.5"], extras=frozenset())
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
            tol: tuple[float, float] | None = None, extra: tuple = ()) -> bool:
    """The verdict of one case: `result OP expected` (or `expected OP result`) on decoded plain values.

    `is`/`is not` only ever meet None, True or False (the converter refuses any other `is`), so identity
    here is the singletons' identity. `truth` is `bool(result) == expected` (the sandbox sends the bit).
    The test's tolerance forms keep their own meaning (`extra` holds their parameters):
      abs< / abs<=   abs(result - expected) < tol, as written (`extra` = (tol, expected written first))
      isclose        math.isclose(result, expected, rel_tol=, abs_tol=)   (`extra` = (rel_tol, abs_tol))
      approx / approx!=       result == pytest.approx(expected, rel=, abs=, nan_ok=)   (`extra` = the three)
      np.isclose / np.allclose  numpy's rule            (`extra` = (rtol, atol, equal_nan))

    >>> matches(2.0, "==", 2), matches([0.1 + 0.2], "==", [0.3], tol=(1e-9, 0.0)), matches(1, "is", True)
    (True, True, False)
    >>> matches(1.5, "abs<", 1.0, extra=(0.5, False)), matches(1.5, "abs<=", 1.0, extra=(0.5, False))
    (False, True)
    """
    if op == "truth":
        return bool(result) is expected
    if op in ("abs<", "abs<="):
        limit, lit_first = extra
        diff = (expected - result) if lit_first else (result - expected)
        return bool(OPS[op[3:]](abs(diff), limit))
    if op == "isclose":
        return math.isclose(result, expected, rel_tol=extra[0], abs_tol=extra[1])
    if op in ("approx", "approx!="):
        close = approx_eq(result, expected, *extra)
        return close if op == "approx" else not close
    if op in ("np.isclose", "np.allclose"):
        return np_close(result, expected, *extra, whole=op == "np.allclose")
    if tol is not None:
        close = _close(result, expected, tol)
        return close if op == "==" else not close
    a, b = (result, expected) if result_first else (expected, result)
    return bool(OPS[op](a, b))


def approx_eq(actual: Any, expected: Any, rel: Any = None, abs_: Any = None, nan_ok: bool = False) -> bool:
    """`actual == pytest.approx(expected, rel=rel, abs=abs_, nan_ok=nan_ok)` by pytest's own rules (9.x): a
    flat dict compares key sets, then values; a flat list or tuple compares lengths, then items (any
    sequence type); a scalar: a bool only equals a bool, exact equality passes, non-numbers need it, nan
    never passes unless nan_ok, an infinite expected value only equals itself, else
    |expected - actual| <= max(rel * |expected|, abs) (rel 1e-6, abs 1e-12; abs alone when only abs given).

    >>> approx_eq((0.1 + 0.2, 1.0), (0.3, 1.0)), approx_eq({"a": 1.0000001}, {"a": 1.0}), approx_eq(1.1, 1.0, abs_=0.2)
    (True, True, True)
    """
    if isinstance(expected, dict):
        try:
            if set(actual.keys()) != set(expected.keys()):
                return False
        except AttributeError:
            return False
        return all(_approx_scalar(actual[k], x, rel, abs_, nan_ok) for k, x in expected.items())
    if isinstance(expected, (list, tuple)):
        try:
            if len(actual) != len(expected):
                return False
        except TypeError:
            return False
        return all(_approx_scalar(a, x, rel, abs_, nan_ok) for a, x in zip(actual, expected))
    return _approx_scalar(actual, expected, rel, abs_, nan_ok)


def _approx_scalar(actual: Any, expected: Any, rel: Any, abs_: Any, nan_ok: bool) -> bool:
    if isinstance(expected, bool) and not isinstance(actual, bool):
        return False
    if actual == expected:
        return True
    number = (int, float, complex, fractions.Fraction, decimal.Decimal)
    if isinstance(expected, bool) or not (isinstance(expected, number) and isinstance(actual, number)):
        return False
    if _is_nan(abs(expected)):
        return nan_ok and _is_nan(abs(actual))
    if _is_inf(abs(expected)):
        return False
    if isinstance(expected, decimal.Decimal):
        rel = decimal.Decimal(rel) if isinstance(rel, (int, float)) else rel
        abs_ = decimal.Decimal(abs_) if isinstance(abs_, (int, float)) else abs_
        default_rel, default_abs = decimal.Decimal("1e-6"), decimal.Decimal("1e-12")
    else:
        default_rel, default_abs = 1e-6, 1e-12
    absolute = abs_ if abs_ is not None else default_abs
    if _is_nan(absolute) or absolute < 0:
        raise ValueError("absolute tolerance can't be NaN or negative")
    if rel is None and abs_ is not None:
        tolerance = absolute
    else:
        relative = (rel if rel is not None else default_rel) * abs(expected)
        if _is_nan(relative) or relative < 0:
            raise ValueError("relative tolerance can't be NaN or negative")
        tolerance = max(relative, absolute)
    return bool(abs(expected - actual) <= tolerance)


def _is_nan(v: Any) -> bool:
    return v.is_nan() if isinstance(v, decimal.Decimal) else math.isnan(v)


def _is_inf(v: Any) -> bool:
    return v.is_infinite() if isinstance(v, decimal.Decimal) else math.isinf(v)


def np_close(a: Any, b: Any, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False,
             whole: bool = False) -> bool:
    """`numpy.allclose(a, b)` (`whole`) or `bool(numpy.isclose(a, b))` on plain values, without numpy: elementwise
    |a - b| <= atol + rtol * |b| (asymmetric: b is the reference), equal infinities are close, nan only with
    equal_nan; equal shapes or a scalar against anything. `isclose` of more than one element raises, as
    numpy's array truth value does.

    >>> np_close(1.0, 1.000001), np_close([1.0, 2.0], 2.0000001, whole=True), np_close(1e-9, 0.0)
    (True, False, True)
    """
    xs, ys = _flat(a), _flat(b)
    if len(xs) != len(ys):
        if len(ys) == 1 and not isinstance(b, (list, tuple)):
            ys = ys * len(xs)
        elif len(xs) == 1 and not isinstance(a, (list, tuple)):
            xs = xs * len(ys)
        else:
            raise ValueError("operands could not be broadcast together")
    if not whole and len(xs) != 1:
        raise ValueError("the truth value of an array with more than one element is ambiguous")
    return all(_np_one(x, y, rtol, atol, equal_nan) for x, y in zip(xs, ys))


def _flat(v: Any) -> list:
    if isinstance(v, (list, tuple)):
        shapes = {len(x) if isinstance(x, (list, tuple)) else -1 for x in v}
        if len(shapes) > 1:
            raise ValueError("an inhomogeneous shape")
        return [y for x in v for y in _flat(x)]
    return [v]


def _np_one(x: Any, y: Any, rtol: float, atol: float, equal_nan: bool) -> bool:
    number = (int, float, complex, fractions.Fraction, decimal.Decimal)
    if not (isinstance(x, number) and isinstance(y, number)):
        raise TypeError("ufunc 'isfinite' not supported for the input types")
    x, y = (complex(x), complex(y)) if isinstance(x, complex) or isinstance(y, complex) else (float(x), float(y))
    nan_x, nan_y = cmath.isnan(x), cmath.isnan(y)
    if nan_x or nan_y:
        return equal_nan and nan_x and nan_y
    if cmath.isinf(x) or cmath.isinf(y):
        return x == y
    return abs(x - y) <= atol + rtol * abs(y)


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


JUDGES = ("lines", "livecodebench", "exact")


def same_output(got: bytes, want: str, rule: str = "lines") -> bool:
    """A program case: stdout against the expected text, by the dataset's judge.
      lines          line by line, ignoring trailing spaces on each line and trailing empty lines (APPS,
                     CodeContests)
      livecodebench  LiveCodeBench's grade_stdio: the whole text and then each line stripped of whitespace on
                     both sides, as many lines, each equal as text or else as a list of Decimal tokens
      exact          byte for byte (after UTF-8 decoding)

    >>> same_output(b"3 \\n4\\n\\n", "3\\n4"), same_output(b"  3\\n4.0\\n", "3\\n4", "livecodebench")
    (True, True)
    """
    try:
        text = got.decode("utf-8")
    except UnicodeDecodeError:
        return False
    if rule == "exact":
        return text == want
    if rule == "livecodebench":
        a, b = _stripped(text), _stripped(want)
        return len(a) == len(b) and all(x == y or _as_decimals(x) == _as_decimals(y) is not None
                                        for x, y in zip(a, b))
    return _lines(text) == _lines(want)


def _stripped(text: str) -> list[str]:
    return [line.strip() for line in text.strip().split("\n")]


def _as_decimals(line: str) -> list | None:
    try:
        out = [decimal.Decimal(tok) for tok in line.split()]
        return out if all(not d.is_nan() for d in out) else None
    except (decimal.InvalidOperation, ValueError):
        return None


def _lines(text: str) -> list[str]:
    lines = [line.rstrip() for line in text.replace("\r\n", "\n").split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return lines
