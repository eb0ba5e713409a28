"""PPO's arithmetic (rlft/methods/ppo_math.py) against numbers computed by hand, the network plumbing the trainer
relies on, and the edges `make mutate` found unguarded (masked means along a dimension, the documented
defaults, the unknown-estimator error)."""

from __future__ import annotations

import math

import pytest
import torch

from rlft.methods.ppo_math import (
    GB,
    clipped_policy_objective,
    clipped_value_loss,
    estimate_memory,
    explained_variance,
    gae,
    kl_penalized_rewards,
    masked_mean,
    masked_var,
    policy_loss,
    whiten,
)


def t(*rows):
    return torch.tensor(rows, dtype=torch.float32)


# --------------------------------------------------------------------------- clipped objective


@pytest.mark.parametrize("ratio, adv, expected", [
    (1.1, 3.0, 3.3),   # inside the clip range: ratio * A = 3.3
    (1.5, 2.0, 2.4),   # A > 0, ratio above 1.2: the gain is capped at 1.2 * 2
    (0.5, -1.0, -0.8),  # A < 0, ratio below 0.8: the loss of probability counts only down to 0.8 * -1
    (1.5, -1.0, -1.5),  # A < 0, ratio above 1.2: min keeps the unclipped, more pessimistic -1.5
])
def test_clipped_objective_by_hand(ratio, adv, expected):
    got = clipped_policy_objective(torch.tensor([ratio]), torch.tensor([adv]), clip=0.2)
    assert got.item() == pytest.approx(expected)


def test_policy_loss_is_minus_the_mean_objective_with_its_clip_fraction():
    ratio, adv = t(1.1, 1.5, 0.5, 1.5), t(3.0, 2.0, -1.0, -1.0)
    loss, stats = policy_loss(torch.log(ratio), torch.zeros(4), adv, torch.ones(4), clip=0.2)
    assert loss.item() == pytest.approx(-(3.3 + 2.4 - 0.8 - 1.5) / 4)  # -0.85
    assert stats["clipfrac"].item() == pytest.approx(0.5)  # the clipped term won for rows 2 and 3
    log_r = torch.log(ratio)
    assert stats["approxkl"].item() == pytest.approx(0.5 * (log_r ** 2).mean().item())


# --------------------------------------------------------------------------- KL-penalised reward


def test_kl_penalised_reward_by_hand():
    # R = 1.0, pi = 0.6, pi_ref = 0.3, beta = 0.1: 1.0 - 0.1 * log(0.6 / 0.3) = 1 - 0.0693 = 0.931
    rewards, kl = kl_penalized_rewards(torch.tensor([1.0]), torch.log(t([0.6])), torch.log(t([0.3])),
                                       torch.ones(1, 1), kl_coef=0.1)
    assert rewards.item() == pytest.approx(0.931, abs=5e-4)
    assert rewards.item() == pytest.approx(1.0 - 0.1 * math.log(2))
    assert kl.item() == pytest.approx(math.log(2))


def test_kl_penalty_on_every_token_and_the_score_on_the_last_real_one():
    logp = torch.log(t([0.5, 0.5, 0.9, 0.9]))
    ref = torch.log(t([0.25, 0.5, 0.9, 0.1]))
    mask = t([1.0, 1.0, 1.0, 0.0])  # the last column is padding after eos
    rewards, kl = kl_penalized_rewards(torch.tensor([2.0]), logp, ref, mask, kl_coef=0.1)
    assert rewards[0].tolist() == pytest.approx([-0.1 * math.log(2), 0.0, 2.0, 0.0])
    assert kl[0, 3].item() == 0.0  # padding carries no penalty


def test_k3_estimator_is_non_negative():
    logp, ref = torch.log(t([0.6, 0.2])), torch.log(t([0.3, 0.4]))
    _, kl = kl_penalized_rewards(torch.tensor([0.0]), logp, ref, torch.ones(1, 2), 0.1, estimator="k3")
    r = torch.tensor([0.5, 2.0])
    assert kl[0].tolist() == pytest.approx((r - 1 - torch.log(r)).tolist())
    assert (kl >= 0).all()


