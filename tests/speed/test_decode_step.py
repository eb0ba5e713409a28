"""rlft.speed.decode_step: the lean decode step gives the model's logits and cache; at its edges (a hostile
review's cases) whatever would make the model's forward compute something else declines it."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")


def _config(**kw):
    from transformers import GenerationConfig

    return GenerationConfig(**{"max_new_tokens": 16, "pad_token_id": 0, "eos_token_id": [3], **kw})


def _small(family, **kw):
    """A random two-layer causal LM of a layout rlft.speed.decode_step knows (GQA: 4 query heads over 2)."""
    import transformers

    names = {"llama": "Llama", "qwen2": "Qwen2", "mistral": "Mistral"}[family]
    shape = dict(vocab_size=97, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                 intermediate_size=128, max_position_embeddings=256, pad_token_id=0)
    config = getattr(transformers, f"{names}Config")(**{**shape, **kw})
    torch.manual_seed(0)
    return getattr(transformers, f"{names}ForCausalLM")(config).eval()


def _prefilled(model, ids, mask, room):
    """rlft.speed.decode's reserved cache after the model's own prefill of left-padded `ids`."""
    from rlft.speed.decode import reserved_cache

    cache = reserved_cache(model.config, room)
    position = (mask.cumsum(-1) - 1).clamp(min=0)
    model(input_ids=ids, attention_mask=mask, position_ids=position, cache=cache, use_cache=True)
    return cache, position[:, -1]


@pytest.mark.parametrize("family,kw", [("llama", {}), ("llama", dict(num_key_value_heads=4)),
                                       ("llama", dict(rope_parameters={"rope_type": "linear", "factor": 2.0,
                                                                       "rope_theta": 10000.0})),
                                       ("qwen2", {}), ("mistral", dict(sliding_window=None))])
def test_lean_step_gives_the_models_logits_and_cache(family, kw):
    """Step by step from the same prefill, the lean one-token forward and the model's forward agree on the
    logits and write the same keys and values (left padding, GQA, rope scaling, Qwen2's q/k/v biases)."""
    model = _small(family, **kw)
    if family == "qwen2":  # random init leaves the biases zero: make them count
        with torch.no_grad():
            for layer in model.model.layers:
                layer.self_attn.q_proj.bias.normal_(0, 0.5)
                layer.self_attn.k_proj.bias.normal_(0, 0.5)
    assert _lean_agrees(model), "the lean step declined"


def _lean_agrees(model, atol=2e-5) -> bool:
    """Six lean steps against the model's forward from the same left-padded prefill: logits and keys/values
    agree (asserted); False where the lean step declines (then the model's forward runs)."""
    from rlft.speed.decode_step import step_fn

    ids = torch.tensor([[0, 0, 11, 12, 13], [21, 22, 23, 24, 25], [0, 0, 0, 0, 31]])
    mask = ids.ne(0).long()
    with torch.no_grad():
        lean_cache, last = _prefilled(model, ids, mask, 8)
        ref_cache, _ = _prefilled(model, ids, mask, 8)
        step = step_fn(model, lean_cache)
        if step is None:
            return False
        token = torch.tensor([5, 6, 7])
        for _ in range(6):
            mask = torch.cat([mask, mask.new_ones(3, 1)], dim=1)
            last = last + 1
            got = step(token, last, mask)
            want = model(input_ids=token[:, None], attention_mask=mask, position_ids=last[:, None],
                         cache=ref_cache, use_cache=True).logits[:, -1]
            torch.testing.assert_close(got, want, atol=atol, rtol=1e-5)
            token = want.argmax(-1)
        for a, b in zip(lean_cache.layers, ref_cache.layers):
            torch.testing.assert_close(a.keys, b.keys)
            torch.testing.assert_close(a.values, b.values)
    return True


def _subclassed():
    from transformers import LlamaForCausalLM

    class Patched(LlamaForCausalLM):
        pass

    model = _small("llama")
    model.__class__ = Patched
    return model


@pytest.mark.parametrize("change", ["subclass", "layer hook", "norm forward", "training", "sliding window",
                                    "flex attention"])
def test_lean_step_declines_what_it_cannot_vouch_for(change):
    """Anything that could make the model's forward differ from the lean arithmetic sends rlft.speed.decode back to
    the model's forward; greedy tokens stay generate's."""
    from rlft.speed.decode import decode
    from rlft.speed.decode_step import eligible

    model = _small("llama")
    assert eligible(model)
    if change == "subclass":
        model = _subclassed()
    elif change == "layer hook":
        model.model.layers[1].register_forward_hook(lambda mod, args, out: out)
    elif change == "norm forward":
        model.model.layers[0].post_attention_layernorm.forward = lambda x: x
    elif change == "training":
        model.train()
    elif change == "sliding window":
        model = _small("mistral", sliding_window=3)
    elif change == "flex attention":
        model.config._attn_implementation = "flex_attention"
    assert not eligible(model)
    model.config._attn_implementation = "sdpa"
    if change in ("training", "subclass", "sliding window"):
        model.eval()
        ids = torch.tensor([[0, 0, 11, 12, 13], [21, 22, 23, 24, 25]])
        cfg = _config(do_sample=False, eos_token_id=[96], max_new_tokens=10)
        with torch.no_grad():
            want = model.generate(input_ids=ids, attention_mask=ids.ne(0).long(), generation_config=cfg)
            got = decode(model, input_ids=ids, attention_mask=ids.ne(0).long(), generation_config=cfg)
        assert torch.equal(got, want)


def _agree(model, atol=2e-5):
    """The lean step either declines or gives the model's logits and cache (test_decode's comparison)."""
    _lean_agrees(model, atol)


def test_a_class_level_patch_of_a_skipped_forward_is_not_bypassed(monkeypatch):
    """Monkeypatching the class (what kernel/patch libraries and users do: LlamaMLP.forward = ...) keeps the
    type identical, so eligible() says yes and the lean step skips the patched forward."""
    from transformers.models.llama import modeling_llama

    orig = modeling_llama.LlamaMLP.forward
    monkeypatch.setattr(modeling_llama.LlamaMLP, "forward", lambda self, x: 0.5 * orig(self, x))
    _agree(_small("llama"))


def test_a_registered_attention_function_is_not_bypassed(monkeypatch):
    """The model's attention goes through ALL_ATTENTION_FUNCTIONS[config._attn_implementation]; a function
    registered over "sdpa" is what the model's forward runs, the lean step calls F.sdpa itself."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    def scaled(module, q, k, v, mask, **kw):
        out, w = sdpa_attention_forward(module, q, k, v, mask, **kw)
        return out * 0.5, w

    monkeypatch.setitem(ALL_ATTENTION_FUNCTIONS._global_mapping, "sdpa", scaled)
    _agree(_small("llama"))


def test_a_subclassed_final_norm_is_not_bypassed():
    """eligible() checks the final norm with isinstance (the layers' norms with `type is`)."""
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    class Scaled(LlamaRMSNorm):
        def forward(self, x):
            return 2.0 * super().forward(x)

    model = _small("llama")
    old = model.model.norm
    model.model.norm = Scaled(old.weight.numel(), eps=old.variance_epsilon)
    _agree(model)


def test_a_subclassed_inner_model_is_not_bypassed():
    """model.model's class is never checked: a LlamaModel subclass with its own forward is skipped."""
    from transformers.models.llama.modeling_llama import LlamaModel

    class Patched(LlamaModel):
        def forward(self, *args, **kwargs):
            out = super().forward(*args, **kwargs)
            out.last_hidden_state = out.last_hidden_state * 0.5
            return out

    model = _small("llama")
    model.model.__class__ = Patched
    _agree(model)


def test_an_attention_module_left_in_training_mode_keeps_its_dropout():
    """eligible() reads model.training only; a submodule in training mode runs dropout in the model's forward."""
    model = _small("llama", attention_dropout=0.5)
    model.model.layers[0].self_attn.train()
    torch.manual_seed(0)
    _agree(model)


def test_eager_bf16_logits_are_the_models():
    """Eager attention in bf16 (softmax in fp32, cast to bf16, then a bf16 matmul) against the lean step's sdpa."""
    model = _small("llama", attn_implementation="eager").to(torch.bfloat16)
    _agree(model, atol=0.0)


def test_a_hook_on_a_packed_projection_runs_in_a_packed_decode(tiny_dir, one_thread):
    """The lean step calls packed projections directly (rlft.speed.packed_linear.direct); a projection with a hook
    is called as a module, so its hook sees every token."""
    from transformers import AutoModelForCausalLM, GenerationConfig

    from rlft.speed import packed_linear
    from rlft.speed.decode import decode

    if not packed_linear.available():
        pytest.skip("this torch has no MKL packed gemm")
    model = AutoModelForCausalLM.from_pretrained(tiny_dir).eval()
    calls = []
    model.model.layers[0].mlp.up_proj.register_forward_hook(lambda m, args, out: calls.append(out.shape))
    ids = torch.tensor([[5, 6, 7], [8, 9, 10]])
    cfg = GenerationConfig(do_sample=False, max_new_tokens=6, eos_token_id=[1], pad_token_id=0)
    with torch.no_grad():
        got = decode(model, input_ids=ids, attention_mask=torch.ones_like(ids), generation_config=cfg, pack=True)
        packed_linear.unpack(model)
        calls.clear()
        want = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), generation_config=cfg)
    assert torch.equal(got, want)
    assert len(calls) == want.size(1) - ids.size(1)  # the prefill and every later token went through the hook


