"""Every field of the PPO memory estimate (rlft/methods/ppo_math.py), by hand: per network and in total, with
LoRA, distinct value/reward sizes and dtypes, and as printed. Pure arithmetic, no model (the survivors of
`make mutate` in estimate_memory were fields no test read)."""

from __future__ import annotations

import pytest

from rlft.methods.ppo_math import GB, estimate_memory, format_memory


def test_every_field_with_distinct_value_and_reward_models():
    # policy 1000 params in fp16 (2 bytes), value 900, reward 800 in fp32, grads kept in fp32 (4 bytes), Adam 4
    est = estimate_memory(1000, 2, has_reward_model=True, value_params=900, reward_params=800,
                          reward_dtype_bytes=4, trainable_bytes=4, adam_bytes=4)
    nets = est["networks"]
    assert nets["policy"] == {"weights": 2000, "grads": 4000, "optimizer": 8000, "total": 14000, "params": 1000,
                              "trainable_params": 1000}
    assert nets["reference"] == {"weights": 2000, "grads": 0.0, "optimizer": 0.0, "total": 2000, "params": 1000,
                                 "trainable_params": 0}
    assert nets["value"] == {"weights": 1800, "grads": 3600, "optimizer": 7200, "total": 12600, "params": 900,
                             "trainable_params": 900}
    assert nets["reward"] == {"weights": 3200, "grads": 0.0, "optimizer": 0.0, "total": 3200, "params": 800,
                              "trainable_params": 0}
    assert est["total_bytes"] == 14000 + 2000 + 12600 + 3200
    assert est["weights_gb"] * GB == pytest.approx(2000 + 2000 + 1800 + 3200)
    assert est["grads_gb"] * GB == pytest.approx(4000 + 3600)
    assert est["optimizer_gb"] * GB == pytest.approx(8000 + 7200)
    assert est["dtype_bytes"] == 2 and est["lora"] is False


def test_every_field_with_a_one_parameter_adapter():
    est = estimate_memory(1000, 0.5, lora_params=1, has_reward_model=False, value_params=1001)  # 4-bit base
    nets = est["networks"]
    assert est["lora"] is True and set(nets) == {"policy", "reference", "value"}
    # base weights 0.5 byte each + the adapter's fp32 weight, grad and two Adam moments (4 + 4 + 8 bytes)
    assert nets["policy"] == {"weights": 504.0, "grads": 4.0, "optimizer": 8.0, "total": 516.0, "params": 1001,
                              "trainable_params": 1}
    assert nets["reference"] == {"weights": 0.0, "grads": 0.0, "optimizer": 0.0, "total": 0.0, "params": 0,
                                 "trainable_params": 0}
    assert nets["value"]["params"] == 1002 and nets["value"]["total"] == 500.5 + 16
    assert est["total_bytes"] == 516.0 + 516.5


def test_printed_estimate_names_each_network_with_its_counts():
    text = format_memory(estimate_memory(10 ** 9, 2, has_reward_model=True))
    lines = text.splitlines()
    assert lines[0].endswith(f"{28e9 / GB:.3g} GB")
    assert lines[1] == ("  policy: 11.2 GB = weights 1.86 GB + grads 1.86 GB + Adam 7.45 GB "
                        "(1,000,000,000 params, 1,000,000,000 trainable)")
    assert lines[2].startswith("  reference: 1.86 GB") and "0 trainable" in lines[2]
    assert [line.split(":")[0].strip() for line in lines[1:]] == ["policy", "reference", "value", "reward"]
    lora = format_memory(estimate_memory(10 ** 6, 4, lora_params=100, has_reward_model=False)).splitlines()
    assert lora[2] == "  reference: 0 (LoRA: the policy with its adapter disabled)"
    assert "(1,000,100 params, 100 trainable)" in lora[1] and "MB" in lora[1]
