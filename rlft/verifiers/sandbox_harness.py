"""How a test becomes observations, and the harness that makes them inside the sandbox.

Parent side (`plan`): a test (setup lines ending in one `assert`) whose condition is a comparison
`A op B [op C ...]` (or a bare expression, optionally under `not`) is split into sides. A side that is a
literal is an expected value the parent holds; a side that evaluates without the solution (in a separate
sandboxed process that never sees the code: `reference` values) is one too. The remaining sides are
*observed*: the solution's process evaluates them and sends back their values, encoded as plain data, and
the parent applies the comparison to the decoded values. The solution's process receives only the
observed expressions and the setup lines they need (a backward slice on assigned names), never the
expected side. A test without such an anchor (no side computable without the code, an assert inside a
block, a `check(candidate)` function) is *opaque*: it runs whole in the solution's process and passes when that
process reports it finished; see `rlft.verifiers.sandbox` for what that means for forging.

Child side (`child_source`): read the job on stdin, set the rlimits, move the code's stdout to stderr
(the result pipe is a private dup of fd 1), run the code, the setup, evaluate each expression, write
one JSON line, exit. Values are encoded with the built-in types' own methods (`int.__repr__`,
`list.__iter__`, ...), so a subclass's overridden `__eq__`, `__repr__` or `__iter__` is never called
and an object that is not plain data (an "AlwaysEqual") has no encoding at all.
"""

from __future__ import annotations

import ast
import inspect
import json
import operator
from dataclasses import dataclass, field
from functools import cache
from typing import Any

_OPS = {ast.Eq: "==", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=",
        ast.Is: "is", ast.IsNot: "is not", ast.In: "in", ast.NotIn: "not in"}
_APPLY = {"==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le, ">": operator.gt,
          ">=": operator.ge, "in": lambda a, b: a in b, "not in": lambda a, b: a not in b}
_SINGLETONS = (None, True, False, Ellipsis)
MAX_DEPTH = 100  # nesting of an encoded value


@dataclass
class TestPlan:
    """One test: either opaque (`source` runs whole) or sides with expected values and observations."""

    source: str
    opaque: bool = True
    setup: list[str] = field(default_factory=list)  # statements before the assert
    sides: list[str] = field(default_factory=list)  # expression source of each side
    ops: list[str] = field(default_factory=list)  # between sides; ["truth"] for a bare `assert E`
    negate: bool = False
    known: dict[int, Any] = field(default_factory=dict)  # side index -> expected value (parent-held)
    needs_reference: list[int] = field(default_factory=list)  # non-literal sides to try without the code
    names: list[str] = field(default_factory=list)  # setup names the non-literal sides read
    bound: dict[str, Any] = field(default_factory=dict)  # name -> encoded value, computed without the code

    def observed(self) -> list[int]:
        return [i for i in range(len(self.sides)) if i not in self.known]

    def solution_bind(self) -> dict[str, Any]:
        """The values (computed without the code) of the setup names the observed sides read; only those,
        so an expected value set up by name (`want = [1, 2]`) is never sent."""
        read = set().union(*(_loads(ast.parse(self.sides[i], mode="eval")) for i in self.observed()))
        return {n: v for n, v in self.bound.items() if n in read}

    def solution_setup(self) -> str:
        """The setup statements the observed sides still need: a backward slice on assigned names, less the
        names sent as values (`bound`); statements that assign nothing (`random.seed(0)`) are kept."""
        if self.opaque:
            return self.source
        needed = set().union(*(_loads(ast.parse(self.sides[i], mode="eval")) for i in self.observed()))
        needed -= set(self.bound)
        keep: list[str] = []
        for src in reversed(self.setup):
            node = ast.parse(src)
            stores = _stores(node)
            if stores & needed or not stores:
                keep.append(src)
                needed = (needed - stores) | _loads(node) if stores else needed | _loads(node)
        return "\n".join(reversed(keep))


