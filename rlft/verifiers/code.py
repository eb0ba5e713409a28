"""`code`: the share of the row's `tests` that the completion's code passes, judged by construction.

The code is the last ```python (or ```py, or bare ```) fenced block of the completion, else the whole
completion; an unclosed fence (generation cut off) counts from the fence to the end. Fences are found
line by line (a fence is a line starting with ```), in linear time, so ``` inside a string literal on
a code line is code.

`tests` is converted into cases (`rlft.verifiers.sandbox.convert`): MBPP asserts `assert f(1, 2) == 3`,
HumanEval `check(candidate)` blocks with their call, I/O pairs (APPS, CodeContests, LiveCodeBench) or
JSON function cases. Each case runs in its own sandboxed process that gets only the arguments (or stdin)
and returns only the value (or stdout); the parent compares (`rlft.verifiers.sandbox.run`: threat model).
A HumanEval check with setup or loops runs as written in a judge sandbox holding no model code, whose
calls of the code's functions cross to fresh code sandboxes as data (docs/verifiers.md).
Reward = passed tests / tests. A test that cannot be judged that way is refused by `check_gold` before
training (file:line, the test, why, how to rewrite it); `rlft verify code --explain` shows how each test
was read.

`code_forgeable` is the opt-in for everything else: the code and each test (any Python) run in one
sandboxed process, and the exit status is the verdict. The host stays safe, but the model can forge its
reward (`os._exit(0)` passes every test); every use prints a warning and every result is marked.

Isolation: without bubblewrap the verifier refuses (`apt-get install bubblewrap`); RLFT_CODE_ISOLATION=none
runs the code with resource limits only, after a loud warning.
"""

from __future__ import annotations

import ast
import json
import sys
from collections import OrderedDict
from functools import cache
from typing import Any

from rlft.verifiers.common import column, completion_text
from rlft.verifiers.sandbox import cases, convert, isolation, run

LIMITS = run.Limits()
_CACHE: OrderedDict[str, cases.Converted] = OrderedDict()
_CACHE_SIZE = 4096  # rows whose converted tests are kept (GRPO scores the same rows every epoch)


def code_reward(completions: list, tests: list, **kwargs: Any) -> list[float | None]:
    """Share of each row's tests that the completion's code passes (None for a row whose tests were refused).

    >>> code_reward(["```python\\ndef add(a, b):\\n    return a + b\\n```", "def add(a, b): return a - b"],
    ...             tests=["assert add(1, 2) == 3\\nassert add(0, 0) == 0"] * 2)
    [1.0, 0.5]
    """
    golds = column(tests, len(completions), "tests")
    isolation.require()  # refuses before anything runs, even for a batch with no code
    jobs, slots = [], []
    out: list[float | None] = []
    for c, t in zip(completions, golds):
        converted = converted_tests(t)
        code = extract_code(completion_text(c))
        if converted.refusals or not converted.tests:
            out.append(None)  # check_gold refuses such rows before training; never a silent 0
        elif not code.strip():
            out.append(0.0)
        else:
            slots.append(len(out))
            jobs.append((code, converted.tests))
            out.append(0.0)
    for slot, result in zip(slots, run.run_cases(jobs, LIMITS)):
        out[slot] = result.fraction
    return out


def code_forgeable_reward(completions: list, tests: list, **kwargs: Any) -> list[float | None]:
    """FORGEABLE: share of the row's tests (any Python) that run without error after the code, in one
    sandboxed process each. The code can exit 0 to pass; use only where `code` refuses the tests."""
    golds = column(tests, len(completions), "tests")
    isolation.require()
    _warn_forgeable()
    jobs = [(extract_code(completion_text(c)), forgeable_tests(t) or []) for c, t in zip(completions, golds)]
    out: list[float | None] = [None if not t else 0.0 for _, t in jobs]
    todo = [k for k, (code, t) in enumerate(jobs) if t and code.strip()]
    for k, result in zip(todo, run.run_forgeable([jobs[k] for k in todo], LIMITS)):
        out[k] = result.fraction
    return out


@cache
def _warn_forgeable() -> None:
    print("WARNING: code_forgeable: code and tests run in one process and the exit status is the reward; "
          "the model can forge it (harmless to the host, not to learning)", file=sys.stderr, flush=True)


