"""The method recommender: SFT, DPO, KTO, GRPO, RLOO, reward model + PPO or distillation, from the signal.

Pure and fast: no torch, transformers, trl or datasets here (a test checks it), so `rlft choose --data` on
10k rows answers in well under half a second. Its parts (reading data files into a Signal is
rlft/choose/from_data.py's `infer_signal`; the printed commands are rlft/choose/next_commands.py's):

  `Signal`          what the user has: its kind, how many rows, whether an SFT'd model exists, the budget,
                    the verifier (and whether it checks format only), the lint findings on the data, and,
                    after a pre-flight, the measured pass rate and mixed-group fraction.
  `recommend`       applies `RULES` in order, each a small function that reads the Signal and edits the
                    Recommendation: the method, why, what it needs, how it fails, what to watch, warnings,
                    and the exact commands to run next.

The rules follow the domain table in the design notes (and the teaching texts behind it):

  signal                         method    because / unless
  demonstrations                 sft       correct outputs written out: copy them
  pairs (about 1k-5k)            dpo       one offline pass, no reward model; fewer -> warning with the count
  pairs, all chosen == rejected  sft       no preference to learn (error); the chosen texts still demonstrate
  taste that pairs cannot cover  ppo       only with --budget high (4 networks, online sampling); else dpo
  verifier, measured, 0/1        bootstrap passes sometimes and a pass/fail reward: rejection-sampling SFT
                                           (rlft/choose/pricing.py prices its rollouts against GRPO's)
  verifier                       grpo      only if the model passes sometimes: pass rate 0 -> sft first,
                                           pass rate >= 0.9 -> harder prompts, mixed groups < 10% -> not ready
                                           (and SFT first when the model mostly fails)
  format-only verifier           (same)    warning: the model learns the format and skips the reasoning
  ratings, one reply per prompt  sft       on the top-rated replies (the rest cannot form pairs)
  ratings, 2+ replies per prompt dpo       on pairs built from them (higher-rated = chosen), from 100 prompts
  no usable model yet            sft       first, then the method above (RL on a model that cannot answer has
                                           nothing to reward)
  thumbs up/down (one answer,    kto       unpaired binary labels: KTO needs no pairs (rlft/data/thumbs.py for the
    a true/false label)                    class weights when one label is rare)
  verifier, --budget low         rloo      k = 4 samples and a leave-one-out baseline instead of GRPO's G = 8
                                           and group std: about half the sampling per prompt (RLOO_GROUP)
  an environment (tools +        grpo      --env FILE.py:Class / --tools FILE.py: episodes over TRL's tool loop
    a reward or verifier)
  a teacher model (same          distill   on-policy distillation: the teacher scores every token of the
    tokenizer)                             student's own samples; no labels, no reward
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from rlft.choose.next_commands import RECIPES_REAL, RECIPES_TINY, build_commands, recipe_for  # noqa: F401
from rlft.choose.pricing import MEASURED_PAIRS, PASS_RATE_HIGH, rule_bootstrap
from rlft.data.lint import Finding
from rlft.data.rows import verifier_registry
from rlft.errors import UserError

SIGNALS = ("demonstrations", "pairs", "verifier", "ratings", "taste", "thumbs", "teacher", "environment")
BUDGETS = ("low", "medium", "high")
METHODS = ("sft", "dpo", "grpo", "ppo", "kto", "rloo", "distill", "bootstrap")
# lint's name for a kind of row -> the signal it carries
KIND_TO_SIGNAL = {"demonstrations": "demonstrations", "pairs": "pairs", "verifiable": "verifier",
                  "ratings": "ratings", "thumbs": "thumbs"}
# When files of several kinds are given, the strongest signal leads: a verifier checks correctness without
# human labels, pairs carry a preference, ratings a noisier one; demonstrations go first as SFT anyway.
PRIORITY = ("verifier", "pairs", "thumbs", "ratings", "demonstrations")
# --- thresholds, with their arithmetic
PAIRS_USUAL = (1000, 5000)   # "about 1,000 to 5,000 pairs is a usual size" for DPO (the seeds' table)
MIN_DEMOS = 100              # below ~100 demonstrations SFT mostly memorises them: a floor, not a target
MIN_PROMPTS = 100            # GRPO revisits each prompt every epoch; under ~100 it overfits them quickly
MIN_TOP_RATED = 100          # the same floor as demonstrations, for SFT on the top-rated replies
MIN_RATED_PAIRS = 100        # ratings make DPO pairs only when 100+ prompts have differently rated replies
MIXED_MIN = 0.1              # under 10% mixed groups, >90% of GRPO's sampling yields zero advantage
GRPO_GROUP, RLOO_GROUP = 8, 4  # samples per prompt in the shipped recipes: RLOO's leave-one-out baseline
                             # needs no group std, so k = 4 works where GRPO's std of G rewards wants 8

WHAT = {  # method -> (needs, fails by, watch): the domain table, one line each
    "sft": (["demonstrations: prompt + completion rows, or messages with an assistant turn"],
            ["copying only what was written: it does not learn beyond the demonstrations"],
            ["eval loss on held-out rows (--eval-data)", "generated samples on prompts unlike the training ones"]),
    "dpo": (["prompt/chosen/rejected pairs (about 1k-5k)",
             "a frozen reference copy of the start model (made for you; with LoRA, the adapter-disabled base)",
             "a start model that already answers usably (SFT'd or instruct); beta 0.1 by default"],
            ["drift: the chosen log-prob falls while the margin grows (the loss keeps improving)",
             "length bias: learning 'longer is better' from the pairs"],
            ["rewards/chosen and the chosen log-prob, not only the loss", "generated text at each checkpoint",
             "output length against the reference"]),
    "grpo": (["prompts the model solves sometimes", "a verifier (reward = f(completions, **row))",
              "G samples per prompt at every step (num_generations, e.g. 8)"],
             ["zero-signal groups: all G rewards equal, so every advantage is 0",
              "a format-only or loose verifier: reward hacking"],
             ["the share of mixed groups (must stay well above 0)", "reward against held-out pass@1 (rlft eval)",
              "the highest-reward samples: read them"]),
    "ppo": (["preference pairs to train the reward model", "prompts for online sampling",
             "memory for 4 networks: policy, frozen reference, reward model, value model"],
            ["reward hacking: the reward climbs while quality does not", "memory (4 networks, online rollouts)"],
            ["KL to the reference", "a held-out eval the reward model never scores",
             "reply length and the highest-reward samples"]),
    "kto": (["prompt/completion rows with a true (thumbs up) or false (thumbs down) label; no pairs needed",
             "a frozen reference copy of the start model (made for you)", "batches of 2+ rows (the KL estimate)"],
            ["drift: the desirable log-prob falls while the margin grows",
             "a rare label (< 10%) without desirable_weight/undesirable_weight to compensate"],
            ["logps/chosen (the desirable answers' log-prob) and rewards/margins", "held-out answers (rlft eval)"]),
    "rloo": (["prompts the model solves sometimes", "a verifier (reward = f(completions, **row))",
              f"k samples per prompt at every step (num_generations, e.g. {RLOO_GROUP})"],
             ["zero-signal groups: all k rewards equal, so every advantage is 0",
              "a format-only or loose verifier: reward hacking"],
             ["frac_reward_zero_std (the share of all-equal groups)", "reward against held-out pass@1 (rlft eval)"]),
    "bootstrap": (["prompts the model solves sometimes", "a pass/fail verifier", "N samples per prompt and round, "
                   "then a short SFT on the accepted ones"], ["learning only what the model solves sometimes (the "
                   "rest: unsolved.jsonl)", "a format-only or loose verifier: it keeps wrong answers"], ["the "
                   "acceptance rate per round", "held-out pass@1 after each round (the best round is kept)"]),
    "distill": (["a teacher model with the student's tokenizer, that you can run during training",
                 "prompts (no answers needed)", "memory for the student and the teacher"],
                ["a teacher with another tokenizer (refused before training)",
                 "the loss rising: the student drifts away from the teacher (learning rate too high)"],
                ["the loss (the student-teacher divergence on the student's samples)",
                 "held-out answers against the teacher's (rlft eval on both)"]),
}


# --------------------------------------------------------------------------- data types

@dataclass
class Note:
    """One warning in a recommendation: level error (not ready as is) / warning / info, a code, a message."""

    level: str
    code: str
    message: str


@dataclass
class Signal:
    """What the user has. Flags fill the first block; `infer_signal` fills the rest from data files."""

    kind: str                                   # demonstrations | pairs | verifier | ratings | taste
    rows: int | None = None                     # rows of that kind (pairs, prompts, demonstrations, ratings)
    has_sft_model: bool | None = None           # a model that already answers usably (None = not said)
    budget: str | None = None                   # low | medium | high (high = can afford an online RL loop)
    taste: bool = False                         # quality is a matter of taste that fixed pairs cannot cover
    verifier: str | None = None                 # registered verifier name
    format_only: bool = False                   # the verifier checks the format only
    model: str | None = None                    # --model, carried into the next commands
    pass_rate: float | None = None              # pre-flight: share of sampled answers that pass
    mixed_fraction: float | None = None         # pre-flight: share of prompts whose G rewards differ
    mixed_interval: tuple | None = None         # pre-flight: its 90% Wilson interval over `preflight_prompts`
    preflight_prompts: int | None = None
    preflight_verdict: str | None = None
    partial_credit: bool = False                # the verifier gives rewards between 0 and 1
    seconds_per_rollout: float | None = None    # pre-flight: its sampling time over its sampled answers
    # from data files
    paths: list[str] = field(default_factory=list)
    other: dict[str, list[str]] = field(default_factory=dict)   # other signals in the data -> their files
    findings: list[Finding] = field(default_factory=list)
    usable_rows: int | None = None              # pairs with chosen != rejected
    sft_field: str | None = None                # a column that can serve as SFT completion (chosen, solution)
    rating_field: str | None = None
    ratings: dict[str, Any] = field(default_factory=dict)      # lint.rating_stats
    suffix: str | None = None
    data_rows: list = field(default_factory=list, repr=False)  # the lead kind's rows (for the pre-flight)

    def summary(self) -> dict[str, Any]:
        """The JSON-able facts (no rows, no findings: those are in the warnings)."""
        skip = ("findings", "data_rows", "suffix")
        d = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in skip}
        d = {k: v for k, v in d.items() if not (v is None or v is False or (isinstance(v, (list, dict)) and not v))}
        d["kind"] = self.kind
        return d


@dataclass
class Recommendation:
    method: str
    ready: bool = True                          # False: an error-level warning says fix something first
    reasons: list[str] = field(default_factory=list)
    needs: list[str] = field(default_factory=list)
    fails_by: list[str] = field(default_factory=list)
    watch: list[str] = field(default_factory=list)
    warnings: list[Note] = field(default_factory=list)
    commands: list[str] = field(default_factory=list)   # the next command first, then the ones after it
    recipe: str | None = None
    then: str | None = None                     # the method that follows an SFT-first step
    signal: dict[str, Any] = field(default_factory=dict)
    rollout_estimate: dict[str, Any] | None = None  # bootstrap vs GRPO, with a measured pass rate (`price`)

    @property
    def next_command(self) -> str:
        return self.commands[0] if self.commands else ""

    def codes(self) -> list[str]:
        return [n.code for n in self.warnings]

    def note(self, level: str, code: str, message: str) -> None:
        self.warnings.append(Note(level, code, message))
        if level == "error":
            self.ready = False

    def as_dict(self) -> dict[str, Any]:
        return {"method": self.method, "then": self.then, "ready": self.ready, "reasons": self.reasons,
                "needs": self.needs, "fails_by": self.fails_by, "watch": self.watch,
                "warnings": [asdict(n) for n in self.warnings], "next_command": self.next_command,
                "commands": self.commands, "recipe": self.recipe, "signal": self.signal,
                **({"rollout_estimate": self.rollout_estimate} if self.rollout_estimate else {})}


# --------------------------------------------------------------------------- rules

def _usable(s: Signal) -> int | None:
    return s.usable_rows if s.usable_rows is not None else s.rows


def _n(x: int | None, what: str) -> str:
    return f"{x:,} {what}" if x is not None else what


def rule_signal(s: Signal, r: Recommendation) -> None:
    """The base method from the kind of signal (the domain table)."""
    if s.kind == "demonstrations":
        r.method = "sft"
        r.reasons.append(f"you have {_n(s.rows, 'demonstrations')} (correct outputs written out): SFT learns "
                         "them directly")
    elif s.kind in ("pairs", "taste"):
        usable = _usable(s)
        if usable == 0:
            r.method = "sft"
            r.note("error", "no_preference", f"chosen equals rejected in all {s.rows:,} pairs: there is no "
                   "preference to learn, so this is not DPO data; the chosen texts can still serve as "
                   "demonstrations")
            r.reasons.append("with no preference in the pairs, what is left is demonstrations (the chosen "
                             "texts): SFT on them")
            return
        r.method = "dpo"
        r.reasons.append(f"you have {_n(usable, 'preference pairs')} (chosen/rejected): DPO learns the preference "
                         "in one offline pass, with no reward model (beta 0.1 against a frozen reference)")
        r.reasons.append(MEASURED_PAIRS)
    elif s.kind == "verifier":
        r.method = "grpo"
        name = f"the {s.verifier} verifier" if s.verifier else "a verifier"
        r.reasons.append(f"{name} checks answers automatically: GRPO samples G answers per prompt and pushes "
                         "toward the above-average ones, with no human labels")
    elif s.kind == "environment":
        r.method = "grpo"
        r.reasons.append("an environment the model acts in (tools it calls, a reward or a verifier on the final "
                         "answer): GRPO over TRL's multi-turn tool loop (rlft grpo --env FILE.py:Class, or --tools "
                         "FILE.py), after SFT on a few tool-call demonstrations so episodes call the tools")
    elif s.kind == "thumbs":
        r.method = "kto"
        r.reasons.append(f"you have {_n(s.rows, 'thumbs up/down labels')} on single answers, not pairs: KTO learns "
                         "from unpaired good/bad labels against a frozen reference, with no reward model")
    elif s.kind == "teacher":
        r.method = "distill"
        r.reasons.append("a stronger model you can run is a dense signal: on-policy distillation lets the student "
                         "sample and the teacher score every token of those samples (no labels, no reward); the "
                         "teacher must share the student's tokenizer")
    elif s.kind == "ratings":
        pairable = s.ratings.get("pairable_prompts") or 0
        if pairable >= MIN_RATED_PAIRS:
            r.method = "dpo"
            r.reasons.append(f"{pairable:,} prompts have two or more differently rated replies: a higher- and a "
                             "lower-rated reply make a preference pair, and DPO learns from pairs in one pass")
        else:
            r.method = "sft"
            top = s.ratings.get("top_rows")
            thr = s.ratings.get("top_threshold")
            r.reasons.append("scalar ratings with one reply per prompt cannot form preference pairs, and a reward "
                             "model would need comparisons: SFT on the top-rated replies"
                             + (f" ({top:,} rated >= {thr:g})" if top is not None and thr is not None else "")
                             + " uses the good part of the signal without a reward model")
            few = f" (only {pairable:,} prompts have differently rated replies, under {MIN_RATED_PAIRS})" \
                if pairable else ""
            r.note("info", "ratings_unpaired", f"to use the low ratings too, rate two or more replies per prompt{few}: "
                   "a higher- and a lower-rated reply make a pair for DPO")


def rule_taste_budget(s: Signal, r: Recommendation) -> None:
    """Reward model + PPO only when quality is taste that pairs cannot cover AND the budget allows the loop."""
    if r.method != "dpo":
        return
    taste = s.taste or s.kind == "taste"
    if taste and s.budget == "high":
        r.method = "ppo"
        r.reasons.append("quality is a matter of taste that fixed pairs cannot cover, and the budget allows the "
                         "loop: train a reward model on the pairs, then PPO samples new replies online and the "
                         "reward model scores them")
        r.note("info", "dpo_baseline", "DPO on the same pairs is one cheap pass: run it as the baseline PPO "
               "has to beat (running RLHF when pairs exist, without that baseline, is the common mistake)")
    elif taste:
        r.note("warning", "taste_no_budget", "taste that pairs cannot cover is the case for reward model + PPO, "
               f"but that needs the budget for the loop (4 networks, online sampling; --budget is "
               f"{s.budget or 'not given'}): DPO on the pairs now, PPO with --budget high")
    elif s.budget == "high":
        r.note("info", "budget_not_reason", "a large budget is no reason for PPO by itself: the pairs already "
               "say what is better, and DPO learns that in one pass; PPO is for taste the pairs cannot cover "
               "(--signal taste)")


def rule_pairs_size(s: Signal, r: Recommendation) -> None:
    """About 1k-5k pairs is the usual size for DPO (and for a reward model): fewer -> a warning with the count."""
    if r.method not in ("dpo", "ppo") or s.kind == "ratings":
        return
    usable = _usable(s)
    if usable is not None and usable < PAIRS_USUAL[0]:
        r.note("warning", "too_few_pairs", f"{usable:,} usable pairs; about {PAIRS_USUAL[0]:,}-{PAIRS_USUAL[1]:,} "
               "is the usual size: expect a small, noisy effect and hold some pairs out to check it")


def rule_rows_size(s: Signal, r: Recommendation) -> None:
    """Too few demonstrations, top-rated replies or GRPO prompts -> a warning with the number."""
    if s.kind == "demonstrations" and s.rows is not None and s.rows < MIN_DEMOS:
        r.note("warning", "too_few_rows", f"only {s.rows:,} demonstrations: SFT on fewer than ~{MIN_DEMOS} mostly "
               "memorises them; write more, or check on held-out prompts")
    if s.kind == "ratings" and r.method == "sft":
        top = s.ratings.get("top_rows")
        if top is not None and top < MIN_TOP_RATED:
            r.note("warning", "too_few_rows", f"only {top:,} top-rated replies to learn from (of {s.rows:,}): "
                   f"SFT on fewer than ~{MIN_TOP_RATED} mostly memorises them")
    if s.kind == "ratings" and r.method in ("dpo", "ppo"):
        pairable = s.ratings.get("pairable_prompts") or 0
        if pairable < PAIRS_USUAL[0]:
            r.note("warning", "too_few_pairs", f"{pairable:,} prompts can form pairs; about {PAIRS_USUAL[0]:,}-"
                   f"{PAIRS_USUAL[1]:,} pairs is the usual size for DPO")
    if s.kind == "verifier" and s.rows is not None and s.rows < MIN_PROMPTS:
        r.note("warning", "too_few_prompts", f"only {s.rows:,} prompts: GRPO sees each one every epoch and can "
               f"overfit them; fewer than ~{MIN_PROMPTS} makes the held-out check the one that counts")


def rule_verifier(s: Signal, r: Recommendation) -> None:
    """GRPO only if the model already passes sometimes; format-only verifiers get a warning."""
    if s.kind != "verifier":
        return
    if s.format_only:
        r.note("warning", "format_only_verifier", f"the {s.verifier or 'given'} verifier checks the format only: "
               "the model learns the format and can skip the reasoning (reward hacking); add a correctness "
               "check, or at least watch a held-out eval with one")
    if s.pass_rate is None:
        if r.method == "grpo":
            how = "--model M" if s.paths else "--data PROMPTS.jsonl --model M"
            r.note("warning", "pass_rate_unknown", "GRPO learns only from prompts the model solves sometimes, "
                   f"and that is not measured yet: rerun with {how} for a pre-flight (pass rate and "
                   "mixed-group share), or pass --pass-rate/--mixed-fraction if you measured them")
        return
    p, m = s.pass_rate, s.mixed_fraction
    noise = (f" (90% interval {s.mixed_interval[0]:.0%}-{s.mixed_interval[1]:.0%} over {s.preflight_prompts} "
             "prompts)") if s.mixed_interval else ""
    r.reasons.append(f"pre-flight: the model passes {p:.0%} of sampled answers"
                     + (f"; {m:.0%} of prompts give a mixed group{noise}" if m is not None else ""))
    if p == 0:
        r.method, r.then = "sft", "grpo"
        r.reasons.insert(0, "the model never passes yet, so GRPO would have nothing to reward: SFT first (on "
                            "demonstrations of the task), then GRPO from the SFT model")
        r.note("error", "never_passes", "the model never passed in the pre-flight: every group is all-0, so "
               "GRPO has nothing to reward; SFT first on demonstrations of the task, then measure again")
        return
    if p >= PASS_RATE_HIGH:
        r.note("warning", "too_easy", f"the model already passes {p:.0%}: most groups are all-correct and teach "
               "nothing; add harder prompts before spending GRPO compute")
    if m is not None and s.mixed_interval and m < MIXED_MIN <= s.mixed_interval[1]:
        r.note("warning", "zero_signal_within_noise", f"{m:.0%} of prompts give a mixed group, within noise of "
               f"{MIXED_MIN:.0%} (interval above): GRPO may learn slowly; its zero_signal alarm watches the run")
    elif m is not None and m < MIXED_MIN:
        mostly_failing = p < 0.5
        fix = ("SFT first, then measure again" if mostly_failing else
               "add harder prompts, keep the ones the model solves sometimes, or raise num_generations")
        r.note("error", "zero_signal", f"only {m:.0%} of prompts give a mixed group (some answers pass, some "
               f"fail): on {1 - m:.0%} of them every advantage is 0 and GRPO learns nothing; {fix}")
        if mostly_failing:  # all-wrong groups: the model cannot answer yet
            r.method, r.then = "sft", "grpo"
            r.reasons.insert(0, f"the model passes only {p:.0%} and most groups are all-wrong: SFT first (on "
                                "demonstrations of the task), then GRPO from the SFT model")


def rule_sft_first(s: Signal, r: Recommendation) -> None:
    """No model that produces usable answers yet (or demonstrations alongside) -> SFT first, then the method."""
    if r.method == "sft":
        return
    measured = s.kind == "verifier" and s.pass_rate is not None and s.pass_rate > 0
    demos = "demonstrations" in s.other
    if s.has_sft_model is False and not measured:
        r.then = r.method
        r.method = "sft"
        r.reasons.insert(0, "your model does not answer usably yet: SFT first (skipping SFT is the common "
                            f"mistake: {r.then.upper()} on a model that cannot answer has nothing to learn from), "
                            f"then {r.then.upper()} from the SFT model")
    elif demos and s.has_sft_model is not True:
        r.then = r.method
        r.method = "sft"
        r.reasons.insert(0, f"you also have demonstrations: SFT on them first, then {r.then.upper()} from the "
                            "SFT model (the usual order)")
    elif s.has_sft_model is None and not measured:
        r.note("info", "assumes_sft_model", f"{r.method.upper()} assumes your model already answers usably (SFT'd "
               "or instruct); if it is a base model, SFT first (--no-sft-model)")
    elif measured and s.has_sft_model is False:
        r.note("info", "measured_over_said", "the pre-flight shows the model already passes sometimes, so GRPO "
               "can start without SFT")


def rule_other_signals(s: Signal, r: Recommendation) -> None:
    """Say what the other files given are for."""
    for kind, paths in s.other.items():
        if kind == "demonstrations":
            if s.has_sft_model is True:
                r.note("info", "demonstrations_unused", "your model is already SFT'd: the demonstrations "
                       f"({', '.join(paths)}) are not needed for this step")
            continue
        use = {"pairs": "DPO on the pairs can tune tone and style after this",
               "verifier": "the verifiable rows make a held-out check (rlft eval)",
               "ratings": "the ratings can check the result, or make pairs",
               "thumbs": "KTO on the thumbs labels can tune the result after this"}[kind]
        r.note("info", f"also_{kind}", f"{', '.join(paths)}: {use}")


def rule_lint(s: Signal, r: Recommendation) -> None:
    """The data lint's findings become warnings (errors: fix the data first)."""
    covered = {"identical_pairs"} if "no_preference" in r.codes() else set()
    for f in s.findings:
        if f.code in covered:
            continue
        where = f"{f.source}: " if f.source else ""
        r.note(f.level, f.code, where + f.message)