def _loads(tree: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _stores(tree: ast.AST) -> set[str]:
    out = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del))}
    for n in ast.walk(tree):
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(n.name)
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            out |= {(a.asname or a.name).split(".")[0] for a in n.names}
    return out


def plan(test: str) -> TestPlan:
    """Split one test into sides (see the module docstring); opaque when it has no single final assert."""
    try:
        body = ast.parse(test).body
    except (SyntaxError, ValueError, RecursionError, MemoryError):  # ValueError: NUL bytes, surrogates
        return TestPlan(test)
    asserts = [n for n in ast.walk(ast.Module(body=body, type_ignores=[])) if isinstance(n, ast.Assert)]
    if not body or not isinstance(body[-1], ast.Assert) or len(asserts) != 1:
        return TestPlan(test)
    cond, negate = body[-1].test, False
    while isinstance(cond, ast.UnaryOp) and isinstance(cond.op, ast.Not):
        cond, negate = cond.operand, not negate
    if isinstance(cond, ast.Compare):
        sides, ops = [cond.left, *cond.comparators], [_OPS[type(op)] for op in cond.ops]
    else:
        sides, ops = [cond], ["truth"]
    p = TestPlan(test, False, [ast.unparse(s) for s in body[:-1]], [ast.unparse(s) for s in sides], ops, negate)
    for i, side in enumerate(p.sides):
        try:
            p.known[i] = ast.literal_eval(side)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            pass
    if not p.known:  # no literal side: try each side without the code (one more process per test)
        p.needs_reference = list(range(len(p.sides)))
    stored = set().union(*(_stores(ast.parse(src)) for src in p.setup))
    read = set().union(*(_loads(ast.parse(p.sides[i], mode="eval")) for i in range(len(p.sides)) if i not in p.known))
    p.names = sorted(read & stored)  # sent as values when they evaluate without the code
    return p


def reference_job(p: TestPlan) -> tuple[str, list[str]] | None:
    """(setup, expressions) to evaluate without the code, or None when nothing needs it."""
    exprs = [p.sides[i] for i in p.needs_reference] + p.names
    return ("\n".join(p.setup), exprs) if exprs else None


def settle(p: TestPlan, reference: list | None) -> TestPlan:
    """Take the reference values that evaluated; a test left with no expected side becomes opaque."""
    keys = [*p.needs_reference, *p.names]
    for key, item in zip(keys, reference or []):
        if not (isinstance(item, list) and len(item) == 2 and item[0] == "v"):
            continue
        try:
            value = decode(item[1])
        except (ValueError, TypeError, KeyError, IndexError, RecursionError):
            continue
        if isinstance(key, int):
            p.known[key] = value
        else:
            p.bound[key] = item[1]
    if not p.opaque and not p.known and p.ops != ["truth"]:
        p.opaque = True  # every side needs the code: nothing to hold back (a bare `assert E` stays observed)
    return p


def verdict(p: TestPlan, observed: list) -> tuple[bool, str]:
    """(passed, why not) from the expected values and the decoded observations, in the parent."""
    values = dict(p.known)
    for i, item in zip(p.observed(), observed):
        if item[0] != "v":
            return False, str(item[1])[:300]
        try:
            values[i] = decode(item[1])
        except (ValueError, TypeError, KeyError, IndexError, RecursionError) as exc:
            return False, f"value of {p.sides[i][:60]} is not plain data ({type(exc).__name__})"
    if len(values) != len(p.sides):
        return False, "missing observation"
    try:
        if p.ops == ["truth"]:
            ok = bool(values[0])
        else:
            ok = all(_compare(op, values[k], values[k + 1]) for k, op in enumerate(p.ops))
    except Exception as exc:  # noqa: BLE001 - e.g. '<' between str and int: the test fails
        return False, f"{type(exc).__name__}: {str(exc)[:200]}"
    ok = ok != p.negate
    return ok, "" if ok else f"AssertionError: {p.source.splitlines()[-1][:200]}"