# --------------------------------------------------------------------------- GAE


def test_gae_three_tokens_by_hand():
    # rewards [0, 0, 1] (score on the last token), values [0.5, 0.6, 0.7], gamma 1, lam 0.95:
    #   t=2: delta = 1 + 0 - 0.7 = 0.3                 A2 = 0.3
    #   t=1: delta = 0 + 0.7 - 0.6 = 0.1               A1 = 0.1 + 0.95 * 0.3 = 0.385
    #   t=0: delta = 0 + 0.6 - 0.5 = 0.1               A0 = 0.1 + 0.95 * 0.385 = 0.46575
    # returns = A + V = [0.96575, 0.985, 1.0]
    adv, ret = gae(t([0.0, 0.0, 1.0]), t([0.5, 0.6, 0.7]), torch.ones(1, 3), gamma=1.0, lam=0.95)
    assert adv[0].tolist() == pytest.approx([0.46575, 0.385, 0.3])
    assert ret[0].tolist() == pytest.approx([0.96575, 0.985, 1.0])


def test_gae_with_discount_by_hand():
    # gamma 0.9: t=2 A2 = 0.3; t=1 delta = 0.9*0.7 - 0.6 = 0.03, A1 = 0.03 + 0.855*0.3 = 0.2865;
    # t=0 delta = 0.9*0.6 - 0.5 = 0.04, A0 = 0.04 + 0.855*0.2865 = 0.2849575
    adv, _ = gae(t([0.0, 0.0, 1.0]), t([0.5, 0.6, 0.7]), torch.ones(1, 3), gamma=0.9, lam=0.95)
    assert adv[0].tolist() == pytest.approx([0.2849575, 0.2865, 0.3])


def test_gae_ignores_padding_after_the_last_token():
    # the same response followed by a padding column holding garbage: the episode ends at column 3
    adv, ret = gae(t([0.0, 0.0, 1.0, 5.0]), t([0.5, 0.6, 0.7, 9.0]), t([1.0, 1.0, 1.0, 0.0]), 1.0, 0.95)
    assert adv[0].tolist() == pytest.approx([0.46575, 0.385, 0.3, 0.0])
    assert ret[0, 3].item() == 0.0


# --------------------------------------------------------------------------- whitening


def test_whitening_by_hand():
    # [1, 2, 3, 4]: mean 2.5, unbiased variance 5/3, std 1.29099
    x = t([1.0, 2.0, 3.0, 4.0])
    got = whiten(x, torch.ones(1, 4))
    assert got[0].tolist() == pytest.approx([-1.161895, -0.387298, 0.387298, 1.161895], abs=1e-5)
    kept = whiten(x, torch.ones(1, 4), shift_mean=False)  # scale only: the mean 2.5 stays
    assert kept[0].tolist() == pytest.approx([1.338105, 2.112702, 2.887298, 3.661895], abs=1e-5)


def test_whitening_skips_padding():
    x = t([1.0, 2.0, 3.0, 4.0, 100.0])
    got = whiten(x, t([1.0, 1.0, 1.0, 1.0, 0.0]))
    assert got[0, :4].tolist() == pytest.approx([-1.161895, -0.387298, 0.387298, 1.161895], abs=1e-5)
    assert got[0, 4].item() == 0.0


# --------------------------------------------------------------------------- value loss, explained variance


def test_clipped_value_loss_by_hand():
    # row 1: V 1.0, V_old 0.5, R 1.2 -> clipped V 0.7: max((1.0-1.2)^2, (0.7-1.2)^2) = 0.25 (clipped wins)
    # row 2: V 0.6, V_old 0.5, R 0.0 -> inside the clip: 0.36 both ways
    loss, clipfrac = clipped_value_loss(t([1.0], [0.6]), t([0.5], [0.5]), t([1.2], [0.0]), torch.ones(2, 1), 0.2)
    assert loss.item() == pytest.approx(0.5 * (0.25 + 0.36) / 2)
    assert clipfrac.item() == pytest.approx(0.5)


