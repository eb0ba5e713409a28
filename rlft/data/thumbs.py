"""Thumbs up/down rows (prompt, completion, label): the label rules and the class-balance advice for KTO.

Shared by data validation (rlft.data), the lint (rlft.data.lint) and the KTO method; standard library only.

KTO weighs the losses of desirable (label true) and undesirable (label false) rows by `desirable_weight` and
`undesirable_weight`. The KTO paper (eq. 8) and TRL's KTO docs recommend keeping

    desirable_weight * n_true / (undesirable_weight * n_false)  in  [1, 4/3]

so the rarer class is weighted up: with 10% true rows, desirable_weight 9-12 (undesirable_weight 1).
"""

from __future__ import annotations

from typing import Any

MINORITY_SHARE = 0.1      # warn when one class is under 10% of the rows
RATIO_RANGE = (1.0, 4 / 3)  # the recommended desirable/undesirable loss-mass ratio (KTO paper eq. 8)


def label_value(value: Any) -> bool | None:
    """A row's label as a bool: JSON true/false, or the text "true"/"false" (a CSV cell); None otherwise."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    return None


def label_problem(value: Any) -> str | None:
    """Why `value` is not a usable label, or None."""
    if value is None:
        return "missing"
    if label_value(value) is None:
        return f"expected true or false, got {value!r} ({type(value).__name__})"
    return None


def recommended_weights(n_true: int, n_false: int, desirable_weight: float = 1.0,
                        undesirable_weight: float = 1.0) -> dict[str, tuple[float, float]] | None:
    """The ranges TRL recommends for desirable_weight (undesirable kept) or undesirable_weight (desirable
    kept), or None when the current weights already satisfy the rule (or one class is absent)."""
    if not n_true or not n_false:
        return None
    ratio = desirable_weight * n_true / (undesirable_weight * n_false)
    if RATIO_RANGE[0] - 1e-9 <= ratio <= RATIO_RANGE[1] + 1e-9:
        return None
    base_d = n_false * undesirable_weight / n_true
    base_u = n_true * desirable_weight / n_false
    return {"desirable_weight": (round(base_d * RATIO_RANGE[0], 2), round(base_d * RATIO_RANGE[1], 2)),
            "undesirable_weight": (round(base_u / RATIO_RANGE[1], 2), round(base_u / RATIO_RANGE[0], 2))}


def balance_warning(n_true: int, n_false: int, desirable_weight: float = 1.0,
                    undesirable_weight: float = 1.0) -> str | None:
    """A one-line warning when one class is under MINORITY_SHARE of the rows, naming the weights that
    compensate; None when the classes are balanced enough or the weights already compensate."""
    n = n_true + n_false
    if not n:
        return None
    rare, count = ("true", n_true) if n_true <= n_false else ("false", n_false)
    if count / n >= MINORITY_SHARE:
        return None
    if count == 0:
        return (f"all {n} labels are {'false' if rare == 'true' else 'true'}: KTO needs some {rare} rows to learn "
                "what to move toward and away from")
    weights = recommended_weights(n_true, n_false, desirable_weight, undesirable_weight)
    head = f"only {count} of {n} labels ({count / n:.0%}) are {rare}"
    if weights is None:
        return None
    d, u = weights["desirable_weight"], weights["undesirable_weight"]
    return (f"{head}: KTO weighs each class's loss so that desirable_weight x n_true / (undesirable_weight x "
            f"n_false) is in [1, 4/3]; set kto.desirable_weight in [{d[0]:g}, {d[1]:g}] or kto.undesirable_weight "
            f"in [{u[0]:g}, {u[1]:g}] (not both)")
