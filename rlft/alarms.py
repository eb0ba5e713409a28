"""Alarms: small rules that read a run's logged history and say when it has gone wrong, and what to do.

The history is the list of metric dicts a run logs (metrics.jsonl: `step` plus the trainer's keys, e.g.
`reward`, `frac_reward_zero_std`, `kl`, `entropy`, `loss`, `logps/chosen`, `rewards/margins`, and rlft's own
`heldout/pass_at_1` and `completions/repetition`). Each rule is a pure function
`rule(history, th) -> Alarm | None`: it looks at the latest logs, and returns an `Alarm` with the rule's
name, the step it tripped at, a one-line message, the evidence (the numbers and steps that tripped it) and
a one-line fix. A rule whose keys are not in the history returns None, so every rule runs on every method.

Thresholds are named constants below; `Thresholds.from_watch(cfg.watch)` reads the overrides from the
config's `watch` section (same names, lower case). No torch here: the rules are tested on synthetic
histories and `rlft --help` never pays for them.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from rlft.errors import UserError

Record = Mapping[str, Any]
History = Sequence[Record]

# --- zero-signal groups (GRPO): a group whose G rewards are all equal has advantage 0 for every member,
# so it contributes no gradient. At 0.8, four in five groups teach nothing: the step's compute buys a
# fifth of a step. N consecutive logs (each already a mean over logging_steps steps) rule out one bad batch.
ZERO_SIGNAL_FRAC = 0.8
ZERO_SIGNAL_LOGS = 3

# --- KL blow-up (GRPO/PPO with a reference): `kl` is TRL's mean per-token KL to the reference, in nats.
# At 1 nat/token the policy gives its own tokens on average e^1 ~ 2.7x the reference's probability: it has
# left the distribution the KL leash (and any reward model) was fit on; healthy runs sit near 0.01-0.1.
# A jump of 10x over the median of the previous KL_LOGS logs is a blow-up even below that ceiling; the
# floor (0.1) keeps early noise (0.001 -> 0.01) quiet.
KL_MAX = 1.0
KL_JUMP = 10.0
KL_FLOOR = 0.1
KL_LOGS = 3

# --- entropy collapse (on-policy RL only: records that carry `reward`): the mean per-token entropy of the
# sampled completions fell below 10% of its first logged value on N logs in a row. A 10x drop means the
# samples of a group are nearly identical, so their rewards are too, and groups stop teaching. (In SFT the
# entropy of the model on the data falls as it learns: that is not a collapse, so SFT records are skipped.)
ENTROPY_MIN_RATIO = 0.1
ENTROPY_LOGS = 3

# --- DPO drift: over the last N logs the chosen answers' log-prob fell by at least 1 nat (they became
# e^1 ~ 2.7x less likely) while the reward margin grew. The loss only sees the margin; a margin won by
# pushing both answers down is not the preference learned.
DRIFT_LOGS = 5
DRIFT_MIN_DROP = 1.0

# --- reward hacking: between two held-out checks the training reward rose by at least 0.4 of its
# starting spread (mean reward_std of the first logs; for a 0/1 reward at pass rate 0.5 that is 0.4 x 0.5
# = 0.2, i.e. 20 points of sampled pass rate) while held-out pass@1 gained at most 0.02 (two rows in 100:
# noise). Measured on the tiny model: the healthy 600-step math GRPO run peaks at 0.21 (steps 300 -> 450,
# held-out 0.715 -> 0.73), GRPO against a tiny reward model reaches 0.72 at its first check after the
# hack (step 75, held-out 0.55 -> 0.0): 0.4 sits about 2x from each. The reward at a check is the mean
# of the last HACK_REWARD_LOGS logs up to it.
HACK_MIN_RISE = 0.4
HACK_MAX_HELDOUT_GAIN = 0.02
HACK_REWARD_LOGS = 3
# A held-out score that *fell* while the reward rose is stronger evidence than a flat one, so a quarter of the
# rise suffices. "Fell" means by at least 0.1 and by at least 3 standard errors of the earlier score
# (sqrt(p(1-p)/n), n = heldout/n rows: 0.106 at p 0.535 on 200 rows, 0.15 on 100), so sampling noise on a
# small held-out set does not count. Measured: PPO against the tiny demo reward model (held-out pair
# accuracy 0.56) raised the reward 0.61 -> 0.72 (+0.26 reward_std) by step 100 while held-out pass@1 fell
# 0.535 -> 0.285 on 200 rows; the 0.4 rule alone never fired there.
HACK_HELDOUT_DROP = 0.1
HACK_RISE_SHARE_ON_DROP = 0.25
HACK_DROP_STDERRS = 3.0

# --- length / repetition hacking: between two held-out checks the completions grew 1.5x longer (and by
# at least 2 tokens, so 2 -> 3 tokens stays quiet), or their repetition (share of repeated 4-grams)
# rose by 0.2, while the held-out score stayed flat (the same HACK_MAX_HELDOUT_GAIN).
LENGTH_MAX_RATIO = 1.5
LENGTH_MIN_TOKENS = 2.0
REPETITION_MIN_RISE = 0.2

# --- KTO drift: the DPO drift rule on KTO's logs (same keys: logps/chosen = the desirable completions'
# log-prob, rewards/margins = desirable minus undesirable implied reward): the desirable answers became
# e^1 ~ 2.7x less likely while the margin grew, i.e. the margin is won by pushing everything down.

# --- distillation diverging: the loss is the per-token divergence between the student's and the teacher's
# next-token distributions on the student's own samples; it should fall. When it stays at diverge_ratio
# (1.5x) of its best earlier value or above for diverge_logs (3) logs in a row, and by at least 0.05
# nats/token (so 0.01 -> 0.02 noise on a nearly converged student stays quiet), the student is moving away
# from the teacher: usually a learning rate too high for on-policy samples.
DIVERGE_RATIO = 1.5
DIVERGE_LOGS = 3
DIVERGE_MIN_RISE = 0.05

# Rules that read keys another method also logs with another meaning run only for their method, and some
# rules do not apply to a method whose logs share their keys: KTO logs DPO's keys (dpo_drift -> kto_drift)
# and a `kl` that is a batch estimate summed over a whole completion, not TRL's per-token KL (kl_blowup).
ONLY_FOR = {"kto_drift": ("kto",), "distill_diverging": ("distill",)}
NOT_FOR = {"kto": ("dpo_drift", "kl_blowup")}

LOSS_KEYS = ("loss", "eval_loss")
KL_KEYS = ("kl", "objective/kl")
HELDOUT_KEY = "heldout/pass_at_1"
LENGTH_KEY = "completions/mean_length"
REPETITION_KEY = "completions/repetition"


@dataclass
class Alarm:
    """One fired rule: what tripped, where, the numbers that show it, and what to do."""

    name: str
    step: int
    message: str
    evidence: dict[str, Any] = field(default_factory=dict)
    fix: str = ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Thresholds:
    """Every rule's thresholds; defaults are the module constants, overridable from `watch`."""

    zero_signal_frac: float = ZERO_SIGNAL_FRAC
    zero_signal_logs: int = ZERO_SIGNAL_LOGS
    kl_max: float = KL_MAX
    kl_jump: float = KL_JUMP
    entropy_min_ratio: float = ENTROPY_MIN_RATIO
    entropy_logs: int = ENTROPY_LOGS
    drift_logs: int = DRIFT_LOGS
    drift_min_drop: float = DRIFT_MIN_DROP
    hacking_min_rise: float = HACK_MIN_RISE
    hacking_max_heldout_gain: float = HACK_MAX_HELDOUT_GAIN
    hacking_heldout_drop: float = HACK_HELDOUT_DROP
    length_max_ratio: float = LENGTH_MAX_RATIO
    repetition_min_rise: float = REPETITION_MIN_RISE
    diverge_ratio: float = DIVERGE_RATIO
    diverge_logs: int = DIVERGE_LOGS
    ignore: tuple[str, ...] = ()
    method: str | None = None  # the run's method: picks the rules of ONLY_FOR / NOT_FOR (None: the general ones)
    reward_scores_heldout: bool = False  # the reward scores held-out (rlft.watch.setup.mark_reward_scored_heldout)

    @classmethod
    def from_watch(cls, watch: Mapping[str, Any] | None, method: str | None = None) -> Thresholds:
        """Thresholds from a config `watch` section (missing or None keys keep the defaults) for `method`."""
        watch = watch or {}
        kwargs = {f.name: watch[f.name] for f in fields(cls) if watch.get(f.name) is not None}
        kwargs["ignore"] = tuple(kwargs.get("ignore") or ())
        outside = ("overfitting", "no_gain", "tool_collapse")  # raised by rlft.watch.overfit and rlft.watch.tool_alarms
        unknown = [n for n in kwargs["ignore"] if n not in RULES and n not in outside]
        if unknown:
            close = difflib.get_close_matches(unknown[0], list(RULES), n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            raise UserError(f"watch.ignore: unknown alarm '{unknown[0]}'{hint}",
                            f"use alarm names from: {', '.join([*RULES, *outside])}")
        return cls(**{k: v for k, v in kwargs.items() if k != "method"}, method=method)


# --------------------------------------------------------------------------- helpers


def value(record: Record, key: str) -> float | None:
    """A logged number as a float; NaN/inf come back from metrics.jsonl as strings ("nan", "inf")."""
    return to_float(record.get(key))


def to_float(v: Any) -> float | None:
    """A logged value as a float (None for anything that is not a number or a number's string)."""
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, str):
        try:
            return float(v)
        except ValueError:
            return None
    return None


