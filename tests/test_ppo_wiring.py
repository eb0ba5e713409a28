"""PPO wiring on the tiny model, one rollout and one update at a time (seconds each): the advantage's sign
reaches the policy, the clip binds at ppo.cliprange, the reference stays the frozen starting model (full
model and LoRA), and the memory estimate counts the model's real parameters.

Each test fails when the behaviour it names breaks (checked by applying each of these mutations to a copy of
the code: advantage sign flipped in ppo_loss, a huge clip range instead of cliprange, the policy as its
own reference, the memory estimate replaced by a constant)."""

from __future__ import annotations

import json

import pytest
from helpers import DATA

from rlft.config import resolve
from rlft.methods import ppo_rollout, ppo_setup

PROMPTS = DATA / "arith/grpo_prompts.jsonl"
ROWS = [json.loads(line) for line in PROMPTS.read_text().splitlines()[:4]]


def ppo_cfg(tmp_path, *sets: str):
    """The tiny model, 4 prompts a batch, one epoch of one minibatch, no dropout anywhere."""
    base = ["ppo.verifiers=[math]", "train.per_device_train_batch_size=4", "ppo.response_length=6",
            "ppo.num_ppo_epochs=1", "ppo.num_mini_batches=1", "model.lora.dropout=0.0", "model.dtype=float32",
            f"train.output_dir={tmp_path / 'out'}"]
    return resolve("ppo", None, {}, base + list(sets), check_trl=False)


def constant_reward(completions, **_):
    return [1.0] * len(completions)


def networks_and_rollout(cfg, seed: int = 0):
    import torch

    torch.manual_seed(seed)
    tok, policy, ref, value = ppo_setup.build_networks(cfg)
    r = ppo_rollout
    ro = r.rollout(policy, value, ref, tok, ROWS, constant_reward, cfg, "cpu")
    return tok, policy, ref, value, ro


def logprobs(model, ro, temperature: float = 1.0):
    import torch

    with torch.no_grad():
        lp = ppo_rollout.response_logprobs(model, ro.input_ids, ro.attention_mask, ro.position_ids, ro.responses,
                                             temperature)
    return lp * ro.mask


def one_update(policy, value, ro, cfg, lr: float):
    """One call of the real `update` (one AdamW step here) on the rollout as given."""
    import torch
    from accelerate import Accelerator

    r = ppo_rollout
    model = r.policy_and_value(policy, value)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    return r.update(model, optimizer, Accelerator(cpu=True), ro, cfg, torch.Generator().manual_seed(0))


# --------------------------------------------------------------------------- the advantage's sign


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_one_update_moves_log_probs_in_the_direction_of_the_advantage(tmp_path, tiny_dir, sign):
    """A positive advantage makes the sampled tokens more likely, a negative one less likely."""
    cfg = ppo_cfg(tmp_path)
    _, policy, _, value, ro = networks_and_rollout(cfg)
    assert torch_allclose(logprobs(policy, ro), ro.logprobs)  # the rollout's log-probs are the policy's
    ro.advantages = sign * ro.mask  # every real token: advantage +1 (or -1)
    one_update(policy, value, ro, cfg, lr=1e-3)
    moved = ((logprobs(policy, ro) - ro.logprobs) * ro.mask).sum(1)
    assert ((moved * sign) > 0).all(), moved  # each response's log-prob moved with the sign, none against it


def torch_allclose(a, b) -> bool:
    import torch

    return torch.allclose(a, b, atol=1e-4)


# --------------------------------------------------------------------------- the clip


def clip_case(tmp_path, cliprange: float):
    """Rollout log-probs set 1 nat below (row 0, advantage +1) and above (row 1, advantage -1) the policy's:
    ratios e and 1/e, outside [0.8, 1.2] and inside [-1, 3]. Returns (clipfrac, policy gradient norm)."""
    import torch

    # cliprange_value far from cliprange: passing one for the other changes the outcome
    cfg = ppo_cfg(tmp_path, f"ppo.cliprange={cliprange}", "ppo.cliprange_value=5.0")
    _, policy, _, value, ro = networks_and_rollout(cfg)
    sign = torch.tensor([1.0, -1.0, 1.0, -1.0])[:, None]
    ro.logprobs = (ro.logprobs - sign) * ro.mask
    ro.advantages = sign * ro.mask
    r = ppo_rollout
    model = r.policy_and_value(policy, value)
    loss, stats = r.ppo_loss(model, ro, torch.arange(4), cfg)
    loss.backward()
    grad = sum(float(p.grad.abs().sum()) for p in policy.parameters() if p.grad is not None)
    return float(stats["policy/clipfrac"]), float(stats["policy/ratio"]), grad


