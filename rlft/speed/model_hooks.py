"""The speed layer's hooks on a loaded model (rlft.models.load_model calls them through rlft.speed).

- `load_options(dtype)`: keyword arguments for `from_pretrained` (eager attention for CPU bf16);
- `fix_cpu_4bit`: bitsandbytes' CPU 4-bit fast path off (it repacks the weights and LoRA gradients go wrong);
- `rlft.speed.activations.fp32_activations` for a trainable LoRA over a CPU bf16 base, and the fp32 base's loader
  for its held-out checks (rlft.speed.served);
- `contiguous_head`: the LM head gets a contiguous input on the CPU.

Light at import: torch and bitsandbytes inside the functions.
"""

from __future__ import annotations


def load_options(dtype) -> dict:
    """`from_pretrained` keyword arguments the speed layer sets before the weights load."""
    if cpu_bf16(dtype):
        # torch's CPU flash-attention kernel is slow in bf16, its backward most (measured: BENCHMARKS.md);
        # short sequences lose nothing by eager.
        return {"attn_implementation": "eager"}
    return {}


def prepare(model, dtype, *, four_bit: bool, lora_trainable: bool, fp32_source=None) -> None:
    """The hooks on a model `load_model` built, in the order they were always applied; `fp32_source` (a loader of
    the base in fp32) is kept for the held-out checks of a LoRA run over a CPU bf16 base (rlft.speed.served)."""
    if four_bit:
        fix_cpu_4bit(model)
    if lora_trainable and cpu_bf16(dtype):
        from rlft.speed.activations import fp32_activations

        if fp32_activations(model) and fp32_source is not None:
            from rlft.speed.served import remember

            remember(model, fp32_source)
    contiguous_head(model)


def contiguous_head(model) -> bool:
    """On the CPU, give the LM head its input contiguous (a forward pre-hook); True where one was added.

    transformers' `generate` (and any caller passing an int `logits_to_keep`) hands the head a strided slice of
    the hidden states, which torch's CPU linear multiplies as a batched product with the weight expanded per row:
    64 rows of SmolLM2 in bf16 7.9 s and +3.6 GB against 0.02 s for the same rows contiguous
    (bench/lm_head_slice.py). rlft's own passes give the head an index tensor (rlft.speed.decode.last_positions); this
    covers the rest: TRL's and transformers' `generate`, PPO's rollouts, chat, remote-code models. A contiguous
    input is passed on as it is, so the hook costs nothing there."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    weight = getattr(head, "weight", None)
    if head is None or weight is None or weight.device.type != "cpu" or getattr(head, "_rlft_contiguous", False):
        return False
    head.register_forward_pre_hook(_contiguous_input)
    head._rlft_contiguous = True
    return True


def _contiguous_input(_module, args):
    # module-level (not a lambda): a model with the hook still pickles and deep-copies
    x = args[0] if args else None
    if x is None or not hasattr(x, "is_contiguous") or x.is_contiguous():
        return None
    return (x.contiguous(), *args[1:])


def fix_cpu_4bit(model) -> int:
    """Stop bitsandbytes' CPU path from repacking 4-bit weights after a no-grad forward.

    On CPUs with AVX512-BF16, Linear4bit repacks its weights the first time it runs without grad (an
    eval or generation pass); LoRA gradients computed through the repacked weights are then silently
    wrong. Turning the fast path off keeps one layout for every pass. Returns how many layers were fixed.
    """
    try:
        from bitsandbytes.nn import Linear4bit
    except ImportError:
        return 0
    fixed = 0
    for module in model.modules():
        if isinstance(module, Linear4bit):
            module.support_avx512bf16_for_cpu = False
            fixed += 1
    return fixed


def cpu_bf16(dtype) -> bool:
    """bf16 weights on a machine without CUDA: the case the CPU hooks below are for."""
    import torch

    return dtype == torch.bfloat16 and not torch.cuda.is_available()
