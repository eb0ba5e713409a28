"""PPO for language models: rlft's own trainer on transformers + peft + accelerate (TRL has none since 1.13).

What it is. Each step takes B prompts (train.per_device_train_batch_size per process) and
  1. rollout: samples one response per prompt from the policy (temperature `temperature`, no top-k/top-p, at
     most `response_length` tokens, cut after the first eos) and keeps each token's log-prob under the
     sampling distribution; scores the response with the verifier(s) or the reward model (through
     rlft.reward_scoring, the path `rlft reward` was evaluated on) and subtracts `missing_eos_penalty` from
     responses that never emitted eos; runs the frozen reference (with LoRA: the policy with its adapter
     disabled, so one base model sits in memory, not two) and the value model over the same tokens;
  2. advantages: per-token reward R'_t = -kl_coef * (log pi - log pi_ref), plus the score on the response's
     last token (its eos); GAE (gamma, lam) with the value model as the baseline, then whitening over the
     batch's tokens; returns = advantages + values;
  3. update: `num_ppo_epochs` passes over the batch in `num_mini_batches` shuffled minibatches (each split
     into train.gradient_accumulation_steps micro-batches), one AdamW step per minibatch on
     -min(ratio * A, clip(ratio, 1 +- cliprange) * A) + vf_coef * the clipped value loss (cliprange_value).
The arithmetic is in rlft/methods/ppo_math.py, checked against numbers computed by hand.

Where it departs from the paper (Schulman et al. 2017, as used for RLHF by Ziegler et al. 2019):
  - an episode is one response and an action one token; the reward arrives once, at the end, and the KL
    penalty to the reference is folded into every token's reward (Ziegler et al.), with a fixed kl_coef
    (the paper's adaptive KL controller is not implemented);
  - the advantages are whitened per batch, and gamma is 1.0 by default (episodes are a few dozen tokens);
  - the value model is a separate network (a one-output score head on its own copy of the backbone,
    initialised from the policy's weights, head zeroed) rather than a second head on the policy;
  - dropout is switched off in every network, so the rollout's log-probs are the ones the first update sees.

Where it departs from TRL's old PPOTrainer (trl <= 1.12, trl.experimental.ppo):
  - the same data as the other rlft methods: text or chat prompts with gold fields, rendered like
    GRPO renders them; no pre-tokenised `input_ids`; stopping at eos is the default, not opt-in;
  - the reward can be a verifier (any rlft verifier spec) as well as a reward model (TRL issue #3093); a
    reward model is scored through rlft.reward_scoring.score on the decoded text, so the reward model need not
    share the policy's tokenizer;
  - the score goes on the response's last real token (its eos), not one position past it, and the value is
    fitted on exactly the response's tokens (TRL's `padding_mask_p1` put both on a padding position);
  - the training forward keeps only the response's logits (`logits_to_keep`): the prompt's logits are never
    computed; responses are trimmed to the batch's longest real response before the update; no
    gc.collect() per step (with torch, transformers and a verifier's sympy loaded it took ~0.4 s a step);
  - `kl` is logged per token with the non-negative k3 estimator (as GRPO logs it; what rlft's KL alarm
    reads); `objective/kl` is TRL's figure: the penalty's estimator summed over the response;
  - held-out accuracy under a verifier is measured before and after (and every train.eval_steps), so reward
    hacking (reward-model score up, accuracy down) is visible in summary.json and raises the alarm.

Checkpoints (checkpoint-N/) hold policy, value model, optimizer, scheduler and RNG states (accelerate's
save_state) plus trainer_state.json; `--resume` continues at the same step with the same data order.
Under `accelerate launch` each process samples its own slice of the prompts and gradients are averaged (DDP);
the policy and value model are one prepared module so their gradients are synchronised together.
"""

from __future__ import annotations

import json
import math
import shutil
import signal
import time
from collections.abc import Callable
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from rlft.config import RunConfig
from rlft.errors import UserError
from rlft.methods.common import RunResult

KIND = "verifiable"
DEFAULT_LR = 3e-6  # TRL PPOConfig's default; the tiny recipe uses 1e-4
STATE_FILE = "trainer_state.json"


