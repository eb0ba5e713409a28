"""`rlft choose` prices rollouts: bootstrap (rejection-sampling fine-tuning) against GRPO for the user's prompts.

Seed 002's cost model: GRPO takes S x B x G rollouts (steps x prompts per step x group), each one trained on;
BootstrapFinetune one teacher rollout per example (rlft bootstrap: N per prompt and round), trained only on the
accepted ones. With a measured pass rate (the pre-flight `rlft choose --model` runs), `rule_bootstrap` prices both
for the prompt count and recommends bootstrap when the model passes sometimes and the reward is 0/1, GRPO when the
verifier gives partial credit or when `--model` is a bootstrap run whose last round gained nothing on its held-out
check (`last_round_gain` in its summary.json: `bootstrap_gain`). Pure: no torch; the time per rollout is the
pre-flight's, measured.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

PASS_RATE_HIGH = 0.9         # at p = 0.9 and G = 8, a group is all-correct with probability 0.9^8 = 0.43
GRPO_GROUP = 8               # GRPO's group size in the shipped recipes


# --- pricing rollouts (seed 002: GRPO needs S x B x G rollouts, BootstrapFinetune one per example and round)
BOOT_SAMPLES, BOOT_ROUNDS, BOOT_KEEP = 8, 2, 2  # rlft bootstrap's defaults (rlft/schema.py, section bootstrap)
# GRPO priced at S x B = 2.5 passes over the prompts: recipes/grpo_math_tiny.yaml's 600 steps x 8 prompts over its
# 1,900 prompts (4,800 / 1,900 = 2.5)
GRPO_EPOCHS = 2.5
# A trained sequence costs TRAIN_COST sampled ones: forward + backward is ~6 flops per weight per token against a
# decode's 2 (3x), all tokens at once instead of one per step (cheaper per token on a CPU, where a decode step is
# bound by reading the weights): 2 is an assumption between those, not a measurement. The sampling time is the
# pre-flight's, measured on this machine.
TRAIN_COST = 2.0


def price(prompts: int, pass_rate: float, seconds_per_rollout: float | None, group: int = GRPO_GROUP) -> dict:
    """Rollouts and minutes of bootstrap (BOOT_ROUNDS rounds x BOOT_SAMPLES samples of every prompt, SFT on the
    min(BOOT_KEEP, N p) accepted per prompt) and GRPO (GRPO_EPOCHS passes x G samples per prompt, each trained on).

    >>> e = price(500, 0.25, 0.1)
    >>> e["bootstrap_rollouts"], e["grpo_rollouts"], e["bootstrap_minutes"], e["grpo_minutes"]
    (8000, 10000, 20.0, 50.0)
    """
    boot = prompts * BOOT_SAMPLES * BOOT_ROUNDS
    trained = prompts * min(BOOT_KEEP, BOOT_SAMPLES * pass_rate) * BOOT_ROUNDS
    grpo = int(prompts * group * GRPO_EPOCHS)
    out: dict[str, Any] = {"prompts": prompts, "pass_rate": round(pass_rate, 4),
                           "bootstrap_rollouts": boot, "bootstrap_trained_rows": round(trained),
                           "grpo_rollouts": grpo, "grpo_trained_rows": grpo,
                           "seconds_per_rollout": None if seconds_per_rollout is None
                           else round(seconds_per_rollout, 4),
                           "bootstrap_minutes": None, "grpo_minutes": None,
                           "assumes": f"bootstrap: {BOOT_ROUNDS} rounds x {BOOT_SAMPLES} samples of every prompt, "
                                      f"SFT on up to {BOOT_KEEP} accepted per prompt; GRPO: {GRPO_EPOCHS:g} passes x G "
                                      f"{group}, every rollout trained on; a trained row costs {TRAIN_COST:g} "
                                      "rollout's time; rollout time from the pre-flight on this machine"}
    if seconds_per_rollout is not None:
        out["bootstrap_minutes"] = round((boot + TRAIN_COST * trained) * seconds_per_rollout / 60, 1)
        out["grpo_minutes"] = round(grpo * (1 + TRAIN_COST) * seconds_per_rollout / 60, 1)
    return out


def bootstrap_gain(model: str | None) -> float | None:
    """The held-out gain of the last round of the bootstrap run in the folder `model` (its summary.json's
    `last_round_gain`: the last check's score less the one before), None when `model` is no bootstrap run folder
    or the run recorded no gain (a single check)."""
    if not model:
        return None
    path = Path(model) / "summary.json"
    try:
        summary = json.loads(path.read_text()) if path.is_file() else None
    except (OSError, ValueError):
        return None
    if not isinstance(summary, dict) or summary.get("method") != "bootstrap":
        return None
    gain = summary.get("last_round_gain")
    return float(gain) if isinstance(gain, (int, float)) else None


def rule_bootstrap(s: Any, r: Any) -> None:
    """With a measured pass rate: bootstrap when the model passes sometimes and the reward is 0/1 (rejection
    sampling keeps every pass, needs no mixed groups, trains only on the accepted rows), GRPO when the verifier
    gives partial credit (a pass/fail filter throws the gradations away); the rollouts priced for both."""
    if s.kind != "verifier" or s.pass_rate is None:
        return
    if s.rows:
        r.rollout_estimate = price(s.rows, s.pass_rate, s.seconds_per_rollout)
    if r.method != "grpo" or not 0 < s.pass_rate < PASS_RATE_HIGH:
        return
    if s.partial_credit:
        r.reasons.append(f"the {s.verifier or 'given'} verifier gives partial credit: GRPO learns from every "
                         "gradation, where bootstrap's pass/fail filter would throw them away")
        return
    if s.format_only or "zero_signal" in r.codes():  # prompts always or never solved: bootstrap keeps nothing new
        return
    gain = bootstrap_gain(s.model)
    if gain is not None and r.rollout_estimate:
        r.rollout_estimate["bootstrap_last_round_gain"] = gain
    if gain is not None and gain <= 0:
        r.reasons.insert(0, f"{s.model} is a bootstrap run whose last round gained nothing on its held-out check "
                            f"({100 * gain:+.1f} points): rejection sampling has kept what it can, so GRPO next, "
                            "from that model (it also pushes down the wrong samples, which bootstrap throws away)")
        return
    r.method = "bootstrap"
    r.reasons = [x for x in r.reasons if "GRPO samples G answers" not in x]  # rule_signal's GRPO line
    e = r.rollout_estimate
    cost = (f" ({e['bootstrap_rollouts']:,} rollouts, ~{e['bootstrap_minutes']} min, against GRPO's "
            f"{e['grpo_rollouts']:,} each trained on, ~{e['grpo_minutes']} min)" if e and e.get("bootstrap_minutes")
            is not None else "")
    r.reasons.insert(0, f"the model passes {s.pass_rate:.0%} of sampled answers and the reward is 0/1: bootstrap "
                        "(rejection-sampling fine-tuning) keeps the accepted samples and fine-tunes on them, the "
                        f"cheap lever before GRPO{cost}; if its last round gains nothing, GRPO next")


# What rlft measured with pairs (docs/preferences.md, BENCHMARKS.md "Preferences on the support store"): the numbers
# `rlft choose` gives for pairs.
MEASURED_PAIRS = ("measured here (docs/preferences.md), SmolLM2-135M + LoRA with the shipped recipes, truth of the "
                  "model's own greedy replies on 150 held-out prompts of a support store: DPO (with the chosen "
                  "replies' NLL, recipes/dpo_smollm2.yaml) raised it over SFT by +12.7 and +21.3 points on the two "
                  "stores where one epoch of it fell short and +26.0 on one drawn after every setting was chosen "
                  "(0.340 -> 0.600, 27 min on 2 cores with bf16); reward model + PPO (recipes/reward_smollm2.yaml, "
                  "ppo_smollm2.yaml) +8.0 and +19.3 on two of them (0.340 -> 0.533, 14 min more: its reward model is "
                  "the DPO run itself, scored per token); score-head reward models agreed with the truth on the "
                  "model's own samples near chance (0.45-0.56), PPO against them never gained 5 points and PPO "
                  "refuses such a reward model; best-of-16 with either kind stayed below greedy; try DPO first, and a "
                  "reward model + PPO when the reward model itself is wanted (to score new prompts' replies); `make "
                  "demo-prefs` compares all three by a held-out truth")
