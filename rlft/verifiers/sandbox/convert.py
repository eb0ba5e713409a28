"""The conservative conversion of the usual test formats into cases (`rlft.verifiers.sandbox.cases`).

What converts (literal values by `literals`: constants, containers, a closed table of typed constructors,
literal arithmetic folded within caps; never by running the test, no setup carried between statements):
  - `assert CALL OP LITERAL` (either side), OP one of == != < <= > >= in, not in; `is`/`is not` only with
    None, True, False; `assert CALL`, `assert not CALL`; a message after the comma is ignored;
  - CALL is `name(<literals>, key=<literal>)`, optionally inside set/frozenset/sorted/list/tuple(...) or
    round(..., n) (applied by the parent to the returned value);
  - the test's tolerance forms, each with its own meaning (`values.matches`): `abs(CALL - LIT) < TOL`
    (or <=, either order) as written, `math.isclose(CALL, LIT[, rel_tol=, abs_tol=])`,
    `CALL == pytest.approx(LIT[, rel=, abs=, nan_ok=])` (scalars, flat sequences, flat dicts), and
    numpy's `isclose`/`allclose(CALL, LIT[, rtol, atol, equal_nan])` where the test imports numpy
    (`_Context` reads the imports: `np.isclose`, `from numpy import isclose`);
  - a string of such asserts (MBPP; one test per assert), a list of strings (one test each, all its
    asserts must pass), HumanEval's `def check(candidate):` made of such asserts plus the call
    `check(name)` after it (`candidate` is `name`, per check; one test per assert); `import` lines (never
    run: a name they bind is not a literal) and HumanEval's `METADATA = <literal>` are allowed and ignored;
  - a HumanEval `check` with more than such asserts (setup, loops, random inputs, a print, helpers of the
    prompt, the function on both sides): one `JudgeCase` for the whole text, run as written by the judge
    sandbox, where `judged.judge_case` admits it (refusing try/with/raise, type/isinstance/id/..., `is`
    on other values, non-stdlib imports);
  - I/O pairs: {"inputs": [...], "outputs": [...]} (APPS), {"input": [...], "output": [...]} (CodeContests),
    a list of {"input": str, "output": str} (LiveCodeBench stdin tests, judged by LiveCodeBench's rule
    when they carry its "testtype"; also "stdin"/"stdout"); an optional "judge" ("lines",
    "livecodebench", "exact") picks the output rule (`values.same_output`);
  - JSON function cases: a list of {"fn": name, "args": [...], "kwargs": {...}, "expected": value,
    "rel_tol"/"abs_tol": number}; JSON has no tuple, so a tuple in the result compares as a list there.
Anything else (a top-level setup statement or loop, an uncalled `def test_...`, `check` without its call or
called before it is defined, a non-literal expected value, `is` on other values, a call inside the
arguments) is a `Refusal`: why it cannot be judged soundly and how to rewrite it. The gold check turns
refusals into one line per row.
"""

from __future__ import annotations

import ast
import decimal
from typing import Any

from rlft.verifiers.sandbox.cases import FIX_CALL, CallCase, Converted, ProgramCase, Refusal, Test, short
from rlft.verifiers.sandbox.judged import judge_case
from rlft.verifiers.sandbox.literals import CONSTRUCTORS as _CONSTRUCTORS
from rlft.verifiers.sandbox.literals import No as _No
from rlft.verifiers.sandbox.literals import dotted as _dotted
from rlft.verifiers.sandbox.literals import literal as _literal
from rlft.verifiers.sandbox.literals import unparse as _unparse
from rlft.verifiers.sandbox.values import JUDGES, OPS, Refused, encode

