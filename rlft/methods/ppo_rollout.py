"""PPO, part 2 of 3: sampling a batch (rollout), scoring it, and the clipped PPO update on it.

The method and its departures from the paper and from TRL's old trainer are described in
rlft/methods/ppo.py; the advantage and loss arithmetic (GAE, whitening, clipped losses) is in ppo_math.py.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any

from rlft.config import RunConfig
from rlft.methods.ppo_setup import unwrap_peft

# --------------------------------------------------------------------------- networks


def token_values(value_model, **inputs):
    """Per-token values from a sequence-classification model: its score head on every hidden state."""
    m = unwrap_peft(value_model)
    backbone = getattr(m, m.base_model_prefix)
    hidden = backbone(**inputs, use_cache=False).last_hidden_state
    return m.score(hidden).squeeze(-1).float()


def policy_and_value(policy, value):
    """One nn.Module holding policy and value model, so accelerate prepares (and DDP synchronises) both."""
    import torch

    class _PolicyAndValue(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.policy = policy
            self.value = value

        def forward(self, input_ids, attention_mask, position_ids, keep: int):
            from rlft.speed.decode import last_positions

            logits = self.policy(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                                 use_cache=False, logits_to_keep=last_positions(self.policy, input_ids, keep)).logits
            values = token_values(self.value, input_ids=input_ids, attention_mask=attention_mask,
                                  position_ids=position_ids)
            return logits, values

    return _PolicyAndValue()


@contextmanager
def reference(policy, ref_model):
    """The frozen reference: a separate model, or (LoRA) the policy itself with its adapter disabled."""
    if ref_model is not None:
        yield ref_model
    else:
        with policy.disable_adapter():
            yield policy


def response_logprobs(model, input_ids, attention_mask, position_ids, responses, temperature: float):
    """Log-probs of `responses` (the last T tokens of input_ids) under `model` at `temperature`."""
    import torch

    from rlft.speed.decode import last_positions

    t = responses.shape[1]
    logits = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                   use_cache=False, logits_to_keep=last_positions(model, input_ids, t + 1)).logits[:, :-1]
    logp = torch.log_softmax(logits.float() / temperature, dim=-1)
    return logp.gather(-1, responses.unsqueeze(-1)).squeeze(-1)


# --------------------------------------------------------------------------- rollout


@dataclass
class Rollout:
    """One batch of sampled responses and everything the update needs (tensors on the device)."""

    input_ids: Any  # (B, P + T) prompt (left-padded) + response (right-padded)
    attention_mask: Any
    position_ids: Any
    responses: Any  # (B, T)
    mask: Any  # (B, T) 1.0 on real response tokens (up to and including eos)
    logprobs: Any
    ref_logprobs: Any
    values: Any
    advantages: Any
    returns: Any
    scores: Any  # (B,) reward + eos penalty
    stats: dict
    prompts: list
    completions: list


def rollout(policy, value_model, ref_model, tok, rows: list[dict], reward_fn: Callable, cfg: RunConfig,
            device, token_reward=None, record: Callable | None = None) -> Rollout:
    """Sample, score, run reference and value model, and compute advantages for one batch of rows.

    With `token_reward` (an implicit reward model, rlft.methods.ppo_setup.token_reward) each response token gets
    its log-ratio as reward and `reward_fn` is not called; a reply's reward is their sum, passed to `record`."""
    import torch

    from rlft.chat.templates import stop_token_ids
    from rlft.evaluate import render_prompt
    from rlft.methods.ppo_math import gae, kl_penalized_rewards, masked_mean, response_mask, whiten

    p = cfg.ppo
    prompts = [r["prompt"] for r in rows]
    side = tok.padding_side
    tok.padding_side = "left"
    try:
        enc = tok([render_prompt(tok, x) for x in prompts], return_tensors="pt", padding=True,
                  add_special_tokens=False).to(device)
    finally:
        tok.padding_side = side
    plen = enc["input_ids"].shape[1]
    stops, pad = stop_token_ids(tok, policy), tok.pad_token_id  # eos + the template's end-of-turn token
    chunks = []
    policy.eval()
    with torch.no_grad():
        for s in range(0, len(rows), p.forward_batch_size):
            ids, am = enc["input_ids"][s:s + p.forward_batch_size], enc["attention_mask"][s:s + p.forward_batch_size]
            out = policy.generate(input_ids=ids, attention_mask=am, do_sample=True, temperature=p.temperature,
                                  top_k=0, top_p=1.0, repetition_penalty=1.0, max_new_tokens=p.response_length,
                                  eos_token_id=stops, pad_token_id=pad, output_logits=True,
                                  return_dict_in_generate=True)
            resp = out.sequences[:, plen:]
            logp_all = torch.log_softmax(torch.stack(out.logits, 1).float() / p.temperature, dim=-1)
            entropy = -(logp_all.exp() * logp_all).sum(-1)  # logged only: the sampler's distribution
            del logp_all, out
            chunks.append((resp, entropy))
    width = max(c[0].shape[1] for c in chunks)

    def right_pad(x, value):
        return torch.nn.functional.pad(x, (0, width - x.shape[1]), value=value)

    responses = torch.cat([right_pad(c[0], pad) for c in chunks])
    entropy = torch.cat([right_pad(c[1], 0.0) for c in chunks])
    mask, ended = response_mask(responses, stops)
    # trim to the longest real response: the update never pays for padding columns
    keep = int(mask.sum(1).max().item())
    responses, entropy, mask = (x[:, :keep] for x in (responses, entropy, mask))
    responses = torch.where(mask.bool(), responses, torch.full_like(responses, pad))
    input_ids = torch.cat([enc["input_ids"], responses], 1)
    attention_mask = torch.cat([enc["attention_mask"], mask.long()], 1)
    position_ids = (attention_mask.cumsum(1) - 1).clamp(min=0)

    completions = tok.batch_decode(responses, skip_special_tokens=True)
    if token_reward is None:
        gold_keys = {k for r in rows for k in r if k != "prompt"}
        raw = reward_fn(completions=completions, prompts=prompts,
                        **{k: [r.get(k) for r in rows] for k in gold_keys})
        raw = torch.tensor([0.0 if x is None else float(x) for x in raw], device=device)

    # The old log-probs of the ratio and the KL: the policy's own forward, the one its update runs, not the
    # sampler's logits (a merged copy, bf16 over a bf16 base, rounds LoRA's small updates away), so the first
    # minibatch's ratio is 1 and the clip range measures the update alone (as TRL's PPOTrainer recomputed them)
    lp, ref_lp, vals, dense = [], [], [], []
    with torch.no_grad():
        for s in range(0, len(rows), p.forward_batch_size):
            sl = slice(s, s + p.forward_batch_size)
            args = {"input_ids": input_ids[sl], "attention_mask": attention_mask[sl],
                    "position_ids": position_ids[sl]}
            lp.append(response_logprobs(policy, **args, responses=responses[sl], temperature=p.temperature))
            with reference(policy, ref_model) as ref:
                ref_lp.append(response_logprobs(ref, **args, responses=responses[sl], temperature=p.temperature))
            vals.append(token_values(value_model, **args)[:, plen - 1:-1])
            if token_reward is not None:
                dense.append(token_reward.token_rewards(**args, width=responses.shape[1]))
    ref_logprobs = torch.cat(ref_lp) * mask
    values = torch.cat(vals) * mask
    logprobs = torch.cat(lp) * mask
    if token_reward is not None:
        dense = torch.cat(dense).to(logprobs.dtype) * mask
        raw = dense.sum(1)
        if record is not None:
            record(0, prompts, completions, raw.tolist())
    penalty = p.missing_eos_penalty * (~ended).float()
    scores = raw - penalty
    # the score on the last token; per token (token_reward), only the missing-eos penalty stays there
    rewards, kl = kl_penalized_rewards(scores if token_reward is None else -penalty, logprobs, ref_logprobs, mask,
                                       p.kl_coef, p.kl_estimator)
    if token_reward is not None:
        rewards = rewards + dense
    if p.whiten_rewards:
        rewards = whiten(rewards, mask, shift_mean=False)
    advantages, returns = gae(rewards, values, mask, p.gamma, p.lam)
    advantages = whiten(advantages, mask)
    lengths = mask.sum(1)
    logr = ref_logprobs - logprobs  # k3 = e^logr - 1 - logr >= 0: the per-token KL GRPO logs, what the alarm reads
    stats = {"reward": raw.mean(), "reward_std": raw.std() if len(rows) > 1 else raw.new_zeros(()),
             "score": scores.mean(), "kl": masked_mean(torch.expm1(logr) - logr, mask),
             "objective/kl": kl.sum(1).mean(),
             "entropy": masked_mean(entropy, mask), "non_score_reward": (-p.kl_coef * kl).sum(1).mean(),
             "eos_missing": (~ended).float().mean(), "completions/mean_length": lengths.mean(),
             "val/mean": masked_mean(values, mask)}
    return Rollout(input_ids, attention_mask, position_ids, responses, mask, logprobs, ref_logprobs, values,
                   advantages, returns, scores, stats, prompts, completions)


