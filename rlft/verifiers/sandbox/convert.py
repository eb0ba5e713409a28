"""The conservative conversion of the usual test formats into cases (`rlft.verifiers.sandbox.cases`).

What converts (with `ast.literal_eval` plus a closed table of typed constructors, never by running the
test: no slicing, no partial evaluation, no setup carried between statements):
  - `assert CALL OP LITERAL` (either side), OP one of == != < <= > >= in, not in; `is`/`is not` only with
    None, True, False; `assert CALL`, `assert not CALL`; a message after the comma is ignored;
  - CALL is `name(<literals>, key=<literal>)`, optionally inside set/frozenset/sorted/list/tuple(...) or
    round(..., n) (applied by the parent to the returned value);
  - tolerances: `math.isclose(CALL, LIT[, rel_tol=, abs_tol=])`, `abs(CALL - LIT) < LIT` (or <=),
    `CALL == pytest.approx(LIT[, rel=, abs=])`;
  - a string of such asserts (MBPP; one test per assert), a list of strings (one test each, all its
    asserts must pass), HumanEval's `def check(candidate):` made of such asserts plus the call
    `check(name)` (`candidate` is `name`; one test per assert); `import` lines (never run: a name they
    bind is not a literal) and HumanEval's `METADATA = <literal>` are allowed and ignored;
  - I/O pairs: {"inputs": [...], "outputs": [...]} (APPS), {"input": [...], "output": [...]} (CodeContests),
    a list of {"input": str, "output": str} (LiveCodeBench stdin tests; also "stdin"/"stdout");
  - JSON function cases: a list of {"fn": name, "args": [...], "kwargs": {...}, "expected": value,
    "rel_tol"/"abs_tol": number}; JSON has no tuple, so a tuple in the result compares as a list there.
Literal constructors: set, frozenset, tuple, list of a literal; float('inf'|'nan'|...); Decimal(str),
Fraction(a, b), Counter(...), OrderedDict(...), bytearray(b'...') (equal to bytes), date(...),
datetime(...) (with or without their module prefix).
Anything else (a setup statement, a loop, an uncalled `def test_...`, `check` without its call, a
non-literal expected value, `is` on other values, a call inside the arguments) is a `Refusal`: why it
cannot be judged soundly and how to rewrite it. The gold check turns refusals into one line per row.
"""

from __future__ import annotations

import ast
import collections
import datetime
import decimal
import fractions
from typing import Any

from rlft.verifiers.sandbox.cases import FIX_CALL, CallCase, Converted, ProgramCase, Refusal, Test, short
from rlft.verifiers.sandbox.values import OPS, Refused, encode

MAX_TEST_CHARS = 1_000_000
ITERATING = ("set", "frozenset", "sorted", "list", "tuple")  # wrappers the harness may materialize
APPROX = (1e-6, 1e-12)  # pytest.approx's default rel and abs
ISCLOSE = (1e-9, 0.0)  # math.isclose's


class _No(Exception):
    def __init__(self, why: str, fix: str = FIX_CALL):
        super().__init__(why)
        self.why, self.fix = why, fix


def convert(tests: Any) -> Converted:
    """The row's tests as cases, or refusals; see the module docstring for what converts.

    >>> c = convert("assert add(1, 2) == 3\\nassert add(0, 0) == 0")
    >>> [(t.cases[0].fn, t.cases[0].args, t.cases[0].expected) for t in c.tests], c.refusals
    ([('add', (1, 2), 3), ('add', (0, 0), 0)], [])
    >>> convert("x = [1]\\nassert f(x) == 1").refusals[0].why[:40]
    'line 1 `x = [1]` is a statement, not an '
    """
    out = Converted()
    if isinstance(tests, str):
        for number, (source, cases) in enumerate(_python(tests, split=True), 1):
            _add(out, number, source, cases)
    elif isinstance(tests, dict):
        for number, (source, cases) in enumerate(_io_columns(tests), 1):
            _add(out, number, source, cases)
    elif isinstance(tests, list) and tests:
        for number, item in enumerate(tests, 1):
            if isinstance(item, str):
                parts = _python(item, split=False)
                source, cases = parts[0] if parts else (item, _No("the test is empty", "at least one assert"))
            elif isinstance(item, dict):
                source, cases = short(str(item)), _dict_case(item)
            else:
                source, cases = short(repr(item)), _No("a test must be a string or an object", FIX_CALL)
            _add(out, number, source, cases)
    else:
        out.refusals.append(Refusal(1, short(repr(tests)), "no tests: expected a string of asserts, a list of "
                                    "tests or an object of I/O pairs"))
    return out


