"""fp32 linear layers with their weights pre-packed for MKL, for decoding a few rows at a time on a CPU.

A decode step multiplies a handful of rows (8 for 2 prompts x G 4) by every weight matrix of the model. For
such skinny products MKL's sgemm spends most of its time re-packing the weight into its panel layout on each
call: on SmolLM2-135M (576 x 1536, 8 rows, one thread, an Intel Xeon with AVX-512) `F.linear` took 0.61-0.80
ms, at 4-6 GB/s of weight read, while the same product against a weight packed once took 0.37-0.49 ms;
decoding 8 x 48 tokens went from 5.9 s to 3.9 s with the same greedy tokens (BENCHMARKS.md).

The packing is MKL's own packed-gemm API (`cblas_sgemm_pack` once, `cblas_sgemm_compute` per product), the
calls torch's `torch.ops.mkl._mkl_reorder_linear_weight` / `_mkl_linear` make (and torch.compile's CPU freezing
pass uses), reached through ctypes in torch's own libtorch_cpu so that the packed weight lives in a buffer rlft
owns: the products are bit-for-bit torch's (tests/speed/test_packed_linear.py), and a weight that changes is
re-packed into the same buffer, with no new memory. `available()` checks the entry points on a small product once.

A layer with low-rank terms (rlft.speed.sampling's live LoRA adapter: scale * (x A^T) B^T per call) is packed with
the terms merged in, W + scale * B A, computed in a scratch buffer per layer; an optimizer step that changes the
adapter makes the next `pack` re-pack those layers in place. On SmolLM2 (210 adapted layers, rank 16, two
threads) that costs ~0.1 s a step against ~0.5 s for the terms' two thin products per layer and token in a 48-token
decode. Packing merged weights into new buffers every step (the first version) made 540 MB of new long-lived
blocks per step among the training step's temporaries, and the heap grew (RSS 3.2 -> 5.1 GB over 5 steps,
1-4 s of system time a step on VMs where the first touch of a page costs 2-25 us).

The catch is MKL's: a packed weight serves the row count it was packed for. So `pack(model, rows)` packs for
one count and rlft.speed.decode keeps its batch at that count (finished rows ride along) while it decodes from a
packed model. A product uses its pack only while the pack's state still holds: the row count, the thread
count, the weight's and the terms' tensors and in-place version counters it was packed from. Otherwise it is
the plain product plus the terms, never a stale pack; a `pack` that declines (too many rows, another dtype)
drops every pack, and a pack that fails leaves its layer plain. Version counters miss changes made without
autograd's bookkeeping (torch's fused AdamW, TRL's default optimizer, steps without moving them; `.data`
writes): whoever changes weights that way calls `invalidate` (rlft.speed.sampling does before every decode).

Packs follow the thread count. MKL lays a packed weight out for the number of threads it packs with, and a
product with that pack computes with that many. So `pack` packs in the calling thread, with the thread count
torch computes with, and re-packs when that count changes. (SmolLM2, a GRPO step's decode of 8 x 48 tokens,
two threads, interleaved in one process: packed with two threads 2.8-3.4 s against 3.2-4.1 s plain; packed
with one thread and used with two, 4.8-5.3 s. Packing in a second thread started a second OpenMP team, after
which every parallel op of the main thread ran slower, plain ones included: 3.7 -> 6.1-6.6 s; BENCHMARKS.md.)

Used only where it applies: float32 weights on the CPU, at most MAX_THREADS compute threads (the counts
measured), Linux with a torch built with MKL whose packed-gemm entry points answer the check; nothing
happens elsewhere (bf16 copies, GPUs, other builds), and `pack` says so by returning False.
"""

from __future__ import annotations

import functools

# packing is used only when torch computes with this many threads or fewer: the counts measured (1 and 2, on
# 2-core machines); with more threads MKL's plain product of a few rows may split better than a pack
MAX_THREADS = 2

# the most rows a packed decode is used for: beyond this the plain product is efficient (and the batch
# too large to keep whole when most of its rows have finished)
MAX_ROWS = 32

# MKL's CBLAS enumerations (mkl_cblas.h)
_ROW_MAJOR, _NO_TRANS, _TRANS, _PACKED, _B_MATRIX = 101, 111, 112, 151, 162


