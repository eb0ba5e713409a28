"""Helpers shared by the verifier families: completion text and per-row gold columns.

TRL calls a reward function with `completions` as strings (plain prompts) or as message lists (chat
prompts), and with every dataset column as a keyword argument holding one value per completion.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

RewardFn = Callable[..., list]  # fn(completions, **row_fields) -> list[float | None]


def completion_text(completion: Any) -> str:
    """The text of one completion, whatever its shape.

    >>> completion_text("46")
    '46'
    >>> completion_text([{"role": "assistant", "content": "46"}])
    '46'

    A message list keeps the assistant turns (all turns when none has a role), joined by newlines;
    content given as parts (`[{"type": "text", "text": ...}]`) is joined.
    """
    if completion is None:
        return ""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, dict):
        return _content(completion)
    if isinstance(completion, (list, tuple)):
        messages = [m for m in completion if isinstance(m, dict)]
        assistant = [m for m in messages if m.get("role", "assistant") == "assistant"]
        return "\n".join(_content(m) for m in (assistant or messages))
    return str(completion)


def _content(message: dict) -> str:
    content = message.get("content", "")
    if isinstance(content, list):
        return "".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in content)
    return "" if content is None else str(content)


def column(values: Any, n: int, name: str) -> list:
    """One gold value per completion. TRL passes a list; a direct call may pass a single value.

    >>> column(["46", "98"], 2, "answer")
    ['46', '98']
    >>> column("46", 2, "answer")
    ['46', '46']
    """
    if isinstance(values, (list, tuple)) and len(values) == n:
        return list(values)
    if n == 1 or not isinstance(values, (list, tuple)):
        return [values] * n
    raise ValueError(f"'{name}' has {len(values)} values for {n} completions")
