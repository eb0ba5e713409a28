"""The `overfitting` alarm and which model a run keeps, from its held-out checks (rlft.watch.heldout); pure.

A check is (step, score, per-row outcomes) on the same held-out rows every time, score higher-is-better.
Because the rows are the same, the noise of a fall from the best check is the paired one: the standard
error of the per-row differences, sd(best_i - now_i) / sqrt(n) (McNemar's view for 0/1 outcomes: only rows
that changed count). With 100 rows and 10 of them flipping, a fall of 6 points is about 2 such errors; as
two independent binomials (each +-5 points) it would look like noise.

  overfitting  fires when the last `patience` checks (default 3) are each below the best one by more than
               `z` (1.0) paired standard errors of their fall, while the training objective improves (the
               latest logged value is better than the first one logged after the best check: a lower loss,
               or for rlft's PPO, which logs no loss, a higher mean reward; see `Objective`). Evidence: the
               scores, the steps and the objective; fix: fewer passes, a lower learning rate, or a larger
               beta (DPO/KTO: a stronger pull to the reference; PPO: a larger kl_coef).
  kept_check   the check whose model the run folder keeps. The start (step 0) unless a trained check beat it
               (`beats_start`: on 0/1 outcomes McNemar's statistic with continuity correction, b rows gained
               and c lost, (b - c - 1) / sqrt(b + c) > 1.0, one-sided p < 0.16; on other outcomes a gain above
               one paired standard error). Of the trained checks that beat it: the last when it
               is within 2 paired standard errors of the best and the overfitting alarm did not fire (picking
               the maximum of noisy checks would trade training for noise), else the best (ties: the later).
               The last model is kept beside it (`last/`) when they differ.
  no_gain      fires at the end of a run (as `overfitting` when the training objective improved, since learning
               the training rows without a held-out gain is what overfitting is; else as `no_gain`) when the start
               was kept: no trained check clearly beat it (runs of `patience` checks or more, as above).
Why the start unless beaten: the start is the one model known not to be worse, so training must earn its
place, and the alarm tells the user when it did not. How high the bar is trades two errors on a small slice:
kept models that are worse, and gains thrown away (START_Z below, with what was measured). Runs whose start
is not a usable model (a reward model's untrained score head) keep the trained check instead
(`keep_start=False`), alarm included.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from rlft.alarms import Alarm

PATIENCE, Z = 3, 1.0
# Without the alarm, one check's fall must exceed 2 paired standard errors to give up the last model: k rows
# flipping one way is a fall of k/n against a noise of about sqrt(k)/n, so 2 errors is about 5 rows (a sign
# test's p = 1/32), where 1 error would be any 2 rows.
KEEP_Z = 2.0
# A trained check beats the start when its McNemar statistic (continuity-corrected) exceeds 1.0: one-sided p < 0.16,
# e.g. 3 rows of 50 gained and none lost. It was 1.645 (p < 0.05), which a 50-prompt slice (the floor of the
# automatic one) cannot reach for a real 10-point gain: measured on 600-row KTO draws (bench/draws.py, which prints
# the z of the check a run would keep; seeds 7 / 11 / 23, from a short SFT at 0.445 on data/arith/test.jsonl),
# recipes/kto_tiny.yaml's models gained +11 / +9.5 / +7.5 points on the 200 test rows with slice z 1.21 / 1.03 /
# 0.97, and the run kept the start every time. At 1.0, over 21 runs of 7 KTO and DPO settings on those draws (the
# recipes, the old ones, lr 3e-4 and 1e-3, 8 passes): every trained model kept scored at or above the start on
# the test rows (+0.5 to +12.5 points); no run kept a last model that lost there (-1.5 to -9 points).
START_Z = 1.0


@dataclass
class Check:
    step: int
    score: float
    per_row: list[float] = field(default_factory=list)
    metric: str = "score"
    stderr: float = 0.0


@dataclass
class Objective:
    """The training objective as logged: (step, value) points in order, and which way is better. The TRL
    methods log a `loss` (lower is better); rlft's PPO logs none, so its signal is the mean `reward` of its
    rollouts (higher is better)."""

    name: str
    points: list[tuple[int, float]]
    higher_is_better: bool = False

    def improved(self, first: float, last: float) -> bool:
        """Whether `last` is better than `first` in this objective's direction."""
        return last > first if self.higher_is_better else last < first

    def change(self, first: float, last: float) -> str:
        """'the training loss fell 0.7 -> 0.5' (or 'rose', or the reward's), for the alarms' messages."""
        verb = "rose" if last > first else "fell" if last < first else "stayed at"
        return f"the training {self.name} {verb} {first:.3g} -> {last:.3g}"

    @property
    def key(self) -> str:
        """The alarms' evidence key for its first and last values: `loss`, or `reward` (PPO)."""
        return "reward" if self.higher_is_better else "loss"

    @property
    def learned(self) -> str:
        """What an improving objective without a held-out gain means."""
        return ("the policy learned to raise its reward, not the task" if self.higher_is_better
                else "the model learned the training rows, not the task")