def test_the_clip_binds_at_the_configured_cliprange(tmp_path, tiny_dir):
    clipfrac, _, grad = clip_case(tmp_path, 0.2)
    assert clipfrac == 1.0  # every token outside [0.8, 1.2] on the side its advantage pushes: all clipped
    assert grad == 0.0  # a clipped token gives the policy no gradient


def test_a_wider_cliprange_lets_the_same_tokens_through(tmp_path, tiny_dir):
    clipfrac, ratio, grad = clip_case(tmp_path, 2.0)
    assert clipfrac == 0.0 and grad > 0.0
    assert ratio == pytest.approx((2.718281828 + 1 / 2.718281828) / 2, rel=1e-3)  # mean of e and 1/e


# --------------------------------------------------------------------------- the reference


def snapshot(model) -> dict:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def test_full_model_reference_is_a_frozen_copy_and_kl_grows_once_the_policy_moves(tmp_path, tiny_dir):
    import torch
    from transformers import AutoModelForCausalLM

    cfg = ppo_cfg(tmp_path)
    _, policy, ref, value, ro = networks_and_rollout(cfg)
    assert ref is not None and ref is not policy
    policy_storage = {p.data_ptr() for p in policy.parameters()}
    assert not any(p.data_ptr() in policy_storage for p in ref.parameters())  # no shared weights
    assert not any(p.requires_grad for p in ref.parameters())
    assert ro.stats["kl"] == pytest.approx(0.0, abs=1e-5)  # first rollout: policy == reference
    frozen = snapshot(ref)
    ro.advantages = ro.mask.clone()
    one_update(policy, value, ro, cfg, lr=1e-2)
    assert all(torch.equal(frozen[k], v) for k, v in ref.state_dict().items())  # the update left it alone

    torch.manual_seed(1)
    ro2 = ppo_rollout.rollout(policy, value, ref, tok_of(cfg), ROWS, constant_reward, cfg, "cpu")
    assert float(ro2.stats["kl"]) > 1e-3, ro2.stats["kl"]
    # the reference log-probs are the starting model's, not the policy's
    start = AutoModelForCausalLM.from_pretrained(tiny_dir, dtype=torch.float32)
    assert torch_allclose(ro2.ref_logprobs, logprobs(start, ro2))
    assert not torch_allclose(ro2.ref_logprobs, logprobs(policy, ro2))


def tok_of(cfg):
    from rlft.models import load_tokenizer

    return load_tokenizer(cfg.model.name_or_path)


def test_lora_reference_is_the_policy_with_its_adapter_disabled(tmp_path, tiny_dir):
    import torch
    from transformers import AutoModelForCausalLM

    cfg = ppo_cfg(tmp_path, "model.lora.enabled=true", "model.lora.r=4")
    _, policy, ref, value, ro = networks_and_rollout(cfg)
    assert ref is None  # no second base model in memory
    start = AutoModelForCausalLM.from_pretrained(tiny_dir, dtype=torch.float32)
    n_base = sum(p.numel() for p in start.parameters())
    n_policy = sum(p.numel() for p in policy.parameters())
    assert n_base < n_policy < 1.2 * n_base  # base + a rank-4 adapter, not two copies of the base
    base_weights = {k: v.clone() for k, v in snapshot(policy.get_base_model()).items() if "lora_" not in k}
    ro.advantages = ro.mask.clone()
    one_update(policy, value, ro, cfg, lr=1e-2)
    after = snapshot(policy.get_base_model())
    assert all(torch.equal(v, after[k]) for k, v in base_weights.items())  # only the adapter trained

    torch.manual_seed(1)
    ro2 = ppo_rollout.rollout(policy, value, None, tok_of(cfg), ROWS, constant_reward, cfg, "cpu")
    assert float(ro2.stats["kl"]) > 1e-4, ro2.stats["kl"]
    assert torch_allclose(ro2.ref_logprobs, logprobs(start, ro2))  # adapter off == the starting model
    assert not torch_allclose(logprobs(policy, ro2), logprobs(start, ro2))  # and the adapter is back on after


