"""`format`: 1.0 when the completion is `<think>...</think>` then `<answer>...</answer>`, else 0.0.

A format-only verifier (`format_only=True`): it says nothing about whether the answer is right, so
a policy trained on it alone learns the tags and skips the reasoning. Pair it with a correctness
verifier at a small weight (`math` plus `format:0.2`); `rlft choose` warns when it is used alone.

Stricter than TRL's `think_format_reward`: the whole completion must be the two blocks (only
whitespace around and between them), each tag appears exactly once, and both blocks hold non-blank
text, so `<think></think><answer></answer>` scores 0.
"""

from __future__ import annotations

import re
from typing import Any

from rlft.verifiers.common import completion_text

_FORMAT_RE = re.compile(r"\s*<think>(.*?)</think>\s*<answer>(.*?)</answer>\s*", re.DOTALL)
_TAGS = ("<think>", "</think>", "<answer>", "</answer>")


def format_reward(completions: list, **kwargs: Any) -> list[float]:
    """1.0 for `<think>reasoning</think><answer>answer</answer>`, else 0.0.

    >>> format_reward(["<think>12+34</think> <answer>46</answer>", "<think></think><answer></answer>", "46"])
    [1.0, 0.0, 0.0]
    """
    return [float(_well_formed(completion_text(c))) for c in completions]


def _well_formed(text: str) -> bool:
    if any(text.count(tag) != 1 for tag in _TAGS):
        return False
    m = _FORMAT_RE.fullmatch(text)
    return m is not None and bool(m.group(1).strip()) and bool(m.group(2).strip())


def check_gold(field: str, value: Any) -> str | None:
    """The format verifier reads no gold field."""
    return None
