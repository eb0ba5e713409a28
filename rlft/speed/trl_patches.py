"""Where rlft changes how TRL's trainers run on a CPU: measured, and none of it changes what is computed.

Score only the positions that carry labels. TRL 1.16's fused LM head (trl.trainer.utils.add_fused_lm_head,
used by GRPO and RLOO to get per-token log-probabilities without the full logits; distillation's divergence
head chooses alike) projects only the labelled positions (the completion tokens) on devices with Triton,
and every position elsewhere, so that XLA-style devices keep one tile shape and do not recompile. A CPU
runs eagerly and recompiles nothing, so there the rule only multiplies the LM head's work, forward and
backward, by (prompt + completion) / completion: on SmolLM2-135M with 2 prompts x G 4 and 48 new tokens,
864 rows instead of 392, and the backward recomputes each tile and accumulates in fp32 (what it costs:
BENCHMARKS.md, "An Intel Xeon with AVX512-BF16 and no AMX").
`score_labelled_positions_only()` makes TRL take its own compact path on the CPU by answering its "is this a
Triton device" question for that choice only (the kernel choice in trl.kernels keeps its own answer: the
torch tiles). The per-token values are the same; tests/speed/test_trl_patches.py checks them against the full
path.

Narrower vocabulary tiles on the CPU. The same function projects 32,768 vocabulary entries per tile, so each
tile and each temporary of its log-sum-exp fold is [positions, 32768] fp32: 39-50 MB for 300-384 positions,
above glibc's 32 MB mmap ceiling, so every one is a fresh mapping whose pages fault in on first touch (a
GPU's caching allocator never sees this). `narrow_cpu_tiles()` sets 8,192 (10-12 MB, reused from the heap;
measured: BENCHMARKS.md, "What changed, measured alone in one process each"). The tiles fold into the same
online log-sum-exp, so the values agree to float rounding.

Fewer passes over each tile. On a device without Triton, TRL folds each [positions, 8192] tile in torch ops
written as its kernel reads: the forward scales the logits into new tensors twice, then subtracts, exponentiates,
multiplies and sums, each pass a new tile-sized temporary; the backward recomputes the tile and makes some twelve
more (zeros, one-hot, differences, products, copies). `lean_cpu_tiles()` swaps in folds that work in the tile
TRL hands over (it is scratch: the projection's output, rewritten for the next tile), with the same products in
the same order for the log-probabilities and their gradient (bit for bit TRL's; tests/speed/test_trl_patches.py) and the
entropy's sum taken over (z - max) (to float rounding). Anything else (soft-capping, the other optional outputs,
an entropy gradient, a half-precision tile) goes to TRL's own fold (the folds' time against TRL's, on captured
GRPO batches: BENCHMARKS.md, beside the narrower tiles).

Freed memory stays with the process. A GRPO/RLOO step on the CPU frees and reallocates the same few GB every
step (activations, LM-head tiles). glibc hands large blocks back to the kernel
when they are freed (each block over its mmap threshold is its own mapping, and the heap's top is trimmed),
so the next step touches fresh pages that the kernel zeroes in page faults. On the VMs rlft is measured on
(cold pages are reclaimed and free pages reported to the host) a first touch is costly (`perf`: clear_page
under the page faults of matmul outputs). `keep_freed_memory()` sets glibc's M_MMAP_MAX to 0 (large blocks
come from the heap) and M_TRIM_THRESHOLD to 2 GB (the heap is not trimmed below that), so each step reuses the
pages the last one had (step time, system time and peak RSS with and without it: BENCHMARKS.md, "The same CPU
model on a later VM: memory, and two threads"). (It did nothing while the sampling packs were re-made as new
buffers in the main heap every step: the heap fragmented and grew; they are now re-packed in place,
rlft.speed.packed_linear.)
PyTorch's CPU tuning guide gets the same from preloading jemalloc or tcmalloc, which needs the variable set
before the process starts. glibc on Linux only; elsewhere it does nothing and returns False.
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


# glibc's mallopt parameters (malloc.h)
M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4
TRIM_THRESHOLD = 2**31 - 1


def _glibc_function(name: str):
    """glibc's `name` (a ctypes function), or None off Linux, on another C library (musl and others have other
    settings) or where the symbol is missing."""
    import ctypes
    import sys

    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None)
        function = getattr(libc, name)
    except (OSError, AttributeError):
        return None
    return function if hasattr(libc, "gnu_get_libc_version") else None


def keep_freed_memory() -> bool:
    """Keep freed heap memory in the process for reuse (see the module docstring); True where glibc took both
    settings. Process-wide: call it once a run is known to sample and train on the CPU."""
    import ctypes

    mallopt = _glibc_function("mallopt")
    if mallopt is None:
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD)) and bool(mallopt(M_MMAP_MAX, 0))


def release_freed_memory() -> bool:
    """Hand the heap's free pages back to the kernel now (glibc's malloc_trim(0), which also returns free pages
    from the middle of the heap); True where it ran. For a process that goes on after a run it trained in
    (`keep_freed_memory` keeps freed blocks for the next step): scripts/pipeline.py runs stages in its own
    process, and the demo's SFT stage left it holding 3.8 GB while its RL stages trained beside it."""
    import ctypes

    trim = _glibc_function("malloc_trim")
    if trim is None:
        return False
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    trim(0)
    return True


