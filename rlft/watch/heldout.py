"""The held-out signal every run gets by default: which rows, and the method's honest metric on them.

Without `watch.holdout` (a file of prompts + gold), a run measures itself on held-out rows:
  - its eval rows (data.eval / --eval-data) when it has them, else
  - a seeded slice of its training rows (`watch.auto_holdout`, on by default): about 5% of the prompts
    (`auto_holdout_fraction`), at least 50 prompts (the floor: below that one row moves the score by 2 points
    and the alarm cannot tell a fall from noise) but never more than 20% of them, and at most
    `holdout_max_rows` (the ceiling, 100). The split is by prompt, so a prompt's true and false thumbs (or
    its demonstrations) are all on one side: a held-out row never shares its prompt with a trained one.
    Turned off, the run trains on every row and nothing tells a falling held-out score (over-training) from
    a rising training curve; the final model is then the last one.

The metric follows the rows (`metric_for`), always one value where higher is better plus its noise:
  verifiable   pass@1: greedy answers scored by the run's verifier (exact match without one)
  pairs        where the preferred answers are short (an answer, not prose: every chosen <= 32 characters),
               pass@1 of the greedy answer against the chosen one (exact match: the chosen answer is the
               gold); else pair accuracy, the share of pairs whose chosen answer the policy gives a higher
               log-probability than the rejected one (the reward model's score, for `rlft reward`)
  thumbs       the same exact-match pass@1 against desirable answers when they are short; else the share
               of (desirable, undesirable) pairs with the same prompt whose desirable answer gets the higher
               mean token log-prob (every pair across prompts when none share one)
  demonstrations  the negative mean token loss of the completions (so higher is better; `token_loss` logged)
  prompts      (distillation) pass@1 with distill.heldout_verifier when the rows carry its gold, else none
Noise: the binomial standard error sqrt(p(1-p)/n) for shares, the standard error of the per-row losses for
the token loss. DPO's own eval metric (rewards/accuracies, relative to the reference) is not used: it keeps
rising while the policy's answers get worse, which is the failure this check is for.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

FLOOR, CEILING_SHARE, SHORT_ANSWER = 50, 0.2, 32


def slice_size(n_rows: int, fraction: float = 0.05, ceiling: int = 100) -> int:
    """How many prompts the automatic held-out slice takes from `n_rows` prompts (see the module docstring).

    >>> [slice_size(n) for n in (100, 300, 600, 4000, 20000)]
    [20, 50, 50, 100, 100]
    """
    want = max(FLOOR, round(n_rows * fraction))
    return max(0, min(want, int(n_rows * CEILING_SHARE), ceiling))


def prompt_key(row: Any) -> str:
    """What groups rows by prompt (a chat prompt by its messages; a messages-only row by its messages)."""
    data = row.data if hasattr(row, "data") else row
    return str(data.get("prompt", data.get("messages")))


def holdout_kind(rows: list[dict]) -> str:
    """The shape of a watch.holdout file's rows, which its metric follows: "pairs" (prompt, chosen, rejected),
    "thumbs" (prompt, completion, label), else "verifiable" (prompts + the verifier's gold)."""
    if rows and all({"chosen", "rejected"} <= set(r) for r in rows):
        return "pairs"
    if rows and all({"completion", "label"} <= set(r) for r in rows):
        return "thumbs"
    return "verifiable"


def prompt_groups(rows: list) -> list[list[int]]:
    """Row indices grouped by prompt, in first-seen order."""
    groups: dict[str, list[int]] = {}
    for i, r in enumerate(rows):
        data = r.data if hasattr(r, "data") else r
        groups.setdefault(str(data.get("prompt", data.get("messages", i))), []).append(i)
    return list(groups.values())


def split_by_prompt(rows: list, n_prompts: int, seed: int) -> tuple[list, list]:
    """(train, held): `n_prompts` whole prompts (all their rows) drawn in a seeded order are held out."""
    groups = prompt_groups(rows)
    random.Random(seed).shuffle(groups)
    held = {i for g in groups[:n_prompts] for i in g}
    return [r for i, r in enumerate(rows) if i not in held], [r for i, r in enumerate(rows) if i in held]


@dataclass
class Measure:
    """One held-out measurement: the metric's value (higher is better), its standard error, rows, extras."""

    metric: str
    value: float
    stderr: float
    n: int
    extra: dict[str, Any]
    samples: list[dict]
    per_row: list[float] = field(default_factory=list)  # each row's outcome, for the paired noise (rlft.watch.overfit)

    def record(self) -> dict[str, Any]:
        out = {"heldout/metric": self.metric, "heldout/score": round(self.value, 4),
               "heldout/stderr": round(self.stderr, 4), "heldout/n": self.n}
        out.update({f"heldout/{k}": (round(v, 4) if isinstance(v, float) else v) for k, v in self.extra.items()})
        return out


def binomial_stderr(p: float, n: int) -> float:
    return math.sqrt(max(p * (1 - p), 0.0) / n) if n else 0.0


def _text(x: Any) -> str:
    if isinstance(x, list):
        return str(x[-1].get("content", "")) if x and isinstance(x[-1], dict) else ""
    return "" if x is None else str(x)


def is_short(answers: list) -> bool:
    return bool(answers) and all(len(_text(a)) <= SHORT_ANSWER for a in answers)


def metric_for(kind: str, rows: list[dict]) -> str:
    """The metric name the rows of `kind` are judged by (see the module docstring)."""
    if kind == "verifiable" or kind == "prompts":
        return "pass_at_1"
    if kind == "pairs":
        return "pass_at_1" if is_short([r["chosen"] for r in rows]) else "pair_accuracy"
    if kind == "thumbs":
        good = [r["completion"] for r in rows if r.get("label") is True]
        return "pass_at_1" if is_short(good) else "desirable_above_undesirable"
    return "neg_token_loss"


def gold_rows(kind: str, rows: list[dict]) -> list[dict]:
    """Verifiable-shaped rows {prompt, answer} for the exact-match pass@1 of pairs and thumbs."""
    if kind == "pairs":
        return [{"prompt": r["prompt"], "answer": _text(r["chosen"])} for r in rows]
    return [{"prompt": r["prompt"], "answer": _text(r["completion"])} for r in rows if r.get("label") is True]


def completion_logprobs(model, tok, pairs: list[tuple[Any, Any]], batch_size: int = 32) -> list[tuple[float, int]]:
    """(sum of log-probs, tokens) of each completion given its prompt, under `model` (teacher-forced)."""

    from rlft.evaluate import render_prompt
    from rlft.reward_model.implicit import sequence_logps

    seqs = [(tok(render_prompt(tok, prompt), add_special_tokens=False)["input_ids"],
             tok(_text(completion), add_special_tokens=False)["input_ids"] or [tok.eos_token_id])
            for prompt, completion in pairs]
    was_training = model.training
    model.eval()
    try:
        sums = sequence_logps(model, seqs, tok.pad_token_id if tok.pad_token_id is not None else 0, batch_size)
    finally:
        if was_training:
            model.train()
    return [(s, len(c)) for s, (_, c) in zip(sums, seqs)]


def _share(metric: str, wins: list[bool], extra: dict | None = None) -> Measure:
    n = len(wins)
    p = sum(wins) / n if n else 0.0
    return Measure(metric, p, binomial_stderr(p, n), n, extra or {}, [], [float(w) for w in wins])


def measure(kind: str, model, tok, rows: list[dict], *, scorer: Callable | None = None, max_new_tokens: int = 32,
            reward_model: bool = False, tools: Any = None) -> Measure:
    """The honest metric of `kind` on held-out `rows` (plain dicts) for `model` (see the module docstring).
    A run that trains a LoRA over a CPU bf16 base is checked on its fp32 base weights, the ones `rlft eval`, merge
    and export serve (rlft.speed.served); where that copy is not kept, a model with bf16 and fp32 weights
    runs under bf16 autocast, as the trainer runs it."""
    import contextlib

    import torch

    from rlft import speed

    with speed.served_weights(model) as not_served:
        dtypes = {p.dtype for p in model.parameters()}
        device = next(model.parameters()).device.type
        mixed = not_served and torch.bfloat16 in dtypes and len(dtypes) > 1
        with torch.autocast(device_type=device, dtype=torch.bfloat16) if mixed else contextlib.nullcontext():
            if tools is not None:
                return _episodes(model, tok, rows, tools, scorer, max_new_tokens)
            return _measure(kind, model, tok, rows, scorer=scorer, max_new_tokens=max_new_tokens,
                            reward_model=reward_model)


def _episodes(model, tok, rows: list[dict], tools, scorer: Callable | None, max_new_tokens: int) -> Measure:
    """A tool run's check: task success of whole greedy episodes with the tools (rlft.episodes), scored as in
    training; pass_at_1 is that success (the reward-hacking alarm reads it), tool use and errors go beside it."""
    from rlft.episodes import score_episodes, summarize

    episodes = score_episodes(model, tok, rows, tools, scorer, max_new_tokens)
    wins = [e["success"] for e in episodes]
    s = summarize(episodes)
    m = _share("task_success", wins, {"pass_at_1": s["heldout_task_success"],
                                      "mean_reward": s["heldout_mean_reward"],
                                      "tool_use": s["heldout_tool_use"],
                                      "tool_errors_per_episode": s["heldout_tool_errors_per_episode"]})
    m.samples = [{"prompt": e["prompt"], "completion": _episode_text(e["completion"]), "reward": e["reward"]}
                 for e in episodes]
    return m


def _episode_text(completion: list) -> str:
    """An episode's messages as one line: tool calls as name(arguments), tool results after `->`."""
    parts = []
    for m in completion:
        for c in m.get("tool_calls") or []:
            fn = c.get("function") or {}
            parts.append(f"{fn.get('name')}({fn.get('arguments')})")
        if m.get("role") == "tool":
            parts.append(f"-> {m.get('content')}")
        elif m.get("content"):
            parts.append(str(m["content"]))
    return " ".join(parts)


def _measure(kind: str, model, tok, rows: list[dict], *, scorer: Callable | None, max_new_tokens: int,
             reward_model: bool) -> Measure:
    from rlft.evaluate import evaluate_rows, exact_match

    metric = metric_for(kind, rows)
    if kind == "pairs" and reward_model:
        from rlft.reward_model.scoring import score

        prompts = [r["prompt"] for r in rows]
        chosen, rejected = score(model, tok, prompts, [r["chosen"] for r in rows]), score(
            model, tok, prompts, [r["rejected"] for r in rows])
        return _share("pair_accuracy", [c > r for c, r in zip(chosen, rejected)])
    if metric == "pass_at_1":
        scored = rows if kind in ("verifiable", "prompts") else gold_rows(kind, rows)
        result = evaluate_rows(model, tok, scored, scorer=scorer or exact_match, max_new_tokens=max_new_tokens)
        m = Measure("pass_at_1", result.pass_at_1, binomial_stderr(result.pass_at_1, result.n), result.n,
                    {"mean_reward": result.mean_reward}, result.samples,
                    [float(x["reward"] >= 1.0) for x in result.samples])
        if kind in ("verifiable", "prompts"):
            m.extra["pass_at_1"] = result.pass_at_1  # the reward-hacking alarm reads heldout/pass_at_1
        return m
    if kind == "pairs":
        lp = completion_logprobs(model, tok, [(r["prompt"], r["chosen"]) for r in rows]
                                 + [(r["prompt"], r["rejected"]) for r in rows])
        n = len(rows)
        return _share(metric, [lp[i][0] > lp[n + i][0] for i in range(n)])
    if kind == "thumbs":
        lp = completion_logprobs(model, tok, [(r["prompt"], r["completion"]) for r in rows])
        mean = [s / max(t, 1) for s, t in lp]
        good = [(r["prompt"], m) for r, m in zip(rows, mean) if r.get("label") is True]
        bad = [(r["prompt"], m) for r, m in zip(rows, mean) if r.get("label") is not True]
        same = [g > b for pg, g in good for pb, b in bad if str(pg) == str(pb)]
        return _share(metric, same or [g > b for _, g in good for _, b in bad])
    # demonstrations: token loss of the completions (prompt/completion rows, or messages ending in the answer)
    pairs = []
    for r in rows:
        if "messages" in r:
            pairs.append((r["messages"][:-1], r["messages"][-1]))
        else:
            pairs.append((r["prompt"], r["completion"]))
    lp = completion_logprobs(model, tok, pairs)
    losses = [-s / max(t, 1) for s, t in lp]
    n = len(losses)
    mean = sum(losses) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in losses) / max(n - 1, 1))
    return Measure("neg_token_loss", -mean, sd / math.sqrt(n), n, {"token_loss": mean}, [], [-x for x in losses])
