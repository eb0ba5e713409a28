"""Held-out checks on the weights a user serves, for a LoRA run that trains on a bf16 base on the CPU.

rlft.speed.precision trains such a run on bf16 base weights (the speed), while `rlft eval`, merge and export serve
its adapter on the fp32 base. The two disagree on greedy replies at near-ties, and a run keeps the model its
held-out checks pick (rlft.methods.keep), so checks on the bf16 base pick by numbers no user sees (the support
store's SFT model, 150 prompts: fp32 0.347 as `rlft eval` reads it, bf16 base 0.333, 40 replies different;
BENCHMARKS.md "Held-out checks on the fp32 base").

So a check runs on fp32 weights: `swapped(model)` puts an fp32 copy of every frozen base weight in place
(`param.data`) for the check and the run's own tensors back after it, whatever the check raised. The adapter is
the run's own (fp32 already) and runs unmerged, so the check computes what `rlft eval` computes on the merged
fp32 weights up to fp32 rounding; every matmul runs in fp32 (rlft.speed.activations' layers multiply in their
weight's dtype). A policy whose `generate` is rlft.speed.sampling's bf16 copy (GRPO, RLOO, distillation,
bootstrap) generates through its own `generate` for the check. The copy is loaded once, on the first check, by
the loader rlft.models registered for the model (`remember`): the run's start model loaded again in fp32, an
earlier stage's adapter merged in fp32 as the run's was. It is kept for the run's later checks, 4 bytes a weight
(540 MB for SmolLM2).

Stands aside (the check then runs on the bf16 base under autocast, as training runs it; `swapped` yields the
reason, and a note says so once) where nothing was registered (fp32 runs, GPUs, 4-bit bases, full fine-tuning,
speedups off), where the copy would take more than MAX_MEMORY_SHARE of this process's share of the memory left
(the smaller of MemAvailable and the cgroup's room, over the processes of a multi-process run), where the reload
fails, or where the loaded weights do not match the model's by name and shape. What it costs: the reload once,
and fp32 matmuls in each check (bench/heldout_check.py).
"""

from __future__ import annotations

import contextlib
import os
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

MAX_MEMORY_SHARE = 0.25  # of MemAvailable: the fp32 copy is kept beside the run for all its checks

_sources: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # base model -> loader of {name: fp32 tensor}
_copies: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # base model -> {name: fp32 tensor} or a reason


def remember(model, loader: Callable[[], Any]) -> None:
    """Register how to load `model`'s base weights in fp32: `loader()` returns a plain model whose parameter names
    are the base model's with peft's `base_layer.` left out (rlft.models loads the start model again)."""
    _sources[_base(model)] = loader


def _base(model):
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def _plain_name(name: str) -> str:
    return name.replace(".base_layer.", ".")


def _available_bytes() -> int | None:
    """This process's share of the memory it may still take: the smaller of MemAvailable and the cgroup's room
    (a container's limit, which /proc/meminfo does not show), divided among the processes of a multi-process run
    on this machine (each keeps its own copy)."""
    room: list[int] = []
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                room.append(int(line.split()[1]) * 1024)
    except (OSError, ValueError, IndexError):
        pass
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        if limit != "max":
            room.append(int(limit) - int(Path("/sys/fs/cgroup/memory.current").read_text().strip()))
    except (OSError, ValueError):
        pass
    if not room:
        return None
    try:
        procs = max(1, int(os.environ.get("LOCAL_WORLD_SIZE") or os.environ.get("WORLD_SIZE") or 1))
    except ValueError:
        procs = 1
    return max(0, min(room)) // procs


def _is_base_weight(name: str) -> bool:
    """A weight of the base model, not of a peft tuner (the run's adapter, TRL's `ref` adapter, modules_to_save)."""
    return not any(part.startswith("lora_") or part == "modules_to_save" for part in name.split("."))


def _frozen(base) -> dict[str, Any]:
    """The base model's frozen floating-point weights by plain name (tied weights once)."""
    return {_plain_name(n): p for n, p in base.named_parameters()
            if not p.requires_grad and p.is_floating_point() and _is_base_weight(n)}


def _copy(base) -> dict[str, Any] | str:
    """The fp32 weights for `base` (loaded on first use and kept), or why there are none; `base` has a source."""
    import torch

    if base in _copies:
        return _copies[base]
    frozen = _frozen(base)
    need = sum(p.numel() for p in frozen.values()) * 4
    free = _available_bytes()
    if free is not None and need > MAX_MEMORY_SHARE * free:
        return _stand_aside(base, f"an fp32 copy of the base ({need / 2**30:.1f} GiB) would take more than "
                                  f"{MAX_MEMORY_SHARE:.0%} of the {free / 2**30:.1f} GiB available")
    try:
        plain = _sources[base]()
    except Exception as exc:  # files moved or damaged mid-run: the check runs as training does, and says so
        return _stand_aside(base, f"the fp32 reload failed ({type(exc).__name__}: {str(exc)[:120]})")
    loaded = {n: p.detach() for n, p in plain.named_parameters()}
    result: dict[str, Any] | str = {}
    for name, p in frozen.items():
        t = loaded.get(name)
        if t is None or t.shape != p.shape or t.dtype != torch.float32:
            result = f"the fp32 reload has no float32 weight {name} of shape {tuple(p.shape)}"
            break
        result[name] = t
    del plain, loaded
    if isinstance(result, str):
        return _stand_aside(base, result)
    _copies[base] = result
    return result


def _stand_aside(base, why: str) -> str:
    """Remember `why` for the run's later checks and say it once: its checks run on the bf16 base."""
    from rich.console import Console

    _copies[base] = why
    Console(stderr=True).print(f"note: held-out checks run on the bf16 base this run trains on, not the fp32 "
                               f"weights rlft eval serves: {why}", highlight=False, soft_wrap=True)
    return why


@contextlib.contextmanager
def swapped(model) -> Iterator[str | None]:
    """The model on its fp32 base weights for the duration (yields None), or unchanged (yields why not)."""
    base = _base(model)
    if base not in _sources:
        yield "no fp32 source"
        return
    copy = _copy(base)
    if isinstance(copy, str):
        yield copy
        return
    params = _frozen(base)
    own = {name: params[name].data for name in copy if name in params}
    sampler = model.__dict__.get("rlft_sampler")  # rlft.speed.sampling: its bf16 copy would not see the swap
    with sampler.bypassed() if sampler is not None else contextlib.nullcontext():
        try:
            for name in own:
                params[name].data = copy[name]
            yield None
        finally:
            for name, t in own.items():
                params[name].data = t
