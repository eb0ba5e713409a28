"""Test cases as data: what the verifier judges, by construction.

  CallCase     call the function `fn` with literal arguments; the parent compares the returned value with a
               literal expected value (`values.matches`: Python's `==` or the test's own operator on plain
               stdlib values, with a float tolerance only where the test asks for one).
  ProgramCase  run the program with `stdin`; the parent compares its stdout with the expected text
               (`values.same_output`: line by line, trailing spaces and trailing empty lines ignored);
               it must also exit 0 (`sys.exit(0)` is fine), as judges count a crash after the output.
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


@dataclass(frozen=True)
class ProgramCase:
    stdin: str
    stdout: str


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
        return (f"run as a program with stdin {short(repr(case.stdin), 40)}; pass when stdout equals "
                f"{short(repr(case.stdout), 40)} ({n} line{'s' * (n != 1)}; trailing spaces and blank lines ignored)")
    args = ", ".join([*(short(repr(a), 30) for a in case.args), *(f"{k}={short(repr(v), 30)}"
                                                                   for k, v in case.kwargs.items())])
    text = f"call {case.fn}({args})"
    for w in case.wrappers:
        text += f", then {w[0]}(result{'' if len(w) == 1 else f', {w[1]}'})"
    want = short(repr(case.expected), 50)
    if case.op == "truth":
        rule = f"bool(result) is {case.expected}"
    elif case.result_first:
        rule = f"result {case.op} {want}"
    else:
        rule = f"{want} {case.op} result"
    if case.tol is not None:
        rule += f" within rel {case.tol[0]:g}, abs {case.tol[1]:g}"
    if case.json:
        rule += " (JSON: tuples compare as lists)"
    return f"{text}; pass when {rule}"
