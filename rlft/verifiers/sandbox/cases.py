"""Test cases as data: what the verifier judges, by construction.

  CallCase     call the function `fn` with literal arguments; the parent compares the returned value with a
               literal expected value (`values.matches`: Python's `==` or the test's own operator on plain
               stdlib values, with a float tolerance only where the test asks for one).
  ProgramCase  run the program with `stdin`; the parent compares its stdout with the expected text by the
               case's rule (`values.same_output`: "lines", trailing spaces and trailing empty lines
               ignored; "livecodebench", LiveCodeBench's judge: the whole output and each line stripped,
               lines equal as text or as Decimal numbers; "exact"); it must also exit 0 (`sys.exit(0)` is
               fine), as judges count a crash after the output.
  JudgeCase    a HumanEval `check` with setup or loops, run as written in a sandbox of its own that holds
               no model code; the calls of the code's functions cross to fresh code sandboxes as data.
A Test is one or more cases that must all pass; a row's reward is the share of its tests that pass.
`rlft.verifiers.sandbox.convert` makes them from the usual test formats, or refuses.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

FIX_CALL = "assert f(<literal args>) == <literal>"


@dataclass(frozen=True)
class CallCase:
    fn: str
    args: tuple
    kwargs: dict
    op: str  # a key of values.OPS, or "truth"
    expected: Any
    result_first: bool = True
    wrappers: tuple = ()  # ("sorted",), ("round", 2), ... applied innermost first by the parent
    tol: tuple[float, float] | None = None
    json: bool = False
    extra: tuple = ()  # the parameters of a tolerance form (values.matches)


@dataclass(frozen=True)
class JudgeCase:
    """A HumanEval `check` that is more than asserts on literals (setup, loops, random inputs, helpers of the
    prompt): the test runs in a sandbox of its own (the judge), holding no model code; each call of a
    function of the code (`names`) is sent to the parent, which runs it in a fresh code sandbox and returns
    the value (plain data) or the exception's type; the judge's exit status is the verdict."""

    test: str
    names: tuple[str, ...]


@dataclass(frozen=True)
class ProgramCase:
    stdin: str
    stdout: str
    rule: str = "lines"  # values.JUDGES: "lines", "livecodebench" or "exact"


@dataclass(frozen=True)
class Test:
    cases: tuple
    source: str  # as written, for messages
    number: int = 0  # 1-based, in the row (refused tests keep theirs)


@dataclass(frozen=True)
class Refusal:
    number: int  # 1-based test number in the row
    source: str
    why: str
    fix: str = FIX_CALL

    def line(self) -> str:
        return f"test {self.number} `{short(self.source)}`: {self.why}; rewrite as {self.fix}"


@dataclass
class Converted:
    tests: list[Test] = field(default_factory=list)
    refusals: list[Refusal] = field(default_factory=list)


def short(text: str, limit: int = 80) -> str:
    """One line, control characters escaped, at most `limit` characters (for messages)."""
    flat = " ".join(str(text).split())
    flat = "".join(c if c.isprintable() else ascii(c)[1:-1] for c in flat[:limit * 2])
    return flat if len(flat) <= limit else flat[:limit - 3] + "..."


def explain(case: Any) -> str:
    """How one case is judged, in one line.

    >>> explain(CallCase("f", ([2, 1],), {}, "==", [1, 2], wrappers=(("sorted",),)))
    'call f([2, 1]), then sorted(result); pass when result == [1, 2]'
    """
    if isinstance(case, ProgramCase):
        n = len(case.stdout.rstrip("\n").split("\n"))
        how = {"lines": "trailing spaces and blank lines ignored",
               "livecodebench": "LiveCodeBench's rule: lines stripped, equal as text or as numbers",
               "exact": "byte for byte"}.get(case.rule, case.rule)
        return (f"run as a program with stdin {short(repr(case.stdin), 40)}; pass when stdout equals "
                f"{short(repr(case.stdout), 40)} ({n} line{'s' * (n != 1)}; {how})")
    if isinstance(case, JudgeCase):
        return (f"run the test as written in a judge sandbox without the code; calls of "
                f"{', '.join(case.names) or 'no function'} run the code in sandboxes of their own; pass when the "
                "test raises nothing")
    args = ", ".join([*(short(repr(a), 30) for a in case.args), *(f"{k}={short(repr(v), 30)}"
                                                                   for k, v in case.kwargs.items())])
    text = f"call {case.fn}({args})"
    for w in case.wrappers:
        text += f", then {w[0]}(result{'' if len(w) == 1 else f', {w[1]}'})"
    want = short(repr(case.expected), 50)
    if case.op == "truth":
        rule = f"bool(result) is {case.expected}"
    elif case.op in ("abs<", "abs<="):
        diff = f"{want} - result" if case.extra[1] else f"result - {want}"
        rule = f"abs({diff}) {case.op[3:]} {case.extra[0]!r}"
    elif case.op == "isclose":
        rule = f"math.isclose(result, {want}, rel_tol={case.extra[0]!r}, abs_tol={case.extra[1]!r})"
    elif case.op in ("approx", "approx!="):
        rel, abs_, nan_ok = case.extra
        opts = "".join(f", {k}={v!r}" for k, v in (("rel", rel), ("abs", abs_)) if v is not None)
        rule = f"result {'==' if case.op == 'approx' else '!='} pytest.approx({want}{opts}{', nan_ok=True' * nan_ok})"
    elif case.op in ("np.isclose", "np.allclose"):
        rule = f"numpy.{case.op[3:]}(result, {want}, rtol={case.extra[0]!r}, atol={case.extra[1]!r})"
    elif case.result_first:
        rule = f"result {case.op} {want}"
    else:
        rule = f"{want} {case.op} result"
    if case.tol is not None:
        rule += f" within rel {case.tol[0]:g}, abs {case.tol[1]:g}"
    if case.json:
        rule += " (JSON: tuples compare as lists)"
    return f"{text}; pass when {rule}"