MAX_TEST_CHARS = 1_000_000
ITERATING = ("set", "frozenset", "sorted", "list", "tuple")  # wrappers the harness may materialize
APPROX = (1e-6, 1e-12)  # pytest.approx's default rel and abs
ISCLOSE = (1e-9, 0.0)  # math.isclose's


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
    """(source, cases or _No) per test: each assert when `split`, else the whole text as one test. A test with a
    HumanEval `check` that is more than asserts on literals is one JudgeCase (the whole text, as written)."""
    if len(text) > MAX_TEST_CHARS:
        return [(text, _No(f"the test is over {MAX_TEST_CHARS:,} characters", "shorter tests"))]
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        why = f"not valid Python ({exc.msg}, line {exc.lineno})" if isinstance(exc, SyntaxError) else (
            f"not valid Python ({type(exc).__name__})")
        return [(text, _No(why, "valid Python"))]
    body = tree.body
    lines = text.splitlines()

    def src(node: ast.AST) -> str:
        return "\n".join(lines[node.lineno - 1:node.end_lineno]).strip() if hasattr(node, "lineno") else text

    ctx = _Context(body)
    try:
        asserts, judged = _asserts(body, src, ctx)
    except _No as exc:
        return [(text, exc)]
    if judged is not None:
        try:
            return [(text, [judge_case(tree, text, judged)])]
        except _No as exc:
            return [(text, exc)]
    if not asserts:
        return [(text, _No("has no assert, so it cannot fail", FIX_CALL))]
    found = []
    for node, target in asserts:
        try:
            found.append((src(node), [_assert(node.test, target, ctx)]))
        except _No as exc:
            found.append((src(node), exc))
        except (ValueError, TypeError, RecursionError, MemoryError, OverflowError, SyntaxError,
                decimal.InvalidOperation) as exc:
            found.append((src(node), _No(f"a value cannot be read ({type(exc).__name__})")))
    if split:
        return found
    bad = next((cases for _, cases in found if isinstance(cases, _No)), None)
    return [(text, bad if bad is not None else [c for _, cases in found for c in cases])]