def rule_rloo(s: Signal, r: Recommendation) -> None:
    """RLOO instead of GRPO when the budget is low: the same verifier reward from half the samples."""
    if s.budget != "low" or "grpo" not in (r.method, r.then):
        return
    if r.method == "grpo":
        r.method = "rloo"
    else:
        r.then = "rloo"
    r.reasons.append(f"with a low budget, RLOO rather than GRPO: each completion's baseline is the mean reward of "
                     f"the other k-1 samples of its prompt (no critic, no group std), which works with k = "
                     f"{RLOO_GROUP} samples per prompt where GRPO's group std wants G = {GRPO_GROUP}: about half "
                     "the generation per prompt; with budget to spare, GRPO's larger groups give steadier steps")


def rule_budget_cost(s: Signal, r: Recommendation) -> None:
    """GRPO, RLOO and PPO sample online: a low budget gets the cost spelled out."""
    online = ("grpo", "ppo", "rloo")
    if s.budget == "low" and (r.method in online or r.then in online):
        r.note("warning", "budget_low", "online methods generate G answers per prompt at every step (roughly G "
               "times the model runs of SFT on the same prompts): with a low budget, cut num_generations and "
               "the completion length, and train on fewer prompts")


RULES: list[Callable[[Signal, Recommendation], None]] = [
    rule_signal, rule_taste_budget, rule_pairs_size, rule_rows_size, rule_verifier, rule_bootstrap, rule_sft_first,
    rule_other_signals, rule_lint, rule_rloo, rule_budget_cost,
]