@pytest.mark.parametrize("family", ["llama", "qwen2"])
def test_sdpa_bf16_logits_are_the_models_bit_for_bit(family):
    """The lean step's rotary (roll with the sign on sin) rounds as transformers' rotate_half does: in bf16
    (rlft's merged sampling copy on CPUs with bf16 units) a fused multiply-add there changed greedy tokens."""
    model = _small(family).to(torch.bfloat16)
    assert _lean_agrees(model, atol=0.0)


def test_a_kernelized_rotary_function_is_not_bypassed():
    """transformers 5.25+ routes Llama's apply_rotary_pos_emb through a per-attention module of the `kernels`
    package, which `kernels.kernelize` swaps for a hub kernel by setting its instance forward. The router
    itself is accepted (the lean step runs on a plain install); a swapped function on any layer declines it,
    and the decode then gives the model's own (changed) logits."""
    import types

    pytest.importorskip("kernels")
    model = _small("llama")
    from rlft.speed.decode_step import eligible

    funcs = model.model.layers[1].self_attn.__dict__.get("_kernel_funcs")
    if not funcs:
        pytest.skip("this transformers does not route functions through kernels")
    assert eligible(model), "kernels' router alone should not decline the lean step"
    name, func = next(iter(funcs.items()))
    original = type(func).forward

    def halved(self, q, k, *args, **kwargs):
        q2, k2 = original(self, q, k, *args, **kwargs)
        return 0.5 * q2, k2

    func.forward = types.MethodType(halved, func)  # what kernelize does with a hub kernel
    assert not eligible(model)
    _agree(model)