# --------------------------------------------------------------------------- setup (before anything loads)


def reward_function(cfg: RunConfig) -> Callable:
    """The run's reward: the verifiers, the reward model, or their sum."""
    from rlft.verifiers.loading import build_reward

    return build_reward(list(cfg.ppo.verifiers), cfg.ppo.reward_model)


def check_config(cfg: RunConfig) -> None:
    """What the schema cannot check alone; all before any data or model is read."""
    p, t = cfg.ppo, cfg.train
    if not p.verifiers and not p.reward_model:
        raise UserError("PPO needs a reward: no verifier and no reward model given",
                        "pass --verifier NAME (e.g. math) or --reward-model DIR (trained with rlft reward)")
    if p.temperature <= 0:
        raise UserError(f"ppo.temperature = {p.temperature}: PPO samples from the policy, it must be > 0",
                        "use 1.0 (the policy as it is) or a value such as 0.7")
    split = p.num_mini_batches * t.gradient_accumulation_steps
    if t.per_device_train_batch_size % split:
        raise UserError(f"train.per_device_train_batch_size = {t.per_device_train_batch_size} prompts is not a "
                        f"multiple of ppo.num_mini_batches x train.gradient_accumulation_steps = {split}",
                        "make the batch a multiple of the two (e.g. --batch-size 64 with 4 minibatches)")