@functools.cache
def _mkl():
    """MKL's packed-gemm entry points in this torch's libtorch_cpu (ctypes), or None where they are missing or
    do not give a small product right."""
    import ctypes
    import os
    import sys

    import torch

    if not sys.platform.startswith("linux") or not torch.backends.mkl.is_available():
        return None
    try:
        lib = ctypes.CDLL(os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so"))
        size, pack, compute = lib.cblas_sgemm_pack_get_size, lib.cblas_sgemm_pack, lib.cblas_sgemm_compute
    except (OSError, AttributeError):
        return None
    i, f, p = ctypes.c_int, ctypes.c_float, ctypes.c_void_p
    size.argtypes, size.restype = [i, i, i, i], ctypes.c_size_t
    pack.argtypes, pack.restype = [i, i, i, i, i, i, f, p, i, p], None
    compute.argtypes, compute.restype = [i, i, i, i, i, i, p, i, p, i, f, p, i], None
    mkl = (size, pack, compute)
    g = torch.Generator().manual_seed(0)
    weight, x = torch.randn(40, 24, generator=g), torch.randn(3, 24, generator=g)
    try:
        if size(_B_MATRIX, 3, 40, 24) < 40 * 24 * 4:
            return None
        out = _product(mkl, x, _pack(mkl, weight, 3), 40)
    except Exception:  # noqa: BLE001 (any failure of the check means: not available)
        return None
    return mkl if torch.allclose(out, x @ weight.t(), atol=1e-5, rtol=1e-5) else None


def available() -> bool:
    """Whether this torch has MKL's packed sgemm, answering correctly through rlft's binding."""
    return _mkl() is not None


def _pack(mkl, weight, rows: int, buffer=None):
    """`weight` [out, in] (fp32, contiguous) in MKL's packed layout for products of `rows` rows, made in this
    thread with its thread count; written into `buffer` when given (a pack of the same shape)."""
    import torch

    size, pack, _ = mkl
    n, k = weight.shape
    numel = -(-size(_B_MATRIX, rows, n, k) // 4)
    if buffer is None or buffer.numel() != numel:
        buffer = torch.empty(numel, dtype=torch.float32)
    pack(_ROW_MAJOR, _B_MATRIX, _TRANS, rows, n, k, 1.0, weight.data_ptr(), k, buffer.data_ptr())
    return buffer


def _product(mkl, flat, packed, n: int):
    """flat [rows, in] (fp32) times the packed weight's transpose: [rows, n]."""
    import torch

    flat = flat.contiguous()
    rows, k = flat.shape
    out = torch.empty(rows, n, dtype=torch.float32)
    mkl[2](_ROW_MAJOR, _NO_TRANS, _PACKED, rows, n, k, flat.data_ptr(), k, packed.data_ptr(), k, 0.0,
           out.data_ptr(), n)
    return out


def _linears(model):
    import torch

    return [m for m in model.modules() if isinstance(m, torch.nn.Linear)]


def _state(m, rows: int, threads: int) -> tuple:
    """What a layer's pack is made from: row and thread count, and the weight's and every term's tensor and
    in-place version (a pack whose state differs from the layer's current one is stale)."""
    w = m.weight
    terms = m.__dict__.get("rlft_terms") or ()
    return (rows, threads, w._version, w.data_ptr(), tuple(w.shape),
            tuple((d._version, d.data_ptr(), u._version, u.data_ptr(), s) for d, u, s in terms))


def pack(model, rows: int) -> bool:
    """Pack every fp32 CPU nn.Linear of `model` (with its low-rank terms merged in) for products of `rows`
    rows, re-packing in place those whose weight or terms changed since; True when the whole model is packed
    for `rows`, False where packing does not apply."""
    import torch

    layers = _linears(model)
    threads = torch.get_num_threads()
    applies = 1 <= rows <= MAX_ROWS and threads <= MAX_THREADS and bool(layers) and all(
        m.weight.dtype == torch.float32 and m.weight.device.type == "cpu" for m in layers) and available()
    if not applies:
        unpack(model)  # packs for another count or older weights must not outlive a refusal
        return False
    stale = [(m, state) for m in layers
             if m.__dict__.get("rlft_packed_state") != (state := _state(m, rows, threads))]
    for m, state in stale:  # a pack for another shape of product is freed first (the new one reuses the memory)
        m.__dict__.pop("rlft_packed_state", None)  # stale from here on, whatever happens below
        if m.__dict__.get("rlft_packed_layout") != _layout(state):
            _drop_pack(m)
    mkl, scratch = _mkl(), None
    for m, state in stale:
        try:
            weight, scratch = _merged(m, scratch)
            m.rlft_packed = _pack(mkl, weight, rows, m.__dict__.get("rlft_packed"))
        except BaseException:
            _drop_pack(m)  # plain, never half-packed
            raise
        m.rlft_packed_state, m.rlft_packed_layout = state, _layout(state)
        m.forward = functools.partial(_forward, m)  # by name: a packed model pickles
    return True


def _layout(state: tuple) -> tuple:
    """The part of a pack's state that fixes its buffer: row count, thread count, weight shape."""
    return state[0], state[1], state[4]


def invalidate(m) -> None:
    """Mark `m`'s pack stale whatever its version counters say (a fused optimizer step or a `.data` write does
    not move them): the next `pack` rewrites it in place, and until then `m` computes plainly."""
    m.__dict__.pop("rlft_packed_state", None)


def _merged(m, scratch):
    """The weight `m` computes with: its own, or W + scale * B A per low-rank term, in `scratch` (grown as
    needed and returned for the next layer)."""
    import torch

    weight = m.weight.detach()
    terms = m.__dict__.get("rlft_terms")
    if not terms:
        return weight.contiguous(), scratch
    if scratch is None or scratch.numel() < weight.numel():
        scratch = torch.empty(weight.numel(), dtype=torch.float32)
    merged = scratch[:weight.numel()].view(weight.shape)
    for i, (down, up, scale) in enumerate(terms):  # x @ down @ up * scale == x @ (scale * up^T down^T)^T
        # the first term written with W in one pass (no copy of W first)
        torch.addmm(weight if i == 0 else merged, up.t().to(torch.float32), down.t().to(torch.float32),
                    alpha=scale, out=merged)
    return merged, scratch


def unpack(model) -> None:
    """Drop the packed weights; the layers compute as plain nn.Linear again (plus their low-rank terms)."""
    for m in _linears(model):
        _drop_pack(m)


def _drop_pack(m) -> None:
    for attr in ("rlft_packed", "rlft_packed_state", "rlft_packed_layout"):
        m.__dict__.pop(attr, None)
    if "rlft_terms" not in m.__dict__:
        m.__dict__.pop("forward", None)


def add_terms(m, terms) -> None:
    """Give nn.Linear `m` low-rank terms [(down, up, scale)]: it computes linear(x) + scale * (x @ down) @ up
    for each, from its pack (terms merged in) where the pack serves, plainly otherwise (rlft.speed.sampling's live
    LoRA adapter: down = A^T, up = B^T)."""
    m.rlft_terms = terms
    m.forward = functools.partial(_forward, m)


def direct(m, rows: int):
    """`m`'s product from its pack as a plain function of x, for rows x in_features inputs, with none of the
    per-call checks of its forward; None where `m` is not packed for `rows` now (state as `_forward` checks
    it) or anything else would run on a call of `m` (hooks, a forward of its own). With grad enabled and a
    weight or input that needs it, the function calls `m` (autograd must see the product).

    For a caller that holds the weights still while it uses the function: rlft.speed.decode_step makes these at
    the first token of a decode (after `pack`), under no_grad, and drops them with the decode."""
    import torch

    forward = m.__dict__.get("forward")
    if type(m) is not torch.nn.Linear or m._forward_hooks or m._forward_pre_hooks or hasattr(m, "_hf_hook"):
        return None
    if not (isinstance(forward, functools.partial) and forward.func is _forward and forward.args == (m,)):
        return None
    packed = m.__dict__.get("rlft_packed")
    if packed is None or m.__dict__.get("rlft_packed_state") != _state(m, rows, torch.get_num_threads()):
        return None
    trains = _trains(m, m.__dict__.get("rlft_terms") or ())
    mkl, k, n = _mkl(), m.in_features, m.out_features
    bias = m.bias.detach() if m.bias is not None else None

    def product(x):
        if torch.is_grad_enabled() and (trains or x.requires_grad):
            return m(x)
        flat = x.reshape(rows, k)  # the shape MKL reads: a wrong one raises here
        if flat.dtype != torch.float32:
            raise ValueError(f"packed product: expected {rows} x {k} float32 rows, got {tuple(x.shape)} {x.dtype}")
        out = _product(mkl, flat, packed, n)
        if bias is not None:
            out.add_(bias)
        return out.view(*x.shape[:-1], n)

    return product


def _trains(m, terms) -> bool:
    """Whether a weight of `m` (its own, its bias, a low-rank term's) needs gradients: autograd must then see
    the product, which the pack's ctypes call hides."""
    bias = m.bias
    return m.weight.requires_grad or (bias is not None and bias.requires_grad) or any(
        d.requires_grad or u.requires_grad for d, u, _ in terms)


def _forward(self, x):
    """nn.Linear's product plus the layer's low-rank terms: from the pack where it serves (made for this row
    count, thread count, weight and terms; no autograd), plainly otherwise."""
    import torch

    terms = self.__dict__.get("rlft_terms") or ()
    packed = self.__dict__.get("rlft_packed")
    bias = self.bias
    if packed is not None and x.dtype == torch.float32 and x.size(-1) == self.in_features and not (
            torch.is_grad_enabled() and (x.requires_grad or _trains(self, terms))):
        flat = x.reshape(-1, x.size(-1))
        if self.__dict__.get("rlft_packed_state") == _state(self, flat.size(0), torch.get_num_threads()):
            out = _product(_mkl(), flat, packed, self.out_features)
            if bias is not None:
                out.add_(bias.detach())
            return out.view(*x.shape[:-1], out.size(-1))
    out = torch.nn.functional.linear(x, self.weight, self.bias)
    if terms:
        flat_out = out.view(-1, out.size(-1))
        flat = x.reshape(-1, x.size(-1))
        for down, up, scale in terms:  # .to: a no-op in fp32; under a user's autocast the product is bf16
            flat_out.addmm_((flat @ down).to(flat_out.dtype), up.to(flat_out.dtype), alpha=scale)
    return out
