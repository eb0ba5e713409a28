"""The parts of rlft bootstrap (rlft/methods/bootstrap.py) that need no run folder: which samples a round keeps,
the acceptance bands, the template check, the sampling of N completions per prompt, and the pre-flight's verdict.
Pure where they can be (doctests); `sample_rows` drives rlft's batched decode.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

# Acceptance bands of a prompt's N samples, by the share accepted (metrics.jsonl `band/...`).
BANDS = (("none", 0.0, 0.0), ("some", 1e-9, 0.5 - 1e-9), ("most", 0.5, 1.0 - 1e-9), ("all", 1.0, 1.0))


# --------------------------------------------------------------------------- pure parts (tested alone)


def normalise(text: str) -> str:
    """Whitespace collapsed and stripped: two completions equal after this are one completion."""
    return " ".join(str(text).split())


def keep_accepted(samples: list[tuple[str, bool]], rewards: list[float], threshold: float,
                  keep: int) -> list[tuple[str, float]]:
    """At most `keep` distinct accepted completions of one prompt, best first: reward >= threshold and finished
    (emitted a stop token), sorted by reward (high first) then length (short first); duplicates dropped.

    >>> keep_accepted([("a", True), ("a ", True), ("b", False), ("cc", True)], [1.0, 1.0, 1.0, 1.0], 1.0, 5)
    [('a', 1.0), ('cc', 1.0)]
    >>> keep_accepted([("x", True), ("yy", True)], [0.5, 0.9], 0.5, 1)
    [('yy', 0.9)]
    """
    seen, out = set(), []
    ranked = sorted(((r, text) for (text, done), r in zip(samples, rewards) if done and r is not None
                     and r >= threshold), key=lambda rt: (-rt[0], len(rt[1])))
    for reward, text in ranked:
        key = normalise(text)
        if not key or key in seen:
            continue
        seen.add(key)
        out.append((text.strip(), float(reward)))
        if len(out) >= keep:
            break
    return out


def bands(accept_shares: list[float]) -> dict[str, int]:
    """Prompts per acceptance band (share of a prompt's samples accepted).

    >>> bands([0.0, 0.125, 0.5, 1.0, 0.0])
    {'band/none': 2, 'band/some': 1, 'band/most': 1, 'band/all': 1}
    """
    return {f"band/{name}": sum(lo <= s <= hi for s in accept_shares) for name, lo, hi in BANDS}


def template_share(kept_texts_by_prompt: list[list[str]]) -> tuple[float, str, int]:
    """The most common kept text across prompts: (share of all kept rows, the text, prompts it was kept for)."""
    counts: Counter = Counter()
    for texts in kept_texts_by_prompt:
        for t in {normalise(t).lower() for t in texts}:
            counts[t] += 1
    total = sum(len(t) for t in kept_texts_by_prompt)
    if not counts or not total:
        return 0.0, "", 0
    text, n = counts.most_common(1)[0]
    return n / total, text, n


# --------------------------------------------------------------------------- sampling


@dataclass
class Sampled:
    """One prompt's samples this round: (text, finished) pairs and their rewards."""

    row: dict
    samples: list[tuple[str, bool]]
    rewards: list[float]


@dataclass
class Preflight:
    prompts: int
    samples: int
    temperature: float
    accepted_rate: float
    pass_rate: float
    solved_fraction: float
    truncation_rate: float
    verdict: str
    advice: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"prompts": self.prompts, "num_generations": self.samples, "temperature": self.temperature,
                "pass_rate": round(self.pass_rate, 4), "accepted_rate": round(self.accepted_rate, 4),
                "solved_fraction": round(self.solved_fraction, 4), "truncation_rate": round(self.truncation_rate, 4),
                "verdict": self.verdict, "advice": self.advice}

    def line(self) -> str:
        return (f"pass rate {self.pass_rate:.2f}, accepted {self.accepted_rate:.2f}, prompts with an accepted sample "
                f"{self.solved_fraction:.2f}, truncated {self.truncation_rate:.2f} over {self.prompts} prompts x "
                f"{self.samples} at temperature {self.temperature:g} -> {self.verdict}")


def sample_rows(net, tok, rows: list[dict], reward_fn, *, samples: int, temperature: float, max_new_tokens: int,
                batch: int, deadline: float | None = None) -> tuple[list[Sampled], int, float]:
    """N sampled completions per row, scored: (per-row results, new tokens sampled, seconds). Decoding goes through
    rlft's batched path (rlft.evaluate.generate_detailed: each prompt prefilled once for its N rows, the LoRA
    policy's plain sampling copy, rlft.speed.sampling). With a `deadline` (time.time()), stops between batches."""
    from rlft.evaluate import generate_detailed

    per_call = max(1, batch // samples)
    out: list[Sampled] = []
    tokens, began = 0, time.time()
    for start in range(0, len(rows), per_call):
        if deadline is not None and out and time.time() > deadline:
            break
        chunk = rows[start:start + per_call]
        groups = generate_detailed(net, tok, [r["prompt"] for r in chunk], max_new_tokens=max_new_tokens,
                                   do_sample=temperature > 0, temperature=temperature or 1.0,
                                   num_return_sequences=samples, batch_size=per_call)
        texts = [t for g in groups for t, _ in g]
        tokens += sum(len(ids) for ids in tok(texts, add_special_tokens=False)["input_ids"]) if texts else 0
        keys = {k for r in chunk for k in r if k != "prompt"}
        gold = {k: [r.get(k) for r in chunk for _ in range(samples)] for k in keys}
        rewards = reward_fn(texts, prompts=[r["prompt"] for r in chunk for _ in range(samples)], **gold)
        scores = [0.0 if x is None else float(x) for x in rewards]
        for i, (row, group) in enumerate(zip(chunk, groups)):
            out.append(Sampled(row, group, scores[i * samples:(i + 1) * samples]))
    return out, tokens, time.time() - began


def completion_row(prompt: Any, text: str) -> dict:
    """A kept sample as an SFT row of the prompt's shape: chat prompts get an assistant message."""
    if isinstance(prompt, list):
        return {"prompt": prompt, "completion": [{"role": "assistant", "content": text}]}
    return {"prompt": prompt, "completion": text}


def judge(done: list[Sampled], sec: dict) -> Preflight:
    """The pre-flight's verdict on round-1 samples: refuse when none is accepted (nothing to keep)."""
    n = sum(len(s.samples) for s in done) or 1
    accepted = [sum(1 for (t, f), r in zip(s.samples, s.rewards) if f and r >= sec["threshold"]) for s in done]
    passes = sum(1 for s in done for r in s.rewards if r >= 1.0)
    truncated = sum(1 for s in done for _, f in s.samples if not f)
    advice = []
    if sum(accepted) == 0:
        advice.append("fine-tune on demonstrations first (rlft sft), or use easier prompts")
        advice.append(f"sample more or hotter (--samples {sec['samples'] * 2}, --temperature "
                      f"{min(1.0, sec['temperature'] + 0.3):g})")
        if sec["threshold"] > 0.5:
            advice.append("with a partial-credit verifier, a lower --threshold")
        if truncated / n > 0.2:
            advice.append(f"{truncated / n:.0%} of samples hit the budget: raise --max-new-tokens")
    return Preflight(len(done), sec["samples"], sec["temperature"], sum(accepted) / n, passes / n,
                     sum(a > 0 for a in accepted) / max(len(done), 1), truncated / n,
                     "refuse" if sum(accepted) == 0 else "go", advice)