def param_counts(cfg: RunConfig) -> dict[str, Any]:
    """Parameter counts of the networks from their configs alone (a `meta` model: no weights are read)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForSequenceClassification

    from rlft.models import _adapter_base, resolve_model_path, torch_dtype

    m = cfg.model
    path = resolve_model_path(m.name_or_path)
    base = _adapter_base(path) or path
    config = AutoConfig.from_pretrained(base, revision=m.revision, trust_remote_code=m.trust_remote_code)
    with torch.device("meta"):
        policy = AutoModelForCausalLM.from_config(config, trust_remote_code=m.trust_remote_code)
    n = sum(p.numel() for p in policy.parameters())
    hidden = policy.get_output_embeddings().weight.shape[1] if policy.get_output_embeddings() is not None else 0
    vocab_head = sum(p.numel() for p in policy.get_output_embeddings().parameters()) \
        if policy.get_output_embeddings() is not None and not config.get_text_config().tie_word_embeddings else 0
    out = {"n_params": n, "value_params": n - vocab_head + hidden,
           "dtype_bytes": 0.5 if m.load_in_4bit else torch.empty(0, dtype=torch_dtype(m.dtype)).element_size(),
           "lora_params": lora_param_count(policy, m.lora) if m.lora.enabled else 0}
    if cfg.ppo.reward_model:
        rpath = resolve_model_path(cfg.ppo.reward_model)
        rconfig = AutoConfig.from_pretrained(_adapter_base(rpath) or rpath)
        rconfig.num_labels = 1
        with torch.device("meta"):
            reward = AutoModelForSequenceClassification.from_config(rconfig)
        out["reward_params"] = sum(p.numel() for p in reward.parameters())
        dtype = getattr(rconfig, "dtype", None) or getattr(rconfig, "torch_dtype", None) or torch.float32
        out["reward_dtype_bytes"] = torch.empty(0, dtype=getattr(torch, dtype) if isinstance(dtype, str)
                                                else dtype).element_size()
    return out


def lora_param_count(model, lora_cfg) -> int:
    """Adapter parameters LoRA adds: r * (in + out) per targeted Linear ("all-linear": all but the output
    layer, as peft does)."""
    import torch

    targets = lora_cfg.target_modules
    out_layer = model.get_output_embeddings()
    total = 0
    for name, module in model.named_modules():
        if not isinstance(module, torch.nn.Linear) or module is out_layer:
            continue
        leaf = name.rsplit(".", 1)[-1]
        if targets == "all-linear" or (isinstance(targets, str) and leaf == targets) or \
                (isinstance(targets, list) and leaf in targets):
            total += lora_cfg.r * (module.in_features + module.out_features)
    return total


def memory_check(cfg: RunConfig, console: Console) -> dict | None:
    """Print the estimated memory of the four networks; refuse (exit 2) above ppo.max_memory_gb."""
    from rlft.methods.ppo_math import estimate_memory, format_memory

    try:
        counts = param_counts(cfg)
    except UserError:
        raise
    except Exception as exc:
        if cfg.ppo.max_memory_gb:
            raise UserError(f"cannot estimate PPO memory ({type(exc).__name__}: {str(exc).splitlines()[0]}), so "
                            f"--max-memory cannot be checked", "drop --max-memory, or make the model's "
                            "config.json readable here") from exc
        console.print(f"[yellow]memory estimate unavailable[/]: {type(exc).__name__}", highlight=False)
        return None
    est = estimate_memory(counts["n_params"], counts["dtype_bytes"], counts["lora_params"],
                          has_reward_model=bool(cfg.ppo.reward_model), reward_params=counts.get("reward_params"),
                          value_params=counts["value_params"], reward_dtype_bytes=counts.get("reward_dtype_bytes"),
                          adam_bytes=4.0 if counts["lora_params"] else max(counts["dtype_bytes"], 1.0))
    console.print(format_memory(est), highlight=False)
    limit = cfg.ppo.max_memory_gb
    if limit and est["total_gb"] > limit:
        raise UserError(f"estimated PPO memory {est['total_gb']:.3g} GB exceeds --max-memory {limit:g} GB "
                        f"(before activations)", "train a LoRA adapter (--lora: no reference copy, no full "
                        "gradients or Adam states), use bf16 weights (--set model.dtype=bfloat16), 4-bit "
                        "(--set model.load_in_4bit=true with --lora), or a smaller model")
    return est


# --------------------------------------------------------------------------- networks


def _unwrap_peft(model):
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def token_values(value_model, **inputs):
    """Per-token values from a sequence-classification model: its score head on every hidden state."""
    m = _unwrap_peft(value_model)
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
            logits = self.policy(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                                 use_cache=False, logits_to_keep=keep).logits
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

    t = responses.shape[1]
    logits = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                   use_cache=False, logits_to_keep=t + 1).logits[:, :-1]
    logp = torch.log_softmax(logits.float() / temperature, dim=-1)
    return logp.gather(-1, responses.unsqueeze(-1)).squeeze(-1)


def _no_dropout(model) -> None:
    import torch

    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0


def build_networks(cfg: RunConfig):
    """(tokenizer, policy, reference or None under LoRA, value model)."""
    import torch

    from rlft.models import load_model, load_tokenizer

    tok = load_tokenizer(cfg.model.name_or_path, cfg.model.revision, cfg.model.trust_remote_code)
    policy = load_model(cfg.model)
    lora = cfg.model.lora.enabled
    ref = None if lora else load_model(cfg.model, trainable=False, with_lora=False)
    value = load_model(cfg.model, head="score")
    head = _unwrap_peft(value).score
    if hasattr(head, "modules_to_save"):  # LoRA: peft trains a copy of the head
        head = head.modules_to_save["default"]
    with torch.no_grad():  # values start at 0: the first advantages are the (whitened) rewards
        head.weight.zero_()
        if getattr(head, "bias", None) is not None:
            head.bias.zero_()
    for m in (policy, ref, value):
        if m is not None:
            _no_dropout(m)
    checkpointing = cfg.train.gradient_checkpointing
    if checkpointing is None:  # rlft's hardware default: on GPUs, off on the CPU (it costs 15-20%)
        checkpointing = torch.cuda.is_available()
    if checkpointing:
        for m in (policy, value):
            m.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    return tok, policy, ref, value


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
            device) -> Rollout:
    """Sample, score, run reference and value model, and compute advantages for one batch of rows."""
    import torch

    from rlft.evaluate import render_prompt
    from rlft.methods.ppo_math import gae, kl_penalized_rewards, masked_mean, whiten

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
    eos, pad = tok.eos_token_id, tok.pad_token_id
    chunks = []
    policy.eval()
    with torch.no_grad():
        for s in range(0, len(rows), p.forward_batch_size):
            ids, am = enc["input_ids"][s:s + p.forward_batch_size], enc["attention_mask"][s:s + p.forward_batch_size]
            out = policy.generate(input_ids=ids, attention_mask=am, do_sample=True, temperature=p.temperature,
                                  top_k=0, top_p=1.0, repetition_penalty=1.0, max_new_tokens=p.response_length,
                                  eos_token_id=eos, pad_token_id=pad, output_logits=True,
                                  return_dict_in_generate=True)
            resp = out.sequences[:, plen:]
            logp_all = torch.log_softmax(torch.stack(out.logits, 1).float() / p.temperature, dim=-1)
            logp = logp_all.gather(-1, resp.unsqueeze(-1)).squeeze(-1)
            entropy = -(logp_all.exp() * logp_all).sum(-1)
            del logp_all, out
            chunks.append((resp, logp, entropy))
    width = max(c[0].shape[1] for c in chunks)

    def right_pad(x, value):
        return torch.nn.functional.pad(x, (0, width - x.shape[1]), value=value)

    responses = torch.cat([right_pad(c[0], pad) for c in chunks])
    logprobs = torch.cat([right_pad(c[1], 0.0) for c in chunks])
    entropy = torch.cat([right_pad(c[2], 0.0) for c in chunks])
    is_eos = responses == eos
    ended = is_eos.any(1)
    last = torch.where(ended, is_eos.int().argmax(1), torch.full_like(ended, width - 1, dtype=torch.long))
    mask = (torch.arange(width, device=device)[None, :] <= last[:, None]).float()
    # trim to the longest real response: the update never pays for padding columns
    keep = int(mask.sum(1).max().item())
    responses, logprobs, entropy, mask = (x[:, :keep] for x in (responses, logprobs, entropy, mask))
    responses = torch.where(mask.bool(), responses, torch.full_like(responses, pad))
    input_ids = torch.cat([enc["input_ids"], responses], 1)
    attention_mask = torch.cat([enc["attention_mask"], mask.long()], 1)
    position_ids = (attention_mask.cumsum(1) - 1).clamp(min=0)

    completions = tok.batch_decode(responses, skip_special_tokens=True)
    gold_keys = {k for r in rows for k in r if k != "prompt"}
    raw = reward_fn(completions=completions, prompts=prompts, **{k: [r.get(k) for r in rows] for k in gold_keys})
    raw = torch.tensor([0.0 if x is None else float(x) for x in raw], device=device)
    scores = raw - p.missing_eos_penalty * (~ended).float()

    ref_lp, vals = [], []
    with torch.no_grad():
        for s in range(0, len(rows), p.forward_batch_size):
            sl = slice(s, s + p.forward_batch_size)
            args = {"input_ids": input_ids[sl], "attention_mask": attention_mask[sl],
                    "position_ids": position_ids[sl]}
            with reference(policy, ref_model) as ref:
                ref_lp.append(response_logprobs(ref, **args, responses=responses[sl], temperature=p.temperature))
            vals.append(token_values(value_model, **args)[:, plen - 1:-1])
    ref_logprobs = torch.cat(ref_lp) * mask
    values = torch.cat(vals) * mask
    logprobs = logprobs * mask

    rewards, kl = kl_penalized_rewards(scores, logprobs, ref_logprobs, mask, p.kl_coef, p.kl_estimator)
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


# --------------------------------------------------------------------------- data order


class PromptOrder:
    """Rows for step s on process `rank`: a fresh seeded shuffle each pass over the data; the same on resume."""

    def __init__(self, n: int, batch: int, world: int, rank: int, seed: int) -> None:
        self.n, self.batch, self.world, self.rank, self.seed = n, batch, world, rank, seed
        self._perms: dict[int, list[int]] = {}

    def _perm(self, epoch: int) -> list[int]:
        if epoch not in self._perms:
            import random

            order = list(range(self.n))
            random.Random(self.seed * 1000003 + epoch).shuffle(order)
            self._perms = {epoch: order}
        return self._perms[epoch]

    def indices(self, step: int) -> list[int]:
        start = (step * self.world + self.rank) * self.batch
        return [self._perm(k // self.n)[k % self.n] for k in range(start, start + self.batch)]

    def epoch(self, step: int) -> float:
        return (step * self.world * self.batch) / self.n


# --------------------------------------------------------------------------- held-out check


def heldout(policy, tok, rows: list[dict], scorer: Callable, reward_fn: Callable | None, max_new_tokens: int,
            score_with_reward: bool) -> dict[str, float]:
    """Greedy pass@1 on held-out rows under the verifier; with a reward model, also its mean score on the
    same completions (reward up while pass@1 falls is reward hacking)."""
    from rlft.evaluate import evaluate_rows

    result = evaluate_rows(policy, tok, rows, scorer=scorer, max_new_tokens=max_new_tokens)
    out = {"heldout_pass_at_1": result.pass_at_1, "heldout_mean_reward": result.mean_reward}
    if score_with_reward and reward_fn is not None:
        gold = {k: [r.get(k) for r in rows] for k in {k for r in rows for k in r if k != "prompt"}}
        scores = reward_fn(completions=[s["completion"] for s in result.samples],
                           prompts=[s["prompt"] for s in result.samples], **gold)
        out["heldout_train_reward"] = sum(0.0 if s is None else float(s) for s in scores) / max(len(scores), 1)
    return out


# --------------------------------------------------------------------------- checkpoints


def save_checkpoint(accelerator, out: Path, step: int, state: dict, limit: int | None) -> Path:
    ckpt = out / f"checkpoint-{step}"
    accelerator.save_state(str(ckpt), safe_serialization=False)
    if accelerator.is_main_process:
        from rlft.run import write_json

        write_json(ckpt / STATE_FILE, {**state, "step": step})
        if limit:
            old = sorted((p for p in out.glob("checkpoint-*") if p.name.split("-")[-1].isdigit()),
                         key=lambda p: int(p.name.split("-")[-1]))
            for p in old[:-limit]:
                shutil.rmtree(p, ignore_errors=True)
    accelerator.wait_for_everyone()
    return ckpt


# --------------------------------------------------------------------------- the run


def _quiet() -> None:
    """rlft.quiet.quiet_libraries without importing `datasets`, which PPO never uses (~90 MB of RSS)."""
    import sys

    if "datasets" in sys.modules:
        from rlft.quiet import quiet_libraries

        quiet_libraries()
        return
    import logging
    import os
    import warnings

    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    logging.getLogger("bitsandbytes.backends.cpu.ops").setLevel(logging.ERROR)
    if os.environ.get("RLFT_DEBUG") == "1":
        return
    warnings.filterwarnings("ignore", category=UserWarning, module=r"(torch|transformers|trl|peft)\b")
    warnings.filterwarnings("ignore", category=FutureWarning)
    import transformers

    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()



def run(cfg: RunConfig, *, overwrite: bool = False, resume: bool = False, console: Console | None = None) -> RunResult:
    """Validate, estimate memory, then train; see the module docstring. Returns the run's result."""
    from rlft.data import load_split
    from rlft.monitor import Holdout, prepare_watch
    from rlft.run import (
        RunRecord,
        is_main_process,
        last_checkpoint,
        prepare_output_dir,
        process_console,
        read_json,
        versions,
        write_json,
    )
    from rlft.verifiers.loading import load_verifiers, validate_gold

    _quiet()
    console = process_console(console)  # silent on the secondary processes of a multi-process run
    check_config(cfg)
    train_rows, eval_rows = load_split(cfg.data, KIND, seed=cfg.train.seed)
    specs = list(cfg.ppo.verifiers)
    if specs:
        validate_gold(train_rows + eval_rows, specs)
    check_specs = specs or [cfg.watch.holdout_verifier]
    if eval_rows and not specs:
        validate_gold(eval_rows, check_specs)  # the held-out check scores them with watch.holdout_verifier
    watch = prepare_watch(cfg)
    if not resume and is_main_process():  # the main process alone checks, creates and writes the run folder
        prepare_output_dir(cfg.train.output_dir, overwrite=overwrite, check_only=True)
    import torch
    from accelerate import PartialState  # under `accelerate launch`: which process writes the run folder
    from accelerate.utils import parse_flag_from_env

    # Without CUDA, processes under torchrun form a gloo group only with cpu=True (else each runs alone).
    state = PartialState(cpu=parse_flag_from_env("ACCELERATE_USE_CPU") or not torch.cuda.is_available())
    memory = memory_check(cfg, console)

    out = Path(cfg.train.output_dir)
    if state.is_main_process:
        out = prepare_output_dir(cfg.train.output_dir, overwrite=overwrite, resume=resume)
    state.wait_for_everyone()
    ckpt = last_checkpoint(out) if resume else None
    prior = read_json(out / "summary.json") if resume and (out / "summary.json").exists() else {}
    if state.is_main_process:
        (out / "config.yaml").write_text(cfg.to_yaml())
        write_json(out / "versions.json", versions())
    record = RunRecord(out, cfg.method, resumed_from=str(ckpt) if ckpt else None, write=state.is_main_process)
    record.update(train_rows=len(train_rows), eval_rows=len(eval_rows), data=list(cfg.data.train),
                  memory_estimate_gb=round(memory["total_gb"], 4) if memory else None)
    # held-out rows: data.eval (scored by the run's verifiers, else watch.holdout_verifier), else watch.holdout
    heldout_rows, scorer = [r.data for r in eval_rows], None
    if heldout_rows:
        scorer = load_verifiers(check_specs)[0]
    elif watch.holdout is not None:
        heldout_rows, scorer = watch.holdout.rows, watch.holdout.scorer
    budget = cfg.ppo.heldout_max_new_tokens or cfg.ppo.response_length
    if watch.holdout is None and heldout_rows and cfg.train.eval_steps:
        watch.holdout = Holdout(heldout_rows, scorer, check_specs[0], int(cfg.train.eval_steps), budget)
    with record.closing_on_error():
        return _train(cfg, out, ckpt, prior, record, train_rows, heldout_rows, scorer, budget, watch, console)


