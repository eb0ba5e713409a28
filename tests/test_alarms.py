"""Alarm rules on synthetic histories: each rule fires on the pattern it names and stays quiet on a
healthy run that looks close to it. Pure: no torch, no model."""

from __future__ import annotations

import dataclasses
import doctest

import pytest
from helpers import FIXTURES

from rlft import alarms
from rlft.alarms import RULES, Thresholds, check
from rlft.config import SCHEMA
from rlft.errors import UserError

TH = Thresholds()


def logs(key_values: dict[str, list], start: int = 10, every: int = 10) -> list[dict]:
    """A history with one record per position: {step, key: value, ...}."""
    n = max(len(v) for v in key_values.values())
    return [{"step": start + i * every, **{k: v[i] for k, v in key_values.items() if i < len(v)}}
            for i in range(n)]


def fired(history, th=TH) -> list[str]:
    return [a.name for a in check(history, th)]


# ----------------------------------------------------------------------------- zero signal


def test_zero_signal_fires_after_n_logs_at_or_above_threshold():
    h = logs({"frac_reward_zero_std": [0.5, 0.85, 0.8, 0.95], "reward": [0.7, 0.9, 0.95, 0.97]})
    alarm = alarms.zero_signal(h, TH)
    assert alarm is not None and alarm.name == "zero_signal" and alarm.step == 40
    assert alarm.evidence["steps"] == [20, 30, 40]
    assert alarm.evidence["frac_reward_zero_std"] == [0.85, 0.8, 0.95]
    assert "harder prompts" in alarm.fix  # reward high: the prompts are always solved


def test_zero_signal_fix_for_never_solved_prompts():
    h = logs({"frac_reward_zero_std": [0.9, 0.9, 0.9], "reward": [0.02, 0.01, 0.0]})
    assert "SFT first" in alarms.zero_signal(h, TH).fix


@pytest.mark.parametrize("fracs", [
    [0.6, 0.55, 0.7, 0.75],   # the healthy sft-short + math run: mixed groups
    [0.9, 0.9, 0.79],         # one log below the threshold breaks the run of N
    [0.95, 0.95],             # fewer than N logs
])
def test_zero_signal_quiet(fracs):
    assert alarms.zero_signal(logs({"frac_reward_zero_std": fracs}), TH) is None


def test_zero_signal_window_from_config():
    h = logs({"frac_reward_zero_std": [0.5, 0.7]})
    assert alarms.zero_signal(h, Thresholds(zero_signal_frac=0.7, zero_signal_logs=1)).step == 20


# ----------------------------------------------------------------------------- KL


def test_kl_fires_above_ceiling():
    alarm = alarms.kl_blowup(logs({"kl": [0.02, 0.05, 0.2, 1.4]}), TH)
    assert alarm.name == "kl_blowup" and alarm.step == 40 and "kl_max" in alarm.message
    assert alarm.evidence["kl"][-1] == 1.4


def test_kl_fires_on_a_tenfold_jump_below_the_ceiling():
    alarm = alarms.kl_blowup(logs({"kl": [0.03, 0.04, 0.03, 0.5]}), TH)
    assert alarm is not None and "x its recent median" in alarm.message


@pytest.mark.parametrize("kls", [
    [0.001, 0.004, 0.01, 0.03, 0.06, 0.08],  # steady growth inside the healthy band
    [0.001, 0.001, 0.002, 0.05],             # 25x, but below the 0.1 floor: early noise
    [0.3, 0.5, 0.7, 0.9],                    # high but below the ceiling, no jump
])
def test_kl_quiet(kls):
    assert alarms.kl_blowup(logs({"kl": kls}), TH) is None


def test_kl_absent_is_quiet():
    assert alarms.kl_blowup(logs({"loss": [1.0, 0.9]}), TH) is None


# ----------------------------------------------------------------------------- entropy