def _add(out: Converted, number: int, source: str, cases: Any) -> None:
    if not isinstance(cases, _No):
        try:  # every value must cross the wall: checked here, so running a case never meets a value it cannot send
            for c in cases:
                if isinstance(c, CallCase):
                    encode([list(c.args), c.kwargs, c.expected])
        except (Refused, RecursionError) as exc:
            cases = _No(f"a value is not plain data or is nested too deep ({short(str(exc), 60)})")
    if isinstance(cases, _No):
        out.refusals.append(Refusal(number, source, cases.why, cases.fix))
    else:
        out.tests.append(Test(tuple(cases), source, number))


# ----------------------------------------------------------------------------- Python asserts


def _python(text: str, split: bool) -> list[tuple[str, Any]]:
    """(source, cases or _No) per test: each assert when `split`, else the whole text as one test."""
    if len(text) > MAX_TEST_CHARS:
        return [(text, _No(f"the test is over {MAX_TEST_CHARS:,} characters", "shorter tests"))]
    try:
        body = ast.parse(text).body
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        why = f"not valid Python ({exc.msg}, line {exc.lineno})" if isinstance(exc, SyntaxError) else (
            f"not valid Python ({type(exc).__name__})")
        return [(text, _No(why, "valid Python"))]
    lines = text.splitlines()

    def src(node: ast.AST) -> str:
        return "\n".join(lines[node.lineno - 1:node.end_lineno]).strip() if hasattr(node, "lineno") else text

    try:
        asserts, target = _asserts(body, src)
    except _No as exc:
        return [(text, exc)]
    if not asserts:
        return [(text, _No("has no assert, so it cannot fail", FIX_CALL))]
    found = []
    for node in asserts:
        try:
            found.append((src(node), [_assert(node.test, target)]))
        except _No as exc:
            found.append((src(node), exc))
        except (ValueError, TypeError, RecursionError, MemoryError, OverflowError, SyntaxError,
                decimal.InvalidOperation) as exc:
            found.append((src(node), _No(f"a value cannot be read ({type(exc).__name__})")))
    if split:
        return found
    bad = next((cases for _, cases in found if isinstance(cases, _No)), None)
    return [(text, bad if bad is not None else [c for _, cases in found for c in cases])]


def _asserts(body: list[ast.stmt], src: Any) -> tuple[list[ast.Assert], dict[str, str]]:
    """The asserts to convert and {'candidate': 'name'} for a HumanEval `check`; _No for any other statement."""
    defs = {n.name: n for n in body if isinstance(n, ast.FunctionDef)}
    calls = [n for n in body if isinstance(n, ast.Expr) and isinstance(n.value, ast.Call)
             and isinstance(n.value.func, ast.Name) and n.value.func.id in defs]
    asserts: list[ast.Assert] = []
    target: dict[str, str] = {}
    for node in body:
        if isinstance(node, ast.Assert):
            asserts.append(node)
        elif _ignorable(node):
            continue
        elif isinstance(node, ast.FunctionDef):
            called = [c for c in calls if c.value.func.id == node.name]
            if not called:
                raise _No(f"defines `{node.name}` but never calls it, so its asserts would never run",
                          f"{FIX_CALL} at top level, or call {node.name}(<function>)")
            target = _check(node, called, src)
            asserts.extend(n for n in node.body if isinstance(n, ast.Assert))
        elif node not in calls:
            raise _No(f"line {node.lineno} `{short(src(node), 40)}` is a statement, not an assert: setup carried "
                      "between statements cannot be judged without running the test beside the code",
                      f"{FIX_CALL} with the values written in")
    asserts = [n for n in asserts if not (isinstance(n.test, ast.Constant) and n.test.value is True)]  # HumanEval
    return asserts, target


def _ignorable(node: ast.stmt) -> bool:
    """Imports, docstrings, `pass`, HumanEval's METADATA: nothing here is ever run."""
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return True  # never run: a name it binds is not a literal, so an assert using it is refused
    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
        return True
    if isinstance(node, ast.Assign) and [getattr(t, "id", "") for t in node.targets] == ["METADATA"]:
        _literal(node.value)
        return True
    return isinstance(node, ast.Pass)