# --------------------------------------------------------------------------- the memory estimate


def test_parameter_counts_are_the_loaded_models(tmp_path, tiny_dir):
    """n_params, value_params and lora_params equal what transformers and peft actually build."""
    import torch
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification

    from rlft.models import apply_lora

    cfg = ppo_cfg(tmp_path, "model.lora.enabled=true", "model.lora.r=4")
    counts = ppo_setup.param_counts(cfg)
    policy = AutoModelForCausalLM.from_pretrained(tiny_dir, dtype=torch.float32)
    value = AutoModelForSequenceClassification.from_pretrained(tiny_dir, num_labels=1)
    assert counts["n_params"] == sum(p.numel() for p in policy.parameters())
    assert counts["value_params"] == sum(p.numel() for p in value.parameters())
    adapter = apply_lora(policy, cfg.model.lora)
    assert counts["lora_params"] == sum(p.numel() for p in adapter.parameters() if p.requires_grad)
    assert counts["dtype_bytes"] == 4
    four_bit = ppo_setup.param_counts(ppo_cfg(tmp_path, "model.lora.enabled=true", "model.load_in_4bit=true"))
    assert four_bit["dtype_bytes"] == 0.5 and four_bit["n_params"] == counts["n_params"]


def test_memory_estimate_is_full_lora_and_4bit_arithmetic_on_the_real_count(tmp_path, tiny_dir):
    from rich.console import Console

    s = ppo_setup
    full_cfg = ppo_cfg(tmp_path)
    counts = s.param_counts(full_cfg)
    n, v = counts["n_params"], counts["value_params"]
    full = s.memory_check(full_cfg, Console(quiet=True))
    # fp32, all trainable: policy and value 4 (weights) + 4 (grads) + 8 (Adam) bytes a parameter, reference 4
    assert full["total_bytes"] == 16 * n + 4 * n + 16 * v
    lora_cfg = ppo_cfg(tmp_path, "model.lora.enabled=true", "model.lora.r=4")
    lora = s.memory_check(lora_cfg, Console(quiet=True))
    adapter = s.param_counts(lora_cfg)["lora_params"]
    # LoRA: frozen fp32 base weights, adapter weights + grads + Adam (4 + 4 + 8 bytes), no reference
    assert lora["total_bytes"] == 4 * n + 4 * v + 2 * 16 * adapter
    q_cfg = ppo_cfg(tmp_path, "model.lora.enabled=true", "model.lora.r=4", "model.load_in_4bit=true")
    q = s.memory_check(q_cfg, Console(quiet=True))
    assert q["total_bytes"] == 0.5 * n + 0.5 * v + 2 * 16 * adapter
    assert full["total_bytes"] > lora["total_bytes"] > q["total_bytes"]


QWEN05_CONFIG = {  # Qwen/Qwen2.5-0.5B-Instruct's config.json, shape fields only (no weights are read)
    "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 896, "intermediate_size": 4864,
    "num_hidden_layers": 24, "num_attention_heads": 14, "num_key_value_heads": 2, "vocab_size": 151936,
    "tie_word_embeddings": True, "max_position_embeddings": 32768, "rms_norm_eps": 1e-6, "hidden_act": "silu",
    "torch_dtype": "bfloat16",
}
# Its parameters by hand: embedding 151936 x 896 = 136,134,656; per layer q 896x896+896, k and v 896x128+128
# each (2 KV heads x 64), o 896x896, MLP 3 x 896 x 4864, two norms 2 x 896 = 14,912,384; x 24 layers
# = 357,897,216; final norm 896. Total 494,032,768 (the model card's 0.49B).
QWEN05_PARAMS = 494_032_768


