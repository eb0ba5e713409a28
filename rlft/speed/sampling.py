"""Sampling from a LoRA policy while it trains: a plain copy of the model that answers the policy's `generate`.

TRL's GRPO and RLOO trainers, rlft's PPO rollout and the held-out check after training all sample by calling
`generate` on the policy. With a peft LoRA adapter on, every decode step then runs each adapted layer through
peft's layer (base matmul, dropout, two adapter matmuls, scaling, an add, in Python per adapter: slower per
decode step than the same weights merged; BENCHMARKS.md, "Numbers moved out of rlft/speed"). `attach(policy)` gives
the policy's object its own `generate` that runs on a plain copy of the model, decoded by rlft.speed.decode's loop
(one prefill per distinct prompt, finished rows leave the batch; `generate` itself for settings the loop does
not handle). It is TRL's own extension surface: the trainer still tokenizes, pads, calls `generate` and masks
after the first stop token exactly as it would; only the code that computes the tokens changes.

Two kinds of copy:
- Live adapter (fp32 weights, MKL's packed gemm available, at most rlft.speed.packed_linear.MAX_THREADS compute
  threads when attached, plain LoRA on linear layers only, nothing trainable outside the adapter: rlft's own
  LoRA runs on the CPU). The copy's weights are the policy's own frozen tensors (new Parameters over them
  that share their version counters, so a pack sees any in-place change; a second set exists only for a
  moment while the copy is built), and each adapted layer carries low-rank terms, scale * (x A^T) B^T, over
  views of the policy's adapter weights (rlft.speed.packed_linear.add_terms), so the copy needs no refresh. Its
  linear layers are packed for MKL at the first decode with the terms merged in (W + scale * B A), and every
  later decode re-packs the adapted layers into the same buffers (no new memory): always, because torch's
  fused AdamW (TRL's default optimizer) updates the adapter without moving the version counters a pack's
  staleness could be read from. A product whose pack is stale computes plainly. Against the terms added per
  call (the previous version) and the merged copy, in decode time and peak memory: BENCHMARKS.md, "The next
  day, another VM of the same CPU model: a lean decode step, the adapter merged into the packs".
- Merged (everything else: bf16 bases, LoRA on embeddings or with fan-in-fan-out weights or variants,
  trainable weights outside the adapter, more threads than MAX_THREADS, a torch without MKL's packed gemm).
  A plain copy in the dtype of the policy's base weights (bf16 on CPUs with bf16 units, rlft.speed.precision) with
  the adapter merged in: marked stale after every optimizer step (torch's global optimizer-step hook, so
  TRL's trainers and rlft's PPO need no code of their own) and rebuilt lazily at the next `generate`; it
  starts stale, so weights restored by `--resume` are seen. A refresh recomputes
  W + scale * B @ A for each adapted layer in fp32 (in place for an fp32 copy) and rounds once into the copy;
  frozen non-adapted weights are copied once. It is not packed (the first packed version re-packed the whole
  copy into new buffers every step and grew the heap; re-packing in place, as the live copy does, would now
  allow it, not measured).

Where no copy is used (the policy's own `generate` runs): GPUs (TRL samples there, or vLLM), models without a
LoRA adapter (nothing to merge), DoRA and LoRA with a bias on B (neither copy computes them), 4/8-bit bases,
while the adapter is disabled (`with model.disable_adapter()`: the copy would hold the adapted weights), and
while it is merged into the base (peft's `merge_adapter`: it would count twice).

The policy's `generate` is the sampler's, so pickling or deep-copying the policy takes the sampler along:
only its policy is kept, and the copy is rebuilt for the new policy at its first `generate` (the packs, the
size of the fp32 weights, are not worth copying).
"""

from __future__ import annotations

import contextlib
from typing import Any