def test_explained_variance():
    returns, mask = t([1.0, 2.0, 3.0, 6.0]), torch.ones(1, 4)
    assert explained_variance(returns.clone(), returns, mask) == pytest.approx(1.0)
    assert explained_variance(torch.full((1, 4), 3.0), returns, mask) == pytest.approx(0.0)
    assert explained_variance(-returns, returns, mask) < 0
    assert math.isnan(explained_variance(torch.zeros(1, 2), torch.ones(1, 2), torch.ones(1, 2)))


# --------------------------------------------------------------------------- memory estimate


def test_memory_estimate_full_fine_tuning_with_a_reward_model():
    est = estimate_memory(10 ** 9, 2, has_reward_model=True)  # 1B params in bf16, Adam moments in fp32
    nets = est["networks"]
    assert nets["policy"] == pytest.approx({"weights": 2e9, "grads": 2e9, "optimizer": 8e9, "total": 12e9,
                                            "params": 1e9, "trainable_params": 1e9})
    assert nets["reference"]["total"] == 2e9 and nets["value"]["total"] == 12e9 and nets["reward"]["total"] == 2e9
    assert est["total_bytes"] == 28e9
    assert est["total_gb"] == pytest.approx(28e9 / GB)


def test_memory_estimate_lora_drops_the_reference_and_full_gradients():
    est = estimate_memory(10 ** 9, 2, lora_params=10 ** 7, has_reward_model=True)
    nets = est["networks"]
    # base 2 GB + adapter 40 MB (fp32); grads 40 MB; Adam 2 x 4 bytes x 1e7 = 80 MB
    assert nets["policy"]["total"] == pytest.approx(2e9 + 4e7 + 4e7 + 8e7)
    assert nets["reference"]["total"] == 0  # the policy with its adapter disabled
    assert est["total_bytes"] == pytest.approx(2 * 2.16e9 + 2e9)


def test_memory_estimate_verifier_has_no_reward_network():
    est = estimate_memory(10 ** 6, 4, has_reward_model=False)
    assert set(est["networks"]) == {"policy", "reference", "value"}
    # fp32 policy: weights 4 MB + grads 4 MB + 2 Adam moments 8 MB; reference 4 MB; value as the policy
    assert est["total_bytes"] == 16e6 + 4e6 + 16e6


# --------------------------------------------------------------------------- the networks


def _tiny(tiny_dir, head="causal"):
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification

    if head == "score":
        return AutoModelForSequenceClassification.from_pretrained(tiny_dir, num_labels=1)
    return AutoModelForCausalLM.from_pretrained(tiny_dir)


def test_lora_reference_is_the_base_model_with_the_adapter_disabled(tiny_dir):
    from rlft.config import Section
    from rlft.methods.ppo_rollout import reference, response_logprobs
    from rlft.models import apply_lora

    torch.manual_seed(0)
    base = _tiny(tiny_dir).eval()
    policy = apply_lora(_tiny(tiny_dir), Section(r=4, alpha=8, dropout=0.0, target_modules="all-linear")).eval()
    with torch.no_grad():  # a trained adapter: B is no longer zero, so the policy differs from its base
        for name, p in policy.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5)
    ids = torch.randint(4, 100, (3, 9))
    mask = torch.ones_like(ids)
    pos = torch.arange(9).expand(3, 9)
    args = {"input_ids": ids, "attention_mask": mask, "position_ids": pos, "responses": ids[:, -4:],
            "temperature": 1.0}
    with torch.no_grad():
        want = response_logprobs(base, **args)
        with reference(policy, None) as ref:
            got = response_logprobs(ref, **args)
        tuned = response_logprobs(policy, **args)
    assert torch.allclose(got, want, atol=1e-5)
    assert not torch.allclose(tuned, want, atol=1e-3)


