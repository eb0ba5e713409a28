"""The speed layer: what makes TRL's methods fast on a CPU. The methods themselves are TRL's (rlft/methods/);
this package only changes how the same numbers are computed, and stands aside wherever it does not apply. The one
place where it changes a number is on purpose: `served_weights` has a bf16-base run's held-out checks read the fp32
weights users serve, where the bf16 base it trains on (precision) would read others.

Four entry points are the whole seam with the rest of rlft:
  prepare_model(model, dtype, ...)  rlft.models.load_model, on every model rlft loads (with its pre-load half,
                                    `load_options(dtype)`, for `from_pretrained`'s keyword arguments)
  trainer_class(trainer_cls)        rlft.methods.group_rl.build: GRPO's and RLOO's trainer with prompt sharing;
                                    rlft.methods.sft.build: SFT's, with the rows' common head once
  attach(policy, console, ...)      fast sampling for a policy that samples while it trains (group_rl.prepare,
                                    methods.common.train for GRPO/RLOO/distillation, methods.ppo), and with
                                    `trl_patches=True` the process-wide TRL patches of trl_patches.py
  served_weights(model)             rlft.watch.heldout.measure: a held-out check on the fp32 base weights users
                                    serve, for a run that trains on a CPU bf16 base
plus `precision` (which dtype a run trains and samples in: methods.common.start_run) and `decode` (the sampling
loop rlft.evaluate and PPO's rollouts share). Nothing else in rlft imports this package (tests/test_structure.py).

What each module changes, against what TRL / transformers would do, and where it stands aside (TRL's own path):
- precision: TRL trains fp32 on a CPU (`bf16=True` there is autocast over fp32 weights); rlft keeps a LoRA run's
  frozen base in bf16 and its adapter in fp32 where the CPU's bf16 units are measured faster. Aside: GPUs
  (TRL's bf16 where supported), full fine-tuning, CPUs without a bf16 flag.
- activations: fp32 activations between the bf16 matmuls of that base, where transformers would run bf16
  throughout. Aside: models with bf16 weights in other kinds of module (GPT-2's Conv1D).
- served: that run's held-out checks on an fp32 copy of its base (the weights `rlft eval` serves), where
  they would run on the bf16 base it trains on. Aside: where the copy would take over a quarter of the free memory.
- model_hooks: eager attention for CPU bf16 (sdpa's CPU kernel is slow there), a contiguous LM-head input (torch
  multiplies a strided one slowly), bitsandbytes' CPU 4-bit repack off (LoRA gradients went wrong). Aside: GPUs.
- sampling: a plain copy of a LoRA policy answers its `generate`, instead of peft's layers per decode step.
  Aside: GPUs, DoRA, LoRA with a bias, 4/8-bit bases, models without an adapter.
- decode: the sampling loop the copy (and rlft eval, PPO's rollouts) runs instead of `generate`: one prefill per
  distinct prompt, finished rows leave the batch, inverse-CDF sampling. Aside: beams, penalties, processors.
- decode_step: a one-token forward with only the ops the arithmetic needs, instead of transformers' modules.
  Aside: layouts other than Llama / Qwen2 / Mistral, hooks, subclasses, training mode.
- packed_linear: fp32 weights packed once for MKL for the batch's row count, where MKL re-packs on every skinny
  product. Aside: other dtypes, no MKL packed gemm, more than MAX_THREADS threads.
- prompt_sharing: each prompt's forward once for its G completions, where TRL runs it G times; in SFT, the rows'
  common head (a long shared system message) once. Aside: GPUs, images, gradient checkpointing, hybrid caches,
  batches without a shared prompt or head.
- trl_patches: on the CPU, TRL's fused LM head projects the labelled positions only, in narrower tiles with
  leaner folds, and glibc keeps freed memory. Aside: GPUs (Triton), TRL versions without these settings.
- switch: `train.speedups=false` turns every entry point above into TRL's / transformers' own path (and
  `decode` into None: `generate`), for A/B checks and debugging; precision still decides the dtype, and
  held-out checks then read the bf16 base a bf16 run trains on (served_weights stands aside).

Each module's docstring says where it departs and what it checks against (tests/speed/ mirrors this package);
what the whole layer buys is measured by bench/bench_speedups.py (on against off) and the per-module benches,
with the dated numbers in BENCHMARKS.md and docs/speed.md.

Light at import: every entry point imports its module (and torch) when called.
"""

