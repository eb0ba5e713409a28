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
"""

from __future__ import annotations

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
