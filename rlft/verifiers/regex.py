"""`regex`: 1.0 when the whole stripped completion matches the gold `pattern` (re.fullmatch), else 0.0.

Full match, not search: with `re.search`, a completion that pastes every plausible string would match.
Completions longer than MAX_CHARS score 0 without matching, which bounds the time a pattern with
nested quantifiers can spend backtracking on model output.
"""

from __future__ import annotations

import re
from typing import Any

from rlft.verifiers.common import column, completion_text

MAX_CHARS = 10_000


def regex_reward(completions: list, pattern: list, **kwargs: Any) -> list[float | None]:
    r"""1.0 when the stripped completion fully matches the row's pattern.

    >>> regex_reward(["2024-05-01", " 2024-05-01\n", "on 2024-05-01"], pattern=[r"\d{4}-\d{2}-\d{2}"] * 3)
    [1.0, 1.0, 0.0]
    """
    patterns = column(pattern, len(completions), "pattern")
    out: list[float | None] = []
    for c, p in zip(completions, patterns):
        compiled = _compile(p)
        text = completion_text(c).strip()
        if compiled is None:
            out.append(None)
        else:
            out.append(float(len(text) <= MAX_CHARS and compiled.fullmatch(text) is not None))
    return out


def check_gold(field: str, value: Any) -> str | None:
    """None when `value` compiles as a Python regular expression, else the compiler's complaint."""
    if not isinstance(value, str):
        return f"expected a regular expression string, got {type(value).__name__}"
    if not value:
        return "empty pattern (it matches only the empty completion)"
    try:
        re.compile(value)
    except re.error as exc:
        return f"bad regular expression: {exc}"
    return None


def _compile(pattern: Any) -> re.Pattern | None:
    if not isinstance(pattern, str) or not pattern:
        return None
    try:
        return re.compile(pattern)  # re keeps its own cache of compiled patterns
    except re.error:
        return None