def _compare(op: str, a: Any, b: Any) -> bool:
    if op in ("is", "is not"):
        same = a is b if any(a is s or b is s for s in _SINGLETONS) else (type(a) is type(b) and a == b)
        return same if op == "is" else not same
    return bool(_APPLY[op](a, b))


def decode(enc: Any, depth: int = 0) -> Any:
    """Plain data from the harness's encoding (tags: see `_child`'s `encode`)."""
    if depth > MAX_DEPTH:
        raise ValueError("too deep")
    tag = enc[0]
    if tag == "n":
        return None
    if tag == "b":
        return bool(enc[1])
    if tag == "i":
        return int(enc[1], 16)  # hex, so no digit limit applies
    if tag == "f":
        return float(enc[1])
    if tag == "c":
        return complex(enc[1])
    if tag == "s":
        return str(enc[1])
    if tag == "y":
        return bytes.fromhex(enc[1])
    if tag == "e":
        return Ellipsis
    items = [decode(x, depth + 1) for x in enc[1]] if tag in "ltSF" else None
    if tag == "l":
        return items
    if tag == "t":
        return tuple(items)
    if tag == "S":
        return set(_few_collisions(items))
    if tag == "F":
        return frozenset(_few_collisions(items))
    if tag == "d":
        pairs = [(decode(k, depth + 1), decode(v, depth + 1)) for k, v in enc[1]]
        _few_collisions([k for k, _ in pairs])
        return dict(pairs)
    raise ValueError(f"unknown tag {tag!r}")


def _few_collisions(keys: list) -> list:
    """Refuse set/dict keys crafted to share one hash (ints k * (2**61 - 1) all hash to 0): building
    them would take the parent quadratic time."""
    hashes = [hash(k) for k in keys]
    if len(hashes) - len(set(hashes)) > 64:
        raise ValueError("too many keys with equal hashes")
    return keys


def parse_report(data: bytes) -> Any:
    """The harness's one JSON line, or None when the output is anything else (two lines, junk, nothing)."""
    if not data.endswith(b"\n") or data.count(b"\n") != 1:
        return None
    try:
        report = json.loads(data)
    except (ValueError, RecursionError):
        return None
    ok = isinstance(report, list) and len(report) == 2 and report[0] in ("ok", "code-error", "error")
    return report if ok else None


@cache
def child_source() -> str:
    return inspect.getsource(_child) + "\n_child()\n"


