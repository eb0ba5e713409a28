"""The arithmetic of PPO, as pure functions on tensors (and one on plain numbers: the memory estimate).

Shapes: `(B, T)` for per-token tensors of B responses of at most T tokens, with `mask` 1.0 on the tokens a
response really has (up to and including its eos) and 0.0 on the padding after it. Every function here is
checked against numbers computed by hand in tests/test_ppo_math.py; rlft/methods/ppo.py only wires them up.

The formulas (Schulman et al. 2017 for the clipped objective and the value clip; Ziegler et al. 2019 for the
per-token KL penalty; Schulman et al. 2016 for GAE):

  ratio_t   = pi(a_t|s_t) / pi_old(a_t|s_t)
  L_clip    = min(ratio * A, clip(ratio, 1 - eps, 1 + eps) * A)       (maximised; the loss is -L_clip)
  r_t       = -beta * (log pi_old(a_t) - log pi_ref(a_t))  [+ score on the last token, or a per-token score]
  delta_t   = r_t + gamma * V(s_{t+1}) - V(s_t),   V = 0 after the last token
  A_t       = delta_t + gamma * lam * A_{t+1}
  returns   = A + V
  L_value   = 0.5 * max((V_new - R)^2, (clip(V_new, V_old - eps_v, V_old + eps_v) - R)^2)
"""

from __future__ import annotations

import torch

# --------------------------------------------------------------------------- masked statistics


