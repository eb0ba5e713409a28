"""A lean one-token forward for Llama-layout causal LMs: what rlft.speed.decode runs for each new token.

After the prefill (the model's own forward), every step of rlft.speed.decode feeds one token per row. Through
transformers' modules that step is some 6,000 small tensor ops on SmolLM2-135M (the mask builder, the cache's
dispatch, per-module reshapes and dtype casts, keyword plumbing), as much wall time on a CPU as the weight
products themselves at 8 rows. `step_fn(model, cache)` returns a function that computes the same logits from
the same modules' weights with only the ops the arithmetic needs; a projection packed for the batch's row
count computes from its pack directly (rlft.speed.packed_linear.direct, with the live adapter's terms merged in),
and any other (peft's LoRA layers, a projection with a hook) is called as its module, so everything attached
to a projection applies as before.

It knows one layout exactly: transformers' Llama (SmolLM2, Llama 2/3, the tiny model rlft builds), Qwen2 and
Mistral, whose decoder layers are pre-norm RMSNorm, rotary attention with grouped key/value heads, residual,
RMSNorm, gated MLP. Anything else (another class, a subclass, a hook or patched forward on a module it would
skip, sliding-window layers, an attention implementation other than sdpa/eager, a model in training mode)
gets None and rlft.speed.decode calls the model's forward as before.

Same arithmetic as transformers' forward, in the same dtype, with departures that change the order of
floating-point operations, not the math: RMSNorm is torch's `rms_norm` (exact for fp32 weights; fp16/bf16
models use transformers' formula), the single query's heads are grouped by their key/value head
(transformers' own `pack_gqa` for one-token sdpa) instead of repeating keys and values, and attention is
sdpa (an fp32 model set to eager agrees to float rounding; eager in half precision is declined). Greedy
tokens equal the model's forward on the tiny model and SmolLM2 (tests/speed/test_decode_step.py). The skipped modules'
classes must be transformers' own with transformers' own forward (a class-level patch, a registered
attention function, a subclass anywhere, a hook, a module in training mode: declined).
"""

from __future__ import annotations

# (module of transformers.models, causal LM, model, decoder layer, attention, MLP, RMSNorm) class names
LAYOUTS = {
    "llama": ("LlamaForCausalLM", "LlamaModel", "LlamaDecoderLayer", "LlamaAttention", "LlamaMLP", "LlamaRMSNorm"),
    "qwen2": ("Qwen2ForCausalLM", "Qwen2Model", "Qwen2DecoderLayer", "Qwen2Attention", "Qwen2MLP", "Qwen2RMSNorm"),
    "mistral": ("MistralForCausalLM", "MistralModel", "MistralDecoderLayer", "MistralAttention", "MistralMLP",
                "MistralRMSNorm"),
}


def _layout_classes(model):
    """The layout's classes when `model` is exactly one of LAYOUTS' causal LMs (no subclass) and every class's
    forward is still transformers' own (no patch library has replaced one), else None."""
    import importlib

    cls = type(model)
    for family, names in LAYOUTS.items():
        if cls.__name__ != names[0]:
            continue
        try:
            module = importlib.import_module(f"transformers.models.{family}.modeling_{family}")
        except ImportError:
            return None
        classes = tuple(getattr(module, name, None) for name in names)
        if classes[0] is not cls or not all(_transformers_forward(c, module.__file__) for c in classes):
            return None
        return classes
    return None


def _transformers_forward(cls, modeling_file: str) -> bool:
    """Whether `cls.forward` is the one its modeling file defines, wrapped only by transformers' decorators or by
    the `kernels` package's function router (`_kernels_router`; transformers 5.25+ installs kernels)."""
    import os

    import transformers

    root = os.path.dirname(transformers.__file__)
    f = cls.__dict__.get("forward") if cls is not None else None
    if f is None:
        return False
    while getattr(f, "__wrapped__", None) is not None:
        source = getattr(getattr(f, "__code__", None), "co_filename", "")
        if not (source.startswith(root) or _kernels_router(f)):
            return False  # a wrapper from outside transformers
        f = f.__wrapped__
    return getattr(getattr(f, "__code__", None), "co_filename", None) == modeling_file


