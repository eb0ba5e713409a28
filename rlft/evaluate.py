"""Generation and held-out evaluation shared by `rlft eval`, pre-flight and the RL methods.

Prompts are rendered the way the trainers render them: a string prompt is used as is (TRL's
non-conversational format), a message list goes through the tokenizer's chat template with the
generation prompt added. Scoring is exact match against `answer` unless a scorer (a verifier) is given.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

from rich.console import Console


def render_prompt(tok, prompt: Any) -> str:
    if isinstance(prompt, list):
        return tok.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True)
    return prompt


def generate(model, tok, prompts: Sequence[Any], *, max_new_tokens: int = 32, do_sample: bool = False,
             temperature: float = 1.0, num_return_sequences: int = 1, batch_size: int = 64,
             progress: Console | None = None) -> list[list[str]]:
    """Complete each prompt; returns one list of `num_return_sequences` strings per prompt."""
    import torch

    texts = [render_prompt(tok, p) for p in prompts]
    side = tok.padding_side
    tok.padding_side = "left"
    model_was_training = model.training
    model.eval()
    out: list[list[str]] = []
    device = next(model.parameters()).device
    try:
        for start in range(0, len(texts), batch_size):
            batch = tok(texts[start:start + batch_size], return_tensors="pt", padding=True,
                        add_special_tokens=False).to(device)
            gen_kwargs: dict[str, Any] = dict(max_new_tokens=max_new_tokens, do_sample=do_sample,
                                              num_return_sequences=num_return_sequences,
                                              pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
            if do_sample:
                gen_kwargs.update(temperature=temperature, top_k=0, top_p=1.0)
            with torch.no_grad():
                ids = model.generate(**batch, **gen_kwargs)
            new = ids[:, batch["input_ids"].shape[1]:]
            decoded = tok.batch_decode(new, skip_special_tokens=True)
            for i in range(0, len(decoded), num_return_sequences):
                out.append(decoded[i:i + num_return_sequences])
    finally:
        tok.padding_side = side
        if model_was_training:
            model.train()
    return out


def exact_match(completions: list[str], answer: list[Any], **_: Any) -> list[float]:
    """1.0 when the stripped completion equals the stripped answer, else 0.0 (the pre-verifier default)."""
    return [float(c.strip() == str(a).strip()) for c, a in zip(completions, answer)]


@dataclass
class EvalResult:
    n: int
    pass_at_1: float
    mean_reward: float
    samples: list[dict]

    def as_dict(self) -> dict[str, Any]:
        return {"n": self.n, "pass_at_1": round(self.pass_at_1, 4), "mean_reward": round(self.mean_reward, 4)}


def evaluate_rows(model, tok, rows: list[dict], scorer: Callable = exact_match, max_new_tokens: int = 32,
                  batch_size: int = 64) -> EvalResult:
    """Greedy pass@1 and mean reward of `model` on verifiable rows (prompt + gold fields)."""
    prompts = [r["prompt"] for r in rows]
    completions = [c[0] for c in generate(model, tok, prompts, max_new_tokens=max_new_tokens,
                                          batch_size=batch_size)]
    gold_keys = {k for r in rows for k in r if k != "prompt"}
    gold = {k: [r.get(k) for r in rows] for k in gold_keys}
    rewards = [0.0 if x is None else float(x) for x in scorer(completions, prompts=prompts, **gold)]
    n = len(rows)
    samples = [{"prompt": p, "completion": c, "reward": r} for p, c, r in zip(prompts, completions, rewards)]
    return EvalResult(n, sum(r >= 1.0 for r in rewards) / max(n, 1), sum(rewards) / max(n, 1), samples)