class _Context:
    """What the test's imports make of a name: `np` -> numpy, `isclose` -> math.isclose or numpy.isclose, ..."""

    def __init__(self, body: list[ast.stmt]):
        self.aliases: dict[str, str] = {}
        for node in ast.walk(ast.Module(body=body, type_ignores=[])):
            if isinstance(node, ast.Import):
                for a in node.names:
                    self.aliases[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for a in node.names:
                    self.aliases[a.asname or a.name] = f"{node.module}.{a.name}"

    def qualified(self, func: ast.expr) -> str:
        """The function a call names, as module.name where the imports say (or the usual meaning without one)."""
        name = _dotted(func)
        head, _, rest = name.partition(".")
        if head in self.aliases:
            full = self.aliases[head] + ("." + rest if rest else "")
        else:
            full = {"isclose": "math.isclose", "approx": "pytest.approx"}.get(name, name)
        return full


def _asserts(body: list[ast.stmt], src: Any, ctx: _Context) -> tuple[list[tuple[ast.Assert, dict]], str | None]:
    """The asserts to convert, each with its own {'candidate': 'name'} (a HumanEval `check` binds `candidate` to
    the function its call names); or, as the second item, the name of a `check` whose body needs the judge.
    _No for any other statement, or a check called before it is defined (Python: NameError)."""
    defs = {n.name: n for n in body if isinstance(n, ast.FunctionDef)}
    calls = [n for n in body if isinstance(n, ast.Expr) and isinstance(n.value, ast.Call)
             and isinstance(n.value.func, ast.Name) and n.value.func.id in defs]
    asserts: list[tuple[ast.Assert, dict]] = []
    defined: set[str] = set()
    for node in body:
        if isinstance(node, ast.Assert):
            asserts.append((node, {}))
        elif _ignorable(node):
            continue
        elif isinstance(node, ast.FunctionDef):
            called = [c for c in calls if c.value.func.id == node.name]
            if not called and not any(isinstance(n, ast.Assert) for n in ast.walk(node)):
                defined.add(node.name)  # a helper of the test (HumanEval's prompt helpers): the judge defines it
                continue
            if not called:
                raise _No(f"defines `{node.name}` but never calls it, so its asserts would never run",
                          f"{FIX_CALL} at top level, or call {node.name}(<function>)")
            defined.add(node.name)
            target = _check(node, called, src)
            if any(not (isinstance(n, ast.Assert) or _ignorable(n)) for n in node.body):
                return [], node.name
            inner = [n for n in node.body if isinstance(n, ast.Assert)
                     and not (isinstance(n.test, ast.Constant) and n.test.value is True)]  # HumanEval's `assert True`
            try:
                for n in inner:
                    _assert(n.test, target, ctx)
            except (_No, ValueError, TypeError, RecursionError, MemoryError, OverflowError, SyntaxError,
                    decimal.InvalidOperation):
                return [], node.name  # its asserts are not all literal cases: the judge runs it as written
            asserts.extend((n, target) for n in inner)
        elif node in calls:
            if node.value.func.id not in defined:
                raise _No(f"line {node.lineno} `{short(src(node), 40)}` calls `{node.value.func.id}` before it is "
                          "defined: Python raises NameError there, so no code can pass", "define it, then call it")
        else:
            raise _No(f"line {node.lineno} `{short(src(node), 40)}` is a statement, not an assert: setup carried "
                      "between statements cannot be judged without running the test beside the code",
                      f"{FIX_CALL} with the values written in")
    asserts = [(n, t) for n, t in asserts if not (isinstance(n.test, ast.Constant) and n.test.value is True)]
    return asserts, None


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
    return {a.args[0].arg: call.args[0].id}


# ----------------------------------------------------------------------------- the judge's admission

def _assert(test: ast.expr, target: dict[str, str], ctx: _Context) -> CallCase:
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return _observed(test.operand, target, op="truth", expected=False)
    if isinstance(test, ast.Call):
        name = ctx.qualified(test.func)
        if name == "math.isclose":
            return _isclose(test, target)
        if name in ("numpy.isclose", "numpy.allclose"):
            return _np_close(test, target, name)
    if isinstance(test, ast.Compare):
        return _compare(test, target, ctx)
    return _observed(test, target, op="truth", expected=True)


def _compare(test: ast.Compare, target: dict[str, str], ctx: _Context) -> CallCase:
    if len(test.ops) != 1:
        raise _No("a chained comparison", f"{FIX_CALL}, one comparison per assert")
    left, op_node, right = test.left, test.ops[0], test.comparators[0]
    op = _OP_NAMES.get(type(op_node))
    if op is None:
        raise _No(f"the operator {type(op_node).__name__} is not one of {', '.join(OPS)}")
    # abs(CALL - LIT) < TOL, as written (also TOL > abs(...))
    if op in (">", ">=") and _is_abs_diff(right):
        left, right, op = right, left, {">": "<", ">=": "<="}[op]
    if op in ("<", "<=") and _is_abs_diff(left):
        diff = left.args[0]
        tol = _literal(right)
        if not isinstance(tol, (int, float)) or isinstance(tol, bool):
            raise _No("the tolerance of abs(... - ...) < tol is not a number")
        lit_first = not _is_call(diff.left)
        call, lit = (diff.right, diff.left) if lit_first else (diff.left, diff.right)
        return _observed(call, target, op="abs" + op, expected=_number(lit), extra=(tol, lit_first))
    if _is_call(left):
        observed, expected, first = left, right, True
    elif _is_call(right):
        observed, expected, first = right, left, False
    else:
        raise _No("neither side is a call of the function under test with literal arguments")
    if _is_call(expected):
        raise _No("both sides call functions: the expected side must be a literal")
    if isinstance(expected, ast.Call) and ctx.qualified(expected.func) == "pytest.approx":
        if op not in ("==", "!="):
            raise _No("pytest.approx outside == or !=")
        value, extra = _approx(expected)
        return _observed(observed, target, op="approx" if op == "==" else "approx!=", expected=value, extra=extra)
    value = _literal(expected)
    if op in ("is", "is not") and not (value is None or value is True or value is False):
        raise _No("`is` compares identity, which only None, True and False have across processes",
                  "assert f(<literal args>) == <literal>")
    return _observed(observed, target, op=op, expected=value, first=first)


def _is_abs_diff(node: ast.expr) -> bool:
    return (isinstance(node, ast.Call) and _dotted(node.func) == "abs" and len(node.args) == 1 and not node.keywords
            and isinstance(node.args[0], ast.BinOp) and isinstance(node.args[0].op, ast.Sub)
            and (_is_call(node.args[0].left) != _is_call(node.args[0].right)))


def _isclose(test: ast.Call, target: dict[str, str]) -> CallCase:
    if len(test.args) != 2:
        raise _No("math.isclose needs two arguments")
    names = {"rel_tol": 0, "abs_tol": 1}
    tol = list(ISCLOSE)
    for kw in test.keywords:
        if kw.arg not in names:
            raise _No(f"math.isclose keyword {kw.arg} is not rel_tol or abs_tol")
        tol[names[kw.arg]] = _number(kw.value)
    a, b = test.args
    call, lit = (a, b) if _is_call(a) else (b, a)
    return _observed(call, target, op="isclose", expected=_number(lit, complex_ok=True), extra=(tol[0], tol[1]))


def _np_close(test: ast.Call, target: dict[str, str], name: str) -> CallCase:
    """numpy.isclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False) / allclose: b is the reference."""
    params = ["rtol", "atol", "equal_nan"]
    given: dict[str, Any] = dict(zip(params, test.args[2:]))
    if len(test.args) < 2 or len(test.args) > 5 or any(kw.arg not in params or kw.arg in given for kw in test.keywords):
        raise _No(f"{name}(a, b[, rtol, atol, equal_nan]) with those keywords only")
    given.update({kw.arg: kw.value for kw in test.keywords})
    rtol = _number(given["rtol"]) if "rtol" in given else 1e-05
    atol = _number(given["atol"]) if "atol" in given else 1e-08
    equal_nan = _literal(given["equal_nan"]) if "equal_nan" in given else False
    if not isinstance(equal_nan, bool):
        raise _No("equal_nan must be True or False")
    a, b = test.args[:2]
    if _is_call(b) and not _is_call(a):
        raise _No(f"{name} with the result as the reference (second) argument", f"{name}(f(<literal args>), <literal>)")
    return _observed(a, target, op="np." + name.split(".")[1], expected=_literal(b), extra=(rtol, atol, equal_nan))


def _approx(node: ast.Call) -> tuple[Any, tuple]:
    if len(node.args) != 1:
        raise _No("pytest.approx needs one value")
    extra: dict[str, Any] = {"rel": None, "abs": None, "nan_ok": False}
    for kw in node.keywords:
        if kw.arg not in extra:
            raise _No(f"pytest.approx keyword {kw.arg} is not rel, abs or nan_ok")
        extra[kw.arg] = _literal(kw.value) if kw.arg == "nan_ok" else _number(kw.value)
    value = _literal(node.args[0])
    items = value.values() if isinstance(value, dict) else value if isinstance(value, (list, tuple)) else ()
    if any(isinstance(x, (list, tuple, dict, set, frozenset)) for x in items):
        raise _No("pytest.approx of nested containers (pytest raises TypeError)")
    if isinstance(value, (set, frozenset)):
        raise _No("pytest.approx of a set (pytest raises TypeError)")
    return value, (extra["rel"], extra["abs"], bool(extra["nan_ok"]))


def _number(node: ast.expr, complex_ok: bool = False) -> Any:
    value = _literal(node)
    kinds = (int, float, complex) if complex_ok else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds):
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
              tol: tuple[float, float] | None = None, extra: tuple = ()) -> CallCase:
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
    return CallCase(name, args, kwargs, op, expected, first, tuple(reversed(wrappers)), tol, extra=extra)


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
            rule = d.get("judge", "lines")
            return [(short(f"stdin {i!r} -> {o!r}"), _program(i, o, rule)) for i, o in zip(d[ins], d[outs])]
    return [(short(str(d)), _No("an object of tests needs lists under inputs/outputs (or input/output)",
                                '{"inputs": ["1 2\\n"], "outputs": ["3\\n"]}'))]


def _program(stdin: Any, stdout: Any, rule: Any = "lines") -> Any:
    if not (isinstance(stdin, str) and isinstance(stdout, str)):
        return _No("program input and output must be strings", '{"input": "1 2\\n", "output": "3\\n"}')
    if rule not in JUDGES:
        return _No(f"judge {short(str(rule), 20)} is not one of {', '.join(JUDGES)}", '"judge": "livecodebench"')
    return [ProgramCase(stdin, stdout, rule)]


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
    rule = d.get("judge", "livecodebench" if "testtype" in d else "lines")  # LiveCodeBench's rows name their testtype
    for ins, outs in (("input", "output"), ("stdin", "stdout")):
        if ins in d and outs in d:
            return _program(d[ins], d[outs], rule)
    return _No("an object test needs input/output, stdin/stdout or fn/args/expected",
               '{"input": "1 2\\n", "output": "3\\n"}')