# kernels' own function names: the forward wrapper `use_kernelized_func` puts on a class, and the module a
# decorated function becomes (both in kernels/_internals/layer/layer.py)
_ROUTER = "use_kernelized_func.<locals>.decorator.<locals>.new_forward"
_FUNC_FORWARD = "_create_func_module.<locals>.Func.forward"


def _from_kernels(f, qualname: str) -> bool:
    import os
    import sys

    kernels = sys.modules.get("kernels")
    code = getattr(f, "__code__", None)
    if kernels is None or code is None:
        return False
    # the code object's name: functools.wraps gives the wrapper the wrapped function's __qualname__
    name = getattr(code, "co_qualname", None) or code.co_name
    return (name == (qualname if hasattr(code, "co_qualname") else qualname.rsplit(".", 1)[-1])
            and code.co_filename.startswith(os.path.dirname(kernels.__file__)))


def _kernels_router(f) -> bool:
    """Whether `f` is kernels' `use_kernelized_func` wrapper: it routes the modeling file's module-level
    functions (Llama's `apply_rotary_pos_emb`) through per-instance modules that `kernels.kernelize` may swap
    for a hub kernel, and otherwise calls the functions as written. `_kernel_funcs_plain` checks the instances."""
    return _from_kernels(f, _ROUTER)


def _kernel_funcs_plain(module) -> bool:
    """Every per-instance function module kernels attached to `module` still runs the original function: its
    class's forward is kernels' router, nothing set on the instance (kernelize sets `forward` and
    `_kernel_repo` there), no hooks."""
    funcs = module.__dict__.get("_kernel_funcs") or {}
    return all(_plain(f) and "_kernel_repo" not in f.__dict__
               and _from_kernels(type(f).__dict__.get("forward"), _FUNC_FORWARD) for f in funcs.values())


def _plain(module) -> bool:
    """A module whose own forward would be skipped: nothing may be attached to it."""
    return not (module._forward_hooks or module._forward_pre_hooks or "forward" in module.__dict__
                or hasattr(module, "_hf_hook"))


def _attention_is_transformers(model) -> bool:
    """sdpa as transformers' own function, or eager for an fp32 model (in half precision eager's softmax runs in
    fp32 and rounds differently from the lean step's sdpa); nothing registered over either name."""
    import torch
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    impl = getattr(model.config, "_attn_implementation", None)
    if impl == "sdpa":
        return ALL_ATTENTION_FUNCTIONS.get_interface("sdpa", None) is sdpa_attention_forward
    if impl == "eager":
        unset = object()
        return (ALL_ATTENTION_FUNCTIONS.get_interface("eager", unset) is unset
                and all(p.dtype == torch.float32 for p in model.parameters()))
    return False


def full_attention_only(config) -> bool:
    """Whether every layer attends to all earlier positions: no sliding window in use, no other layer type."""
    if getattr(config, "sliding_window", None) and getattr(config, "use_sliding_window", True):
        return False
    return all(t == "full_attention" for t in (getattr(config, "layer_types", None) or []))


def eligible(model) -> bool:
    """Whether step_fn's arithmetic is `model`'s (see the module docstring)."""
    classes = _layout_classes(model)
    if classes is None or any(m.training for m in model.modules()):
        return False
    _, model_cls, layer_cls, attn_cls, mlp_cls, norm_cls = classes
    config = model.config
    if not _attention_is_transformers(model):
        return False
    if not full_attention_only(config):
        return False
    inner = getattr(model, "model", None)
    layers = list(getattr(inner, "layers", []) or [])
    if (type(inner) is not model_cls or not layers or len(layers) < config.num_hidden_layers
            or type(getattr(inner, "norm", None)) is not norm_cls):
        return False
    skipped = [model, inner, inner.norm]
    for layer in layers[:config.num_hidden_layers]:
        if not (type(layer) is layer_cls and type(layer.self_attn) is attn_cls and type(layer.mlp) is mlp_cls
                and type(layer.input_layernorm) is norm_cls and type(layer.post_attention_layernorm) is norm_cls):
            return False
        skipped += [layer, layer.self_attn, layer.mlp, layer.input_layernorm, layer.post_attention_layernorm]
    from torch.nn.modules import module as torch_module

    if torch_module._global_forward_hooks or torch_module._global_forward_pre_hooks:
        return False  # hooks on every module's call: the skipped calls would miss them
    return all(_plain(m) and _kernel_funcs_plain(m) for m in skipped)