# TRL's torch folds (trl.kernels.chunked_logprob) and the parameters rlft's lean folds take in their place
TILE_FOLDS = {
    "_forward_tile": ("tile", "tile_stride", "targets", "running_max", "sum_exp", "x_sum_exp", "sq_sum_exp", "z_sum",
                      "max_before_target", "target_logit", "vocab_start", "n_cols", "logit_scale", "softcap", "inv_t",
                      "HAS_SOFTCAP", "HAS_ENTROPY", "HAS_LOG_SUM_SQ_PROBS", "HAS_MEAN_LOGITS", "HAS_IS_TOP1",
                      "BLOCK_SIZE"),
    "_backward_tile": ("tile", "tile_stride", "targets", "log_z", "entropy", "grad_logprobs", "grad_entropy",
                       "vocab_start", "n_cols", "logit_scale", "softcap", "inv_t", "HAS_SOFTCAP", "HAS_LOGPROB_GRAD",
                       "HAS_ENTROPY_GRAD", "BLOCK_SIZE"),
}


def lean_cpu_tiles() -> bool:
    """Fold TRL's fused-LM-head tiles with fewer passes on devices without Triton (see the module docstring);
    False where this TRL has no such folds or they take other parameters (nothing changed)."""
    import inspect

    try:
        import trl.kernels.chunked_logprob as kernels
    except ImportError:
        return False
    lean = {"_forward_tile": _lean_forward_tile, "_backward_tile": _lean_backward_tile}
    folds = {}
    for name, params in TILE_FOLDS.items():
        fold = getattr(kernels, name, None)
        original = getattr(fold, "original", fold)
        try:
            if original is None or tuple(inspect.signature(original).parameters) != params:
                return False
        except (TypeError, ValueError):
            return False
        folds[name] = original
    for name, original in folds.items():
        if getattr(kernels, name) is original:
            setattr(kernels, name, _with_original(lean[name], original))
    return True


def _with_original(lean, original):
    def fold(*args, **kwargs):
        if not lean(*args, **kwargs):  # declined: TRL's own fold
            original(*args, **kwargs)

    fold.original = original
    return fold


def _lean_forward_tile(tile, tile_stride, targets, running_max, sum_exp, x_sum_exp, sq_sum_exp, z_sum,
                       max_before_target, target_logit, vocab_start, n_cols, logit_scale, softcap, inv_t,
                       HAS_SOFTCAP, HAS_ENTROPY, HAS_LOG_SUM_SQ_PROBS, HAS_MEAN_LOGITS, HAS_IS_TOP1, BLOCK_SIZE):
    """TRL's forward fold (online log-sum-exp, target logit, entropy's sum) computed in `tile`; False where it
    declines (what the module docstring lists), having changed nothing."""
    import torch

    if HAS_SOFTCAP or HAS_LOG_SUM_SQ_PROBS or HAS_MEAN_LOGITS or HAS_IS_TOP1 or tile.dtype != torch.float32:
        return False
    z = _scaled(tile, logit_scale, inv_t)
    local = targets - vocab_start
    in_tile = (local >= 0) & (local < n_cols)
    target_z = z.gather(-1, local.clamp(0, n_cols - 1).unsqueeze(-1)).squeeze(-1)
    target_logit.copy_(torch.where(in_tile, target_z, target_logit))
    new_m = torch.maximum(running_max, z.amax(-1))
    rescale = torch.exp(running_max - new_m)
    shifted = z.sub_(new_m.unsqueeze(-1))
    if HAS_ENTROPY:
        e = torch.exp(shifted)
        e_sum = e.sum(-1)
        # sum e * z = sum e * (z - max) + max * sum e
        x_sum_exp.mul_(rescale).add_(e.mul_(shifted).sum(-1) + new_m * e_sum)
    else:
        e_sum = shifted.exp_().sum(-1)
    sum_exp.mul_(rescale).add_(e_sum)
    running_max.copy_(new_m)
    return True


def _lean_backward_tile(tile, tile_stride, targets, log_z, entropy, grad_logprobs, grad_entropy,
                        vocab_start, n_cols, logit_scale, softcap, inv_t, HAS_SOFTCAP, HAS_LOGPROB_GRAD,
                        HAS_ENTROPY_GRAD, BLOCK_SIZE):
    """TRL's backward fold: the tile's logits replaced in place by d loss / d logits, g * (1[target] - p);
    False where it declines, having changed nothing."""
    import torch

    if HAS_SOFTCAP or HAS_ENTROPY_GRAD or tile.dtype != torch.float32:
        return False
    if not HAS_LOGPROB_GRAD:
        tile.zero_()
        return True
    p = _scaled(tile, logit_scale, inv_t).sub_(log_z.unsqueeze(-1)).exp_()
    local = targets - vocab_start
    rows = ((local >= 0) & (local < n_cols)).nonzero().squeeze(-1)
    cols = local[rows]
    p_target = p[rows, cols]
    g = grad_logprobs.unsqueeze(-1)
    grad = p.mul_(-g)  # g * (0 - p) off the target
    grad[rows, cols] = g[rows, 0] * (1 - p_target)
    if inv_t != 1:
        grad.mul_(inv_t)
    if logit_scale != 1:
        grad.mul_(logit_scale)
    return True


def _scaled(tile, logit_scale, inv_t):
    """tile * logit_scale * inv_t in place, multiplied in TRL's order (a factor of 1 skipped: exact)."""
    if logit_scale != 1:
        tile.mul_(logit_scale)
    if inv_t != 1:
        tile.mul_(inv_t)
    return tile