def _child() -> None:  # pragma: no cover - runs inside the sandbox process, shipped as source text
    """Read the job, set the rlimits, run the code then the setup, evaluate each expression, report."""
    import os
    import resource
    import sys

    # The job is the parent's ascii() of a dict of plain values, read before any untrusted code runs. Not
    # json: importing it (and re) costs ~90 ms per process here, more than bubblewrap does.
    job = eval(sys.stdin.buffer.read().decode("ascii"), {"__builtins__": {}})  # noqa: S307
    null = os.open("/dev/null", os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    out = os.dup(1)
    os.dup2(2, 1)  # the code's prints go to stderr; the report goes to the private copy of fd 1
    for name, (soft, hard) in job["rlimits"].items():
        res = getattr(resource, name)
        cur = resource.getrlimit(res)[1]
        if cur != resource.RLIM_INFINITY:
            soft, hard = min(soft, cur), min(hard, cur)
        try:
            resource.setrlimit(res, (soft, hard))
        except (ValueError, OSError):
            pass
    write, exit_, type_ = os.write, os._exit, type
    exc_types = (BaseException,)
    hex_of = int.__format__  # hex: no 4,300-digit limit (sys.set_int_max_str_digits) on power-of-2 bases
    scalars = ((bool, None), (int, lambda v: hex_of(v, "x")), (float, float.__repr__), (complex, complex.__repr__),
               (str, str.__str__), (bytes, bytes.hex))
    tags = {bool: "b", int: "i", float: "f", complex: "c", str: "s", bytes: "y"}
    containers = ((list, "l", list.__iter__), (tuple, "t", tuple.__iter__), (set, "S", set.__iter__),
                  (frozenset, "F", frozenset.__iter__))
    mro_of = type.__dict__["__mro__"].__get__
    list_, str_ = list, str

    def encode(v, depth=0):
        if depth > 100:
            raise ValueError("value nested too deep")
        if v is None:
            return ["n"]
        if v is Ellipsis:
            return ["e"]
        mro = mro_of(type_(v))
        for kind, fn in scalars:
            if kind in mro:
                return ["b", v is True] if kind is bool else [tags[kind], fn(v)]
        for kind, tag, it in containers:
            if kind in mro:
                return [tag, [encode(x, depth + 1) for x in list_(it(v))]]
        if dict in mro:
            return ["d", [[encode(k, depth + 1), encode(x, depth + 1)] for k, x in list_(dict.items(v))]]
        raise TypeError(f"{type_(v).__name__} is not plain data")

    def describe(exc):
        try:
            text = f"{type_(exc).__name__}: {str_(exc)}" if str_(exc) else type_(exc).__name__
        except exc_types:
            text = "error"
        return text[:300].replace("\n", " | ")

    def jstr(s):  # a JSON string, ASCII only (lone surrogates and all)
        if s.isascii() and s.isprintable() and '"' not in s and "\\" not in s:
            return '"' + s + '"'
        chars = []
        for ch in s:
            o = ord(ch)
            if 32 <= o < 127 and ch != '"' and ch != "\\":
                chars.append(ch)
            elif o > 0xFFFF:  # a surrogate pair
                o -= 0x10000
                chars.append("\\u%04x\\u%04x" % (0xD800 | (o >> 10), 0xDC00 | (o & 0x3FF)))
            else:
                chars.append("\\u%04x" % o)
        return '"' + "".join(chars) + '"'

    def dumps(v):  # the report holds lists, str and bool only
        if v is True or v is False:
            return "true" if v else "false"
        if type_(v) is str_:
            return jstr(v)
        return "[" + ",".join([dumps(x) for x in v]) + "]"

    def report(obj):
        try:
            data = dumps(obj) + "\n"
        except exc_types as exc:
            data = dumps(["error", "report failed: " + describe(exc)]) + "\n"
        write(out, data.encode("ascii"))
        exit_(0)

    builders = {"l": list, "t": tuple, "S": set, "F": frozenset}
    scalar_of = {"b": bool, "i": lambda x: int(x, 16), "f": float, "c": complex, "s": str, "y": bytes.fromhex}

    def decode(enc):  # the parent's encoding of a value computed without the code
        tag = enc[0]
        if tag == "n" or tag == "e":
            return None if tag == "n" else Ellipsis
        if tag in scalar_of:
            return scalar_of[tag](enc[1])
        if tag == "d":
            return {decode(k): decode(v) for k, v in enc[1]}
        return builders[tag](decode(x) for x in enc[1])

    scope = sys.modules["__main__"].__dict__  # the code's functions pickle (multiprocessing) as __main__.f
    code, setup, exprs, bind = job["code"], job["setup"], job["exprs"], job.get("bind") or {}
    del job
    if code is not None:
        try:
            exec(compile(code, "<solution>", "exec"), scope)
        except exc_types as exc:
            report(["code-error", describe(exc)])
    try:
        for name, enc in bind.items():
            scope[name] = decode(enc)
        exec(compile(setup, "<test>", "exec"), scope)
    except exc_types as exc:
        report(["error", describe(exc)])
    values = []
    for src in exprs:
        try:
            values.append(["v", encode(eval(compile(src, "<test>", "eval"), scope))])
        except exc_types as exc:
            values.append(["x", describe(exc)])
    report(["ok", values])
