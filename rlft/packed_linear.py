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
drops every pack. A packed model cannot be deep-copied or pickled (MKL's packed tensors have no storage):
`unpack` first (rlft.sampling's sampler drops its copy when pickled).

Packs follow the thread count. MKL lays a packed weight out for the number of threads it packs with, and a
product with that pack computes with that many. So `pack` packs in the calling thread, with the thread count
torch computes with, and re-packs when that count changes. (SmolLM2, a GRPO step's decode of 8 x 48 tokens,
two threads, interleaved in one process: packed with two threads 2.8-3.4 s against 3.2-4.1 s plain; packed
with one thread and used with two, 4.8-5.3 s. Packing in a second thread, as the last version did to keep
per-step packs out of the main heap, started a second OpenMP team, after which every parallel op of the
main thread ran slower, plain ones included: 3.7 -> 6.1-6.6 s; BENCHMARKS.md.)

Packs are meant to be made once. rlft.sampling keeps the LoRA adapter out of the packed weights (the frozen
base weights are packed once, the adapter's two thin products are added per call), so a run packs at its
first decode and never again: re-packing merged weights after every update made 540 MB of new long-lived
blocks per step among the training step's temporaries and the heap grew (RSS 3.2 -> 5.1 GB over 5 `rlft
grpo` steps on SmolLM2, 1-4 s of system time a step on VMs where a first touch of a page costs 2-25 us).

Used only where it applies: float32 weights on the CPU, at most MAX_THREADS compute threads (the counts
measured), a torch built with MKL's packed-gemm ops; nothing happens elsewhere (bf16 copies, GPUs, other
builds), and `pack` says so by returning False.
"""

from __future__ import annotations

# packing is used only when torch computes with this many threads or fewer: the counts measured (1 and 2, on
# 2-core machines); with more threads MKL's plain product of a few rows may split better than a pack
MAX_THREADS = 2

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
    states = [(rows, threads, m.weight._version, m.weight.data_ptr()) for m in layers]
    stale = [(m, state) for m, state in zip(layers, states) if getattr(m, "rlft_packed_state", None) != state]
    for m, _ in stale:  # free every stale pack first: the new ones (same sizes, same order) reuse that memory
        _drop_pack(m)  # plain nn.Linear (with its low-rank terms) until re-packed
    for m, state in stale:
        m.rlft_packed, m.rlft_packed_state = _reorder(m.weight, rows), state
        m.forward = _forward.__get__(m)
    return True


def _reorder(weight, rows: int):
    """MKL's packed layout of `weight` for `rows` rows, made in this thread with its thread count (the count
    the pack then computes with)."""
    import torch

    with torch.no_grad():
        return torch.ops.mkl._mkl_reorder_linear_weight(weight.detach(), rows)


def unpack(model) -> None:
    """Drop the packed weights; the layers compute as plain nn.Linear again (plus their low-rank terms)."""
    for m in _linears(model):
        _drop_pack(m)


def _drop_pack(m) -> None:
    for attr in ("rlft_packed", "rlft_packed_state"):
        m.__dict__.pop(attr, None)
    if "rlft_terms" not in m.__dict__:
        m.__dict__.pop("forward", None)


def add_terms(m, terms) -> None:
    """Give nn.Linear `m` low-rank terms [(down, up, scale)]: it computes linear(x) + scale * (x @ down) @ up
    for each, packed or not (rlft.sampling's live LoRA adapter: down = A^T, up = B^T)."""
    m.rlft_terms = terms
    m.forward = _forward.__get__(m)


def _forward(self, x):
    """nn.Linear's product, from the pack where it serves (the row count, thread count and weight it was made
    for; no autograd), plainly otherwise; plus the layer's low-rank terms."""
    import torch

    state = self.__dict__.get("rlft_packed_state")
    flat = x.reshape(-1, x.size(-1))
    if state is None or (
            flat.size(0) != state[0] or torch.get_num_threads() != state[1] or self.weight._version != state[2]
            or self.weight.data_ptr() != state[3] or x.dtype != torch.float32
            or (torch.is_grad_enabled() and (x.requires_grad or self.weight.requires_grad))):
        # not packed, another row or thread count, a weight changed since, or a product autograd must see
        out = torch.nn.functional.linear(x, self.weight, self.bias)
    else:
        bias = None if self.bias is None else self.bias.detach()
        out = torch.ops.mkl._mkl_linear(flat, self.rlft_packed, self.weight.detach(), bias, state[0])
        out = out.reshape(*x.shape[:-1], out.size(-1))
    terms = self.__dict__.get("rlft_terms")
    if terms:
        flat_out = out.view(-1, out.size(-1))
        for down, up, scale in terms:  # .to: a no-op in fp32; under a user's autocast the product is bf16
            flat_out.addmm_((flat @ down).to(flat_out.dtype), up.to(flat_out.dtype), alpha=scale)
    return out
