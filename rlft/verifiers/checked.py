"""Plugin verifiers are user code: check what they return before anything trusts it.

A verifier must return one reward per completion, each a number or None (could not score). A plugin that
raises, or returns a string, None, a scalar or a list of the wrong length would otherwise crash deep in the
trainer, or be zipped against the completions and scored as if it were right (a 1-element list scored 8
completions as "mean reward 1.000"). `checked(fn, where)` wraps a plugin so each such case is one UserError
naming the plugin and what it returned; `reward_problem` is the check itself.
"""

from __future__ import annotations

import functools
import math
import numbers
from typing import Any, Callable

from rlft.errors import UserError

FIX = "fix the function: it must return a list with one float (or None) per completion"


def reward_problem(rewards: Any, n: int) -> str | None:
    """Why `rewards` is not n rewards (numbers or None), or None when it is."""
    if not isinstance(rewards, (list, tuple)):
        return f"returned {type(rewards).__name__} {_short(rewards)} instead of a list of {n} rewards"
    if len(rewards) != n:
        return f"returned {len(rewards)} rewards for {n} completions"
    for i, r in enumerate(rewards):
        if r is None:
            continue
        if not isinstance(r, numbers.Real):
            return f"returned {type(r).__name__} {_short(r)} as reward {i} (expected a number or None)"
        if not math.isfinite(float(r)):
            return f"returned {r} as reward {i} (expected a finite number)"
    return None


class checked:  # noqa: N801 - used like a function: checked(fn, where)
    """`fn` with its failures and its return value checked (see the module docstring). A class, not a closure,
    so the reward stays picklable (TRL's async GRPO rollout sends reward functions to another process)."""

    def __init__(self, fn: Callable, where: str) -> None:
        functools.update_wrapper(self, fn)  # __name__, __doc__, gold_fields, ...; __wrapped__ for inspect
        self.fn, self.where = fn, where

    def __call__(self, completions, *args: Any, **kwargs: Any) -> list:
        try:
            rewards = self.fn(completions, *args, **kwargs)
        except UserError:
            raise
        except Exception as exc:  # noqa: BLE001 - any failure of user code is the plugin's
            first = (str(exc).splitlines() or [""])[0][:200]
            raise UserError(f"verifier plugin {self.where} raised {type(exc).__name__}: {first}", FIX) from exc
        problem = reward_problem(rewards, len(completions))
        if problem:
            raise UserError(f"verifier plugin {self.where} {problem}", FIX)
        return list(rewards)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
