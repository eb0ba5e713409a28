"""Every threshold constant in rlft/alarms.py pinned by a history just inside it (the alarm fires) and one
just outside (quiet), with the default Thresholds: moving any constant either way fails a case here.
Synthetic histories, no torch. The constants' reasons (measured runs) are in rlft/alarms.py."""

from __future__ import annotations

import pytest

from rlft import alarms
from rlft.alarms import Thresholds

TH = Thresholds()


def logs(key_values: dict[str, list], start: int = 10, every: int = 10) -> list[dict]:
    n = max(len(v) for v in key_values.values())
    return [{"step": start + i * every, **{k: v[i] for k, v in key_values.items() if i < len(v)}}
            for i in range(n)]


def fires(rule, history) -> bool:
    return rule(history, TH) is not None


# --------------------------------------------------------------------------- zero signal: 0.8 on 3 logs


@pytest.mark.parametrize("fracs, expected", [
    ([0.8, 0.8, 0.8], True),            # ZERO_SIGNAL_FRAC = 0.8: at the threshold fires
    ([0.799, 0.799, 0.799], False),     # just below
    ([0.9, 0.9], False),                # ZERO_SIGNAL_LOGS = 3: two logs are not enough
    ([0.9, 0.5, 0.9, 0.9], False),      # the last 3 must all be high
    ([0.5, 0.9, 0.9, 0.9], True),
])
def test_zero_signal_bounds(fracs, expected):
    assert fires(alarms.zero_signal, logs({"frac_reward_zero_std": fracs})) is expected


# --------------------------------------------------------------------------- KL: 1.0 ceiling, 10x jump over 0.1


@pytest.mark.parametrize("kls, expected", [
    ([0.5, 0.5, 0.5, 1.0], True),           # KL_MAX = 1.0 (no jump: 2x the median)
    ([0.5, 0.5, 0.5, 0.999], False),
    ([0.03125] * 3 + [0.3125], True),       # KL_JUMP = 10: exactly 10x the median (binary-exact numbers)
    ([0.03125] * 3 + [0.3124], False),
    ([0.001] * 3 + [0.1], True),            # KL_FLOOR = 0.1: 100x, at the floor
    ([0.001] * 3 + [0.0999], False),        # 100x, just below the floor: early noise
    ([0.01, 0.05, 0.01, 0.15], True),       # KL_LOGS = 3: median of [0.01, 0.05, 0.01] is 0.01 -> 15x
    ([0.05, 0.05, 0.01, 0.01, 0.15], True),  # median of the last 3 (0.01), not of the last 4 (0.05)
])
def test_kl_bounds(kls, expected):
    assert fires(alarms.kl_blowup, logs({"kl": kls})) is expected


def test_kl_evidence_is_the_last_kl_logs_plus_the_trigger():
    alarm = alarms.kl_blowup(logs({"kl": [0.01, 0.01, 0.01, 0.01, 0.01, 2.0]}), TH)
    assert alarm.evidence["steps"] == [30, 40, 50, 60]  # KL_LOGS = 3 before the step that tripped


# --------------------------------------------------------------------------- entropy: below 10% on 3 logs


@pytest.mark.parametrize("ent, expected", [
    ([1.0, 0.0999, 0.0999, 0.0999], True),  # ENTROPY_MIN_RATIO = 0.1 of the first value
    ([1.0, 0.1, 0.1, 0.1], False),          # at 10%: not below
    ([1.0, 0.05, 0.05], False),             # ENTROPY_LOGS = 3 after the first: not yet
    ([1.0, 0.5, 0.05, 0.05], False),        # only 2 of the last 3 low
])
def test_entropy_bounds(ent, expected):
    assert fires(alarms.entropy_collapse, logs({"entropy": ent, "reward": [0.5] * len(ent)})) is expected


# --------------------------------------------------------------------------- DPO drift: 1 nat over 5 logs


MARGINS = [0.0, 0.1, 0.2, 0.3, 0.4]


@pytest.mark.parametrize("chosen, expected", [
    ([-3.0, -3.25, -3.5, -3.75, -4.0], True),    # DRIFT_MIN_DROP = 1.0 nat over DRIFT_LOGS = 5 logs
    ([-3.0, -3.25, -3.5, -3.75, -3.99], False),  # 0.99 nats
    ([-3.5, -3.0, -3.5, -4.0, -4.0], False),     # over 5 logs 0.5 nats (over the last 4 it would be 1.0)
])
def test_dpo_drift_bounds(chosen, expected):
    assert fires(alarms.dpo_drift, logs({"logps/chosen": chosen, "rewards/margins": MARGINS})) is expected


