"""Edges of rlft/methods/ppo_math.py that `make mutate` found unguarded: masked means along a dimension, the
unbiased variance of two values, the documented defaults (clip 0.2, lambda 0.95), a return variance of exactly
1, and the unknown-estimator error. Values by hand."""

from __future__ import annotations

import math

import pytest
import torch

from rlft.methods.ppo_math import (
    GB,
    clipped_policy_objective,
    clipped_value_loss,
    explained_variance,
    gae,
    kl_penalized_rewards,
    masked_mean,
    masked_var,
    policy_loss,
)


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