class PolicySampler:
    """A plain copy of a peft LoRA policy, live-adapter or merged (module docstring), that answers the
    policy's `generate` calls. Merged mode alone keeps state between calls: `stale` (set by torch's global
    optimizer-step hook) and `refreshes` (how many times the copy was rebuilt)."""

    def __init__(self, policy):
        import torch

        self.policy = policy
        base = policy.get_base_model()
        self.lora_layers = [m for m in base.modules() if _is_lora(m)]
        dtype = next(m.base_layer.weight.dtype for m in self.lora_layers)
        with torch.device("meta"):
            copy = type(base)(base.config)
        copy = copy.to_empty(device=base.device).to(dtype)
        copy.generation_config = base.generation_config
        self.copy = copy.eval().requires_grad_(False)
        from rlft.speed.model_hooks import contiguous_head

        contiguous_head(self.copy)  # its `generate` fallback slices the hidden states for the head
        # non-persistent buffers (rotary frequencies) are not weights: to_empty left them unset
        for name, buf in base.named_buffers():
            if "lora_" not in name:
                try:
                    self.copy.get_buffer(name).copy_(buf)
                except AttributeError:
                    pass
        self.pairs: list[tuple[Any, Any, Any]] = []  # (copy's parameter, policy's tensor, LoRA layer or None)
        for name, param in self.copy.named_parameters():
            module_name, attr = name.rsplit(".", 1)
            src = base.get_submodule(module_name)
            if _is_lora(src):
                self.pairs.append((param, getattr(src.base_layer, attr), src if attr == "weight" else None))
            else:
                self.pairs.append((param, getattr(src, attr), None))
        self.stale = True
        self._copied_frozen = False
        self.refreshes = 0
        self._hook = None
        self.live = _can_keep_adapter_out(policy, self.lora_layers, dtype)
        if self.live:  # nothing to rebuild: the adapter is re-merged into the packs at every decode
            self._share_base_and_wrap(base)
            self.stale = False
            return
        import weakref

        from torch.optim.optimizer import register_optimizer_step_post_hook

        # a weak reference: the global hook must not keep the sampler (and the policy, copy, packs) alive
        ref = weakref.ref(self)
        self._hook = register_optimizer_step_post_hook(lambda *_: _mark_stale(ref))

    def __getstate__(self) -> dict:
        """Pickled or deep-copied with its policy (the policy's `generate` is this sampler's): only the policy
        goes along, and the copy is rebuilt for it at its first `generate` (its packs are not copied)."""
        return {"policy": self.policy}

    def __setstate__(self, state: dict) -> None:
        self.policy, self.copy, self._hook = state["policy"], None, None

    def _share_base_and_wrap(self, base) -> None:
        """Live-adapter mode: the copy's weights become the policy's own frozen tensors (no second set), and
        each adapted linear layer of the copy computes base(x) + scale * (x A^T) B^T from the policy's live
        adapter weights (merged into its pack at each decode after an update), so the copy needs no refresh."""
        import torch

        from rlft.speed.packed_linear import add_terms

        # new Parameters over the policy's tensors: `detach` shares their version counter, so a pack sees any
        # in-place change of the policy's weight (`param.data = ...` would keep the copy's own counter)
        shared = {id(param): torch.nn.Parameter(src.detach(), requires_grad=False) for param, src, _ in self.pairs}
        for module in self.copy.modules():
            for attr, param in list(module._parameters.items()):
                if param is not None and id(param) in shared:
                    module._parameters[attr] = shared[id(param)]
        self.live_layers = [(self.copy.get_submodule(name), module) for name, module in base.named_modules()
                            if _is_lora(module)]
        for layer, lora in self.live_layers:
            add_terms(layer, _live_terms(lora))
        self.pairs = []
        self.copy.requires_grad_(False)

    def refresh(self) -> None:
        """Merged mode: rebuild the copy from the policy's current weights (adapter merged, rounded once)."""
        import torch

        with torch.no_grad():
            for dst, src, lora in self.pairs:
                if lora is not None and dst.dtype == torch.float32 and _plain_adapters(lora):
                    # in place, no temporary: W + scale * B @ A (fp32 copies: nothing to round)
                    dst.copy_(src)
                    for name in lora.active_adapters:
                        if name in lora.lora_A:
                            dst.addmm_(lora.lora_B[name].weight, lora.lora_A[name].weight,
                                       alpha=lora.scaling[name])
                elif lora is not None:
                    merged = src.to(torch.float32)
                    for name in lora.active_adapters:
                        if name in lora.lora_A or name in getattr(lora, "lora_embedding_A", {}):
                            merged = merged + lora.get_delta_weight(name).to(torch.float32)
                    dst.copy_(merged)
                elif src.requires_grad or not self._copied_frozen:
                    dst.copy_(src)
        self._copied_frozen = True
        self.stale = False
        self.refreshes += 1

    def generate(self, *args: Any, **kwargs: Any):
        import torch

        if self.copy is None and "generate" in self.policy.__dict__:  # a pickled or deep-copied policy's
            self.__init__(self.policy)
        if any(getattr(m, "disable_adapters", False) for m in self.lora_layers[:1]) or any(
                getattr(m, "merged", False) for m in self.lora_layers):
            # adapter off: the copy holds it; merged into the base (peft's merge_adapter): it would count twice
            return self._policy_generate(*args, **kwargs)
        if self.live:  # the active adapters may have changed since: cheap to re-read
            from rlft.speed.packed_linear import invalidate

            for layer, lora in self.live_layers:
                layer.rlft_terms = _live_terms(lora)
                # re-merged into the pack at this decode whatever the version counters say: torch's fused
                # AdamW (TRL's default optimizer) updates the adapter without moving them
                invalidate(layer)
        elif self.stale:
            self.refresh()
        from rlft.speed.decode import decode

        with torch.no_grad():
            out = None if args else decode(self.copy, pack=self.live, **kwargs)
            return out if out is not None else self.copy.generate(*args, **kwargs)

    def _policy_generate(self, *args: Any, **kwargs: Any):
        return type(self.policy).generate(self.policy, *args, **kwargs)

    @contextlib.contextmanager
    def bypassed(self):
        """A context in which the policy's `generate` is its own (peft's, on the policy's current weights), not
        the copy's: rlft.speed.served puts fp32 base weights in the policy for a held-out check, which a bf16
        copy would not see. The copy is untouched; the policy's `generate` is the sampler's again after."""
        ours = self.policy.__dict__.pop("generate", None)
        try:
            yield
        finally:
            if ours is not None:
                self.policy.__dict__["generate"] = ours

    def detach(self) -> None:
        """Give the policy its own `generate` back and drop the copy."""
        if self._hook is not None:
            self._hook.remove()
        self.policy.__dict__.pop("generate", None)
        self.policy.__dict__.pop("rlft_sampler", None)
        self.copy = None