def test_entropy_collapse_fires_in_rl():
    h = logs({"entropy": [0.8, 0.5, 0.07, 0.05, 0.04], "reward": [0.3, 0.5, 0.6, 0.6, 0.6]})
    alarm = alarms.entropy_collapse(h, TH)
    assert alarm.name == "entropy_collapse" and alarm.step == 50
    assert alarm.evidence["first_entropy"] == 0.8 and alarm.evidence["entropy"] == [0.07, 0.05, 0.04]


@pytest.mark.parametrize("ent", [
    [0.8, 0.6, 0.5, 0.4, 0.3],          # falling, but above 10% of the start
    [0.8, 0.05, 0.04, 0.2, 0.05],       # one log back above: not N in a row
])
def test_entropy_quiet_in_rl(ent):
    assert alarms.entropy_collapse(logs({"entropy": ent, "reward": [0.5] * len(ent)}), TH) is None


def test_entropy_falling_in_sft_is_learning_not_collapse():
    h = logs({"entropy": [2.0, 0.5, 0.1, 0.05, 0.04], "loss": [2.0, 0.5, 0.1, 0.05, 0.04]})
    assert alarms.entropy_collapse(h, TH) is None


# ----------------------------------------------------------------------------- NaN


@pytest.mark.parametrize("bad", ["nan", "inf", "-inf", float("nan"), float("inf")])
def test_nan_loss_fires(bad):
    h = logs({"loss": [1.2, 0.9, bad, bad]})
    alarm = alarms.nan_loss(h, TH)
    assert alarm.name == "nan_loss" and alarm.step == 30 and "loss" in alarm.message


def test_nan_eval_loss_fires_and_finite_is_quiet():
    assert alarms.nan_loss([{"step": 5, "loss": 1.0}, {"step": 5, "eval_loss": "nan"}], TH).step == 5
    assert alarms.nan_loss(logs({"loss": [3.0, 1e30, 0.0]}), TH) is None


# ----------------------------------------------------------------------------- DPO drift


def test_dpo_drift_fires_when_chosen_falls_and_margin_grows():
    h = logs({"logps/chosen": [-3.0, -3.3, -3.7, -4.0, -4.4], "rewards/margins": [0.1, 0.4, 0.8, 1.2, 1.7],
              "logps/rejected": [-8.0, -9.5, -11.0, -13.0, -15.0]})
    alarm = alarms.dpo_drift(h, TH)
    assert alarm.name == "dpo_drift" and alarm.step == 50
    assert alarm.evidence["logps/chosen"][0] == -3.0 and alarm.evidence["logps/chosen"][-1] == -4.4
    assert "1.40 nats" in alarm.message
    assert "--set dpo.loss_type=" in alarm.fix
    # rlft reward's implicit objective logs DPO's keys; its fix names the reward section
    reward_run = alarms.dpo_drift(h, alarms.Thresholds.from_watch(None, method="reward"))
    assert "--set reward.loss_type=" in reward_run.fix


@pytest.mark.parametrize("chosen, margins", [
    ([-3.7, -4.4, -4.5, -4.4, -4.0], [0.0, 0.0, 0.02, 0.02, 0.06]),     # the real dpo_tiny run: small dip
    ([-3.0, -2.8, -2.7, -2.6, -2.5], [0.1, 0.4, 0.8, 1.2, 1.7]),       # healthy: chosen up, margin up
    ([-3.0, -3.5, -4.0, -4.5, -5.0], [1.0, 0.8, 0.6, 0.5, 0.4]),       # chosen falls, margin shrinks
    ([-3.0, -3.5, -4.0, -4.5], [0.1, 0.4, 0.8, 1.2]),                  # fewer than N logs
])
def test_dpo_drift_quiet(chosen, margins):
    assert alarms.dpo_drift(logs({"logps/chosen": chosen, "rewards/margins": margins}), TH) is None


# ----------------------------------------------------------------------------- reward hacking


def hacking_history(rewards, heldout, every=50, reward_std=0.5) -> list[dict]:
    """Reward logs every 10 steps; held-out checks at 0, every, 2*every, ..."""
    h = [{"step": 10 * (i + 1), "reward": r, "reward_std": reward_std} for i, r in enumerate(rewards)]
    h += [{"step": every * i, "heldout/pass_at_1": v} for i, v in enumerate(heldout)]
    return sorted(h, key=lambda r: r["step"])


