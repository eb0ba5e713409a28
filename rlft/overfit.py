"""The `overfitting` alarm and which model a run keeps, from its held-out checks (rlft.heldout); pure.

A check is (step, score, per-row outcomes) on the same held-out rows every time, score higher-is-better.
Because the rows are the same, the noise of a fall from the best check is the paired one: the standard
error of the per-row differences, sd(best_i - now_i) / sqrt(n) (McNemar's view for 0/1 outcomes: only rows
that changed count). With 100 rows and 10 of them flipping, a fall of 6 points is about 2 such errors; as
two independent binomials (each +-5 points) it would look like noise.

  overfitting  fires when the last `patience` checks (default 3) are each below the best one by more than
               `z` (1.0) paired standard errors of their fall, while the training objective improves (the
               latest logged loss is below the first one logged after the best check). Evidence: the
               scores, the steps and the losses; fix: fewer passes, a lower learning rate, or a larger beta
               (DPO/KTO: a stronger pull to the reference).
  kept_check   the check whose model the run folder keeps: the best score (ties: the later step, which
               trained more); without the overfitting alarm, the last one when it is within 2 paired standard
               errors of the best (picking the maximum of noisy checks would trade training for noise); with
               the alarm, the start (step 0) when no trained check beat it by more than 2 standard errors
               (training made it worse and never clearly better); the last model is kept beside it (`last/`)
               when they differ.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from rlft.alarms import Alarm

PATIENCE, Z = 3, 1.0
# Without the alarm, one check's fall must exceed 2 paired standard errors to give up the last model: k rows
# flipping one way is a fall of k/n against a noise of about sqrt(k)/n, so 2 errors is about 5 rows (a sign
# test's p = 1/32), where 1 error would be any 2 rows.
KEEP_Z = 2.0


@dataclass
class Check:
    step: int
    score: float
    per_row: list[float] = field(default_factory=list)
    metric: str = "score"
    stderr: float = 0.0


def fall_noise(best: Check, now: Check) -> float:
    """The paired standard error of best.score - now.score (their own stderrs combined if rows differ)."""
    a, b = best.per_row, now.per_row
    if not a or len(a) != len(b):
        return math.sqrt(best.stderr ** 2 + now.stderr ** 2)
    d = [x - y for x, y in zip(a, b)]
    n = len(d)
    mean = sum(d) / n
    return math.sqrt(sum((x - mean) ** 2 for x in d) / max(n - 1, 1) / n)


def best_check(checks: list[Check]) -> Check | None:
    """The best-scoring check; on a tie the later one."""
    best = None
    for c in checks:
        if best is None or c.score >= best.score:
            best = c
    return best


def overfitting(checks: list[Check], losses: list[tuple[int, float]], patience: int = PATIENCE,
                z: float = Z) -> Alarm | None:
    """The alarm when the held-out score fell below its best by more than its noise for `patience` checks
    in a row while the training loss (`losses`: (step, loss), in order) went down; else None."""
    if len(checks) < patience + 1:
        return None
    best = best_check(checks)
    tail = checks[-patience:]
    if best is None or best.step >= tail[0].step:
        return None
    falls = [(best.score - c.score, fall_noise(best, c)) for c in tail]
    if not all(f > z * noise and f > 0 for f, noise in falls):
        return None
    after = [loss for step, loss in losses if step > best.step]
    if len(after) < 2 or not after[-1] < after[0]:
        return None
    now = tail[-1]
    return Alarm("overfitting", now.step,
                 f"held-out {best.metric} fell from {best.score:.3f} (step {best.step}) to {now.score:.3f} over the "
                 f"last {patience} checks, each by more than its noise, while the training loss fell "
                 f"{after[0]:.3g} -> {after[-1]:.3g}: the model is learning the training rows, not the task",
                 {"best_step": best.step, "best_score": round(best.score, 4),
                  "scores": {c.step: round(c.score, 4) for c in tail},
                  "fall_noise": [round(n, 4) for _, n in falls], "loss": [round(after[0], 4), round(after[-1], 4)]},
                 "fewer passes over the data (--max-steps or --epochs: the best held-out check was at step "
                 f"{best.step}), a lower learning rate, or a larger beta (DPO/KTO); the run folder keeps the best "
                 "held-out model")


def kept_check(checks: list[Check], alarm: bool = False) -> tuple[Check | None, str]:
    """The check whose model the run keeps, and why (one sentence for summary.json and the report); `alarm`:
    the overfitting alarm fired (its sustained fall is the evidence, so the best check is kept)."""
    best = best_check(checks)
    if best is None:
        return None, "no held-out check ran"
    last = checks[-1]
    start = checks[0]
    if alarm and best is not start and start.step == 0 and best.score - start.score <= KEEP_Z * fall_noise(best, start):
        return start, (f"the overfitting alarm fired and no trained check beat the start by more than 2 standard "
                       f"errors (best: step {best.step}, {best.score:.3f}; start {start.score:.3f}): the run folder "
                       f"holds the starting model; the last step {last.step} ({last.score:.3f}) is in last/")
    if best.step == last.step:
        return best, f"the last step scored best on the held-out rows ({best.metric} {best.score:.3f})"
    noise = fall_noise(best, last)
    if not alarm and best.score - last.score <= KEEP_Z * noise:
        return last, (f"the last step scored {last.score:.3f}, within 2 standard errors ({noise:.3f} each) of the "
                      f"best check (step {best.step}, {best.score:.3f}): the more trained model is kept")
    return best, (f"step {best.step} scored best on the held-out rows ({best.metric} {best.score:.3f} +- "
                  f"{best.stderr:.3f}); the last step {last.step} scored {last.score:.3f} (kept in last/)")


def summary(checks: list[Check]) -> dict[str, Any]:
    """The held-out curve as summary.json holds it."""
    return {"metric": checks[0].metric if checks else None,
            "curve": [{"step": c.step, "score": round(c.score, 4), "stderr": round(c.stderr, 4)} for c in checks],
            "rows": len(checks[0].per_row) if checks else 0}
