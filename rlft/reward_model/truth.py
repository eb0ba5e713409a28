"""Preferences judged by a held-out truth: best-of-n with a reward model, and the reward model's agreement with
the truth on the policy's own replies.

Both sample replies from a policy (the SFT model: the distribution PPO will see, not the pairs') and score them
two ways, with the reward model (rlft.reward_model.scoring.score, the tokenisation the reward model trained on) and
with a truth verifier (e.g. `support_policy`):

- `best_of_n`: for each prompt, n sampled replies; the reward model's top one is the answer, scored by the
  truth. Nested: the first n of the largest n's samples, so n = 4, 8, 16 cost one sampling pass of 16. The
  cheapest use of a reward model, and the baseline PPO against that reward model must beat.
- `agreement`: over pairs of replies to one prompt that the truth tells apart (one right, one wrong), the share
  the reward model orders as the truth does (ties count a half). 0.5 is chance; a reward model near it gives PPO
  nothing to climb but its own errors (reward hacking). The pairs' accuracy (the reward model on chosen vs
  rejected) can be high while this is near chance, when the policy's replies differ from the pairs'.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from rlft.errors import UserError


class RewardModelRefused(UserError):
    """The reward model disagrees with the truth about as often as a coin would (PPO refuses: exit code 3)."""

    exit_code = 3


@dataclass
class Sampled:
    """k sampled replies per prompt with their reward-model scores and truth scores (row-major)."""

    rows: list[dict]
    replies: list[list[str]]
    rm: list[list[float]]
    truth: list[list[float]]


@dataclass
class Agreement:
    pairs: int  # reply pairs of one prompt with different truth
    agree: float  # share ordered as the truth orders them (ties a half)
    interval: tuple[float, float]
    prompts: int
    samples: int
    truth_rate: float  # share of sampled replies the truth passes
    mean_rm_right: float | None = None
    mean_rm_wrong: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"agreement": round(self.agree, 4) if self.pairs else None,
                "agreement_interval": [round(x, 4) for x in self.interval],
                "agreement_pairs": self.pairs, "agreement_prompts": self.prompts, "agreement_samples": self.samples,
                "sampled_truth_rate": round(self.truth_rate, 4),
                "rm_mean_right": None if self.mean_rm_right is None else round(self.mean_rm_right, 4),
                "rm_mean_wrong": None if self.mean_rm_wrong is None else round(self.mean_rm_wrong, 4)}

    def line(self) -> str:
        if not self.pairs:
            return (f"reward model vs truth: not measured ({self.prompts} prompts x {self.samples} sampled replies "
                    f"gave no pair the truth tells apart; truth rate {self.truth_rate:.2f})")
        lo, hi = self.interval
        return (f"reward model vs truth on {self.prompts} prompts x {self.samples} sampled replies: agreement "
                f"{self.agree:.3f} (90% {lo:.2f}-{hi:.2f}, {self.pairs} pairs the truth tells apart; chance 0.5), "
                f"truth rate of the samples {self.truth_rate:.2f}")


def sample_and_score(policy, tok, rows: Sequence[dict], truth: Callable, reward_model, k: int,
                     max_new_tokens: int, temperature: float = 1.0) -> Sampled:
    """k sampled replies per row from `policy`, each scored by `reward_model` (a RewardModelReward) and `truth`."""
    from rlft.evaluate import _score, generate

    rows = list(rows)
    groups = generate(policy, tok, [r["prompt"] for r in rows], max_new_tokens=max_new_tokens, do_sample=True,
                      temperature=temperature, num_return_sequences=k, batch_size=max(1, 64 // k))
    flat = [c for g in groups for c in g]
    prompts = [r["prompt"] for r in rows for _ in range(k)]
    rm_flat = reward_model(flat, prompts=prompts)
    truth_flat = _score(truth, rows, flat, repeat=k)
    cut = lambda xs: [list(xs[i * k:(i + 1) * k]) for i in range(len(rows))]  # noqa: E731
    return Sampled(rows, cut(flat), cut(rm_flat), cut(truth_flat))


def agreement(s: Sampled) -> Agreement:
    from rlft.preflight import wilson

    agree = pairs = 0.0
    right: list[float] = []
    wrong: list[float] = []
    for rm, tr in zip(s.rm, s.truth):
        for i in range(len(rm)):
            (right if tr[i] >= 1.0 else wrong).append(rm[i])
            for j in range(i + 1, len(rm)):
                if (tr[i] >= 1.0) == (tr[j] >= 1.0):
                    continue
                pairs += 1
                hi, lo = (i, j) if tr[i] >= 1.0 else (j, i)
                agree += 1.0 if rm[hi] > rm[lo] else 0.5 if rm[hi] == rm[lo] else 0.0
    n = sum(len(t) for t in s.truth)
    share = agree / pairs if pairs else 0.5
    return Agreement(int(pairs), share, wilson(round(agree), int(pairs)) if pairs else (0.0, 1.0), len(s.rows),
                     len(s.truth[0]) if s.truth else 0, sum(x >= 1.0 for t in s.truth for x in t) / max(n, 1),
                     sum(right) / len(right) if right else None, sum(wrong) / len(wrong) if wrong else None)


@dataclass
class BestOfN:
    n: list[int]
    truth: dict[int, float]  # n -> share of prompts whose reward-model-top reply the truth passes
    oracle: dict[int, float]  # n -> share of prompts with at least one passing reply among the n
    first: float  # truth of one sampled reply (n = 1)
    picks: list[dict] = field(default_factory=list)  # per prompt at the largest n: the chosen reply and scores

    def as_dict(self) -> dict[str, Any]:
        return {"sampled_1": round(self.first, 4),
                **{f"best_of_{n}": round(self.truth[n], 4) for n in self.n},
                **{f"any_of_{n}": round(self.oracle[n], 4) for n in self.n}}


def best_of_n(s: Sampled, ns: Sequence[int]) -> BestOfN:
    """The reward model's top reply among the first n samples of each prompt, scored by the truth."""
    ns = sorted(set(ns))
    truth, oracle = {}, {}
    for n in ns:
        top = [max(range(n), key=lambda i, rm=rm: rm[i]) for rm in s.rm]
        truth[n] = sum(t[i] >= 1.0 for t, i in zip(s.truth, top)) / max(len(s.rows), 1)
        oracle[n] = sum(any(x >= 1.0 for x in t[:n]) for t in s.truth) / max(len(s.rows), 1)
    n = ns[-1]
    picks = []
    for row, replies, rm, tr in zip(s.rows, s.replies, s.rm, s.truth):
        i = max(range(n), key=lambda j: rm[j])
        picks.append({"prompt": row["prompt"], "reply": replies[i], "reward": rm[i], "truth": tr[i]})
    first = sum(t[0] >= 1.0 for t in s.truth) / max(len(s.rows), 1)
    return BestOfN(ns, truth, oracle, first, picks)


