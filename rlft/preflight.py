"""Pre-flight: will GRPO learn anything from these prompts with this model and verifier?

GRPO's advantage is a reward minus its group's mean, so a group whose G rewards are all equal (all pass
or all fail) contributes exactly zero gradient. Before a run, sample G completions for up to N prompts
at the training temperature, score them, and report:
  pass_rate        share of sampled completions with reward >= 1 (the verifier's "right")
  mixed_fraction   share of prompts whose G rewards are not all equal: the only groups that teach
  truncation_rate  share of completions cut off at max_completion_length (no end-of-turn token)
  parse_failures   share of completions the verifier returned None for (could not score)
Verdict `refuse` when mixed_fraction < min_mixed (default 0.1), with advice naming the fix.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from rlft.errors import UserError


class PreflightRefused(UserError):
    """The model cannot learn from these prompts with this verifier (exit code 3)."""

    exit_code = 3


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

    def as_dict(self) -> dict[str, Any]:
        return {"prompts": self.prompts, "num_generations": self.num_generations,
                "pass_rate": round(self.pass_rate, 4), "mixed_fraction": round(self.mixed_fraction, 4),
                "truncation_rate": round(self.truncation_rate, 4), "parse_failures": round(self.parse_failures, 4),
                "verdict": self.verdict, "advice": self.advice}


def verdict_for(pass_rate: float, mixed_fraction: float, truncation_rate: float, min_mixed: float,
                num_generations: int, section: str = "grpo") -> tuple[str, list[str]]:
    """`go` or `refuse`, and advice that names the fix, in the run's own config section (`grpo` or `rloo`;
    pure: tested on given numbers)."""
    advice = []
    if mixed_fraction < min_mixed:
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
    return ("refuse" if mixed_fraction < min_mixed else "go"), advice


def probe(net, tok, rows: list[dict], reward_fn: Callable, *, num_generations: int = 8, max_prompts: int = 32,
          max_new_tokens: int = 64, temperature: float = 1.0, min_mixed: float = 0.1,
          batch_size: int = 64, section: str = "grpo") -> PreflightResult:
    """Sample, score and judge (the model is already loaded); the advice names `section`'s keys."""
    from rlft.evaluate import generate_detailed

    rows = rows[:max_prompts]
    if not rows:
        raise UserError("pre-flight got no prompts", "pass a prompts file with rows")
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
    parse_failures = sum(r is None for r in rewards) / n
    scores = [0.0 if r is None else float(r) for r in rewards]
    mixed = [len(set(scores[i:i + num_generations])) > 1 for i in range(0, n, num_generations)]
    pass_rate = sum(s >= 1.0 for s in scores) / n
    mixed_fraction = sum(mixed) / len(mixed)
    truncation = 1 - sum(finished) / n
    verdict, advice = verdict_for(pass_rate, mixed_fraction, truncation, min_mixed, num_generations, section)
    return PreflightResult(len(rows), num_generations, pass_rate, mixed_fraction, truncation, parse_failures,
                           verdict, advice, mixed)


def run_preflight(model: str, rows, verifier: str | list[str], num_generations: int = 8, max_prompts: int = 32,
                  max_new_tokens: int = 64, temperature: float = 1.0, min_mixed: float = 0.1,
                  seed: int = 0, console=None) -> PreflightResult:
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
        from rlft.chat_templates import plain_prompt_note

        if note := plain_prompt_note(tok, rows, switch="--as-chat"):
            console.print(f"[yellow]note[/]: {note}")
    net = load_for_inference(model)
    return probe(net, tok, [r.data for r in rows], reward_fn, num_generations=num_generations,
                 max_prompts=max_prompts, max_new_tokens=max_new_tokens, temperature=temperature,
                 min_mixed=min_mixed)