def extract_code(text: str) -> str:
    """The code of a completion: its last python (or unlabeled) fenced block, else the text itself.

    >>> extract_code("Here:\\n```python\\nx = '```'\\n```\\nDone.")
    "x = '```'\\n"
    """
    blocks: list[tuple[str, int, int]] = []  # (language, first line, end line) of each fenced block
    lines = text.split("\n")
    lang, start = None, 0
    for i, line in enumerate(lines):
        s = line.strip()
        if not s.startswith("```"):
            continue
        if lang is None:
            info = s[3:].strip()
            if "`" not in info:
                lang, start = (info.split()[0].lower() if info else ""), i + 1
        elif not s.strip("`"):
            blocks.append((lang, start, i))
            lang = None
    if lang is not None:  # an unclosed fence: cut off at max tokens; counts to the end
        blocks.append((lang, start, len(lines)))
    for wanted in (("python", "python3", "py"), ("",)):
        chosen = [b for b in blocks if b[0] in wanted]
        if chosen:
            _, a, b = chosen[-1]
            body = "\n".join(lines[a:b])
            return body + "\n" if b < len(lines) else body
    return "" if blocks else text  # only other languages: not Python


def converted_tests(tests: Any) -> cases.Converted:
    """`convert.convert(tests)`, cached by the gold value's text."""
    try:
        key = tests if isinstance(tests, str) else json.dumps(tests, sort_keys=True)
    except (TypeError, ValueError, RecursionError):
        return convert.convert(tests)
    found = _CACHE.get(key)
    if found is None:
        found = _CACHE[key] = convert.convert(tests)
        while len(_CACHE) > _CACHE_SIZE:
            _CACHE.popitem(last=False)
    return found


def forgeable_tests(tests: Any) -> list[str] | None:
    """The forgeable mode's tests: a string is one test per top-level assert (statements before it are
    its setup), a list is one test per string; None when unusable."""
    if isinstance(tests, (list, tuple)):
        return list(tests) if tests and all(isinstance(t, str) and t.strip() for t in tests) else None
    if not isinstance(tests, str) or not tests.strip():
        return None
    try:
        body = ast.parse(tests).body
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return [tests]
    lines = tests.splitlines()
    out, setup = [], []
    for node in body:
        text = "\n".join(lines[node.lineno - 1:node.end_lineno])
        if isinstance(node, ast.Assert):
            out.append("\n".join([*setup, text]))
        else:
            setup.append(text)
    return out or [tests]


def require_isolation() -> None:
    """UserError (one line, naming the package to install) when the sandbox cannot isolate code."""
    isolation.require()


def check_gold(field: str, value: Any) -> str | None:
    """None when every test converts into cases; else, for the first refused test, what and why and how to
    rewrite it (one line)."""
    converted = converted_tests(value)
    if converted.refusals:
        extra = len(converted.refusals) - 1
        more = f" (and {extra} more test{'s' * (extra > 1)} refused)" if extra else ""
        return converted.refusals[0].line() + more + "; or use --verifier code_forgeable (forgeable)"
    if not converted.tests:
        return "no tests"
    return None


def check_gold_forgeable(field: str, value: Any) -> str | None:
    """None when `value` is Python test code with an assert (a string, or a list of strings)."""
    tests = forgeable_tests(value)
    if not tests:
        return "expected a string of Python asserts or a non-empty list of them"
    for i, test in enumerate(tests, 1):
        try:
            tree = ast.parse(test)
        except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
            return f"test {i} is not valid Python ({type(exc).__name__})"
        if not any(isinstance(node, ast.Assert) for node in ast.walk(tree)):
            return f"test {i} has no assert, so it cannot fail: `{cases.short(test, 60)}`"
    return None


def explain_rows(rows: list[tuple[int, dict]], source: str, field: str = "tests") -> list[str]:
    """How each test of each row is read: one line per case or refusal (for `rlft verify code --explain`)."""
    out = []
    for line, row in rows:
        converted = converted_tests(row.get(field))
        found = [(t.number, cases.explain(c)) for t in converted.tests for c in t.cases]
        found += [(r.number, "REFUSED: " + r.line().split(": ", 1)[1]) for r in converted.refusals]
        out += [f"{source}:{line}: test {number}: {text}" for number, text in sorted(found, key=lambda x: x[0])]
    return out