def test_reward_hacking_fires_when_reward_rises_and_heldout_falls():
    # The tiny-model demo's shape: reward-model score 2.0 -> 3.0, held-out accuracy 0.38 -> 0.02.
    h = hacking_history([2.0, 2.0, 2.1, 2.3, 2.5, 2.7, 2.8, 2.9, 3.0, 3.0], [0.38, 0.20, 0.02])
    alarm = alarms.reward_hacking(h, TH)
    assert alarm.name == "reward_hacking" and alarm.step == 100
    assert alarm.evidence["steps"] == [0, 100]
    assert alarm.evidence["heldout/pass_at_1"] == [0.38, 0.02]
    assert alarm.evidence["reward"][0] == pytest.approx(2.0333, abs=1e-3)
    assert alarm.evidence["reward"][1] == pytest.approx(2.9667, abs=1e-3)


def test_reward_hacking_fires_on_a_flat_heldout_too():
    h = hacking_history([0.3, 0.3, 0.35, 0.45, 0.5, 0.55, 0.6, 0.65, 0.7, 0.7], [0.40, 0.41, 0.41])
    assert alarms.reward_hacking(h, TH) is not None


def test_reward_hacking_after_real_progress_compares_with_each_earlier_check():
    # Held-out rose 0.4 -> 0.6 (learning), then the reward kept climbing while held-out fell back to 0.45:
    # against step 0 the held-out gained, against step 50 it fell while the reward rose 0.6 -> 0.98.
    h = hacking_history([0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 1.0, 1.0], [0.40, 0.60, 0.45])
    alarm = alarms.reward_hacking(h, TH)
    assert alarm is not None and alarm.evidence["steps"] == [50, 100]
    assert alarm.evidence["heldout/pass_at_1"] == [0.6, 0.45]


@pytest.mark.parametrize("rewards, heldout", [
    ([0.3, 0.3, 0.35, 0.45, 0.5, 0.55, 0.6, 0.65, 0.7, 0.7], [0.40, 0.50, 0.62]),  # both rise: learning
    ([0.40, 0.42, 0.38, 0.41, 0.44, 0.40, 0.39, 0.43, 0.41, 0.42], [0.40, 0.39, 0.40]),  # noise, flat
    ([0.5, 0.45, 0.4, 0.35, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3], [0.5, 0.4, 0.3]),  # both fall: no hacking
])
def test_reward_hacking_quiet(rewards, heldout):
    assert alarms.reward_hacking(hacking_history(rewards, heldout), TH) is None


def test_reward_hacking_needs_two_heldout_checks():
    h = hacking_history([2.0, 2.5, 3.0, 3.5], [0.38])
    assert alarms.reward_hacking(h, TH) is None
    h = hacking_history([2.0, 2.5, 3.0, 3.5], [])
    assert alarms.reward_hacking(h, TH) is None


def test_reward_hacking_threshold_is_in_units_of_the_starting_spread():
    h = hacking_history([2.0, 2.0, 2.0, 2.1, 2.1, 2.1, 2.2, 2.2, 2.2, 2.2], [0.4, 0.4, 0.4], reward_std=1.0)
    assert alarms.reward_hacking(h, TH) is None  # +0.17 on a spread of 1.0: 0.17 < 0.4
    assert alarms.reward_hacking(h, Thresholds(hacking_min_rise=0.1)) is not None


# ----------------------------------------------------------------------------- length / repetition


def length_history(lengths, heldout, key="completions/mean_length") -> list[dict]:
    h = [{"step": 10 * (i + 1), key: v, "reward": 0.5} for i, v in enumerate(lengths)]
    h += [{"step": 50 * i, "heldout/pass_at_1": v} for i, v in enumerate(heldout)]
    return sorted(h, key=lambda r: r["step"])