def _check(fn: ast.FunctionDef, calls: list[ast.Expr], src: Any) -> dict[str, str]:
    """HumanEval's `def check(candidate)`: one plain parameter, called once with a function name."""
    a = fn.args
    if len(calls) != 1 or len(a.args) != 1 or a.posonlyargs or a.vararg or a.kwonlyargs or a.kwarg \
            or fn.decorator_list:
        raise _No(f"`{fn.name}` is not HumanEval's `def check(candidate)` called once as `check(name)`",
                  "def check(candidate): with asserts, then check(<function name>)")
    call = calls[0].value
    if len(call.args) != 1 or call.keywords or not isinstance(call.args[0], ast.Name):
        raise _No(f"`{short(src(calls[0]), 40)}` does not name the function under test", "check(<function name>)")
    for node in fn.body:
        if not (isinstance(node, ast.Assert) or _ignorable(node)):
            raise _No(f"line {node.lineno} `{short(src(node), 40)}` in {fn.name} is not an assert: setup, loops "
                      "and branches cannot be judged without running the test beside the code",
                      f"{FIX_CALL} per case inside {fn.name}")
    return {a.args[0].arg: call.args[0].id}


def _assert(test: ast.expr, target: dict[str, str]) -> CallCase:
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return _observed(test.operand, target, op="truth", expected=False)
    if isinstance(test, ast.Call) and _dotted(test.func) in ("math.isclose", "isclose"):
        return _isclose(test, target)
    if isinstance(test, ast.Compare):
        return _compare(test, target)
    return _observed(test, target, op="truth", expected=True)


def _compare(test: ast.Compare, target: dict[str, str]) -> CallCase:
    if len(test.ops) != 1:
        raise _No("a chained comparison", f"{FIX_CALL}, one comparison per assert")
    left, op_node, right = test.left, test.ops[0], test.comparators[0]
    op = _OP_NAMES.get(type(op_node))
    if op is None:
        raise _No(f"the operator {type(op_node).__name__} is not one of {', '.join(OPS)}")
    # abs(CALL - LIT) < TOL
    if isinstance(left, ast.Call) and _dotted(left.func) == "abs" and op in ("<", "<=") and len(left.args) == 1 \
            and isinstance(left.args[0], ast.BinOp) and isinstance(left.args[0].op, ast.Sub):
        diff = left.args[0]
        tol = _literal(right)
        if not isinstance(tol, (int, float)) or isinstance(tol, bool) or not tol >= 0:
            raise _No("the tolerance of abs(... - ...) < tol is not a number")
        call, lit = (diff.left, diff.right) if _is_call(diff.left) else (diff.right, diff.left)
        return _observed(call, target, op="==", expected=_number(lit), tol=(0.0, float(tol)))
    if _is_call(left):
        observed, expected, first = left, right, True
    elif _is_call(right):
        observed, expected, first = right, left, False
    else:
        raise _No("neither side is a call of the function under test with literal arguments")
    if _is_call(expected):
        raise _No("both sides call functions: the expected side must be a literal")
    if isinstance(expected, ast.Call) and _dotted(expected.func) in ("pytest.approx", "approx"):
        if op not in ("==", "!="):
            raise _No("pytest.approx outside == or !=")
        value, tol = _approx(expected)
        return _observed(observed, target, op=op, expected=value, tol=tol)
    value = _literal(expected)
    if op in ("is", "is not") and not (value is None or value is True or value is False):
        raise _No("`is` compares identity, which only None, True and False have across processes",
                  "assert f(<literal args>) == <literal>")
    return _observed(observed, target, op=op, expected=value, first=first)


def _isclose(test: ast.Call, target: dict[str, str]) -> CallCase:
    if len(test.args) != 2:
        raise _No("math.isclose needs two arguments")
    names = {"rel_tol": 0, "abs_tol": 1}
    tol = list(ISCLOSE)
    for kw in test.keywords:
        if kw.arg not in names:
            raise _No(f"math.isclose keyword {kw.arg} is not rel_tol or abs_tol")
        tol[names[kw.arg]] = float(_number(kw.value))
    a, b = test.args
    call, lit = (a, b) if _is_call(a) else (b, a)
    return _observed(call, target, op="==", expected=_number(lit), tol=(tol[0], tol[1]))


def _approx(node: ast.Call) -> tuple[Any, tuple[float, float]]:
    if len(node.args) != 1:
        raise _No("pytest.approx needs one value")
    tol = list(APPROX)
    for kw in node.keywords:
        if kw.arg not in ("rel", "abs"):
            raise _No(f"pytest.approx keyword {kw.arg} is not rel or abs")
        tol[kw.arg == "abs"] = float(_number(kw.value))
    return _literal(node.args[0]), (tol[0], tol[1])