def check_signal(s: Signal) -> None:
    if s.kind not in SIGNALS:
        raise UserError(f"unknown signal '{s.kind}'", f"use one of: {', '.join(SIGNALS)}")
    if s.budget is not None and s.budget not in BUDGETS:
        raise UserError(f"unknown budget '{s.budget}'", f"use one of: {', '.join(BUDGETS)}")
    if s.rows is not None and s.rows < 0:
        raise UserError(f"--rows must be >= 0, got {s.rows}", "pass the number of rows you have")
    for name in ("pass_rate", "mixed_fraction"):
        v = getattr(s, name)
        if v is not None and not 0 <= v <= 1:
            raise UserError(f"{name} must be between 0 and 1, got {v}", "pass a fraction, e.g. 0.35")


def recommend(signal: Signal, pass_rate: float | None = None, mixed_fraction: float | None = None) -> Recommendation:
    """Apply RULES to `signal` (measured pass_rate / mixed_fraction override the signal's)."""
    s = signal
    if pass_rate is not None or mixed_fraction is not None:
        s = replace(signal, pass_rate=signal.pass_rate if pass_rate is None else pass_rate,
                    mixed_fraction=signal.mixed_fraction if mixed_fraction is None else mixed_fraction)
    check_signal(s)
    r = Recommendation(method="sft")
    for rule in RULES:
        rule(s, r)
    needs, fails, watch = WHAT[r.method]
    r.needs = list(needs) + _extra_needs(s, r)
    if r.then:
        r.needs.append(f"then, for {r.then.upper()}: " + "; ".join(WHAT[r.then][0]))
    r.fails_by, r.watch = list(fails), list(watch)
    if r.then:
        r.fails_by += [f"{r.then.upper()}: {x}" for x in WHAT[r.then][1]]
        r.watch += [f"{r.then.upper()}: {x}" for x in WHAT[r.then][2]]
    order = {"error": 0, "warning": 1, "info": 2}
    r.warnings.sort(key=lambda n: order[n.level])
    r.commands, r.recipe = build_commands(s, r)
    r.signal = s.summary()
    return r


def _extra_needs(s: Signal, r: Recommendation) -> list[str]:
    out = []
    if r.method == "sft" and s.kind == "ratings" and s.ratings.get("top_threshold") is not None:
        out.append(f"the top-rated replies only ({s.rating_field} >= {s.ratings['top_threshold']:g}): the first "
                   "command below writes them to a file")
    if r.method == "dpo" and s.kind == "ratings":
        out.append("pairs built from the ratings: per prompt the highest-rated reply as chosen and the lowest as "
                   "rejected (the first command below writes them)")
    if r.method in ("grpo", "rloo") and not s.verifier:
        names = ", ".join(verifier_registry()) or "see rlft.verifiers"
        out.append(f"a registered verifier for --verifier ({names})")
    return out