def series(history: History, key: str, where: Callable[[Record], bool] | None = None) -> list[tuple[int, float]]:
    """(step, value) of every record that logged `key` as a number (finite or not)."""
    out = []
    for r in history:
        v = value(r, key)
        if v is not None and (where is None or where(r)):
            out.append((int(r.get("step", 0)), v))
    return out


def _r(x: float) -> float:
    return round(x, 4) if math.isfinite(x) else x


def _steps(points: Sequence[tuple[int, float]]) -> list[int]:
    return [s for s, _ in points]


def _values(points: Sequence[tuple[int, float]]) -> list[float]:
    return [_r(v) for _, v in points]


def _fmt(points: Sequence[tuple[int, float]]) -> str:
    return ", ".join(f"{v:.3g}" for _, v in points)


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs)


# --------------------------------------------------------------------------- the rules


def zero_signal(history: History, th: Thresholds) -> Alarm | None:
    """GRPO/RLOO groups with all-equal rewards (frac_reward_zero_std) at or above zero_signal_frac on the last
    zero_signal_logs logs: most prompts are always or never solved, so most of each step teaches nothing."""
    pts = series(history, "frac_reward_zero_std")[-th.zero_signal_logs:]
    if len(pts) < th.zero_signal_logs or any(v < th.zero_signal_frac for _, v in pts):
        return None
    rewards = series(history, "reward")
    mean_reward = rewards[-1][1] if rewards else None
    solved = mean_reward is not None and mean_reward >= 0.5
    fix = ("the model (almost) always solves these prompts: use harder prompts, or --filter-prompts to keep "
           "those it sometimes fails" if solved else
           "the groups are all-fail or all-pass: use easier prompts or SFT first, a partial-credit verifier, "
           "or a larger group (num_generations)")
    evidence = {"steps": _steps(pts), "frac_reward_zero_std": _values(pts), "reward": mean_reward}
    message = (f"{_mean(_values(pts)):.0%} of sampled groups had all-equal rewards over the last {len(pts)} logs "
               f"(>= {th.zero_signal_frac:.0%}): those groups have zero advantage and teach nothing")
    last = next((r for r in reversed(history) if "band/left" in r), {})
    band = {k: value(last, f"band/{k}") for k in ("in", "left", "retired", "failed", "on")}
    if band["left"] is not None and band["in"] is not None:  # rlft.methods.prompt_sampler's per-prompt records
        message += (f"; {int(band['left'])} of {int(band['in'] + band['left'])} prompts left the learnable band "
                    f"({int(band['retired'] or 0)} solved by every sample twice, {int(band['failed'] or 0)} failed "
                    f"by every sample), {int(band['in'])} in it")
        evidence.update({f"band_{k}": v for k, v in band.items() if k != "on" and v is not None})
        if band["on"] == 0:
            fix += "; or draw prompts from the band: prompt_sampler: band in the run's grpo/rloo section"
        elif band["in"] < 0.1 * (band["in"] + band["left"]):  # the band sampler has little left to draw from
            fix = "add prompts at the edge of what the model solves (harder when most are retired, easier or SFT first)"
    return Alarm("zero_signal", pts[-1][0], message, evidence, fix)