def test_dpo_drift_needs_five_logs():
    h = logs({"logps/chosen": [-3.0, -3.5, -4.0, -4.5], "rewards/margins": MARGINS[:4]})
    assert not fires(alarms.dpo_drift, h)
    h = logs({"logps/chosen": [-2.0, -3.0, -3.5, -4.0, -4.5, -5.0], "rewards/margins": [0.0] + MARGINS})
    assert alarms.dpo_drift(h, TH).evidence["steps"] == [20, 30, 40, 50, 60]


# --------------------------------------------------------------------------- reward hacking


def hacking(rewards: list[float], heldout: list[float], reward_std: float = 1.0, n: int | None = None) -> list[dict]:
    """Reward logged at steps 10..100, held-out checks at 0 and 100 (with heldout/n rows when given)."""
    h = [{"step": 10 * (i + 1), "reward": r, "reward_std": reward_std} for i, r in enumerate(rewards)]
    h += [{"step": 100 * i, "heldout/pass_at_1": v, **({"heldout/n": n} if n else {})}
          for i, v in enumerate(heldout)]
    return sorted(h, key=lambda r: r["step"])


def rising(rise: float) -> list[float]:
    """Seven logs at 0 then three at `rise`: the reward at the first check is 0, at the last `rise`."""
    return [0.0] * 7 + [rise] * 3


@pytest.mark.parametrize("rewards, heldout, expected", [
    (rising(0.401), [0.5, 0.5], True),     # HACK_MIN_RISE = 0.4 reward_std with a flat held-out score
    (rising(0.399), [0.5, 0.5], False),
    (rising(0.9), [0.5, 0.519], True),      # HACK_MAX_HELDOUT_GAIN = 0.02: a gain of 0.019 is flat
    (rising(0.9), [0.5, 0.521], False),     # 0.021 is progress
    ([0.0] * 7 + [0.63, 0.6, 0.0], [0.5, 0.5], True),  # HACK_REWARD_LOGS = 3: mean of the last 3 is 0.41
    ([0.0] * 7 + [0.0, 0.63, 0.6], [0.5, 0.5], True),
    ([0.0] * 6 + [0.63, 0.6, 0.0, 0.0], [0.5, 0.5], False),  # last 3 mean 0.2 (last 4 would be 0.31)
    (rising(0.2), [0.5, 0.399], True),      # HACK_HELDOUT_DROP = 0.1: a fall of 0.101 needs a quarter of 0.4
    (rising(0.2), [0.5, 0.401], False),     # a fall of 0.099 is noise: the full 0.4 rise is needed
    (rising(0.101), [0.5, 0.2], True),      # HACK_RISE_SHARE_ON_DROP = 0.25: 0.25 x 0.4 = 0.1 on a fall
    (rising(0.099), [0.5, 0.2], False),
])
def test_reward_hacking_bounds(rewards, heldout, expected):
    assert fires(alarms.reward_hacking, hacking(rewards, heldout)) is expected


@pytest.mark.parametrize("after, expected", [
    (0.349, True),   # HACK_DROP_STDERRS = 3: p 0.5 on 100 rows, stderr 0.05, so a fall must reach 0.15
    (0.351, False),  # 0.149: within 3 standard errors (yet above HACK_HELDOUT_DROP = 0.1)
])
def test_reward_hacking_heldout_fall_in_standard_errors(after, expected):
    assert fires(alarms.reward_hacking, hacking(rising(0.2), [0.5, after], n=100)) is expected


# --------------------------------------------------------------------------- length and repetition


def lengths(before: float, after: float, key: str = "completions/mean_length") -> list[dict]:
    h = [{"step": 10 * (i + 1), key: v, "reward": 0.5} for i, v in enumerate([before] * 7 + [after] * 3)]
    h += [{"step": 0, "heldout/pass_at_1": 0.5}, {"step": 100, "heldout/pass_at_1": 0.5}]
    return sorted(h, key=lambda r: r["step"])