def _number(node: ast.expr) -> Any:
    value = _literal(node)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _No("a tolerance compares numbers: this side is not a number")
    return value


def _is_call(node: ast.expr) -> bool:
    """A call of a function by name (possibly inside wrappers), not a literal constructor or a form."""
    while isinstance(node, ast.Call) and _dotted(node.func) in (*ITERATING, "round") and node.args:
        if _dotted(node.func) in ITERATING and not _is_call(node.args[0]):
            return False  # set([1, 2]): a literal constructor
        node = node.args[0]
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and _dotted(node.func) not in _CONSTRUCTORS and node.func.id not in ("abs", "isclose", "approx"))


def _observed(node: ast.expr, target: dict[str, str], op: str, expected: Any, first: bool = True,
              tol: tuple[float, float] | None = None) -> CallCase:
    wrappers: list = []
    while isinstance(node, ast.Call) and _dotted(node.func) in (*ITERATING, "round") and node.args:
        name = _dotted(node.func)
        if name == "round":
            digits = _literal(node.args[1]) if len(node.args) == 2 else None
            if len(node.args) > 2 or node.keywords or not (digits is None or type(digits) is int):
                raise _No("round(..., n) with an int literal n")
            wrappers.append(("round", digits))
        elif len(node.args) != 1 or node.keywords:
            raise _No(f"{name}(...) with more than the result in it (e.g. sorted(key=...))")
        else:
            wrappers.append((name,))
        node = node.args[0]
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
        raise _No(f"`{short(_unparse(node), 40)}` is not a call of the function under test by name",
                  FIX_CALL)
    name = target.get(node.func.id, node.func.id)
    if target and node.func.id not in target:
        raise _No(f"calls `{node.func.id}` inside check: only `{next(iter(target))}` is the function under test")
    args = tuple(_literal(a, in_call=True) for a in node.args)
    kwargs = {}
    for kw in node.keywords:
        if kw.arg is None:
            raise _No("**kwargs in the call")
        kwargs[kw.arg] = _literal(kw.value, in_call=True)
    return CallCase(name, args, kwargs, op, expected, first, tuple(reversed(wrappers)), tol)


def _unparse(node: ast.AST) -> str:
    try:
        return ast.unparse(node)
    except (RecursionError, ValueError, MemoryError):
        return "(too deep to show)"