def test_length_hacking_fires_on_longer_completions_with_flat_heldout():
    alarm = alarms.length_hacking(length_history([40, 42, 45, 55, 60, 70, 80, 85, 90, 95], [0.4, 0.41, 0.40]),
                                  TH)
    assert alarm.name == "length_hacking" and "tokens" in alarm.message and alarm.step == 100


def test_repetition_hacking_fires():
    h = length_history([0.05, 0.05, 0.06, 0.1, 0.2, 0.3, 0.4, 0.45, 0.5, 0.5], [0.4, 0.4, 0.35],
                       key="completions/repetition")
    alarm = alarms.length_hacking(h, TH)
    assert alarm is not None and "repetition" in alarm.message


@pytest.mark.parametrize("lengths, heldout", [
    ([40, 42, 45, 55, 60, 70, 80, 85, 90, 95], [0.4, 0.5, 0.6]),   # longer and better: reasoning grew
    ([3.6, 3.6, 3.5, 3.7, 3.6, 3.6, 3.7, 3.6, 3.6, 3.6], [0.5, 0.5, 0.5]),  # flat length
    ([2, 2, 2, 3, 3, 3, 3, 3, 3, 3], [0.5, 0.5, 0.5]),              # 1.5x but only 1 token
])
def test_length_hacking_quiet(lengths, heldout):
    assert alarms.length_hacking(length_history(lengths, heldout), TH) is None


# ----------------------------------------------------------------------------- real histories
# Logged by the tiny model after recipes/sft_tiny_short.yaml, as metrics.jsonl records (rounded to 3 places):
# tests/fixtures/grpo_math_metrics.jsonl is GRPO with the math verifier (recipes/grpo_math_tiny.yaml, 600 steps,
# held-out 0.535 -> 0.795); tests/fixtures/grpo_reward_model_metrics.jsonl is GRPO against a tiny reward model
# (recipes/reward_tiny.yaml, pair accuracy 0.54) as the only reward. Held-out checked with the math verifier
# (`heldout/pass_at_1` records, every 50 and 25 steps).


def real_history(name: str) -> list[dict]:
    from rlft.run.folder import read_jsonl

    return read_jsonl(FIXTURES / name)


def first_alarms(history) -> dict[str, int]:
    """Replay the history log by log as the monitor does: {alarm: step it first fired}."""
    out: dict[str, int] = {}
    for i in range(1, len(history) + 1):
        for a in check(history[:i], TH, skip=set(out)):
            out[a.name] = a.step
    return out


def test_real_math_verifier_run_raises_no_alarm():
    assert first_alarms(real_history("grpo_math_metrics.jsonl")) == {}


def test_real_reward_model_run_raises_the_hacking_alarm_at_the_first_check_after_the_hack():
    h = real_history("grpo_reward_model_metrics.jsonl")
    # Step 50: held-out 0.55 -> 0.04 with a small reward rise (the held-out-drop branch); step 75: the
    # reward has jumped past 0.4 reward_std and the completions grew (length hacking).
    assert first_alarms(h) == {"reward_hacking": 50, "length_hacking": 75}
    alarm = alarms.reward_hacking([r for r in h if r["step"] <= 50], TH)
    assert alarm.evidence["heldout/pass_at_1"] == [0.55, 0.04]
    alarm = alarms.reward_hacking([r for r in h if r["step"] <= 75], TH)
    assert alarm.evidence["heldout/pass_at_1"] == [0.55, 0.0]
    assert alarm.evidence["reward"][1] > alarm.evidence["reward"][0] + 0.25


# ----------------------------------------------------------------------------- the registry and config


def test_check_skips_ignored_and_already_fired():
    h = logs({"frac_reward_zero_std": [0.9, 0.9, 0.9], "loss": ["nan", "nan", "nan"]})
    assert fired(h) == ["nan_loss", "zero_signal"]
    assert [a.name for a in check(h, TH, skip={"nan_loss"})] == ["zero_signal"]
    assert fired(h, Thresholds(ignore=("zero_signal",))) == ["nan_loss"]