# --------------------------------------------------------------------------- loss and update


def ppo_loss(model, ro: Rollout, idx, cfg: RunConfig):
    """Clipped policy loss + vf_coef * clipped value loss on the rows `idx` of a rollout; (loss, stats)."""
    import torch

    from rlft.methods.ppo_math import clipped_value_loss, policy_loss

    p = cfg.ppo
    t = ro.responses.shape[1]
    logits, values = model(ro.input_ids[idx], ro.attention_mask[idx], ro.position_ids[idx], t + 1)
    logp = torch.log_softmax(logits[:, :-1].float() / p.temperature, dim=-1)
    logp = logp.gather(-1, ro.responses[idx].unsqueeze(-1)).squeeze(-1)
    mask = ro.mask[idx]
    pg_loss, pstats = policy_loss(logp, ro.logprobs[idx], ro.advantages[idx], mask, p.cliprange)
    vpred = values[:, -t - 1:-1]
    vf_loss, vf_clipfrac = clipped_value_loss(vpred, ro.values[idx], ro.returns[idx], mask, p.cliprange_value)
    loss = pg_loss + p.vf_coef * vf_loss
    stats = {"loss/policy": pg_loss.detach(), "loss/value": vf_loss.detach(), "policy/clipfrac": pstats["clipfrac"],
             "policy/approxkl": pstats["approxkl"], "policy/ratio": pstats["ratio"], "val/clipfrac": vf_clipfrac}
    return loss, stats


