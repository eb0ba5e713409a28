"""Pre-flight: will GRPO learn anything from these prompts with this model and verifier?

GRPO's advantage is a reward minus its group's mean, so a group whose G rewards are all equal (all pass
or all fail) contributes exactly zero gradient. Before a run, sample G completions for up to N prompts
at the training temperature, score them, and report:
  pass_rate        share of sampled completions with reward >= 1 (the verifier's "right")
  mixed_fraction   share of prompts whose G rewards are not all equal: the only groups that teach
  mixed_interval   its Wilson score interval over the prompts (z = 1.645: each bound one-sided 95%)
  truncation_rate  share of completions cut off at max_completion_length (no end-of-turn token)
  parse_failures   share of completions the verifier returned None for (could not score)

A decision that turns on one prompt is noise (3 mixed groups of 32 is 0.09, and its interval 0.04-0.21 holds
the default threshold 0.1), so the verdict accounts for it: `refuse` only when the interval's upper bound is
below min_mixed (clearly below); `go` when its lower bound is at or above it; in between, the probe samples
more prompts (doubling, up to `max_prompts_cap`), and if the interval still holds the threshold there, it
goes, saying that the share is within noise of the threshold. `verdict_for` without an interval keeps the
plain comparison (the numbers a user typed into `rlft choose`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

from rlft.errors import UserError


class PreflightRefused(UserError):
    """The model cannot learn from these prompts with this verifier (exit code 3)."""

    exit_code = 3


Z = 1.645  # each bound of the interval is a one-sided 95% bound (two-sided 90%)


def wilson(k: int, n: int, z: float = Z) -> tuple[float, float]:
    """Wilson score interval for k successes in n trials (exact at the edges: 0/n gives a lower bound of 0).

    >>> [round(x, 3) for x in wilson(3, 32)]
    [0.038, 0.213]
    """
    if n <= 0:
        return 0.0, 1.0
    p = k / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


@dataclass
class PreflightResult:
    prompts: int
    num_generations: int
    pass_rate: float
    mixed_fraction: float
    truncation_rate: float
    parse_failures: float
    verdict: str
    advice: list[str] = field(default_factory=list)
    mixed: list[bool] = field(default_factory=list)  # per prompt, in order
    mixed_interval: tuple[float, float] = (0.0, 1.0)
    min_mixed: float = 0.1
    within_noise: bool = False  # the interval still held min_mixed when the prompts ran out
    episodes: dict[str, float] | None = None  # a tool run's: tool calls and tool errors per episode
    sample_seconds: float = 0.0  # wall time of the sampling and scoring (what `rlft choose` prices rollouts by)

    def as_dict(self) -> dict[str, Any]:
        return {"prompts": self.prompts, "num_generations": self.num_generations,
                "pass_rate": round(self.pass_rate, 4), "mixed_fraction": round(self.mixed_fraction, 4),
                "mixed_interval": [round(x, 4) for x in self.mixed_interval], "interval_z": Z,
                "min_mixed": self.min_mixed, "within_noise": self.within_noise,
                "truncation_rate": round(self.truncation_rate, 4), "parse_failures": round(self.parse_failures, 4),
                "verdict": self.verdict, "advice": self.advice,
                **({k: round(v, 4) for k, v in self.episodes.items()} if self.episodes else {})}

    def line(self) -> str:
        """One line for the console: the estimates, their noise, and the verdict."""
        lo, hi = self.mixed_interval
        noise = f" (within noise of {self.min_mixed:g}: going)" if self.within_noise else ""
        e = self.episodes
        tools = (f", tool calls/episode {e['tool_calls_per_episode']:.2f}, tool errors/episode "
                 f"{e['tool_errors_per_episode']:.2f}" if e else "")
        return (f"pass rate {self.pass_rate:.2f}, mixed groups {self.mixed_fraction:.2f} "
                f"[{lo:.2f}-{hi:.2f}, 90% interval], truncated {self.truncation_rate:.2f}{tools} over "
                f"{self.prompts} prompts x {self.num_generations}{' episodes' if e else ''} -> {self.verdict}{noise}")


def verdict_for(pass_rate: float, mixed_fraction: float, truncation_rate: float, min_mixed: float,
                num_generations: int, section: str = "grpo",
                interval: tuple[float, float] | None = None) -> tuple[str, list[str]]:
    """`go` or `refuse`, and advice that names the fix, in the run's own config section (`grpo` or `rloo`;
    pure: tested on given numbers). With the mixed share's `interval`, refuse only when its upper bound is
    below min_mixed; without one, compare the point estimate."""
    advice = []
    low = (interval[1] if interval is not None else mixed_fraction) < min_mixed
    if low:
        if pass_rate == 0.0:
            advice.append("the model never passes: SFT it first on demonstrations (rlft sft), or use easier prompts")
        elif pass_rate >= 0.5:
            advice.append("the model (almost) always passes: use harder prompts, or --filter-prompts to keep "
                          "only prompts it sometimes fails")
        else:
            advice.append("groups are all-fail or all-pass: use a verifier with partial credit (e.g. label_partial), "
                          f"or a larger group (--set {section}.num_generations={num_generations * 2})")
    if truncation_rate > 0.2:
        advice.append(f"{truncation_rate:.0%} of completions hit max_completion_length: raise it "
                      f"(--set {section}.max_completion_length=...) or the reward is scored on cut-off text")
    return ("refuse" if low else "go"), advice


def _sample(net, tok, rows: list[dict], reward_fn: Callable, num_generations: int, max_new_tokens: int,
            temperature: float, batch_size: int) -> tuple[list[bool], int, int, int, int]:
    """G completions for each row, scored: (mixed per prompt, passes, finished, unparsed, completions)."""
    from rlft.evaluate import generate_detailed

    samples = generate_detailed(net, tok, [r["prompt"] for r in rows], max_new_tokens=max_new_tokens,
                                do_sample=True, temperature=temperature, num_return_sequences=num_generations,
                                batch_size=max(1, batch_size // num_generations))
    completions, gold, finished = [], {}, []
    keys = {k for r in rows for k in r if k != "prompt"}
    for row, group in zip(rows, samples):
        for text, done in group:
            completions.append(text)
            finished.append(done)
            for k in keys:
                gold.setdefault(k, []).append(row.get(k))
    prompts = [r["prompt"] for r in rows for _ in range(num_generations)]
    rewards = reward_fn(completions, prompts=prompts, **gold)
    n = len(completions)
    scores = [0.0 if r is None else float(r) for r in rewards]
    mixed = [len(set(scores[i:i + num_generations])) > 1 for i in range(0, n, num_generations)]
    return (mixed, sum(s >= 1.0 for s in scores), sum(finished), sum(r is None for r in rewards), n)


class _EpisodeSampler:
    """`_sample` for a tool run: G sampled episodes per row with the run's tools (rlft.episodes.score_episodes),
    scored as in training (the reward plus the environment's get_reward); an episode that ends on a tool call (out
    of rounds) counts as truncated. Keeps the tool calls and tool errors per episode."""

    def __init__(self, tools) -> None:
        self.tools, self.episodes, self.calls, self.errors = tools, 0, 0, 0

    def __call__(self, net, tok, rows, reward_fn, num_generations, max_new_tokens, temperature, batch_size):
        from rlft.episodes import score_episodes

        eps = score_episodes(net, tok, [r for r in rows for _ in range(num_generations)], self.tools, reward_fn,
                             max_new_tokens, temperature=temperature)
        self.episodes += len(eps)
        self.calls += sum(e["tool_calls"] for e in eps)
        self.errors += sum(e["tool_errors"] for e in eps)
        scores = [e["reward"] for e in eps]
        mixed = [len(set(scores[i:i + num_generations])) > 1 for i in range(0, len(eps), num_generations)]
        return mixed, sum(e["success"] for e in eps), sum(e["answered"] for e in eps), 0, len(eps)

    def counts(self) -> dict[str, float]:
        n = max(self.episodes, 1)
        return {"tool_calls_per_episode": self.calls / n, "tool_errors_per_episode": self.errors / n}


def probe(net, tok, rows: list[dict], reward_fn: Callable, *, num_generations: int = 8, max_prompts: int = 32,
          max_new_tokens: int = 64, temperature: float = 1.0, min_mixed: float = 0.1,
          batch_size: int = 64, section: str = "grpo", max_prompts_cap: int | None = None,
          tools: Any = None) -> PreflightResult:
    """Sample, score and judge (the model is already loaded); the advice names `section`'s keys. With `tools`
    (rlft.tools.ToolSetup), each sample is a whole episode with the tools (`_EpisodeSampler`).

    Starts with `max_prompts` prompts; while the mixed share's interval holds min_mixed, doubles the prompts
    (the next ones in `rows`) up to `max_prompts_cap` (default: max_prompts, one round)."""
    sample = _EpisodeSampler(tools) if tools is not None else _sample
    cap = max(max_prompts, max_prompts_cap or max_prompts)
    if not rows:
        raise UserError("pre-flight got no prompts", "pass a prompts file with rows")
    mixed: list[bool] = []
    passes = finished = unparsed = n = 0
    target = max_prompts
    import time

    began = time.time()
    while True:
        batch = rows[len(mixed):min(target, cap)]
        if batch:
            m, p, f, u, c = sample(net, tok, batch, reward_fn, num_generations, max_new_tokens, temperature,
                                    batch_size)
            mixed += m
            passes, finished, unparsed, n = passes + p, finished + f, unparsed + u, n + c
        interval = wilson(sum(mixed), len(mixed))
        undecided = interval[0] < min_mixed <= interval[1]
        if not undecided or len(mixed) >= min(cap, len(rows)):
            break
        target = len(mixed) * 2
    pass_rate, mixed_fraction = passes / n, sum(mixed) / len(mixed)
    truncation = 1 - finished / n
    verdict, advice = verdict_for(pass_rate, mixed_fraction, truncation, min_mixed, num_generations, section,
                                  interval)
    return PreflightResult(len(mixed), num_generations, pass_rate, mixed_fraction, truncation, unparsed / n,
                           verdict, advice, mixed, interval, min_mixed, undecided,
                           sample.counts() if tools is not None else None, time.time() - began)


def run_preflight(model: str, rows, verifier: str | list[str], num_generations: int = 8, max_prompts: int = 32,
                  max_new_tokens: int = 64, temperature: float = 1.0, min_mixed: float = 0.1,
                  seed: int = 0, console=None, max_prompts_cap: int | None = None,
                  section: str = "grpo") -> PreflightResult:
    """Load `model`, validate `rows` (rlft.data.Row) for the verifier(s), and probe. With a `console`, say so
    when plain-string prompts meet a model with a chat template (`--as-chat` wraps them)."""
    from rlft.models import load_for_inference, load_tokenizer
    from rlft.quiet import quiet_libraries
    from rlft.verifiers.loading import load_verifiers, validate_gold

    quiet_libraries()
    specs = [verifier] if isinstance(verifier, str) else list(verifier)
    reward_fn, gold_fields = load_verifiers(specs)
    validate_gold(rows, specs)
    import torch

    torch.manual_seed(seed)
    tok = load_tokenizer(model)
    if console is not None:
        from rlft.chat.templates import plain_prompt_note

        if note := plain_prompt_note(tok, rows, switch="--as-chat"):
            console.print(f"[yellow]note[/]: {note}")
    net = load_for_inference(model)
    return probe(net, tok, [r.data for r in rows], reward_fn, num_generations=num_generations,
                 max_prompts=max_prompts, max_new_tokens=max_new_tokens, temperature=temperature,
                 min_mixed=min_mixed, max_prompts_cap=max_prompts_cap, section=section)
