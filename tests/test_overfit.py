"""The overfitting alarm fires on a recorded over-training curve and not on a healthy or merely noisy one; the
run keeps the best held-out check's model."""

from __future__ import annotations

import json
from pathlib import Path

from rlft.watch.overfit import (
    Check,
    Objective,
    beats_start,
    fall_noise,
    kept_check,
    no_gain,
    overfitting,
    training_objective,
)

FIXTURE = Path(__file__).parent / "fixtures" / "overfit_kto_600.jsonl"
# recorded: make demo's PPO stage before recipes/ppo_tiny.yaml was retuned (lr 1e-4, kl_coef 0.05, 150 steps)
# against a reward model of held-out pair accuracy 0.68: the mean rollout reward rose 0.91 -> 3.09 while held-out
# pass@1 fell 0.535 -> 0.045 (200 rows, checks every 50 steps); PPO logs no `loss`
PPO_FIXTURE = Path(__file__).parent / "fixtures" / "ppo_rm_demo.jsonl"


def curve(scores, n=50, start_right=None):
    """Checks on the same n rows: score s means the first round(s*n) rows right (so falls are paired)."""
    out = []
    for i, s in enumerate(scores):
        k = round(s * n)
        out.append(Check(i * 10, k / n, [1.0] * k + [0.0] * (n - k), "pass_at_1", (k / n * (1 - k / n) / n) ** 0.5))
    return out


FALLING_LOSS = Objective("loss", [(s, 1.0 - s / 200) for s in range(5, 200, 5)])
FLAT_LOSS = Objective("loss", [(s, 0.5) for s in range(5, 200, 5)])


def test_fires_on_the_recorded_kto_curve():
    # recorded: rlft kto --recipe recipes/kto_tiny.yaml --max-steps 60 on 600 thumbs rows of another draw of
    # data/arith/make_arith.py (seed 7), from the short SFT: 50 held-out prompts, checks every 6 steps
    rows = [json.loads(line) for line in FIXTURE.read_text().splitlines()]
    checks = [Check(r["step"], r["score"], r["per_row"], "pass_at_1", r["stderr"]) for r in rows if "score" in r]
    losses = Objective("loss", [(r["step"], r["loss"]) for r in rows if "loss" in r])
    fired = [overfitting(checks[:i], losses) for i in range(1, len(checks) + 1)]
    first = next(i for i, a in enumerate(fired) if a is not None)
    alarm = fired[first]
    assert alarm.name == "overfitting" and alarm.evidence["best_step"] == 6 and alarm.step == 24
    assert "fewer passes" in alarm.fix and "lower learning rate" in alarm.fix
    kept, why = kept_check(checks, alarm=True)
    # step 6 (0.66) beat the start (0.62) by 2 rows of 50: within noise, so with the alarm the start is kept
    assert kept.step == 0 and "starting model" in why and "last/" in why


def test_silent_on_a_healthy_curve_and_on_noise():
    assert overfitting(curve([0.4, 0.45, 0.5, 0.55, 0.6, 0.62]), FALLING_LOSS) is None
    # one row up and down around the best: within its noise
    assert overfitting(curve([0.5, 0.52, 0.5, 0.5, 0.52, 0.5]), FALLING_LOSS) is None


def test_needs_the_training_objective_to_improve():
    falling = curve([0.6, 0.7, 0.5, 0.45, 0.4])
    assert overfitting(falling, FALLING_LOSS) is not None
    assert overfitting(falling, FLAT_LOSS) is None  # held-out falls, training does not improve: not over-fitting


def test_paired_noise_is_smaller_than_two_independent_binomials():
    a, b = curve([0.6, 0.5], n=100)
    independent = (a.stderr ** 2 + b.stderr ** 2) ** 0.5
    assert fall_noise(a, b) < independent / 2  # only the 10 rows that flipped count


def test_kept_check_prefers_the_later_of_equals_and_the_last_within_noise():
    kept, why = kept_check(curve([0.3, 0.6, 0.6]))
    assert kept.step == 20 and "last step scored best" in why
    kept, why = kept_check(curve([0.3, 0.66, 0.6]))  # 3 rows of 50 below the best: noise, without the alarm
    assert kept.step == 20 and "within 2 standard errors" in why
    assert kept_check(curve([0.3, 0.66, 0.6]), alarm=True)[0].step == 10
    kept, why = kept_check(curve([0.5, 0.8, 0.5]))
    assert kept.step == 10 and "kept in last/" in why
    assert kept_check(curve([0.5, 0.8, 0.5]), alarm=True)[0].step == 10  # clearly above the start: the best