def training_objective(history: Sequence[dict]) -> Objective:
    """The objective of a run's logged records (metrics.jsonl rows): its `loss` where any record has one,
    else its mean rollout `reward` (rlft's PPO), higher being better; the held-out records are skipped."""
    def points(key: str) -> list[tuple[int, float]]:
        return [(r["step"], float(r[key])) for r in history
                if isinstance(r.get(key), (int, float)) and not isinstance(r.get(key), bool)
                and math.isfinite(r[key])]

    losses = points("loss")
    if losses:
        return Objective("loss", losses)
    rewards = points("reward")
    return Objective("mean reward", rewards, higher_is_better=True) if rewards else Objective("loss", [])


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


def overfitting(checks: list[Check], objective: Objective, patience: int = PATIENCE, z: float = Z) -> Alarm | None:
    """The alarm when the held-out score fell below its best by more than its noise for `patience` checks
    in a row while the training objective improved; else None."""
    if len(checks) < patience + 1:
        return None
    best = best_check(checks)
    tail = checks[-patience:]
    if best is None or best.step >= tail[0].step:
        return None
    falls = [(best.score - c.score, fall_noise(best, c)) for c in tail]
    if not all(f > z * noise and f > 0 for f, noise in falls):
        return None
    after = [value for step, value in objective.points if step > best.step]
    if len(after) < 2 or not objective.improved(after[0], after[-1]):
        return None
    now = tail[-1]
    return Alarm("overfitting", now.step,
                 f"held-out {best.metric} fell from {best.score:.3f} (step {best.step}) to {now.score:.3f} over the "
                 f"last {patience} checks, each by more than its noise, while {objective.change(after[0], after[-1])}: "
                 f"{objective.learned.replace('learned', 'is learning')}",
                 {"best_step": best.step, "best_score": round(best.score, 4),
                  "scores": {c.step: round(c.score, 4) for c in tail},
                  "fall_noise": [round(n, 4) for _, n in falls],
                  objective.key: [round(after[0], 4), round(after[-1], 4)]},
                 "fewer passes over the data (--max-steps or --epochs: the best held-out check was at step "
                 f"{best.step}), a lower learning rate, or a larger beta (DPO/KTO) or kl_coef (PPO); the run folder "
                 "keeps the best held-out model")


def beats_start(now: Check, start: Check, z: float = START_Z) -> bool:
    """Whether `now` scored above `start` on the same rows by more than its noise: McNemar's statistic with
    continuity correction on 0/1 outcomes, else a gain above `z` paired standard errors (see START_Z).

    >>> ones = lambda k, n=50: [1.0] * k + [0.0] * (n - k)
    >>> beats_start(Check(9, 0.54, ones(27)), Check(0, 0.5, ones(25)))  # 2 rows gained, none lost: 0.71
    False
    >>> beats_start(Check(9, 0.56, ones(28)), Check(0, 0.5, ones(25)))  # 3 gained: 2 / sqrt(3) = 1.15
    True
    """
    return gain_z(now, start) > z


def gain_z(now: Check, start: Check) -> float:
    """The statistic `beats_start` compares with its bar: on 0/1 outcomes McNemar's, continuity-corrected,
    (b - c - 1) / sqrt(b + c) for b rows gained and c lost (0 when none changed); else the gain over its paired
    standard error (inf for a gain without noise)."""
    a, b = now.per_row, start.per_row
    if a and len(a) == len(b) and all(x in (0.0, 1.0) for x in a + b):
        return mcnemar_z(sum(1 for x, y in zip(a, b) if x > y), sum(1 for x, y in zip(a, b) if x < y))
    gain, noise = now.score - start.score, fall_noise(now, start)
    return gain / noise if noise > 0 else (math.inf if gain > 0 else 0.0)


def mcnemar_z(gained: int, lost: int) -> float:
    """McNemar's statistic with continuity correction for `gained` rows passed now and failed before and `lost`
    the other way round: (gained - lost - 1) / sqrt(gained + lost), 0 when none changed.

    >>> round(mcnemar_z(40, 20), 2), mcnemar_z(29, 28), mcnemar_z(0, 0)
    (2.45, 0.0, 0.0)
    """
    return (gained - lost - 1) / math.sqrt(gained + lost) if gained + lost else 0.0