def _dotted(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        return f"{node.value.id}.{node.attr}"
    return ""


def _literal(node: ast.expr, in_call: bool = False) -> Any:
    """A literal value: ast.literal_eval, plus containers of literals and the constructor table."""
    if isinstance(node, ast.Call):
        name = _dotted(node.func)
        make = _CONSTRUCTORS.get(name)
        if make is None or any(kw.arg is None for kw in node.keywords):
            where = "an argument" if in_call else "the expected side"
            raise _No(f"{where} `{short(_unparse(node), 40)}` is not a literal: it would have to run beside the code")
        return make(*(_literal(a) for a in node.args), **{kw.arg: _literal(kw.value) for kw in node.keywords})
    calls = isinstance(node, (ast.List, ast.Tuple, ast.Set, ast.Dict)) and any(
        isinstance(n, ast.Call) for n in ast.walk(node))
    if calls and isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        items = [_literal(e) for e in node.elts]
        return {ast.List: list, ast.Tuple: tuple, ast.Set: set}[type(node)](items)
    if calls and isinstance(node, ast.Dict):
        if None in node.keys:
            raise _No("** inside a dict literal")
        return {_literal(k): _literal(v) for k, v in zip(node.keys, node.values)}
    try:
        return ast.literal_eval(node)
    except ValueError as exc:
        where = "an argument" if in_call else "the expected side"
        raise _No(f"{where} `{short(_unparse(node), 40)}` is not a literal: it would have to run beside the "
                  "code") from exc


def _float(x: Any) -> float:
    if not isinstance(x, (str, int, float)) or isinstance(x, bool) or (isinstance(x, str) and len(x) > 100):
        raise _No("float(...) of something other than a number or a short string")
    return float(x)


def _decimal(x: Any) -> decimal.Decimal:
    if not isinstance(x, (str, int)) or isinstance(x, bool) or len(str(x)) > 1000:
        raise _No("Decimal(...) of something other than a string or int of at most 1,000 characters")
    return decimal.Decimal(x)


def _fraction(*args: Any) -> fractions.Fraction:
    if not all(isinstance(a, (int, str)) and not isinstance(a, bool) and len(str(a)) <= 1000 for a in args):
        raise _No("Fraction(...) of something other than ints or a string")
    return fractions.Fraction(*args)


def _bytes(x: Any) -> bytes:
    if not isinstance(x, bytes):
        raise _No("bytearray(...) of something other than a bytes literal")
    return x


def _checked(kind: type, accepts: tuple) -> Any:
    def make(*args: Any, **kwargs: Any) -> Any:
        if len(args) > 1 or (args and not isinstance(args[0], accepts)) or (kwargs and kind is not Counter):
            raise _No(f"{kind.__name__}(...) of something other than a literal container")
        return kind(*args, **kwargs)
    return make


def _date(kind: type) -> Any:
    def make(*args: Any) -> Any:
        if not all(type(a) is int for a in args) or not 3 <= len(args) <= 7:
            raise _No(f"{kind.__name__}(...) needs int arguments")
        return kind(*args)
    return make


Counter, OrderedDict = collections.Counter, collections.OrderedDict
_ITERABLE = (list, tuple, set, frozenset, dict, str, bytes)
_CONSTRUCTORS = {
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
_OP_NAMES = {ast.Eq: "==", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.In: "in",
             ast.NotIn: "not in", ast.Is: "is", ast.IsNot: "is not"}


# ----------------------------------------------------------------------------- data: I/O pairs, JSON calls


def _io_columns(d: dict) -> list[tuple[str, Any]]:
    """APPS {"inputs", "outputs"} or CodeContests {"input", "output"}: one program test per pair."""
    if "fn_name" in d:
        return [(short(str(d)), _No("APPS call-based tests (fn_name) do not say how outputs wrap the value",
                                    '[{"fn": name, "args": [...], "expected": value}, ...]'))]
    for ins, outs in (("inputs", "outputs"), ("input", "output")):
        if isinstance(d.get(ins), list) and isinstance(d.get(outs), list):
            if len(d[ins]) != len(d[outs]) or not d[ins]:
                return [(short(str(d)), _No(f"{ins} and {outs} differ in length or are empty",
                                            "one output per input"))]
            return [(short(f"stdin {i!r} -> {o!r}"), _program(i, o)) for i, o in zip(d[ins], d[outs])]
    return [(short(str(d)), _No("an object of tests needs lists under inputs/outputs (or input/output)",
                                '{"inputs": ["1 2\\n"], "outputs": ["3\\n"]}'))]


def _program(stdin: Any, stdout: Any) -> Any:
    if not (isinstance(stdin, str) and isinstance(stdout, str)):
        return _No("program input and output must be strings", '{"input": "1 2\\n", "output": "3\\n"}')
    return [ProgramCase(stdin, stdout)]


def _dict_case(d: dict) -> Any:
    if "fn" in d:
        if not (isinstance(d["fn"], str) and d["fn"].isidentifier() and isinstance(d.get("args", []), list)
                and isinstance(d.get("kwargs", {}), dict) and "expected" in d):
            return _No("a function case needs fn (a name), args (a list) and expected",
                       '{"fn": "add", "args": [1, 2], "expected": 3}')
        tol = None
        if "rel_tol" in d or "abs_tol" in d:
            r, a = d.get("rel_tol", 0.0), d.get("abs_tol", 0.0)
            if not all(isinstance(x, (int, float)) and not isinstance(x, bool) and x >= 0 for x in (r, a)):
                return _No("rel_tol and abs_tol must be non-negative numbers", '"rel_tol": 1e-6')
            tol = (float(r), float(a))
        return [CallCase(d["fn"], tuple(d.get("args", [])), dict(d.get("kwargs", {})), "==", d["expected"],
                         tol=tol, json=True)]
    if d.get("testtype", "stdin") != "stdin":
        return _No(f"testtype {short(str(d.get('testtype')), 20)} tests need the harness of their benchmark",
                   '{"input": "...", "output": "..."} for stdin tests, or {"fn": ..., "args": ..., "expected": ...}')
    for ins, outs in (("input", "output"), ("stdin", "stdout")):
        if ins in d and outs in d:
            return _program(d[ins], d[outs])
    return _No("an object test needs input/output, stdin/stdout or fn/args/expected",
               '{"input": "1 2\\n", "output": "3\\n"}')