from __future__ import annotations

from typing import Any

from rlft.speed.switch import enabled, set_enabled  # train.speedups (rlft.speed.switch)

__all__ = ["attach", "enabled", "load_options", "prepare_model", "served_weights", "set_enabled", "trainer_class"]


def load_options(dtype) -> dict[str, Any]:
    """Keyword arguments for `from_pretrained` (eager attention for CPU bf16): prepare_model's pre-load half."""
    if not enabled():
        return {}
    from rlft.speed.model_hooks import load_options

    return load_options(dtype)


def prepare_model(model, dtype, *, four_bit: bool, lora_trainable: bool, fp32_source=None) -> None:
    """The CPU hooks on a model `load_model` built: bitsandbytes' 4-bit repack off, fp32 activations for a
    trainable LoRA over a CPU bf16 base (and `fp32_source`, a loader of that base in fp32, kept for its held-out
    checks), a contiguous LM-head input (rlft.speed.model_hooks)."""
    if not enabled():
        return
    from rlft.speed.model_hooks import prepare

    prepare(model, dtype, four_bit=four_bit, lora_trainable=lora_trainable, fp32_source=fp32_source)


def served_weights(model):
    """A context for a held-out check of `model`: where the run trains a LoRA over a CPU bf16 base, its fp32 base
    weights in place (rlft.speed.served.swapped: what `rlft eval` and export serve); yields None when in
    place, else why not (the check then runs as training does)."""
    if not enabled():
        import contextlib

        return contextlib.nullcontext("speedups off")
    from rlft.speed.served import swapped

    return swapped(model)


def trainer_class(trainer_cls):
    """GRPO's or RLOO's trainer class with prompt sharing (rlft.speed.prompt_sharing): a subclass overriding
    `_get_per_token_logps_and_entropies`, which computes each prompt once where it applies and calls TRL's
    method otherwise. Where it sits in the trainer's MRO: rlft.methods.group_rl.trainer_class. For TRL's
    SFTTrainer (rlft.methods.sft.build), a subclass whose loss runs the rows' common head (a shared system
    message) once."""
    if not enabled():
        return trainer_cls
    from trl import SFTTrainer

    from rlft.speed.prompt_sharing import with_head_sharing, with_prompt_sharing

    if issubclass(trainer_cls, SFTTrainer):
        return with_head_sharing(trainer_cls)
    return with_prompt_sharing(trainer_cls)


def attach(policy, console=None, *, trl_patches: bool = False):
    """Fast sampling for `policy` (rlft.speed.sampling.attach: on the CPU a LoRA policy's `generate` runs on a
    plain copy; returns the sampler or None), and with `trl_patches` (the policy is a TRL trainer's, about to
    train) the process-wide TRL patches: score labelled positions only, and on the CPU narrower and leaner
    LM-head tiles and freed memory kept (rlft.speed.trl_patches)."""
    if not enabled():
        return None
    from rlft.speed.sampling import attach as attach_sampler

    sampler = attach_sampler(policy, console)
    if trl_patches:
        from rlft.speed.trl_patches import (
            keep_freed_memory,
            lean_cpu_tiles,
            narrow_cpu_tiles,
            score_labelled_positions_only,
        )

        score_labelled_positions_only()
        if policy.device.type == "cpu":
            narrow_cpu_tiles()
            lean_cpu_tiles()
            keep_freed_memory()
    return sampler