def kept_check(checks: list[Check], alarm: bool = False, keep_start: bool = True) -> tuple[Check | None, str]:
    """The check whose model the run keeps, and why (one sentence for summary.json and the report); `alarm`:
    the overfitting alarm fired during the run (its sustained fall is the evidence, so the best check is
    preferred to the last); `keep_start`: the start is a usable model (see the module docstring)."""
    best = best_check(checks)
    if best is None:
        return None, "no held-out check ran"
    last, start = checks[-1], checks[0]
    if best.step == last.step:
        candidates = [(last, f"the last step scored best on the held-out rows ({best.metric} {best.score:.3f})")]
    else:
        noise = fall_noise(best, last)
        candidates = [(best, f"step {best.step} scored best on the held-out rows ({best.metric} {best.score:.3f} +- "
                             f"{best.stderr:.3f}); the last step {last.step} scored {last.score:.3f} (kept in last/)")]
        if not alarm and best.score - last.score <= KEEP_Z * noise:
            candidates.insert(0, (last, f"the last step scored {last.score:.3f}, within 2 standard errors "
                                        f"({noise:.3f} each) of the best check (step {best.step}, {best.score:.3f}): "
                                        "the more trained model is kept"))
    if start.step != 0 or not keep_start:
        return candidates[0]
    for check, why in candidates:
        if check is not start and beats_start(check, start):
            return check, f"{why}; it beat the start ({start.score:.3f}) by more than its noise"
    if best is start:
        return start, (f"step 0 (the start) scored best on the held-out rows ({best.metric} {best.score:.3f}); the "
                       f"last step {last.step} ({last.score:.3f}) is in last/")
    return start, (f"no trained check beat the start clearly (best: step {best.step}, {best.score:.3f}; start "
                   f"{start.score:.3f}, {len(start.per_row)} rows): the run folder holds the starting model; the last "
                   f"step {last.step} ({last.score:.3f}) is in last/")


def no_gain(checks: list[Check], objective: Objective, alarm: bool = False, keep_start: bool = True,
            patience: int = PATIENCE) -> Alarm | None:
    """The end-of-run alarm when kept_check keeps the start (step 0; `alarm` as there): `overfitting` when the
    training objective improved over the run, else
    `no_gain`; None otherwise, and for a run of fewer than `patience` trained checks (as the overfitting alarm:
    too short to judge; its kept start and why are still in summary.json and printed)."""
    points = objective.points
    if len(checks) < patience + 1 or checks[0].step != 0 or kept_check(checks, alarm)[0] is not checks[0]:
        return None
    start, best = checks[0], best_check(checks[1:])
    first, last = (points[0][1], points[-1][1]) if points else (math.nan, math.nan)
    fell = len(points) >= 2 and objective.improved(first, last)
    where = ("the run folder holds the starting model (the last one is in last/)" if keep_start
             else "the run folder holds a trained model: its start is not a usable model")
    trained = (f"while {objective.change(first, last)}: {objective.learned}" if fell else
               f"and the training {objective.name} did not {'rise' if objective.higher_is_better else 'fall'} "
               f"either" + (f" ({first:.3g} -> {last:.3g})" if len(points) >= 2 else ""))
    return Alarm("overfitting" if fell else "no_gain", checks[-1].step,
                 f"no held-out check beat the start clearly: {start.metric} {start.score:.3f} at step 0, best "
                 f"{best.score:.3f} (step {best.step}), last {checks[-1].score:.3f} on {len(start.per_row)} rows, "
                 f"{trained}; {where}",
                 {"start_score": round(start.score, 4), "best_step": best.step, "best_score": round(best.score, 4),
                  "scores": {c.step: round(c.score, 4) for c in checks}, "rows": len(start.per_row),
                  objective.key: [round(first, 4), round(last, 4)] if points else []},
                 "fewer passes or a lower learning rate (or a larger beta, DPO/KTO, or kl_coef, PPO) if the held-out "
                 "score fell; more "
                 "(or more varied) training rows, or more held-out rows (--holdout FILE) to measure a small gain")


def summary(checks: list[Check]) -> dict[str, Any]:
    """The held-out curve as summary.json holds it."""
    return {"metric": checks[0].metric if checks else None,
            "curve": [{"step": c.step, "score": round(c.score, 4), "stderr": round(c.stderr, 4)} for c in checks],
            "rows": len(checks[0].per_row) if checks else 0}