def masked_mean(x: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Mean of `x` over the positions where `mask` is 1 (all of them, or along `dim`)."""
    mask = mask.to(x.dtype)
    if dim is None:
        return (x * mask).sum() / mask.sum().clamp(min=1.0)
    return (x * mask).sum(dim) / mask.sum(dim).clamp(min=1.0)


def masked_var(x: torch.Tensor, mask: torch.Tensor, unbiased: bool = True) -> torch.Tensor:
    """Variance over the masked positions; unbiased (n - 1) as in the old TRL trainer and the PPO code base."""
    mean = masked_mean(x, mask)
    var = masked_mean((x - mean) ** 2, mask)
    n = mask.sum()
    if unbiased and n > 1:
        var = var * n / (n - 1)
    return var


def whiten(x: torch.Tensor, mask: torch.Tensor, shift_mean: bool = True, eps: float = 1e-8) -> torch.Tensor:
    """(x - mean) / std over the masked positions; padding comes back as 0.

    With `shift_mean=False` the mean is added back (only the scale changes): how rewards are whitened, so
    that whitening does not turn a reward that is good for every response into zero."""
    mean, var = masked_mean(x, mask), masked_var(x, mask)
    out = (x - mean) * torch.rsqrt(var + eps)
    if not shift_mean:
        out = out + mean
    return out * mask.to(x.dtype)


# --------------------------------------------------------------------------- rewards and advantages


def kl_penalized_rewards(score: torch.Tensor, logp: torch.Tensor, ref_logp: torch.Tensor, mask: torch.Tensor,
                         kl_coef: float, estimator: str = "k1") -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token rewards R'_t = -kl_coef * kl_t, plus the sequence's score on its last real token.

    `kl_t` estimates KL(pi || pi_ref) from the sampled token: k1 = log pi - log pi_ref (the classic penalty;
    unbiased, can be negative on one token), k3 = (r - 1) - log r with r = pi_ref / pi (unbiased, >= 0, lower
    variance; http://joschu.net/blog/kl-approx.html). Returns (rewards, kl), both (B, T) and 0 on padding.

    R=1.0, pi=0.6, pi_ref=0.3, beta=0.1 on a one-token response: 1.0 - 0.1 * log(0.6 / 0.3) = 0.931.
    """
    logr = ref_logp - logp
    if estimator == "k1":
        kl = -logr
    elif estimator == "k3":
        kl = torch.expm1(logr) - logr
    else:
        raise ValueError(f"unknown KL estimator {estimator!r} (k1 or k3)")
    m = mask.to(logp.dtype)
    kl = kl * m
    rewards = -kl_coef * kl
    last = last_index(mask)
    rewards[torch.arange(rewards.shape[0], device=rewards.device), last] += score.to(rewards.dtype)
    return rewards * m, kl


def response_mask(responses: torch.Tensor, stop_ids: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """(mask, ended) of right-padded sampled responses: mask is 1.0 up to and including the first stop token
    (eos or the chat template's end-of-turn), 0.0 after it; a response with none keeps every token. Only the
    first stop counts, so a pad id equal to eos (SmolLM2, Qwen2.5, Llama 3) is padding after it.

    >>> response_mask(torch.tensor([[5, 2, 2, 2], [5, 6, 7, 8], [2, 2, 9, 2]]), [2])[0].tolist()
    [[1.0, 1.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0], [1.0, 0.0, 0.0, 0.0]]
    """
    is_stop = torch.isin(responses, torch.tensor(stop_ids, device=responses.device))
    ended = is_stop.any(1)
    width = responses.shape[1]
    last = torch.where(ended, is_stop.int().argmax(1), torch.full_like(ended, width - 1, dtype=torch.long))
    mask = (torch.arange(width, device=responses.device)[None, :] <= last[:, None]).float()
    return mask, ended


def last_index(mask: torch.Tensor) -> torch.Tensor:
    """Index of the last real token of each row (0 for an empty row)."""
    return (mask.long().sum(1) - 1).clamp(min=0)


def gae(rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, gamma: float = 1.0,
        lam: float = 0.95) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation over each response; returns (advantages, returns), 0 on padding.

    The value after the last real token is 0 (the episode ends there), so padding never leaks into the
    advantages. rewards [0, 0, 1], values [0.5, 0.6, 0.7], gamma 1, lam 0.95 give deltas [0.1, 0.1, 0.3] and
    advantages [0.46575, 0.385, 0.3]."""
    m = mask.to(values.dtype)
    rewards, values = rewards * m, values * m
    steps = rewards.shape[1]
    last = torch.zeros_like(rewards[:, 0])
    out = [None] * steps
    for t in reversed(range(steps)):
        next_value = values[:, t + 1] if t + 1 < steps else torch.zeros_like(last)
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        last = (delta + gamma * lam * last) * m[:, t]
        out[t] = last
    advantages = torch.stack(out, dim=1)
    return advantages, (advantages + values) * m


# --------------------------------------------------------------------------- losses


def clipped_policy_objective(ratio: torch.Tensor, adv: torch.Tensor, clip: float = 0.2) -> torch.Tensor:
    """PPO's clipped surrogate, per token: min(ratio * A, clip(ratio, 1-clip, 1+clip) * A) (to maximise).

    (ratio, A) = (1.1, 3) -> 3.3; (1.5, 2) -> 2.4; (0.5, -1) -> -0.8; (1.5, -1) -> -1.5 with clip 0.2."""
    return torch.min(ratio * adv, torch.clamp(ratio, 1.0 - clip, 1.0 + clip) * adv)


def policy_loss(logp: torch.Tensor, old_logp: torch.Tensor, adv: torch.Tensor, mask: torch.Tensor,
                clip: float = 0.2) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The loss -mean(L_clip) over real tokens, with its diagnostics (no grad): clip fraction (tokens where
    the clipped term won) and approx KL 0.5 * mean((log ratio)^2) between the new and the rollout policy."""
    log_ratio = logp - old_logp
    ratio = torch.exp(log_ratio)
    objective = clipped_policy_objective(ratio, adv, clip)
    loss = -masked_mean(objective, mask)
    with torch.no_grad():
        clipped = (torch.clamp(ratio, 1.0 - clip, 1.0 + clip) * adv < ratio * adv).float()
        stats = {"clipfrac": masked_mean(clipped, mask), "approxkl": 0.5 * masked_mean(log_ratio ** 2, mask),
                 "ratio": masked_mean(ratio, mask)}
    return loss, stats


def clipped_value_loss(vpred: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor,
                       clip: float = 0.2) -> tuple[torch.Tensor, torch.Tensor]:
    """0.5 * mean(max((V - R)^2, (clip(V, V_old +- clip) - R)^2)) over real tokens, and the share of tokens
    where the clipped term was the larger (the value clip fraction)."""
    vclipped = old_values + torch.clamp(vpred - old_values, -clip, clip)
    loss_unclipped = (vpred - returns) ** 2
    loss_clipped = (vclipped - returns) ** 2
    loss = 0.5 * masked_mean(torch.max(loss_unclipped, loss_clipped), mask)
    with torch.no_grad():
        clipfrac = masked_mean((loss_clipped > loss_unclipped).float(), mask)
    return loss, clipfrac


def explained_variance(values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor) -> float:
    """1 - Var(returns - values) / Var(returns) over real tokens: 1 is a perfect critic, 0 one that predicts
    the mean, negative one worse than that. NaN when the returns do not vary."""
    var_returns = masked_var(returns, mask, unbiased=False)
    if float(var_returns) == 0.0:
        return float("nan")
    return float(1.0 - masked_var(returns - values, mask, unbiased=False) / var_returns)


# --------------------------------------------------------------------------- memory


GB = 1024 ** 3


def estimate_memory(n_params: int, dtype_bytes: float, lora_params: int = 0, has_reward_model: bool = True,
                    reward_params: int | None = None, value_params: int | None = None,
                    reward_dtype_bytes: float | None = None, trainable_bytes: float | None = None,
                    adam_bytes: float = 4.0) -> dict:
    """Bytes the four PPO networks need before activations: weights, gradients and Adam's two moments.

      policy     trainable: weights + grads + 2 Adam states per trainable parameter
      reference  frozen copy of the policy's weights; free under LoRA (the policy with its adapter off)
      value      trainable like the policy (its own backbone, initialised from the policy's weights)
      reward     frozen; absent when a verifier is the reward

    Without LoRA every weight is trainable; gradients are kept in the weights' dtype (`trainable_bytes`,
    default `dtype_bytes`) and each Adam moment in `adam_bytes` (fp32 by default, 2 x 4 = 8 bytes a
    parameter). With LoRA (`lora_params` adapter parameters per network, fp32 as peft keeps them) only the
    adapter has gradients and Adam states; the base weights are frozen. `value_params` and `reward_params`
    default to `n_params` (same backbone; the score head of one output is negligible).

    A 0.5B model in bf16, full fine-tuning, with a reward model: weights 4 x 1 GB, grads 2 x 1 GB, Adam
    2 x 4 GB = 14 GB before activations. The same with LoRA: about 3 GB.
    """
    value_params = n_params if value_params is None else value_params
    reward_params = n_params if reward_params is None else reward_params
    reward_dtype_bytes = dtype_bytes if reward_dtype_bytes is None else reward_dtype_bytes
    lora = lora_params > 0

    def trainable(n: int) -> dict:
        if lora:
            return {"weights": n * dtype_bytes + lora_params * 4.0, "grads": lora_params * 4.0,
                    "optimizer": lora_params * 2 * adam_bytes, "params": n + lora_params,
                    "trainable_params": lora_params}
        grad_bytes = dtype_bytes if trainable_bytes is None else trainable_bytes
        return {"weights": n * dtype_bytes, "grads": n * grad_bytes, "optimizer": n * 2 * adam_bytes,
                "params": n, "trainable_params": n}

    def frozen(n: int, bytes_per: float) -> dict:
        return {"weights": n * bytes_per, "grads": 0.0, "optimizer": 0.0, "params": n, "trainable_params": 0}

    nets = {"policy": trainable(n_params),
            "reference": frozen(0, dtype_bytes) if lora else frozen(n_params, dtype_bytes),
            "value": trainable(value_params)}
    if has_reward_model:
        nets["reward"] = frozen(reward_params, reward_dtype_bytes)
    for net in nets.values():
        net["total"] = net["weights"] + net["grads"] + net["optimizer"]
    total = sum(net["total"] for net in nets.values())
    return {"networks": nets, "total_bytes": total, "total_gb": total / GB,
            "weights_gb": sum(n["weights"] for n in nets.values()) / GB,
            "grads_gb": sum(n["grads"] for n in nets.values()) / GB,
            "optimizer_gb": sum(n["optimizer"] for n in nets.values()) / GB,
            "dtype_bytes": dtype_bytes, "lora": lora}


def format_memory(est: dict) -> str:
    """The estimate as a few lines for the console."""
    def gb(x: float) -> str:
        return f"{x / GB:.3g} GB" if x >= GB / 100 else f"{x / 1024 ** 2:.3g} MB"

    head = "estimated memory of the PPO networks (weights + grads + Adam, before activations): "
    lines = [head + gb(est["total_bytes"])]
    for name, net in est["networks"].items():
        if name == "reference" and net["params"] == 0:
            lines.append("  reference: 0 (LoRA: the policy with its adapter disabled)")
            continue
        lines.append(f"  {name}: {gb(net['total'])} = weights {gb(net['weights'])} + grads {gb(net['grads'])} "
                     f"+ Adam {gb(net['optimizer'])} ({net['params']:,} params, {net['trainable_params']:,} "
                     f"trainable)")
    return "\n".join(lines)