def check_agreement(a: Agreement, minimum: float, reward_model: str) -> None:
    """Refuse (exit 3) when the reward model orders the truth's pairs about as often right as wrong."""
    if a.pairs and a.agree < minimum:
        raise RewardModelRefused(
            f"the reward model {reward_model} agrees with the truth on {a.agree:.3f} of {a.pairs} pairs of the "
            f"policy's own sampled replies (90% {a.interval[0]:.2f}-{a.interval[1]:.2f}; chance 0.5, needed "
            f"{minimum}): PPO would climb its errors",
            "train a better reward model (more pairs, hard negatives: same decision with a wrong number; more "
            "passes), or use DPO on the same pairs (rlft dpo), or best-of-n (rlft eval --best-of 8 "
            "--reward-model RM); to run anyway: --set ppo.min_reward_agreement=0")


@dataclass
class PolicyGain:
    """Greedy truth of the start policy and of an implicit reward model's own policy on the same prompts."""

    prompts: int
    start: float
    reward_policy: float
    gained: int | None = None  # prompts the reward model's policy passes and the start fails
    lost: int | None = None  # and the other way round

    def as_dict(self) -> dict[str, Any]:
        return {"gain_prompts": self.prompts, "start_truth": round(self.start, 4),
                "reward_policy_truth": round(self.reward_policy, 4), "gain_prompts_gained": self.gained,
                "gain_prompts_lost": self.lost}

    def line(self) -> str:
        moved = f" ({self.gained} prompts gained, {self.lost} lost)" if self.gained is not None else ""
        return (f"the reward model's own policy (about PPO's optimum at kl_coef = its beta, per-token rewards) "
                f"passes {self.reward_policy:.3f} of {self.prompts} prompts greedily, the start "
                f"{self.start:.3f}{moved}")