def test_the_start_is_kept_unless_a_trained_check_clearly_beat_it():
    # 0.5 -> 0.54: 2 rows of 50 gained, none lost; McNemar (2 - 1) / sqrt 2 = 0.71 < 1.0: not clearly better
    kept, why = kept_check(curve([0.5, 0.54, 0.52]))
    assert kept.step == 0 and "no trained check beat the start clearly" in why and "last/" in why
    # 4 rows gained (3 / 2 = 1.5): the trained model is kept, and why says it beat the start
    kept, why = kept_check(curve([0.5, 0.58, 0.58]))
    assert kept.step == 20 and "beat the start" in why
    # the last is within noise of the best but not above the start by its noise, the best is: the best
    assert kept_check(curve([0.5, 0.6, 0.54]))[0].step == 10
    # a reward model's start (an untrained score head) is no model to keep: the trained check instead
    assert kept_check(curve([0.5, 0.54, 0.52]), keep_start=False)[0].step == 20


def test_beats_start_counts_only_rows_that_changed():
    start = Check(0, 0.5, [1.0] * 25 + [0.0] * 25)
    swapped = Check(9, 0.62, [0.0] * 10 + [1.0] * 31 + [0.0] * 9)  # 16 gained, 10 lost: 5 / sqrt 26 = 0.98
    assert not beats_start(swapped, start)
    assert beats_start(Check(9, 0.62, [1.0] * 31 + [0.0] * 19), start)  # the same score, only gains
    # continuous outcomes (token loss): the gain against 2 paired standard errors
    assert beats_start(Check(9, -0.5, [-0.5] * 50), Check(0, -1.0, [-1.0 + 0.1 * (i % 2) for i in range(50)]))


def test_no_gain_alarm_at_the_end_when_the_start_is_kept():
    flat = curve([0.5, 0.54, 0.52, 0.5])
    alarm = no_gain(flat, FALLING_LOSS)
    assert alarm.name == "overfitting" and "not the task" in alarm.message and "starting model" in alarm.message
    assert alarm.evidence["start_score"] == 0.5 and alarm.evidence["rows"] == 50
    assert no_gain(flat, FLAT_LOSS).name == "no_gain"  # nothing learned either: not called overfitting
    assert "holds a trained model" in no_gain(flat, FALLING_LOSS, keep_start=False).message
    assert no_gain(curve([0.5, 0.62, 0.7]), FALLING_LOSS) is None  # a clear gain: no alarm
    assert no_gain(curve([0.5, 0.52, 0.5]), FALLING_LOSS) is None  # 2 trained checks: too short to judge
    assert no_gain(curve([0.5, 0.52, 0.5]), FALLING_LOSS, patience=2).name == "overfitting"


def test_ppo_reads_its_rising_reward_as_the_training_objective():
    rows = [json.loads(line) for line in PPO_FIXTURE.read_text().splitlines()]
    checks = [Check(r["step"], r["score"], r["per_row"], "pass_at_1", r["stderr"]) for r in rows if "score" in r]
    objective = training_objective(rows)  # the held-out rows carry no reward: skipped
    assert objective.higher_is_better and objective.name == "mean reward" and len(objective.points) == 15
    alarm = overfitting(checks, objective)
    assert alarm is not None and alarm.step == 150 and alarm.evidence["best_step"] == 0
    assert "mean reward rose 0.906 -> 3.09" in alarm.message and "kl_coef" in alarm.fix
    assert alarm.evidence["reward"] == [0.9055, 3.0943]
    # as the run logged it before: no `loss`, so neither alarm could see the objective improve
    assert overfitting(checks, Objective("loss", [])) is None
    end = no_gain(checks, objective)
    assert end.name == "overfitting" and "rose 0.906 -> 3.09" in end.message and "not the task" in end.message
    # the same held-out fall while the reward fell: nothing learned, and said in the reward's direction
    falling = Objective("mean reward", [(s, -v) for s, v in objective.points], higher_is_better=True)
    assert overfitting(checks, falling) is None
    flat = no_gain(checks, falling)
    assert flat.name == "no_gain" and "mean reward did not rise either" in flat.message and "loss" not in flat.message


def test_training_objective_is_the_loss_when_one_is_logged():
    rows = [{"step": 5, "loss": 0.7, "reward": 0.1}, {"step": 10, "loss": 0.5, "reward": 0.0}]
    objective = training_objective(rows)
    assert objective == Objective("loss", [(5, 0.7), (10, 0.5)]) and objective.improved(0.7, 0.5)
    assert training_objective([{"step": 0, "heldout/score": 0.5}]).points == []
