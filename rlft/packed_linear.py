"""fp32 linear layers with their weights pre-packed for MKL, for decoding a few rows at a time on a CPU.

A decode step multiplies a handful of rows (8 for 2 prompts x G 4) by every weight matrix of the model. For
such skinny products MKL's sgemm spends most of its time re-packing the weight into its panel layout on each
call: on SmolLM2-135M (576 x 1536, 8 rows, one thread, an Intel Xeon with AVX-512) `F.linear` took 0.61-0.80
ms, at 4-6 GB/s of weight read, while the same product against a weight packed once
(`torch.ops.mkl._mkl_reorder_linear_weight`, the op torch.compile's CPU freezing pass uses) took 0.37-0.49
ms; decoding 8 x 48 tokens went from 5.9 s to 3.9 s with the same greedy tokens (BENCHMARKS.md).

The catch is MKL's: a packed weight serves only the row count it was packed for; any other count falls
back to the plain product. So `pack(model, rows)` packs for one count and rlft.decode keeps its batch at that
count (finished rows ride along) while it decodes from a packed model. Packing costs one more copy of the
weights in memory (540 MB for SmolLM2-135M) and ~0.2 s; it is redone at the next `pack` for a layer whose
weight changed (its in-place version counter moved) or for another row count. Until then a changed weight is
multiplied plainly, never through its stale pack, and a `pack` that declines (too many rows, another dtype)
drops every pack. A packed model cannot be deep-copied (MKL's packed tensors have no storage): `unpack` first.

Where packs live. Re-packing after every sampler refresh made 540 MB of new long-lived blocks per step in the
middle of the training step's temporaries: allocated in the main thread, they took the holes the last step's
activations left, the next step's activations no longer fitted, and the heap grew by 0.2-1 GB a step (RSS
3.2 -> 5.1 GB over 5 `rlft grpo` steps on SmolLM2, against 3.6 GB with the packs never remade). On the VMs
rlft is measured on, every newly touched page costs 2-25 us in the kernel (`perf`: clear_page under page
faults), so that growth was 1-4 s of system time a step. Packs are now made by one worker thread: glibc gives
each thread its own malloc arena, so packs only ever replace packs (the stale ones are freed first, the new
ones have the same sizes), and the main thread's heap holds the step's temporaries alone: peak RSS 4.4-4.8
-> 4.0 GB, system time 2.0-2.5 s -> 0.6-1.0 s a step (5-step runs, one thread; BENCHMARKS.md).

Used only where it applies: float32 weights on the CPU, one compute thread (MAX_THREADS: with two, MKL's plain
product splits across them and beats the packed one), a torch built with MKL's packed-gemm ops; nothing
happens elsewhere (bf16 copies, GPUs, other builds), and `pack` says so by returning False.
"""

from __future__ import annotations

from typing import Any

# packing is used only when torch computes with this many threads or fewer: MKL's packed product does not split
# an 8-row product across threads the way its plain sgemm does (SmolLM2 576 x 1536, 8 rows, 2 threads: 0.55-0.62
# ms packed against 0.40-0.44 plain; a GRPO step's decode 3.3-3.6 s plain against 4.6-4.8 s packed)
MAX_THREADS = 1

# the most rows a packed decode is used for: beyond this the plain product is efficient (and the batch
# too large to keep whole when most of its rows have finished)
MAX_ROWS = 32


def available() -> bool:
    """Whether this torch has MKL's packed sgemm ops."""
    import torch

    if not torch.backends.mkl.is_available():
        return False
    try:
        return hasattr(torch.ops.mkl, "_mkl_reorder_linear_weight") and hasattr(torch.ops.mkl, "_mkl_linear")
    except (AttributeError, RuntimeError):
        return False


def _linears(model):
    import torch

    return [m for m in model.modules() if isinstance(m, torch.nn.Linear)]


def pack(model, rows: int) -> bool:
    """Pack every fp32 CPU nn.Linear of `model` for products of `rows` rows (re-packing those whose weight
    changed since); True when the whole model is packed for `rows`, False where packing does not apply."""
    import torch

    layers = _linears(model)
    threads = torch.get_num_threads()
    applies = 1 <= rows <= MAX_ROWS and threads <= MAX_THREADS and available() and bool(layers) and all(
        m.weight.dtype == torch.float32 and m.weight.device.type == "cpu" for m in layers)
    if not applies:
        unpack(model)  # packs for another count or older weights must not outlive a refusal
        return False
    states = [(rows, m.weight._version, m.weight.data_ptr()) for m in layers]
    stale = [(m, state) for m, state in zip(layers, states) if getattr(m, "rlft_packed_state", None) != state]
    for m, _ in stale:  # free every stale pack first: the new ones (same sizes, same order) reuse that memory
        for attr in ("rlft_packed", "rlft_packed_state", "forward"):  # plain nn.Linear until re-packed
            m.__dict__.pop(attr, None)
    if stale:
        packed = _packer().submit(_reorder, [m.weight for m, _ in stale], rows, threads).result()
        for (m, state), weight in zip(stale, packed):
            m.rlft_packed, m.rlft_packed_state = weight, state
            m.forward = _packed_forward.__get__(m)
    return True


def _reorder(weights, rows: int, threads: int):
    """Pack `weights` (in the packer thread) with one compute thread, so that packing starts no OpenMP team of
    its own beside the caller's, then give MKL back the caller's thread count (MKL's is process-wide). The
    caller waits meanwhile, so nothing else computes."""
    import torch

    torch.set_num_threads(1)
    try:
        with torch.no_grad():
            return [torch.ops.mkl._mkl_reorder_linear_weight(w.detach(), rows) for w in weights]
    finally:
        torch.set_num_threads(threads)


_PACKER: tuple[int, Any] | None = None  # (pid, the one-thread executor that allocates every pack)


def _packer():
    """The thread that packs. glibc gives each thread its own malloc arena, so packs allocated there never sit
    between the training step's temporaries in the main thread's heap: re-packed every step in the main
    thread, they left holes the next step's activations did not fit, and the heap grew (see module docstring)."""
    global _PACKER
    import os
    from concurrent.futures import ThreadPoolExecutor

    if _PACKER is None or _PACKER[0] != os.getpid():  # a forked child has no such thread: make its own
        _PACKER = (os.getpid(), ThreadPoolExecutor(1, thread_name_prefix="rlft-pack"))
    return _PACKER[1]


def unpack(model) -> None:
    """Drop the packed weights; the layers compute as plain nn.Linear again."""
    for m in _linears(model):
        for attr in ("rlft_packed", "rlft_packed_state", "forward"):
            m.__dict__.pop(attr, None)


def _packed_forward(self, x):
    import torch

    flat = x.reshape(-1, x.size(-1))
    rows, version, pointer = self.rlft_packed_state
    if (flat.size(0) != rows or x.dtype != torch.float32 or self.weight._version != version
            or self.weight.data_ptr() != pointer
            or (torch.is_grad_enabled() and (x.requires_grad or self.weight.requires_grad))):
        # another row count, a weight changed since it was packed, or a product autograd must see: plain
        return torch.nn.functional.linear(x, self.weight, self.bias)
    bias = None if self.bias is None else self.bias.detach()
    out = torch.ops.mkl._mkl_linear(flat, self.rlft_packed, self.weight.detach(), bias, rows)
    return out.reshape(*x.shape[:-1], out.size(-1))