def _mark_stale(ref) -> None:
    sampler = ref()
    if sampler is not None:
        sampler.stale = True


def _live_terms(lora) -> list:
    """(A^T, B^T, scale) per active adapter of a peft LoRA layer: views of its weights, so they follow the
    optimizer's in-place updates (rlft.speed.packed_linear.add_terms: merged into the layer's pack, or added per
    call)."""
    return [(lora.lora_A[n].weight.detach().t(), lora.lora_B[n].weight.detach().t(), lora.scaling[n])
            for n in lora.active_adapters if n in lora.lora_A]


def _can_keep_adapter_out(policy, lora_layers, dtype) -> bool:
    """Whether the copy can share the policy's base weights and carry the adapter as low-rank terms
    (live-adapter mode): fp32 weights, MKL packing available at this thread count, plain LoRA adapters, and no
    trainable weight outside the adapters (only the adapted layers are re-packed at each decode)."""
    import torch

    from rlft.speed import packed_linear

    if dtype != torch.float32 or not packed_linear.available():
        return False
    if torch.get_num_threads() > packed_linear.MAX_THREADS:
        return False
    if not all(_plain_adapters(m) for m in lora_layers):
        return False
    return not any(p.requires_grad for n, p in policy.named_parameters() if "lora_" not in n)


def _plain_adapters(lora) -> bool:
    """Whether every active adapter of a LoRA layer is scale * B @ A on an nn.Linear's [out, in] weight (what
    `refresh` may add in place); peft's `get_delta_weight` covers the rest (fan-in-fan-out, variants)."""
    import torch

    if getattr(lora, "fan_in_fan_out", False) or getattr(lora, "lora_variant", None):
        return False
    if type(lora.base_layer) is not torch.nn.Linear:  # embeddings, convolutions: get_delta_weight
        return False
    return all(type(lora.lora_A[n]) is torch.nn.Linear and type(lora.lora_B[n]) is torch.nn.Linear
               and lora.lora_B[n].bias is None for n in lora.active_adapters if n in lora.lora_A)


def _is_lora(module) -> bool:
    return hasattr(module, "lora_A") and hasattr(module, "base_layer") and hasattr(module, "get_delta_weight")


def attach(policy, console=None) -> PolicySampler | None:
    """Route `policy.generate` through a merged copy where that is faster (see the module docstring);
    returns the sampler, or None where the policy keeps its own `generate`."""
    if getattr(policy, "rlft_sampler", None) is not None:
        return policy.rlft_sampler
    if not hasattr(policy, "get_base_model") or getattr(policy, "device", None) is None:
        return None
    if policy.device.type != "cpu":
        return None
    base = policy.get_base_model()
    layers = [m for m in base.modules() if _is_lora(m)]
    if not layers or any(getattr(m, "use_dora", {}).get(a) or getattr(m, "lora_bias", {}).get(a)
                         for m in layers for a in m.active_adapters):
        return None  # DoRA's norms, a bias on B: neither copy computes them
    if getattr(base, "is_loaded_in_4bit", False) or getattr(base, "is_loaded_in_8bit", False):
        return None
    sampler = PolicySampler(policy)
    policy.__dict__["generate"] = sampler.generate  # an instance attribute: the class's generate is untouched
    policy.__dict__["rlft_sampler"] = sampler
    if console is not None:
        dtype = str(sampler.copy.dtype).replace("torch.", "")
        line = ("the policy's float32 base weights, packed with the live adapter merged in" if sampler.live else
                f"a merged {dtype} copy of the policy, refreshed after each update")
        console.print(f"sampling: {line}", highlight=False)
    return sampler
