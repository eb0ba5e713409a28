"""Where rlft changes how TRL's trainers run on a CPU: measured, and none of it changes what is computed.

Score only the positions that carry labels. TRL 1.16's fused LM head (trl.trainer.utils.add_fused_lm_head,
used by GRPO and RLOO to get per-token log-probabilities without the full logits; distillation's divergence
head chooses alike) projects only the labelled positions (the completion tokens) on devices with Triton,
and every position elsewhere, so that XLA-style devices keep one tile shape and do not recompile. A CPU
runs eagerly and recompiles nothing, so there the rule only multiplies the LM head's work, forward and
backward, by (prompt + completion) / completion: on SmolLM2-135M with 2 prompts x G 4 and 48 new tokens,
864 rows instead of 392, and the backward recomputes each tile and accumulates in fp32 (TRL's chunked
log-prob function alone, bf16, one thread: 2.9 against 0.9 CPU-seconds forward + backward; BENCHMARKS.md).
`score_labelled_positions_only()` makes TRL take its own compact path on the CPU by answering its "is this a
Triton device" question for that choice only (the kernel choice in trl.kernels keeps its own answer: the
torch tiles). The per-token values are the same; tests/test_decode.py checks them against the full path.

Narrower vocabulary tiles on the CPU. The same function projects 32,768 vocabulary entries per tile, so each
tile and each temporary of its log-sum-exp fold is [positions, 32768] fp32: 39-50 MB for 300-384 positions,
above glibc's 32 MB mmap ceiling, so every one is a fresh mapping whose pages fault in on first touch (a
GPU's caching allocator never sees this). `narrow_cpu_tiles()` sets 8,192 (10-12 MB, reused from the heap):
SmolLM2, 2 x G 4 completions of 48 tokens, one thread: forward 1.72 -> 1.56 s, backward 2.13 -> 1.9 s. The
tiles fold into the same online log-sum-exp, so the values agree to float rounding.
"""

from __future__ import annotations

# TRL's vocabulary tile width (trl.trainer.utils._CHUNKED_LOGPROB_CHUNK_SIZE) for runs on the CPU
CPU_TILE = 8192

# TRL modules that choose between projecting labelled positions only and every position by `_use_triton`
COMPACT_CHOOSERS = ("trl.trainer.utils", "trl.trainer.distillation_trainer")


def score_labelled_positions_only() -> int:
    """Let TRL's fused LM heads (GRPO/RLOO log-probabilities, distillation's divergence) project only labelled
    positions on the CPU; returns how many of TRL's choosers now do (0: this TRL has none, nothing changed)."""
    import importlib

    done = 0
    for name in COMPACT_CHOOSERS:
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        original = getattr(module, "_use_triton", None)
        if original is None:
            continue
        if not getattr(original, "rlft_cpu_compact", False):
            module._use_triton = _compact_on_cpu(original)
        done += 1
    return done


def _compact_on_cpu(original):
    def compact(device) -> bool:
        return device.type == "cpu" or original(device)

    compact.rlft_cpu_compact, compact.original = True, original
    return compact


def narrow_cpu_tiles() -> bool:
    """Make TRL's fused LM head project CPU_TILE vocabulary entries per tile (see the module docstring); call it
    only for a run on the CPU (the setting is TRL's module-wide one). False where this TRL has no such setting."""
    try:
        import trl.trainer.utils as trl_utils
    except ImportError:
        return False
    if not isinstance(getattr(trl_utils, "_CHUNKED_LOGPROB_CHUNK_SIZE", None), int):
        return False
    trl_utils._CHUNKED_LOGPROB_CHUNK_SIZE = min(trl_utils._CHUNKED_LOGPROB_CHUNK_SIZE, CPU_TILE)
    return True