def kl_blowup(history: History, th: Thresholds) -> Alarm | None:
    """KL to the reference above kl_max, or kl_jump times its median over the previous logs (and above
    0.1): the policy is running away from the model the reward and the KL leash were set for."""
    key = next((k for k in KL_KEYS if series(history, k)), None)
    if key is None:
        return None
    pts = series(history, key)
    step, kl = pts[-1]
    prev = sorted(v for _, v in pts[-1 - KL_LOGS:-1])
    base = prev[len(prev) // 2] if prev else None
    jumped = base is not None and kl >= KL_FLOOR and kl >= th.kl_jump * max(base, 1e-12)
    if not (not math.isfinite(kl) or kl >= th.kl_max or jumped):
        return None
    why = (f"above kl_max {th.kl_max}" if kl >= th.kl_max or not math.isfinite(kl)
           else f"{kl / max(base, 1e-12):.0f}x its recent median {base:.3g}")
    return Alarm("kl_blowup", step, f"KL to the reference is {kl:.3g} nats/token at step {step}, {why}",
                 {"steps": _steps(pts[-1 - KL_LOGS:]), key: _values(pts[-1 - KL_LOGS:])},
                 "lower the learning rate, raise the KL coefficient (beta), or resume from an earlier checkpoint")


def entropy_collapse(history: History, th: Thresholds) -> Alarm | None:
    """On-policy RL: the sampled completions' entropy below entropy_min_ratio of its first value on the
    last entropy_logs logs: the policy has collapsed onto one answer per prompt and exploration is gone."""
    pts = series(history, "entropy", where=lambda r: "reward" in r)
    if len(pts) <= th.entropy_logs:
        return None
    first = pts[0][1]
    last = pts[-th.entropy_logs:]
    if first <= 0 or any(v >= th.entropy_min_ratio * first for _, v in last):
        return None
    return Alarm("entropy_collapse", last[-1][0],
                 f"sampling entropy fell from {first:.3g} (step {pts[0][0]}) to {last[-1][1]:.3g}, below "
                 f"{th.entropy_min_ratio:.0%} of its start for {len(last)} logs: the samples of a group are "
                 f"near-identical",
                 {"first_step": pts[0][0], "first_entropy": _r(first), "steps": _steps(last),
                  "entropy": _values(last)},
                 "lower the learning rate, raise the temperature or beta, or stop at an earlier checkpoint")


def nan_loss(history: History, th: Thresholds) -> Alarm | None:
    """A NaN or infinite loss: the weights are (or are about to be) garbage; every later step is wasted."""
    for r in history:
        for key in LOSS_KEYS:
            v = value(r, key)
            if v is not None and not math.isfinite(v):
                step = int(r.get("step", 0))
                return Alarm("nan_loss", step, f"{key} is {v} at step {step}",
                             {"step": step, key: str(v), "grad_norm": r.get("grad_norm"),
                              "learning_rate": r.get("learning_rate")},
                             "lower the learning rate, use bf16 rather than fp16, check the data for empty "
                             "targets, and resume from the last finite checkpoint")
    return None


def _drift(history: History, th: Thresholds):
    """(chosen, margins, drop, grew, evidence) when the chosen log-prob fell by drift_min_drop over the last drift_logs
    logs while the margin grew; None otherwise."""
    chosen = series(history, "logps/chosen")[-th.drift_logs:]
    margins = series(history, "rewards/margins")[-th.drift_logs:]
    if len(chosen) < th.drift_logs or len(margins) < th.drift_logs:
        return None
    drop = chosen[0][1] - chosen[-1][1]
    grew = margins[-1][1] - margins[0][1]
    if drop < th.drift_min_drop or grew <= 0:
        return None
    evidence = {"steps": _steps(chosen), "logps/chosen": _values(chosen), "rewards/margins": _values(margins),
                "logps/rejected": _values(series(history, "logps/rejected")[-th.drift_logs:])}
    return chosen, margins, drop, grew, evidence


def dpo_drift(history: History, th: Thresholds) -> Alarm | None:
    """DPO: over the last drift_logs logs the chosen log-prob fell by drift_min_drop nats or more while the
    reward margin grew: the margin is being won by pushing the chosen answers down too."""
    found = _drift(history, th)
    if found is None:
        return None
    (chosen, _, drop, grew, evidence), section = found, "reward" if th.method == "reward" else "dpo"  # implicit RM
    return Alarm("dpo_drift", chosen[-1][0],
                 f"chosen log-prob fell {drop:.2f} nats ({chosen[0][1]:.3g} -> {chosen[-1][1]:.3g}) while the "
                 f"reward margin grew {grew:.3g} over steps {chosen[0][0]}-{chosen[-1][0]}", evidence,
                 f"lower the learning rate or epochs, add an SFT term on the chosen answers (--set {section}.loss_type="
                 f"[sigmoid,sft]; where it has one, raise {section}.loss_weights), and read generated answers")


def kto_drift(history: History, th: Thresholds) -> Alarm | None:
    """KTO: over the last drift_logs logs the desirable (label true) completions' log-prob fell by
    drift_min_drop nats or more while the reward margin grew: the undesirable ones are pushed down faster
    than the desirable ones, but both are being pushed down."""
    found = _drift(history, th)
    if found is None:
        return None
    chosen, _, drop, grew, evidence = found
    return Alarm("kto_drift", chosen[-1][0],
                 f"desirable log-prob fell {drop:.2f} nats ({chosen[0][1]:.3g} -> {chosen[-1][1]:.3g}) while the "
                 f"reward margin grew {grew:.3g} over steps {chosen[0][0]}-{chosen[-1][0]}", evidence,
                 "lower the learning rate or epochs, raise kto.beta, or raise kto.desirable_weight so the "
                 "desirable completions weigh more; read generated answers, not the loss")


def distill_diverging(history: History, th: Thresholds) -> Alarm | None:
    """Distillation: the loss (student-teacher divergence) at diverge_ratio x its best earlier value or above,
    and by DIVERGE_MIN_RISE nats at least, for the last diverge_logs logs: the student drifts from the teacher."""
    pts = [p for p in series(history, "loss") if math.isfinite(p[1])]
    if len(pts) <= th.diverge_logs:
        return None
    best = min(v for _, v in pts[:-th.diverge_logs])
    last = pts[-th.diverge_logs:]
    if any(v < th.diverge_ratio * best or v - best < DIVERGE_MIN_RISE for _, v in last):
        return None
    return Alarm("distill_diverging", last[-1][0],
                 f"distillation loss rose from its best {best:.3g} to {last[-1][1]:.3g} "
                 f"({last[-1][1] / max(best, 1e-12):.1f}x) and stayed above {th.diverge_ratio:g}x for "
                 f"{len(last)} logs: the student is moving away from the teacher",
                 {"best_loss": _r(best), "steps": _steps(last), "loss": _values(last)},
                 "lower the learning rate (on-policy samples shift as the student changes), or resume from the "
                 "checkpoint with the lowest loss")


def _reward_at(rewards: list[tuple[int, float]], step: int) -> float:
    """Mean reward of the HACK_REWARD_LOGS logs up to `step` (the first ones when none is that early)."""
    upto = [v for s, v in rewards if s <= step][-HACK_REWARD_LOGS:]
    return _mean(upto or [v for _, v in rewards[:HACK_REWARD_LOGS]])


def _value_at(points: list[tuple[int, float]], step: int) -> float | None:
    upto = [v for s, v in points if s <= step][-HACK_REWARD_LOGS:]
    upto = upto or [v for _, v in points[:HACK_REWARD_LOGS]]
    return _mean(upto) if upto else None


def _flat_heldout_pairs(history: History, th: Thresholds):
    """(earlier, latest) held-out checks with the latest no more than hacking_max_heldout_gain above the
    earlier one, earliest first. Only pairs ending at the latest check: alarms judge the run as it is now."""
    checks = series(history, HELDOUT_KEY)
    if len(checks) < 2:
        return []
    last = checks[-1]
    return [(c, last) for c in checks[:-1] if c[0] < last[0] and last[1] - c[1] <= th.hacking_max_heldout_gain]


def _needed_drop(history: History, th: Thresholds, step: int, score: float) -> float:
    """The held-out fall that counts as real: hacking_heldout_drop, or 3 standard errors of the score at
    `step` when the check logged its row count (heldout/n), whichever is larger."""
    rows = [v for s, v in series(history, "heldout/n") if s == step and v > 0]
    if not rows:
        return th.hacking_heldout_drop
    stderr = math.sqrt(max(score * (1 - score), 0.0) / rows[-1])
    return max(th.hacking_heldout_drop, HACK_DROP_STDERRS * stderr)


def reward_hacking(history: History, th: Thresholds) -> Alarm | None:
    """The training reward rose by hacking_min_rise x its starting spread (reward_std) between two held-out
    checks while held-out pass@1 gained at most hacking_max_heldout_gain, or by a quarter of that while
    held-out pass@1 fell by hacking_heldout_drop or more: the reward is being gamed. With th.reward_scores_heldout
    only the fall counts: gaming that verifier would lift the held-out score too (README, alarms)."""
    rewards = [p for p in series(history, "reward") if math.isfinite(p[1])]
    if len(rewards) < 2:
        return None
    spread = [v for _, v in series(history, "reward_std")[:HACK_REWARD_LOGS] if math.isfinite(v)]
    scale = _mean(spread) if spread and _mean(spread) > 0 else 1.0
    # a 0/1 verifier's reward: a share of passing samples (in [0, 1], spread at most 0.5), on pass@1's scale
    pass_rate = all(0.0 <= v <= 1.0 for _, v in rewards) and bool(spread) and max(spread) <= 0.5
    for (s0, h0), (s1, h1) in _flat_heldout_pairs(history, th):
        r0, r1 = _reward_at(rewards, s0), _reward_at(rewards, s1)
        fell = h0 - h1 >= _needed_drop(history, th, s0, h0) - 1e-9
        need = th.hacking_min_rise * (HACK_RISE_SHARE_ON_DROP if fell else 1.0) * scale
        if not fell and (th.reward_scores_heldout or (pass_rate and r1 <= h1)):
            # or a pass rate still below greedy pass@1: samples catching up with the greedy answer (SmolLM2 GRPO
            # after SFT: reward 0.16 -> 0.33, 40 held-out rows flat at 0.575, all 150 0.373 -> 0.533).
            continue
        if r1 - r0 >= need and r1 > r0 and any(s0 < s <= s1 for s, _ in rewards):
            return Alarm("reward_hacking", s1,
                         f"training reward rose {r0:.3g} -> {r1:.3g} (+{(r1 - r0) / scale:.1f} reward_std) "
                         f"between steps {s0} and {s1} while held-out pass@1 went {h0:.3g} -> {h1:.3g}",
                         {"steps": [s0, s1], "reward": [_r(r0), _r(r1)], "heldout/pass_at_1": [_r(h0), _r(h1)],
                          "reward_std_at_start": _r(scale)},
                         "the reward is being gamed: tighten the verifier or retrain the reward model on the "
                         "policy's outputs, raise beta, and keep the checkpoint with the best held-out score")
    return None


def length_hacking(history: History, th: Thresholds) -> Alarm | None:
    """Completions grew length_max_ratio x longer (or their repetition rose by repetition_min_rise)
    between two held-out checks while held-out pass@1 stayed flat: the reward pays for length or loops."""
    lengths = series(history, LENGTH_KEY)
    reps = series(history, REPETITION_KEY)
    for (s0, h0), (s1, h1) in _flat_heldout_pairs(history, th):
        l0, l1 = _value_at(lengths, s0), _value_at(lengths, s1)
        if l0 is not None and l1 is not None and l1 >= th.length_max_ratio * l0 and l1 - l0 >= LENGTH_MIN_TOKENS:
            return Alarm("length_hacking", s1,
                         f"completions grew {l0:.3g} -> {l1:.3g} tokens ({l1 / max(l0, 1e-9):.1f}x) between steps "
                         f"{s0} and {s1} while held-out pass@1 went {h0:.3g} -> {h1:.3g}",
                         {"steps": [s0, s1], LENGTH_KEY: [_r(l0), _r(l1)], "heldout/pass_at_1": [_r(h0), _r(h1)]},
                         "the reward pays for length: penalise length in the reward (or cap "
                         "grpo.max_completion_length) and check the top-reward samples")
        p0, p1 = _value_at(reps, s0), _value_at(reps, s1)
        if p0 is not None and p1 is not None and p1 - p0 >= th.repetition_min_rise:
            return Alarm("length_hacking", s1,
                         f"completions' repetition rose {p0:.2f} -> {p1:.2f} between steps {s0} and {s1} while "
                         f"held-out pass@1 went {h0:.3g} -> {h1:.3g}",
                         {"steps": [s0, s1], REPETITION_KEY: [_r(p0), _r(p1)],
                          "heldout/pass_at_1": [_r(h0), _r(h1)]},
                         "the reward pays for repeated text: penalise repetition in the reward, raise beta, "
                         "and check the top-reward samples")
    return None


# The registry: alarm name -> rule. Explicit, in the order they are checked and printed.
RULES: dict[str, Callable[[History, Thresholds], Alarm | None]] = {
    "nan_loss": nan_loss,
    "zero_signal": zero_signal,
    "kl_blowup": kl_blowup,
    "entropy_collapse": entropy_collapse,
    "dpo_drift": dpo_drift,
    "kto_drift": kto_drift,
    "distill_diverging": distill_diverging,
    "reward_hacking": reward_hacking,
    "length_hacking": length_hacking,
}


def applies(name: str, method: str | None) -> bool:
    """Whether rule `name` runs for `method` (ONLY_FOR rules need their method; NOT_FOR excludes)."""
    if name in ONLY_FOR:
        return method in ONLY_FOR[name]
    return name not in NOT_FOR.get(method or "", ())


def check(history: History, th: Thresholds | None = None, skip: set[str] | frozenset[str] = frozenset()) -> list[Alarm]:
    """Every rule not in `skip` or `th.ignore`, on the whole history; the alarms that fire, in RULES order."""
    th = th or Thresholds()
    out = []
    for name, rule in RULES.items():
        if name in skip or name in th.ignore or not applies(name, th.method):
            continue
        alarm = rule(history, th)
        if alarm is not None:
            out.append(alarm)
    return out


def repetition(text: str, n: int = 4) -> float:
    """Share of a text's character n-grams that repeat an earlier one: 0 for short or varied text, near 1
    for a loop ("ababababab" -> 0.71, 0.04 for an ordinary English sentence). Characters, not words, so it works for any
    tokenizer and language.

    >>> repetition("12+34=46")
    0.0
    >>> round(repetition("la la la la la la"), 2)
    0.79
    """
    grams = [text[i:i + n] for i in range(len(text) - n + 1)]
    return 0.0 if not grams else 1.0 - len(set(grams)) / len(grams)