def step_fn(model, cache):
    """`step(tokens, positions, mask) -> logits` for one new token per row, or None where not eligible.

    tokens, positions: [rows] (int); mask: [rows, cached + 1], 1 where a row attends (the left padding 0);
    `cache`: the prefilled cache (rlft.speed.decode's reserved one), updated as the model's forward would.
    Returns the last position's logits, [rows, vocab], in the model's dtype."""
    import torch
    import torch.nn.functional as F
    from transformers.cache_utils import DynamicLayer

    if not eligible(model):
        return None
    config = model.config
    inner = model.model
    layers = list(inner.layers[:config.num_hidden_layers])
    cache_layers = list(getattr(cache, "layers", []) or [])
    # per-row key/value layers that append (rlft.speed.decode's in-place ones, transformers' DynamicLayer); the
    # layouts here have no sliding windows (eligible)
    if len(cache_layers) != len(layers) or not all(isinstance(c, DynamicLayer) for c in cache_layers):
        return None
    attn0 = layers[0].self_attn
    head_dim = attn0.head_dim
    kv_heads = config.num_key_value_heads
    groups = config.num_attention_heads // kv_heads
    if groups * kv_heads != config.num_attention_heads:
        return None
    hidden = config.hidden_size

    def norm(x, module):
        if module.weight.dtype == torch.float32 and x.dtype == torch.float32:
            return F.rms_norm(x, (hidden,), module.weight, module.variance_epsilon)
        return module.weight * F.rms_norm(x.float(), (hidden,), eps=module.variance_epsilon).to(x.dtype)

    def rotate(x, cos, sin_signed):
        # x * cos + rotate_half(x) * sin, with rotate_half(x) * sin == roll(x) * [-sin_1, sin_2] exactly (the
        # sign moves to sin: the same products and the same rounding as transformers', in every dtype)
        return x * cos + x.roll(x.size(-1) // 2, -1) * sin_signed

    projections: dict[int, list] = {}

    def linears(rows: int) -> list:
        """Per layer (q, k, v, o, gate, up, down), then the LM head: each projection's packed product where
        it is packed for `rows` (rlft.speed.packed_linear.direct, made once per row count of this decode), else
        the module itself."""
        if rows not in projections:
            from rlft.speed.packed_linear import direct

            mods = [m for layer in layers for m in (layer.self_attn.q_proj, layer.self_attn.k_proj,
                                                    layer.self_attn.v_proj, layer.self_attn.o_proj,
                                                    layer.mlp.gate_proj, layer.mlp.up_proj, layer.mlp.down_proj)]
            projections[rows] = [direct(m, rows) or m for m in mods + [model.lm_head]]
        return projections[rows]

    def step(tokens, positions, mask):
        rows = tokens.size(0)
        lin = linears(rows)
        h = inner.embed_tokens(tokens[:, None])  # [rows, 1, hidden]
        cos, sin = inner.rotary_emb(h, positions[:, None])  # [rows, 1, head_dim]
        half = head_dim // 2
        cos, sin = cos[:, None], torch.cat((-sin[..., :half], sin[..., half:]), dim=-1)[:, None]
        keep = mask.bool()[:, None, None, :]  # [rows, 1, 1, cached + 1]
        for i, (layer, cached) in enumerate(zip(layers, cache_layers)):
            q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj = lin[7 * i:7 * i + 7]
            attn = layer.self_attn
            x = norm(h, layer.input_layernorm)
            # one query token: its heads grouped under their key/value head, as queries of that head
            q = rotate(q_proj(x).view(rows, kv_heads, groups, head_dim), cos, sin)
            k = rotate(k_proj(x).view(rows, kv_heads, 1, head_dim), cos, sin)
            v = v_proj(x).view(rows, kv_heads, 1, head_dim)
            keys, values = cached.update(k, v)
            a = F.scaled_dot_product_attention(q, keys, values, attn_mask=keep, scale=attn.scaling)
            h = h + o_proj(a.reshape(rows, 1, -1))
            x = norm(h, layer.post_attention_layernorm)
            h = h + down_proj(layer.mlp.act_fn(gate_proj(x)) * up_proj(x))
        return lin[-1](norm(h, inner.norm))[:, -1]

    return step