def update(model, optimizer, accelerator, ro: Rollout, cfg: RunConfig, generator) -> dict[str, float]:
    """`num_ppo_epochs` passes of shuffled minibatches over one rollout; the mean of each statistic."""
    import torch

    b = ro.responses.shape[0]
    mini = b // cfg.ppo.num_mini_batches
    micro = mini // cfg.train.gradient_accumulation_steps
    max_norm = cfg.train.get("max_grad_norm")  # clip only when set (the old TRL trainer never clipped)
    sums: dict[str, float] = {}
    n = 0
    model.train()
    for _ in range(cfg.ppo.num_ppo_epochs):
        order = torch.randperm(b, generator=generator).to(ro.responses.device)
        for start in range(0, b, mini):
            parts = [order[start + k:start + k + micro] for k in range(0, mini, micro)]
            for j, idx in enumerate(parts):
                sync = nullcontext() if j == len(parts) - 1 else accelerator.no_sync(model)
                with sync:
                    loss, stats = ppo_loss(model, ro, idx, cfg)
                    accelerator.backward(loss / len(parts))
                for k, v in stats.items():
                    sums[k] = sums.get(k, 0.0) + float(v)
                n += 1
            norm = accelerator.clip_grad_norm_(model.parameters(), max_norm or float("inf"))
            sums["grad_norm"] = sums.get("grad_norm", 0.0) + float(norm) * len(parts)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
    return {k: v / max(n, 1) for k, v in sums.items()}


# --------------------------------------------------------------------------- held-out check


def heldout(policy, tok, rows: list[dict], scorer: Callable, reward_fn: Callable | None, max_new_tokens: int,
            score_with_reward: bool) -> dict[str, float]:
    """Greedy pass@1 on held-out rows under the verifier; with a reward model, also its mean score on the
    same completions (reward up while pass@1 falls is reward hacking). A policy on a CPU bf16 base is checked on
    the fp32 weights users serve, as the periodic checks are (rlft.speed.served)."""
    from rlft.evaluate import evaluate_rows

    result = evaluate_rows(policy, tok, rows, scorer=scorer, max_new_tokens=max_new_tokens, served=True)
    out = {"heldout_pass_at_1": result.pass_at_1, "heldout_mean_reward": result.mean_reward}
    if score_with_reward and reward_fn is not None:
        gold = {k: [r.get(k) for r in rows] for k in {k for r in rows for k in r if k != "prompt"}}
        scores = reward_fn(completions=[s["completion"] for s in result.samples],
                           prompts=[s["prompt"] for s in result.samples], **gold)
        out["heldout_train_reward"] = sum(0.0 if s is None else float(s) for s in scores) / max(len(scores), 1)
    return out