def test_a_half_billion_model_is_refused_at_16_gb_in_full_fp32_and_fits_with_lora(cli, tmp_path, tiny_dir):
    import shutil

    from rich.console import Console

    model = tmp_path / "qwen05"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(QWEN05_CONFIG))
    # a tokenizer and a (shard-less) weights index, so the folder passes the checks made before the estimate:
    # the estimate reads config.json alone, and the run is refused before any weight would be loaded
    for f in tiny_dir.iterdir():
        if f.name.startswith(("tokenizer", "special_tokens", "chat_template")):
            shutil.copy(f, model / f.name)
    (model / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": {}}))
    s = ppo_setup
    cfg = ppo_cfg(tmp_path, f"model.name_or_path={model}")
    counts = s.param_counts(cfg)
    assert counts["n_params"] == QWEN05_PARAMS
    assert counts["value_params"] == QWEN05_PARAMS + 896  # the 896 -> 1 score head instead of the tied LM head
    # fp32: 20 bytes a policy parameter (with its reference) + 16 a value parameter = 16.56 GiB
    expected_gb = (20 * QWEN05_PARAMS + 16 * (QWEN05_PARAMS + 896)) / 1024 ** 3
    out = tmp_path / "never"
    r = cli("ppo", "--prompts", PROMPTS, "--verifier", "math", "--model", model, "--set", "model.dtype=float32",
            "--max-memory", "16", "-o", out)
    assert r.code == 2, r.text
    assert f"estimated PPO memory {expected_gb:.3g} GB exceeds --max-memory 16 GB" in r.err
    assert not out.exists()
    # just above the estimate it passes; with LoRA (r 16) it is a fraction of the limit
    assert s.memory_check(ppo_cfg(tmp_path, f"model.name_or_path={model}", "ppo.max_memory_gb=16.6"),
                          Console(quiet=True))["total_gb"] == pytest.approx(expected_gb)
    lora = s.memory_check(ppo_cfg(tmp_path, f"model.name_or_path={model}", "ppo.max_memory_gb=16",
                                  "model.lora.enabled=true"), Console(quiet=True))
    assert 3.6 < lora["total_gb"] < 4.0, lora["total_gb"]  # 8 bytes a base parameter + the adapters


# --------------------------------------------------------------------------- per-token rewards (ppo.token_rewards)


class FirstTokenReward:
    """A stand-in implicit reward model whose log-ratio is +1 on each response's first token, 0 elsewhere."""

    def __init__(self) -> None:
        self.calls = 0

    def token_rewards(self, input_ids, attention_mask, position_ids, width: int):
        import torch

        self.calls += 1
        out = torch.zeros(input_ids.shape[0], width)
        out[:, 0] = 1.0
        return out


def test_token_rewards_land_on_their_tokens_and_the_reply_score_is_their_sum(tmp_path, tiny_dir):
    """With a per-token reward the return of each token is the reward still to come (values start at 0; no KL,
    lambda 1): 1 on the first token, 0 after it. The sequence reward function is not called; the recorded
    reward of a reply is the sum of its tokens' rewards."""
    import torch

    cfg = ppo_cfg(tmp_path, "ppo.kl_coef=0.0", "ppo.lam=1.0", "ppo.missing_eos_penalty=0.5")
    torch.manual_seed(0)
    tok, policy, ref, value = ppo_setup.build_networks(cfg)
    recorded = []

    def never(*_, **__):
        raise AssertionError("the sequence reward must not be called under token rewards")

    fake = FirstTokenReward()
    ro = ppo_rollout.rollout(policy, value, ref, tok, ROWS, never, cfg, "cpu", fake,
                             lambda i, p, c, r: recorded.append(r))
    assert fake.calls >= 1 and recorded == [[1.0] * len(ROWS)]
    unended = 1.0 - ro.scores  # 0.5 where the reply never emitted eos (the penalty), else 0
    assert set(unended.tolist()) <= {0.0, 0.5} and unended.sum() > 0, ro.scores  # 6 tokens: some run past it
    # per token: +1 on the first; the missing-eos penalty, and only it, on the last real token
    rewards = torch.zeros_like(ro.returns)
    rewards[:, 0] = 1.0
    rewards[torch.arange(len(ROWS)), ro.mask.sum(1).long() - 1] -= unended
    expected = rewards.flip(1).cumsum(1).flip(1) * ro.mask  # the reward still to come
    assert torch.allclose(ro.returns, expected), (ro.returns, expected)
    # the same rollout scored once at the end (the sequence path): every token's return is the reply's score
    ro2 = ppo_rollout.rollout(policy, value, ref, tok, ROWS, constant_reward, cfg, "cpu")
    assert torch.allclose(ro2.returns, ro2.scores[:, None] * ro2.mask), ro2.returns
