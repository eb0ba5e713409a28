"""Generation and held-out evaluation shared by `rlft eval`, pre-flight and the RL methods.

Prompts are rendered the way the trainers render them: a string prompt is used as is (TRL's
non-conversational format; `rlft.data.wrap_as_chat` makes it a user message), a message list goes through the
tokenizer's chat template with the generation prompt added. Generation stops at eos or the template's
end-of-turn token (rlft.chat.templates.stop_token_ids); tokens come from rlft.speed.decode's loop (the same tokens as
`generate` when greedy; one prefill per prompt for several samples) or, for a model it does not drive, from the
model's own `generate`; completions are decoded without special tokens. Scoring is exact match against `answer`
unless a scorer (a verifier) is given.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence


def render_prompt(tok, prompt: Any) -> str:
    if isinstance(prompt, list):
        return tok.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True)
    return prompt


def generate(model, tok, prompts: Sequence[Any], **kwargs: Any) -> list[list[str]]:
    """Complete each prompt; returns one list of `num_return_sequences` strings per prompt."""
    return [[text for text, _ in group] for group in generate_detailed(model, tok, prompts, **kwargs)]


def generate_detailed(model, tok, prompts: Sequence[Any], *, max_new_tokens: int = 32, do_sample: bool = False,
                      temperature: float = 1.0, num_return_sequences: int = 1,
                      batch_size: int = 64) -> list[list[tuple[str, bool]]]:
    """Like `generate`, with each completion paired with whether it ended (emitted a stop token) in budget."""
    import torch

    from rlft.chat.templates import stop_token_ids
    from rlft.speed.decode import decode

    texts = [render_prompt(tok, p) for p in prompts]
    stops = stop_token_ids(tok, model)  # eos and the chat template's end-of-turn token
    side = tok.padding_side
    tok.padding_side = "left"
    model_was_training = model.training
    model.eval()
    out: list[list[tuple[str, bool]]] = []
    device = next(model.parameters()).device
    try:
        for start in range(0, len(texts), batch_size):
            batch = tok(texts[start:start + batch_size], return_tensors="pt", padding=True,
                        add_special_tokens=False).to(device)
            if num_return_sequences > 1:  # each prompt repeated, as generate would; rlft.speed.decode prefills it once
                batch = {k: v.repeat_interleave(num_return_sequences, dim=0) for k, v in batch.items()}
            gen_kwargs: dict[str, Any] = dict(max_new_tokens=max_new_tokens, do_sample=do_sample,
                                              pad_token_id=tok.pad_token_id, eos_token_id=stops)
            if do_sample:
                gen_kwargs.update(temperature=temperature, top_k=0, top_p=1.0)
            with torch.no_grad():
                ids = decode(model, **batch, **gen_kwargs)
                if ids is None and hasattr(model, "get_base_model") and "generate" not in model.__dict__:
                    # a peft wrapper (no sampling copy answering its generate): the loop drives the model under
                    # it, whose layers carry the adapter (the same tokens; what a held-out check decodes)
                    ids = decode(model.get_base_model(), **batch, **gen_kwargs)
                if ids is None:  # a model the loop does not drive (no KV cache): its own generate
                    ids = model.generate(**batch, **gen_kwargs)
            new = ids[:, batch["input_ids"].shape[1]:]
            finished = torch.isin(new, torch.tensor(stops, device=new.device)).any(dim=1).tolist()
            decoded = tok.batch_decode(new, skip_special_tokens=True)
            for i in range(0, len(decoded), num_return_sequences):
                out.append(list(zip(decoded[i:i + num_return_sequences], finished[i:i + num_return_sequences])))
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
    sampled_pass_rate: float | None = None  # with --samples K: share of the K samples per prompt that pass
    k: int | None = None

    def as_dict(self) -> dict[str, Any]:
        out = {"n": self.n, "pass_at_1": round(self.pass_at_1, 4), "mean_reward": round(self.mean_reward, 4)}
        if self.k:
            out.update(samples=self.k, pass_rate_at_k_samples=round(self.sampled_pass_rate or 0.0, 4))
        return out


def _score(scorer: Callable, rows: list[dict], completions: list[str], repeat: int = 1) -> list[float]:
    prompts = [r["prompt"] for r in rows for _ in range(repeat)]
    gold_keys = {k for r in rows for k in r if k != "prompt"}
    gold = {k: [r.get(k) for r in rows for _ in range(repeat)] for k in gold_keys}
    return [0.0 if x is None else float(x) for x in scorer(completions, prompts=prompts, **gold)]


def evaluate_rows(model, tok, rows: list[dict], scorer: Callable = exact_match, max_new_tokens: int = 32,
                  batch_size: int = 64, samples: int = 0, temperature: float = 1.0,
                  served: bool = False) -> EvalResult:
    """Greedy pass@1 and mean reward of `model` on verifiable rows (prompt + gold fields); with
    `samples` K > 0, also the share of K sampled completions per prompt that pass. `served`: a run's model in
    training, measured on the weights users serve (rlft.speed.served: the fp32 base under a bf16-base LoRA run)."""
    if served:
        from rlft import speed

        with speed.served_weights(model):
            return evaluate_rows(model, tok, rows, scorer, max_new_tokens, batch_size, samples, temperature)
    prompts = [r["prompt"] for r in rows]
    completions = [c[0] for c in generate(model, tok, prompts, max_new_tokens=max_new_tokens,
                                          batch_size=batch_size)]
    rewards = _score(scorer, rows, completions)
    n = len(rows)
    shown = [{"prompt": p, "completion": c, "reward": r} for p, c, r in zip(prompts, completions, rewards)]
    result = EvalResult(n, sum(r >= 1.0 for r in rewards) / max(n, 1), sum(rewards) / max(n, 1), shown)
    if samples:
        groups = generate(model, tok, prompts, max_new_tokens=max_new_tokens, do_sample=True,
                          temperature=temperature, num_return_sequences=samples,
                          batch_size=max(1, batch_size // samples))
        sampled = _score(scorer, rows, [c for g in groups for c in g], repeat=samples)
        result.sampled_pass_rate = sum(r >= 1.0 for r in sampled) / max(len(sampled), 1)
        result.k = samples
    return result


def heldout_pass_at_1(model: str, heldout: str, verifier: str = "math", max_new_tokens: int = 8) -> float:
    """Greedy pass@1 of `model` on `heldout`, scored by `verifier` (a registered name or file.py:function)."""
    from rlft.data import read_rows
    from rlft.models import load_for_inference, load_tokenizer
    from rlft.quiet import quiet_libraries
    from rlft.verifiers.loading import load_verifiers

    quiet_libraries()
    scorer, _ = load_verifiers([verifier])
    tok = load_tokenizer(model)
    net = load_for_inference(model)
    return evaluate_rows(net, tok, [r.data for r in read_rows(heldout)], scorer=scorer,
                         max_new_tokens=max_new_tokens).pass_at_1