def test_healthy_history_fires_nothing():
    h = logs({"loss": [0.01, 0.009, 0.008, 0.01, 0.007], "reward": [0.44, 0.38, 0.37, 0.39, 0.39],
              "reward_std": [0.5] * 5, "frac_reward_zero_std": [0.55, 0.53, 0.75, 0.72, 0.55],
              "entropy": [0.2, 0.19, 0.19, 0.21, 0.2], "completions/mean_length": [3.6] * 5}, every=5)
    h += [{"step": 0, "heldout/pass_at_1": 0.55}, {"step": 25, "heldout/pass_at_1": 0.52}]
    assert fired(sorted(h, key=lambda r: r["step"])) == []


def test_every_alarm_has_name_message_and_fix_on_one_line():
    histories = [
        logs({"frac_reward_zero_std": [0.9] * 3}), logs({"kl": [0.01, 0.01, 2.0]}),
        logs({"entropy": [1.0, 0.05, 0.05, 0.05], "reward": [0.1] * 4}), logs({"loss": ["nan"]}),
        logs({"logps/chosen": [-3, -3.5, -4, -4.5, -5], "rewards/margins": [0, 0.5, 1, 1.5, 2]}),
        hacking_history([2.0, 2.2, 2.4, 2.6, 2.8, 3.0], [0.38, 0.02]),
        length_history([40, 50, 60, 80, 90, 100], [0.4, 0.4]),
    ]
    drift = logs({"logps/chosen": [-3, -3.5, -4, -4.5, -5], "rewards/margins": [0, 0.5, 1, 1.5, 2]})
    per_method = [(drift, "kto"), (logs({"loss": [0.5, 0.3, 0.2, 0.4, 0.5, 0.6]}), "distill")]
    names = set()
    for h, method in [(h, None) for h in histories] + per_method:
        for a in check(h, Thresholds(method=method)):
            names.add(a.name)
            assert a.message and a.fix and "\n" not in a.message + a.fix
            assert a.as_dict()["evidence"] == a.evidence
    assert names == set(RULES)


def test_thresholds_from_watch_and_schema_defaults_agree():
    watch = SCHEMA["watch"]
    for f in dataclasses.fields(Thresholds):
        if f.name in ("method", "reward_scores_heldout"):  # set from the run (its method, its reward), not watch
            continue
        assert f.name in watch, f"watch.{f.name} missing from the config schema"
        default = watch[f.name].default
        assert (tuple(default) if isinstance(default, list) else default) == f.default, f.name
        assert watch[f.name].rlft_only
    th = Thresholds.from_watch({"zero_signal_frac": 0.5, "kl_max": None, "ignore": ["kl_blowup"]})
    assert th.zero_signal_frac == 0.5 and th.kl_max == alarms.KL_MAX and th.ignore == ("kl_blowup",)


def test_unknown_alarm_name_in_ignore_says_did_you_mean():
    with pytest.raises(UserError, match="unknown alarm 'zero_signals'.*did you mean 'zero_signal'"):
        Thresholds.from_watch({"ignore": ["zero_signals"]})


def test_repetition_doctests():
    assert doctest.testmod(alarms).failed == 0