def test_token_values_match_the_classifier_at_the_last_token(tiny_dir):
    from rlft.methods.ppo_rollout import token_values

    torch.manual_seed(0)
    value = _tiny(tiny_dir, "score").eval()
    value.config.pad_token_id = 0
    ids = torch.randint(4, 100, (2, 6))
    ids[1, 4:] = 0  # right padding
    mask = (ids != 0).long()
    with torch.no_grad():
        per_token = token_values(value, input_ids=ids, attention_mask=mask, position_ids=torch.arange(6).expand(2, 6))
        pooled = value(input_ids=ids, attention_mask=mask).logits[:, 0]
    assert per_token.shape == (2, 6)
    assert per_token[0, 5].item() == pytest.approx(pooled[0].item(), abs=1e-5)
    assert per_token[1, 3].item() == pytest.approx(pooled[1].item(), abs=1e-5)


def test_rollout_log_probs_are_what_the_first_update_sees(tiny_dir):
    """Ratio 1 and zero KL before any update: generation, reference and training forward agree, left padding
    and eos cut-off included."""
    from rlft.config import resolve
    from rlft.methods.ppo_rollout import policy_and_value, ppo_loss, rollout
    from rlft.methods.ppo_setup import build_networks

    cfg = resolve("ppo", None, {"model.name_or_path": (str(tiny_dir), "test")},
                  ["ppo.response_length=6", "ppo.forward_batch_size=5"])
    torch.manual_seed(0)
    tok, policy, ref, value = build_networks(cfg)
    rows = [{"prompt": p, "answer": "1"} for p in ("1+1=", "12+30=", "7+7=", "99+99=", "5+0=", "3+14=")]
    rows.append({"prompt": [{"role": "user", "content": "40+2="}], "answer": "42"})  # chat: rendered by the template
    seen = {}

    def reward(completions, prompts, answer, **_):
        seen.update(prompts=prompts, answer=answer)
        return [1.0] * len(completions)

    ro = rollout(policy, value, ref, tok, rows, reward, cfg, "cpu")
    assert seen["answer"][-1] == "42" and seen["prompts"][-1] == rows[-1]["prompt"]  # the reward sees the rows
    chat = tok.decode(ro.input_ids[-1][ro.attention_mask[-1].bool()])
    assert chat.startswith("<|im_start|>user\n40+2=<|im_end|>\n<|im_start|>assistant\n")
    assert ro.input_ids.shape[0] == 7 and ro.mask.shape == ro.responses.shape
    assert ro.stats["kl"].item() == pytest.approx(0.0, abs=1e-5)
    assert ro.values.abs().max().item() == 0.0  # the value head starts at zero
    # responses that end: eos is the last real token
    ended = (ro.responses == tok.eos_token_id).any(1)
    for i in torch.nonzero(ended).flatten().tolist():
        last = int(ro.mask[i].sum().item()) - 1
        assert ro.responses[i, last].item() == tok.eos_token_id
    model = policy_and_value(policy, value).train()
    _, stats = ppo_loss(model, ro, torch.arange(7), cfg)
    assert stats["policy/approxkl"].item() < 1e-8 and stats["policy/clipfrac"].item() == 0.0
    assert stats["policy/ratio"].item() == pytest.approx(1.0, abs=1e-5)


