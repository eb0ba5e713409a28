"""`code`: the share of the gold `tests` that the completion's code passes, run in the sandbox.

The code is the last ```python (or ```py, or bare ```) fenced block of the completion, else the whole
completion; an unclosed fence (generation cut off) counts from the fence to the end. `tests` is a
string of Python (each `assert` ends one test; setup lines join the next assert) or a list of test
strings. Each test of each completion runs in its own sandboxed process (see `rlft.verifiers.sandbox`:
bubblewrap isolation, verdicts decided in the parent), so one failing test does not hide the others.
Reward = passed / total, so partial credit is built in.

Anti-gaming, from the sandbox: the expected side of each `assert LHS == RHS` never enters the code's
process, so printing a fake report, `os._exit(0)` or an object whose `__eq__` always returns True scores
0; and the code never sees the other tests.

Isolation: without bubblewrap the verifier refuses (`apt-get install bubblewrap`); RLFT_CODE_ISOLATION=none
runs the code with resource limits only, after a loud warning.
"""

from __future__ import annotations

import ast
import re
from typing import Any

from rlft.verifiers import sandbox, sandbox_isolation
from rlft.verifiers.common import column, completion_text

_FENCE_RE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[ \t]*\n(.*?)```", re.DOTALL)
_OPEN_FENCE_RE = re.compile(r"```[ \t]*(?:python3?|py)?[ \t]*\n(.*)\Z", re.DOTALL | re.IGNORECASE)
LIMITS = sandbox.Limits()


def code_reward(completions: list, tests: list, **kwargs: Any) -> list[float | None]:
    """Fraction of each row's tests that the completion's code passes (UserError when isolation is missing).

    >>> code_reward(["```python\\ndef add(a, b):\\n    return a + b\\n```", "def add(a, b): return a - b"],
    ...             tests=["assert add(1, 2) == 3\\nassert add(0, 0) == 0"] * 2)
    [1.0, 0.5]
    """
    golds = column(tests, len(completions), "tests")
    jobs, slots = [], []
    out: list[float | None] = []
    for c, t in zip(completions, golds):
        cases = gold_tests(t)
        code = extract_code(completion_text(c))
        if cases is None:
            out.append(None)
        elif not code.strip():
            out.append(0.0)
        else:
            slots.append(len(out))
            jobs.append((code, cases))
            out.append(0.0)
    sandbox_isolation.require()  # refuses before anything runs, even for a batch with no code
    for slot, result in zip(slots, sandbox.run_many(jobs, LIMITS)):
        out[slot] = result.fraction
    return out


def extract_code(text: str) -> str:
    """The code of a completion: its last python (or unlabeled) fenced block, else the text itself.

    >>> extract_code("Here:\\n```python\\nx = 1\\n```\\nDone.")
    'x = 1\\n'
    """
    blocks = [(lang.lower(), body) for lang, body in _FENCE_RE.findall(text)]
    for wanted in (("python", "python3", "py"), ("",)):
        chosen = [body for lang, body in blocks if lang in wanted]
        if chosen:
            return chosen[-1]
    if blocks:
        return ""  # only other languages: not Python
    m = _OPEN_FENCE_RE.search(text)
    return m.group(1) if m else text


def gold_tests(tests: Any) -> list[str] | None:
    """The row's tests as a list of snippets, None when unusable."""
    if isinstance(tests, str):
        return sandbox.split_tests(tests) if tests.strip() else None
    if isinstance(tests, (list, tuple)) and tests and all(isinstance(t, str) and t.strip() for t in tests):
        return list(tests)
    return None


def require_isolation() -> None:
    """UserError (one line, naming the package to install) when the sandbox cannot isolate code."""
    sandbox_isolation.require()


def check_gold(field: str, value: Any) -> str | None:
    """None when `value` is a usable test string or list of test strings, else why not."""
    cases = gold_tests(value)
    if cases is None:
        return "expected a string of Python asserts or a non-empty list of them"
    for i, case in enumerate(cases, 1):
        try:
            tree = ast.parse(case)
        except SyntaxError as exc:
            return f"test {i} is not valid Python: {exc.msg} (line {exc.lineno})"
        except (ValueError, RecursionError, MemoryError) as exc:  # NUL bytes, lone surrogates, deep nesting
            return f"test {i} is not valid Python: {type(exc).__name__}: {str(exc)[:80]}"
        if not any(isinstance(node, ast.Assert) for node in ast.walk(tree)):
            return f"test {i} has no assert, so it cannot fail: {case[:60]!r}"
    return None