def test_watch_modules_import_no_heavy_library():
    import subprocess
    import sys

    code = ("import sys, rlft.alarms, rlft.report, rlft.commands.report, rlft.watch.monitor; print(','.join(m for m in "
            "('torch', 'transformers', 'trl', 'matplotlib') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_reward_hacking_fires_on_a_small_rise_when_heldout_falls():
    # The demo's PPO-vs-reward-model run (metrics.jsonl, rounded): reward +0.26 reward_std by step 100, held-out
    # 0.535 -> 0.285. Below the 0.4 rise a flat held-out needs; a fall of 0.25 needs only a quarter of it.
    rewards = [0.589, 0.633, 0.621, 0.665, 0.67, 0.695, 0.723, 0.719, 0.714, 0.718]
    h = hacking_history(rewards, [0.535, 0.29, 0.285], reward_std=0.4)
    alarm = alarms.reward_hacking(h, TH)
    assert alarm is not None and alarm.step == 100 and alarm.evidence["steps"] == [0, 100]
    # The same rewards with a flat held-out score stay under the flat-held-out threshold.
    assert alarms.reward_hacking(hacking_history(rewards, [0.535, 0.53, 0.535], reward_std=0.4), TH) is None
    # A smaller fall (0.05) is treated as noise: the full rise is needed.
    assert alarms.reward_hacking(hacking_history(rewards, [0.535, 0.50, 0.485], reward_std=0.4), TH) is None
    # A reward that did not rise never counts, however far held-out fell.
    flat = [0.6] * 10
    assert alarms.reward_hacking(hacking_history(flat, [0.535, 0.3, 0.2], reward_std=0.4), TH) is None


def test_heldout_drop_must_beat_sampling_noise_of_the_heldout_set():
    rewards = [0.589, 0.633, 0.621, 0.665, 0.67, 0.695, 0.723, 0.719, 0.714, 0.718]

    def with_rows(n, heldout):
        h = hacking_history(rewards, heldout, reward_std=0.4)
        return h + [{"step": 50 * i, "heldout/n": n} for i in range(len(heldout))]

    # 0.535 -> 0.41 is a fall of 0.125: past 3 standard errors on 200 rows (0.106), not on 40 rows (0.237).
    assert alarms.reward_hacking(with_rows(200, [0.535, 0.45, 0.41]), TH) is not None
    assert alarms.reward_hacking(with_rows(40, [0.535, 0.45, 0.41]), TH) is None
    # A fall of exactly the threshold counts despite float rounding (0.7 - 0.6 < 0.1 in binary).
    assert alarms.reward_hacking(hacking_history(rewards, [0.7, 0.65, 0.6], reward_std=0.4), TH) is not None


# ----------------------------------------------------------------------------- KTO, RLOO, distillation

KTO = Thresholds(method="kto")
DISTILL = Thresholds(method="distill")


def test_kto_drift_replaces_dpo_drift_and_kl_blowup_on_kto_runs():
    # KTO logs DPO's keys; its `kl` is a batch estimate summed over whole completions (here 3 nats), not the
    # per-token KL that kl_blowup reads
    h = logs({"logps/chosen": [-3, -3.4, -3.9, -4.3, -4.6], "rewards/margins": [0, 0.1, 0.2, 0.25, 0.3],
              "kl": [0.0, 0.0, 3.0, 0.0, 0.0]})
    assert fired(h, KTO) == ["kto_drift"]
    alarm = alarms.kto_drift(h, KTO)
    assert alarm.step == 50 and "desirable log-prob fell 1.60 nats" in alarm.message and "desirable_weight" in alarm.fix
    assert "dpo_drift" in fired(h) and "kto_drift" not in fired(h)  # without a method: the general rules


def test_kto_drift_quiet_while_the_desirable_answers_gain():
    h = logs({"logps/chosen": [-3, -2.9, -2.8, -2.6, -2.5], "rewards/margins": [0, 0.1, 0.2, 0.25, 0.3]})
    assert fired(h, KTO) == []


def test_distill_diverging_fires_when_the_loss_stays_well_above_its_best():
    h = logs({"loss": [1.7, 1.2, 0.8, 0.6, 1.0, 1.1, 1.3]})
    alarm = alarms.distill_diverging(h, DISTILL)
    assert alarm is not None and alarm.step == 70 and alarm.evidence["best_loss"] == 0.6
    assert fired(h, DISTILL) == ["distill_diverging"] and "distill_diverging" not in fired(h)  # distill only
    assert fired(h, Thresholds(method="distill", diverge_logs=4)) == []  # step 40 (0.6) is in a 4-log window


@pytest.mark.parametrize("losses", [
    [1.7, 1.5, 1.3, 1.0, 0.8, 0.6],          # falling: healthy
    [0.6, 0.65, 0.7, 0.62, 0.68, 0.7],       # noise around a plateau (< 1.5x the best)
    [0.02, 0.01, 0.03, 0.04, 0.035],         # 3x the best but by 0.02-0.03 nats: under DIVERGE_MIN_RISE
    [1.7, 1.2, 0.6, 1.0, 1.1, 0.7],          # came back down at the last log
])
def test_distill_diverging_quiet(losses):
    assert alarms.distill_diverging(logs({"loss": losses}), DISTILL) is None


def test_zero_signal_reads_rloo_logs_too():
    h = logs({"frac_reward_zero_std": [0.85, 0.9, 0.88], "reward": [0.2, 0.2, 0.2]})
    assert fired(h, Thresholds(method="rloo")) == ["zero_signal"]


def test_watch_section_picks_the_rules_of_the_method():
    th = Thresholds.from_watch({"diverge_ratio": 2.0}, "distill")
    assert th.method == "distill" and th.diverge_ratio == 2.0
    assert alarms.applies("distill_diverging", "distill") and not alarms.applies("distill_diverging", "sft")
    assert not alarms.applies("dpo_drift", "kto") and alarms.applies("dpo_drift", "dpo")


# ----------------------------------------------------------------------------- tool runs (episodes)


def _recorded(name: str) -> list[dict]:
    import json

    return [json.loads(line) for line in (FIXTURES / f"grpo_tools_{name}_metrics.jsonl").read_text().splitlines()]


def test_tool_collapse_fires_on_the_recorded_collapse_and_not_on_the_healthy_run():
    # Recorded metrics.jsonl of two tiny-model GRPO runs with the calculator environment after SFT: lr 3e-4 stopped
    # calling the tool (0.7 -> 0.075 -> 0 calls per episode, reward 0.25 -> 0), lr 3e-5 kept calling it.
    from rlft.watch.tool_alarms import tool_collapse

    def first(rule, history):  # as the watcher runs a rule: after each log, the first that fires
        return next((a for i in range(1, len(history) + 1) if (a := rule(history[:i], TH)) is not None), None)

    collapsed = _recorded("collapse")
    alarm = first(tool_collapse, collapsed)
    assert alarm is not None and alarm.name == "tool_collapse" and alarm.step == 30
    assert alarm.evidence["tools/call_frequency"] == [0.075, 0.0] and alarm.evidence["first_call_frequency"] == 0.7
    assert "stopped using its tools" in alarm.message and "learning rate" in alarm.fix
    assert first(tool_collapse, _recorded("healthy")) is None
    # the zero-signal alarm reads the episode rewards of the same rows (all groups 0 after the collapse)
    assert first(alarms.zero_signal, collapsed).step == 40


def test_tool_collapse_on_dominant_errors_and_quiet_while_the_reward_rises():
    from rlft.watch.tool_alarms import tool_collapse

    base = {"tools/call_frequency": [1.0, 1.1, 1.0, 1.2], "reward_std": [0.4, 0.4, 0.4, 0.4]}
    errors = logs({**base, "tools/failure_frequency": [0.05, 0.2, 0.6, 0.7], "reward": [0.3, 0.3, 0.25, 0.2]})
    alarm = tool_collapse(errors)
    assert alarm is not None and alarm.step == 40 and alarm.evidence["tools/failure_frequency"] == [0.6, 0.7]
    assert "errors" in alarm.message
    rising = logs({**base, "tools/failure_frequency": [0.05, 0.2, 0.6, 0.7], "reward": [0.3, 0.35, 0.5, 0.6]})
    assert tool_collapse(rising) is None  # a reward that rises: the errors are not costing the task
    no_tool = logs({"tools/call_frequency": [0.9, 0.5, 0.1, 0.0], "reward": [0.2, 0.3, 0.5, 0.7]})
    assert tool_collapse(no_tool) is None  # answering without the tool, and better: not a collapse
    th = Thresholds.from_watch({"ignore": ["tool_collapse"]})
    assert "tool_collapse" in th.ignore  # a known name for watch.ignore