def test_the_old_log_probs_are_the_policys_forward_not_the_samplers_logits(tiny_dir):
    """A sampler whose logits are not the policy's (a merged bf16 copy rounds the adapter): the rollout's log-probs
    and the KL still come from the policy's own forward, so the first update's ratio is 1."""
    from rlft.config import resolve
    from rlft.methods.ppo_rollout import policy_and_value, ppo_loss, response_logprobs, rollout
    from rlft.methods.ppo_setup import build_networks

    cfg = resolve("ppo", None, {"model.name_or_path": (str(tiny_dir), "test")},
                  ["ppo.response_length=6", "ppo.forward_batch_size=4"])
    torch.manual_seed(0)
    tok, policy, ref, value = build_networks(cfg)
    generate = policy.generate

    def off_sampler(*args, **kwargs):  # the tokens it samples are real; the logits it reports are off by noise
        out = generate(*args, **kwargs)
        out.logits = tuple(x + torch.randn_like(x) for x in out.logits)
        return out

    policy.generate = off_sampler
    rows = [{"prompt": q, "answer": "1"} for q in ("1+1=", "12+30=", "7+7=", "99+99=")]
    ro = rollout(policy, value, ref, tok, rows, lambda completions, **_: [1.0] * len(completions), cfg, "cpu")
    with torch.no_grad():
        want = response_logprobs(policy, ro.input_ids, ro.attention_mask, ro.position_ids, ro.responses,
                                 cfg.ppo.temperature) * ro.mask
    assert torch.allclose(ro.logprobs, want, atol=1e-6)
    assert ro.stats["kl"].item() == pytest.approx(0.0, abs=1e-5)  # a fresh adapter: the policy is its reference
    _, stats = ppo_loss(policy_and_value(policy, value).train(), ro, torch.arange(4), cfg)
    assert stats["policy/ratio"].item() == pytest.approx(1.0, abs=1e-5) and stats["policy/clipfrac"].item() == 0.0


def test_prompt_order_is_a_seeded_permutation_per_pass():
    from rlft.methods.ppo import PromptOrder

    order = PromptOrder(10, 4, 1, 0, seed=3)
    seen = [i for s in range(5) for i in order.indices(s)]  # 20 rows = two passes over 10 prompts
    assert sorted(seen[:10]) == list(range(10)) and sorted(seen[10:]) == list(range(10))
    assert seen == [i for s in range(5) for i in PromptOrder(10, 4, 1, 0, seed=3).indices(s)]
    two = [PromptOrder(10, 2, 2, r, seed=3) for r in (0, 1)]  # two processes split each global batch
    assert two[0].indices(0) + two[1].indices(0) == order.indices(0)


# --------------------------------------------------------------------------- edges from make mutate


def test_masked_mean_along_a_dimension_and_of_an_empty_row():
    x = torch.tensor([[1.0, 3.0, 100.0], [4.0, 100.0, 100.0], [7.0, 7.0, 7.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0], [0, 0, 0]])  # an integer mask is fine
    assert masked_mean(x, mask, dim=1).tolist() == [2.0, 4.0, 0.0]  # the empty row is 0, not NaN
    assert masked_mean(x, mask).item() == pytest.approx(8.0 / 3)
    assert masked_mean(torch.tensor([5.0]), torch.tensor([0.0])).item() == 0.0


def test_unbiased_variance_of_two_values():
    x, mask = torch.tensor([[1.0, 3.0]]), torch.ones(1, 2)
    assert masked_var(x, mask).item() == pytest.approx(2.0)  # ((1-2)^2 + (3-2)^2) / (2 - 1)
    assert masked_var(x, mask, unbiased=False).item() == pytest.approx(1.0)
    assert masked_var(torch.tensor([[4.0]]), torch.ones(1, 1)).item() == 0.0  # one value: no n - 1 correction