def _train(cfg, out, ckpt, prior, record, train_rows, heldout_rows, scorer, budget, watch, console) -> RunResult:
    import torch
    from accelerate import Accelerator
    from accelerate.utils import set_seed
    from transformers import get_scheduler

    from rlft.methods.ppo_math import explained_variance
    from rlft.monitor import (
        LABELS,
        SHOWN,
        STOPPED_EXIT_CODE,
        RolloutRecorder,
        Watcher,
        alarm_state,
        progress_bar,
    )
    from rlft.report import report_and_print
    from rlft.run import Interrupt, last_checkpoint

    accelerator = Accelerator()
    set_seed(cfg.train.seed)
    main = accelerator.is_main_process
    tok, policy, ref, value = build_networks(cfg)
    model = policy_and_value(policy, value)
    params = [p for p in model.parameters() if p.requires_grad]
    t = cfg.train  # AdamW as transformers' Trainer builds it: its TrainingArguments defaults, overridable here
    optimizer = torch.optim.AdamW(params, lr=t.learning_rate or DEFAULT_LR, weight_decay=t.get("weight_decay") or 0.0,
                                  betas=(t.get("adam_beta1") or 0.9, t.get("adam_beta2") or 0.999),
                                  eps=t.get("adam_epsilon") or 1e-8)
    batch = cfg.train.per_device_train_batch_size
    world = accelerator.num_processes
    total = cfg.train.max_steps if cfg.train.max_steps > 0 else \
        max(1, math.ceil(len(train_rows) * cfg.train.num_train_epochs / (batch * world)))
    scheduler = get_scheduler(cfg.train.get("lr_scheduler_type") or "linear", optimizer,
                              num_warmup_steps=int(cfg.train.get("warmup_steps") or 0), num_training_steps=total)
    model, optimizer = accelerator.prepare(model, optimizer)
    accelerator.register_for_checkpointing(scheduler)
    if ref is not None:
        ref.to(accelerator.device)
    reward_fn = reward_function(cfg)
    for part in getattr(reward_fn, "parts", [reward_fn]):
        if hasattr(part, "load"):  # a reward model: load it once, on the training device
            part.load()[0].to(accelerator.device)
    inner = accelerator.unwrap_model(model)
    order = PromptOrder(len(train_rows), batch, world, accelerator.process_index, cfg.train.seed)
    generator = torch.Generator().manual_seed(cfg.train.seed + 7919 * accelerator.process_index)

    step, episodes, carried = 0, 0, {}
    if ckpt is not None:
        accelerator.load_state(str(ckpt))
        state = json.loads((ckpt / STATE_FILE).read_text())
        step, episodes = state["step"], state["episodes"]
        generator.set_state(torch.tensor(state["generator"], dtype=torch.uint8))
        carried = state.get("heldout_before", {})

    if ckpt is not None and main:  # a crash after the checkpoint logged steps that will run again
        _truncate_metrics(out / "metrics.jsonl", step)
    watcher = Watcher(out, console, watch)  # writes on the main process only
    recorder = RolloutRecorder()
    reward_call = recorder.wrap(reward_fn, 0, 1.0)
    watcher.recorder = recorder
    interrupt = Interrupt()
    progress = progress_bar(console) if main else None
    logging_steps = max(1, int(cfg.train.logging_steps or 1))
    save_steps = int(cfg.train.save_steps or 0)
    shown: dict[str, float] = {}

    def refresh(record_: dict) -> None:
        shown.update({k: v for k, v in record_.items() if k in SHOWN and isinstance(v, (int, float))})
        stats = "  ".join(f"{LABELS.get(k, k)} {shown[k]:.4g}" for k in SHOWN if k in shown)
        if progress is not None:
            progress.update(task, completed=step, stats=f"{stats}  {alarm_state(watcher.alarm_names)}")

    def checkpoint() -> Path:
        return save_checkpoint(accelerator, out, step, {"episodes": episodes, "heldout_before": before,
                                                        "generator": generator.get_state().tolist()},
                               cfg.train.save_total_limit)

    before = carried or prior.get("heldout_before") or {}
    if heldout_rows and not before and main:
        before = heldout(inner.policy, tok, heldout_rows, scorer, reward_fn, budget, bool(cfg.ppo.reward_model))
        console.print("held-out before: " + "  ".join(f"{k} {v:.3f}" for k, v in before.items()), highlight=False)
    record.update(heldout_before=before)
    console.print(f"[bold]rlft ppo[/]: {len(train_rows)} prompts, {total} steps x {batch * world} prompts, "
                  f"{cfg.ppo.num_ppo_epochs} epochs x {cfg.ppo.num_mini_batches} minibatches -> {out}")
    window: dict[str, list[float]] = {}
    start_time, start_step, start_episodes = time.time(), step, episodes
    status = "completed"
    try:
        if progress is not None:
            progress.start()
            task = progress.add_task("ppo", total=total, completed=step, stats=alarm_state(watcher.alarm_names))
        if watch.holdout is not None and main and step == 0:
            refresh(watcher.heldout(inner.policy, tok, 0, 0.0))
        with interrupt.installed():
            while step < total:
                rows = [train_rows[i].data for i in order.indices(step)]
                ro = rollout(inner.policy, inner.value, ref, tok, rows, reward_call, cfg, accelerator.device)
                stats = {k: float(v) for k, v in ro.stats.items()}
                stats.update(update(model, optimizer, accelerator, ro, cfg, generator))
                stats["val/explained_variance"] = explained_variance(ro.values, ro.returns, ro.mask)
                stats["learning_rate"] = scheduler.get_last_lr()[0]
                scheduler.step()
                step += 1
                episodes += len(rows) * world
                for k, v in stats.items():
                    window.setdefault(k, []).append(v)
                if step % logging_steps == 0 or step == total:
                    rec = {"step": step, "epoch": round(order.epoch(step), 4), "episodes": episodes}
                    rec.update(_reduce(accelerator, {k: sum(v) / len(v) for k, v in window.items()}))
                    rec["episodes_per_second"] = round((episodes - start_episodes) / (time.time() - start_time), 3)
                    window = {}
                    watcher.log(rec)
                    refresh(rec)
                h = watch.holdout
                if h is not None and main and (step % h.every == 0 or step == total):
                    refresh(watcher.heldout(inner.policy, tok, step, order.epoch(step)))
                if progress is not None:
                    progress.update(task, completed=step)
                stop = _any_process(accelerator, interrupt.signum is not None or watcher.stopped_by is not None)
                if stop or (save_steps and step % save_steps == 0 and step < total):
                    checkpoint()
                    if main:
                        watcher.samples(step)
                if stop:
                    status = "stopped" if watcher.stopped_by is not None else "interrupted"
                    break
    finally:
        if progress is not None and progress.live.is_started:
            progress.stop()
        watcher.flush()
    train_seconds = round(time.time() - start_time, 2)
    alarms = [a["name"] for a in watcher.fired]
    last_log = next((r for r in reversed(watcher.history) if "reward" in r), {})
    try:
        if status == "interrupted":
            record.finish("interrupted", global_step=step, signal=interrupt.signum or signal.SIGTERM,
                          checkpoint=str(last_checkpoint(out)), alarms=alarms, last_log=last_log)
            console.print(f"[yellow]interrupted[/] at step {step}; checkpoint saved. Continue with the same "
                          f"command plus --resume --output-dir {out}")
            report_and_print(out, console)
            return RunResult("interrupted", out, 128 + (interrupt.signum or signal.SIGTERM))
        if status == "stopped":
            alarm = watcher.stopped_by
            record.finish("stopped", global_step=step, stopped_by=alarm.as_dict(), alarms=alarms,
                          checkpoint=str(last_checkpoint(out)), last_log=last_log)
            console.print(f"[red]stopped[/] at step {step} by the {alarm.name} alarm (watch.on_alarm=stop); "
                          f"checkpoint saved: {last_checkpoint(out)}")
            report_and_print(out, console)
            return RunResult("stopped", out, STOPPED_EXIT_CODE)
        accelerator.wait_for_everyone()
        rate = (episodes - start_episodes) / max(train_seconds, 1e-9)
        final: dict[str, Any] = {"episodes": episodes, "episodes_per_second": round(rate, 3)}
        if main:
            inner.policy.save_pretrained(str(out))
            tok.save_pretrained(str(out))
            watcher.samples(step)
            if heldout_rows:
                after = heldout(inner.policy, tok, heldout_rows, scorer, reward_fn, budget, bool(cfg.ppo.reward_model))
                final.update(after)
                final.update({f"{k}_before": v for k, v in before.items()})
                console.print("held-out: " + "  ".join(f"{k} {before.get(k, float('nan')):.3f} -> {v:.3f}"
                                                       for k, v in after.items()), highlight=False)
        for k in ("reward", "kl", "entropy"):
            if k in last_log:
                final[f"train_{k}"] = last_log[k]
        record.finish("completed", global_step=step, train_seconds=train_seconds, final_metrics=final,
                      last_log=last_log, alarms=alarms, steps_this_run=step - start_step)
        if main:
            report_and_print(out, console)
        return RunResult("completed", out, 0, final)
    finally:
        watcher.close()


def _truncate_metrics(path: Path, step: int) -> None:
    if path.exists():
        lines = [line for line in path.read_text().splitlines()
                 if line.strip() and json.loads(line).get("step", 0) <= step]
        path.write_text("".join(line + "\n" for line in lines))


def _any_process(accelerator, flag: bool) -> bool:
    """True on every process when it is true on one (a signal or an alarm must stop all of them together)."""
    if accelerator.num_processes == 1:
        return flag
    import torch

    return bool(accelerator.reduce(torch.tensor(float(flag), device=accelerator.device), reduction="sum") > 0)


def _reduce(accelerator, stats: dict[str, float]) -> dict[str, float]:
    """Mean of each statistic over processes (a no-op on one)."""
    if accelerator.num_processes == 1:
        return {k: round(v, 6) if math.isfinite(v) else v for k, v in stats.items()}
    import torch

    keys = sorted(stats)
    t = torch.tensor([stats[k] for k in keys], device=accelerator.device)
    t = accelerator.reduce(t, reduction="mean")
    return {k: round(float(v), 6) for k, v in zip(keys, t.tolist())}
