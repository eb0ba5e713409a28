"""rlft.speed.activations and the LoRA-over-bf16-base path: bf16 matmuls, fp32 activations and adapter."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")


def test_lora_over_a_bf16_base_computes_in_bf16_with_fp32_weights(tiny_dir):
    """The adapter's matmuls run in the base's dtype (no fp32 activations), its weights and gradients stay fp32,
    and the gradients agree with peft's fp32 path to bf16 precision."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from rlft.models import _fp32_trainable

    def build(ours):
        torch.manual_seed(0)
        m = AutoModelForCausalLM.from_pretrained(tiny_dir, dtype=torch.bfloat16)
        pm = get_peft_model(m, LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", lora_dropout=0.0,
                                          init_lora_weights=False))
        if ours:
            _fp32_trainable(pm)
        else:
            for p in pm.parameters():
                if p.requires_grad:
                    p.data = p.data.float()
        return pm

    ids = torch.randint(4, 60, (4, 24), generator=torch.Generator().manual_seed(0))
    grads, dtypes = [], []
    for ours in (False, True):
        pm = build(ours)
        seen = []
        lora = next(m for n, m in pm.named_modules() if n.endswith("lora_B.default"))
        lora.register_forward_hook(lambda mod, args, out, seen=seen: seen.append(out.dtype))
        pm(input_ids=ids, labels=ids).loss.backward()
        dtypes.append(seen[0])
        grads.append(torch.cat([p.grad.flatten() for p in pm.parameters() if p.requires_grad]))
        assert all(p.dtype == torch.float32 for p in pm.parameters() if p.requires_grad)
    assert dtypes == [torch.float32, torch.bfloat16]
    rel = float((grads[1] - grads[0]).norm() / grads[0].norm())
    assert 0 < rel < 0.05, rel


def test_a_bf16_base_keeps_fp32_activations_between_bf16_matmuls(tiny_dir):
    """rlft.speed.activations.fp32_activations: over a bf16 base the residual stream is fp32, the base weights stay
    bf16, and the adapter's gradients stay within bf16 rounding of fp32's (the tiny model is too shallow to show
    the gain over bf16 activations: test_real_model.py measures it on SmolLM2)."""
    from tests.helpers import precision_gap

    gap = precision_gap(tiny_dir, torch.randint(4, 60, (8, 24), generator=torch.Generator().manual_seed(0)))
    assert gap["hidden"] == {"fp32": torch.float32, "bf16 activations": torch.bfloat16,
                             "fp32 activations": torch.float32}
    assert gap["weights"] == {"fp32": torch.float32, "bf16 activations": torch.bfloat16,
                              "fp32 activations": torch.bfloat16}
    assert gap["grad"]["fp32 activations"] < 0.02 and gap["loss"]["fp32 activations"] < 1e-3, gap