def test_documented_defaults():
    ratio, adv = torch.tensor([1.5]), torch.tensor([2.0])
    assert clipped_policy_objective(ratio, adv).item() == pytest.approx(2.4)  # clip 0.2: 1.2 x 2
    loss, stats = policy_loss(torch.log(ratio), torch.zeros(1), adv, torch.ones(1))
    assert loss.item() == pytest.approx(-2.4) and stats["clipfrac"].item() == 1.0
    vloss, vclip = clipped_value_loss(torch.tensor([1.0]), torch.tensor([0.0]), torch.tensor([0.0]), torch.ones(1))
    assert vloss.item() == pytest.approx(0.5) and vclip.item() == 0.0  # max(1^2, 0.2^2) / 2
    vloss, vclip = clipped_value_loss(torch.tensor([-1.0]), torch.tensor([0.0]), torch.tensor([-1.0]), torch.ones(1))
    assert vloss.item() == pytest.approx(0.5 * 0.8 ** 2) and vclip.item() == 1.0  # clipped at -0.2 from below
    vloss, vclip = clipped_value_loss(torch.tensor([1.0]), torch.tensor([0.0]), torch.tensor([1.0]), torch.ones(1))
    assert vloss.item() == pytest.approx(0.5 * 0.8 ** 2) and vclip.item() == 1.0
    adv, _ = gae(torch.tensor([[0.0, 1.0]]), torch.zeros(1, 2), torch.ones(1, 2))  # gamma 1, lambda 0.95
    assert adv.tolist()[0] == pytest.approx([0.95, 1.0])


def test_explained_variance_when_the_returns_vary_by_exactly_one():
    returns, mask = torch.tensor([[0.0, 2.0]]), torch.ones(1, 2)  # population variance 1.0
    assert explained_variance(torch.zeros(1, 2), returns, mask) == pytest.approx(0.0)
    assert explained_variance(torch.tensor([[0.0, 1.0]]), returns, mask) == pytest.approx(0.75)  # 1 - 0.25 / 1
    assert math.isnan(explained_variance(torch.zeros(1, 2), torch.full((1, 2), 5.0), mask))


def test_unknown_kl_estimator_names_the_choices():
    with pytest.raises(ValueError, match=r"unknown KL estimator 'k2' \(k1 or k3\)"):
        kl_penalized_rewards(torch.zeros(1), torch.zeros(1, 1), torch.zeros(1, 1), torch.ones(1, 1), 0.1, "k2")


def test_policy_loss_clips_at_the_range_it_is_given():
    ratio, adv = torch.tensor([1.5]), torch.tensor([2.0])
    loss, stats = policy_loss(torch.log(ratio), torch.zeros(1), adv, torch.ones(1), clip=0.6)
    assert loss.item() == pytest.approx(-3.0) and stats["clipfrac"].item() == 0.0  # 1.5 is inside [0.4, 1.6]


def test_whitening_a_constant_gives_zeros_not_nan():
    from rlft.methods.ppo_math import whiten

    assert whiten(torch.full((1, 3), 2.0), torch.ones(1, 3)).tolist() == [[0.0, 0.0, 0.0]]


def test_gae_on_one_token_responses():
    adv, ret = gae(torch.tensor([[1.0], [0.0]]), torch.tensor([[0.25], [0.5]]), torch.ones(2, 1))
    assert adv.flatten().tolist() == [0.75, -0.5] and ret.flatten().tolist() == [1.0, 0.0]


def test_memory_estimate_counts_a_reward_model_unless_told_otherwise():
    from rlft.methods.ppo_math import estimate_memory

    assert "reward" in estimate_memory(1000, 4)["networks"]


def test_small_estimates_print_in_megabytes():
    from rlft.methods.ppo_math import estimate_memory, format_memory

    # 668,750 fp32 parameters: 16 bytes each in the policy = 10,700,000 bytes, just under GB / 100 (10.74 MB)
    lines = format_memory(estimate_memory(668_750, 4, has_reward_model=False)).splitlines()
    assert lines[0] == ("estimated memory of the PPO networks (weights + grads + Adam, before activations): "
                        f"{(16 + 4 + 16) * 668_750 / GB:.3g} GB")
    assert lines[1].startswith("  policy: 10.2 MB = weights 2.55 MB + grads 2.55 MB + Adam 5.1 MB")
    lora = format_memory(estimate_memory(10 ** 6, 4, lora_params=100, has_reward_model=False)).splitlines()
    assert [line.split(":")[0].strip() for line in lora[1:]] == ["policy", "reference", "value"]
