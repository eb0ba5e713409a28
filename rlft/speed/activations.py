"""fp32 activations between bf16 matmuls: how a CPU LoRA run over a bf16 base computes (rlft.speed.precision decides
when; rlft.models.load_model applies it after `_fp32_trainable`). Light at import: torch inside the functions."""

from __future__ import annotations

import functools
from typing import Any


def fp32_activations(model) -> bool:
    """bf16 matmuls over the frozen bf16 base, fp32 everything between them; True where applied.

    Each frozen nn.Linear casts its input to bf16, multiplies in bf16 (the CPU's bf16 units: the speed) and
    hands back fp32; embeddings hand back fp32; norm weights become fp32. So the residual stream, the norms,
    attention and the LoRA adapter's path (fp32 A and B on fp32 inputs) run in fp32, which is what autocast
    gives, without autocast's cast of every weight at every op (the weights are stored in bf16 once).
    Why: with bf16 activations rounding accumulates along the residual stream and through the backward pass,
    and LoRA learned measurably less. SmolLM2 LoRA SFT (make demo-real's 11 steps, seed 1), training loss at
    step 5 / 10: fp32 0.518 / 0.280, bf16 activations 0.593 / 0.341, fp32 activations 0.513 / 0.277; held-out
    pass@1 fp32 0.44, bf16 activations 0.32 (BENCHMARKS.md). Adapter gradients on 8 demonstrations (B ~ 1e-2):
    12.6% off fp32's with bf16 activations, 4.1% with fp32 activations. The final norm's output is cast to the LM
    head's weight dtype: bf16 in training, where the head's matmul is bf16 either way (TRL's fused head takes its
    compute dtype from it), fp32 while rlft.speed.served has the fp32 base in place for a check.
    A model holding bf16 weights in any other kind of module (e.g. GPT-2's Conv1D) is left as it was (bf16
    activations) and False returned: its ops would meet fp32 inputs they were not written for."""
    import torch

    low = torch.bfloat16
    plan: list[tuple[Any, Any]] = []
    for module in model.modules():
        if not any(p.dtype == low for p in module.parameters(recurse=False)):
            continue
        if type(module) is torch.nn.Linear:
            plan.append((module, _bf16_linear_class()))
        elif type(module) is torch.nn.Embedding:
            plan.append((module, _fp32_embedding_class()))
        elif "norm" in type(module).__name__.lower():
            plan.append((module, None))
        else:
            return False
    if not plan:
        return False
    for module, cls in plan:
        if cls is None:
            module.float()
        else:
            module.__class__ = cls
    final = _final_norm(model)
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if final is not None and head is not None and head.weight.dtype == low:
        final.register_forward_hook(lambda _m, _a, out: out.to(head.weight.dtype))  # fp32 in a served check
    return True


def _final_norm(model):
    """The norm whose output feeds the LM head (the decoder's `norm`, `final_layernorm`, `ln_f`), or None."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    decoder = base.get_decoder() if hasattr(base, "get_decoder") else None
    for name in ("norm", "final_layernorm", "ln_f", "final_norm"):
        module = getattr(decoder, name, None)
        if module is not None:
            return module
    return None


def _bf16_in_fp32_out(self, x):
    import torch
    import torch.nn.functional as F

    return F.linear(x.to(self.weight.dtype), self.weight, self.bias).to(torch.float32)


def _fp32_out_embedding(self, ids):
    import torch

    return torch.nn.Embedding.forward(self, ids).to(torch.float32)


@functools.cache
def _bf16_linear_class():
    import torch

    class LinearBf16Matmul(torch.nn.Linear):
        """A frozen bf16 nn.Linear that takes and returns fp32 and multiplies in bf16 (see `fp32_activations`).
        Same parameters and state dict as nn.Linear."""

        forward = _bf16_in_fp32_out

    LinearBf16Matmul.__module__, LinearBf16Matmul.__qualname__ = __name__, "LinearBf16Matmul"
    return LinearBf16Matmul


@functools.cache
def _fp32_embedding_class():
    import torch

    class EmbeddingFp32Out(torch.nn.Embedding):
        """A bf16 nn.Embedding whose rows come back as fp32 (see `fp32_activations`)."""

        forward = _fp32_out_embedding

    EmbeddingFp32Out.__module__, EmbeddingFp32Out.__qualname__ = __name__, "EmbeddingFp32Out"
    return EmbeddingFp32Out


def __getattr__(name: str):
    # built on first use: this module must not import torch at import time
    if name == "LinearBf16Matmul":
        return _bf16_linear_class()
    if name == "EmbeddingFp32Out":
        return _fp32_embedding_class()
    raise AttributeError(name)
