"""Verifiers: programs that check a completion and return a GRPO reward.

Each is a plain function with TRL's reward signature, `fn(completions, **row_fields) ->
list[float | None]`, where `completions` holds strings (plain prompts) or message lists (chat prompts)
and each gold column arrives as a keyword argument with one value per completion. None means "not
applicable to this row" (TRL leaves it out of the mean).

Built-ins (REGISTRY): math, label, label_partial, json, regex, code, format, support_policy (the
support store's truth, rlft.verifiers.support). `resolve("NAME[:WEIGHT]")`
or `resolve("path/to/file.py:function[:WEIGHT]")` finds one; `check_rows` validates gold values before
training; `combine` makes one weighted reward; `stress` probes a verifier with junk completions.

Pure Python: nothing here imports torch, transformers, trl or datasets; math-verify (sympy) is imported
only when a non-numeric answer needs it.
"""

from rlft.verifiers.code import code_reward
from rlft.verifiers.common import RewardFn, completion_text
from rlft.verifiers.format import format_reward
from rlft.verifiers.json_schema import json_reward
from rlft.verifiers.label import label_partial_reward, label_reward
from rlft.verifiers.math import math_reward
from rlft.verifiers.regex import regex_reward
from rlft.verifiers.registry import ENTRY_POINT_GROUP, REGISTRY, Verifier, check_rows, combine, resolve
from rlft.verifiers.sandbox import Limits, SandboxResult, run_many, run_tests
from rlft.verifiers.stress import FamilyResult, gameable, stress

__all__ = [
    "ENTRY_POINT_GROUP", "REGISTRY", "FamilyResult", "Limits", "RewardFn", "SandboxResult", "Verifier",
    "check_rows", "code_reward", "combine", "completion_text", "format_reward", "gameable", "json_reward",
    "label_partial_reward", "label_reward", "math_reward", "regex_reward", "resolve", "run_many", "run_tests",
    "stress",
]