def policy_gain(policy_path: str, reward_policy, rows: list[dict], spec: str, max_new_tokens: int) -> PolicyGain:
    """Greedy truth `spec` of the model at `policy_path` and of `reward_policy` (an implicit reward model's
    trained language model) on `rows`."""
    from rlft.evaluate import evaluate_rows
    from rlft.models import load_for_inference, load_tokenizer
    from rlft.verifiers.loading import load_verifiers

    truth, _ = load_verifiers([spec])
    tok = load_tokenizer(policy_path)
    start = evaluate_rows(load_for_inference(policy_path), tok, rows, truth, max_new_tokens)
    mine = evaluate_rows(reward_policy, tok, rows, truth, max_new_tokens)
    pairs = [(a["reward"] >= 1.0, b["reward"] >= 1.0) for a, b in zip(start.samples, mine.samples)]
    return PolicyGain(len(rows), start.pass_at_1, mine.pass_at_1, sum(b and not a for a, b in pairs),
                      sum(a and not b for a, b in pairs))


def ppo_refusal(g: PolicyGain, reward_model: str) -> str | None:
    """Why PPO's gate refuses an implicit reward model, or None when it passes: its own policy must beat the start
    under the truth by more than its noise (PPO with per-token rewards moves the policy toward it, so there is
    nothing else to gain that a held-out check could tell from chance). The bar is the one a run's trained check
    must clear to be kept (rlft.watch.overfit.beats_start: McNemar's statistic on the prompts gained and lost above
    START_Z); without per-prompt counts, a reward policy scoring at or below the start."""
    from rlft.watch.overfit import START_Z, mcnemar_z

    counted = g.gained is not None and g.lost is not None
    z = mcnemar_z(g.gained, g.lost) if counted else None
    if not ((z <= START_Z) if counted else (g.reward_policy <= g.start)):
        return None
    moved = (f" ({g.gained} gained, {g.lost} lost: McNemar z {z:.2f}, where a trained check must clear {START_Z:g} "
             "to be kept)" if counted else "")
    return (f"the implicit reward model {reward_model}'s own policy passes {g.reward_policy:.3f} of {g.prompts} "
            f"held-out prompts, the start {g.start:.3f}{moved}: PPO toward it has nothing to gain")


def refusal_note(why: str) -> str:
    """The line `rlft reward` and `rlft verify` print when PPO's gate will refuse the reward model (`ppo_refusal`)."""
    return f"  note: rlft ppo with per-token rewards will refuse it: {why}"


def check_policy_gain(g: PolicyGain, reward_model: str) -> None:
    """Refuse (exit 3) what `ppo_refusal` refuses."""
    why = ppo_refusal(g, reward_model)
    if why:
        raise RewardModelRefused(
            why, "train the reward model longer or on more pairs (its DPO run must beat the start), or use DPO on the "
            "same pairs (rlft dpo); to run anyway: --set ppo.min_reward_agreement=0")


def truth_rows(path: str, spec: str, limit: int, as_chat: bool) -> list[dict]:
    """The first `limit` rows of a truth file, gold checked for `spec`, wrapped as chat like the training prompts."""
    from rlft.chat.templates import wrap_as_chat
    from rlft.data import read_rows
    from rlft.verifiers.loading import validate_gold

    rows = read_rows(path, max_rows=limit)
    validate_gold(rows, [spec])
    return [r.data for r in (wrap_as_chat(rows) if as_chat else rows)]


def policy_agreement(policy_path: str, reward_fn: Callable, rows: list[dict], spec: str, samples: int,
                     max_new_tokens: int, temperature: float = 1.0, seed: int = 0) -> Agreement:
    """Sample `samples` replies per row from the model at `policy_path` and measure the reward model's agreement
    with the truth `spec` on them (module docstring)."""
    import torch

    from rlft.models import load_for_inference, load_tokenizer
    from rlft.verifiers.loading import load_verifiers

    truth, _ = load_verifiers([spec])
    tok = load_tokenizer(policy_path)
    policy = load_for_inference(policy_path)
    torch.manual_seed(seed)
    return agreement(sample_and_score(policy, tok, rows, truth, reward_fn, samples, max_new_tokens, temperature))