@pytest.mark.parametrize("before, after, expected", [
    (10.0, 15.0, True),    # LENGTH_MAX_RATIO = 1.5
    (10.0, 14.9, False),
    (4.0, 6.0, True),      # LENGTH_MIN_TOKENS = 2: 1.5x and exactly 2 tokens longer
    (3.9, 5.89, False),    # 1.51x but 1.99 tokens
])
def test_length_bounds(before, after, expected):
    assert fires(alarms.length_hacking, lengths(before, after)) is expected


@pytest.mark.parametrize("after, expected", [(0.251, True), (0.249, False)])  # REPETITION_MIN_RISE = 0.2
def test_repetition_bounds(after, expected):
    assert fires(alarms.length_hacking, lengths(0.05, after, key="completions/repetition")) is expected


# --------------------------------------------------------------------------- windows and indices (from `make mutate`)


def test_kl_median_is_over_exactly_the_previous_three_logs():
    # previous 3: [0.05, 0.05, 0.01] -> median 0.05, so 0.15 is 3x: quiet (a longer or shorter window says 0.01)
    assert not fires(alarms.kl_blowup, logs({"kl": [0.01, 0.01, 0.01, 0.01, 0.05, 0.05, 0.01, 0.15]}))


def test_dpo_drift_compares_the_first_and_last_margin_of_the_window():
    chosen = [-3.0, -3.25, -3.5, -3.75, -4.0]
    # the margin rose in between but ends below where it started: not "grew"
    assert not fires(alarms.dpo_drift, logs({"logps/chosen": chosen, "rewards/margins": [0.5, 0.9, 0.2, 0.8, 0.4]}))
    # and one that ends above its start grew, whatever happened in between
    assert fires(alarms.dpo_drift, logs({"logps/chosen": chosen, "rewards/margins": [0.5, 0.7, 0.9, 0.0, 0.6]}))
    # both series need the full window
    assert not fires(alarms.dpo_drift, logs({"logps/chosen": chosen, "rewards/margins": MARGINS[:4]}))


def test_zero_signal_fix_follows_the_latest_reward():
    h = logs({"frac_reward_zero_std": [0.9, 0.9, 0.9], "reward": [0.9, 0.9, 0.1]})
    assert "SFT first" in alarms.zero_signal(h, TH).fix  # now failing every group, whatever it did before
    h = logs({"frac_reward_zero_std": [0.9, 0.9, 0.9], "reward": [0.1, 0.1, 0.5]})
    assert "harder prompts" in alarms.zero_signal(h, TH).fix  # 0.5 counts as solved
    assert alarms.zero_signal(h, TH).evidence["reward"] == 0.5


def test_nan_loss_names_the_step_and_the_numbers_around_it():
    alarm = alarms.nan_loss([{"step": 7, "loss": "nan", "grad_norm": 1e9, "learning_rate": 0.1}], TH)
    assert alarm.evidence == {"step": 7, "loss": "nan", "grad_norm": 1e9, "learning_rate": 0.1}
    assert alarms.nan_loss([{"loss": "inf"}], TH).step == 0  # a record without a step


def test_a_pass_rate_reward_catching_up_with_greedy_is_not_hacking():
    """RL sharpening: the sampled pass rate rises toward the greedy held-out pass@1 (make demo-real's GRPO, 4 x G 4:
    0.16 -> 0.33 against a flat 0.575) -- quiet; the same rise past the held-out score still fires."""
    catching_up = hacking([0.16] * 7 + [0.33] * 3, [0.575, 0.575], reward_std=0.36)
    assert not fires(alarms.reward_hacking, catching_up)
    past_it = hacking([0.5] * 7 + [0.7] * 3, [0.575, 0.575], reward_std=0.36)
    assert fires(alarms.reward_hacking, past_it)


def test_a_reward_that_also_scores_the_heldout_rows_is_not_called_gamed():
    """When the held-out check is scored by the training reward itself, gaming the reward would lift the held-out
    score too: a rise with a flat held-out score is no hacking (make demo-real RL=rloo: 0.17 -> 0.31 on a flat
    0.23-0.24); the same history with another scorer still fires."""
    history = hacking([0.17] * 7 + [0.31] * 3, [0.23, 0.24], reward_std=0.3)
    assert fires(alarms.reward_hacking, history)
    assert alarms.reward_hacking(history, Thresholds(reward_scores_heldout=True)) is None
    fell = hacking([0.17] * 7 + [0.31] * 3, [0.40, 0.20], reward_std=0.3, n=100)  # a fall past 3 standard errors
    assert alarms.reward_hacking(fell, Thresholds(reward_scores_heldout=True)) is not None

