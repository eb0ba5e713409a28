"""rlft.speed.decode_step at its edges (a hostile review's cases): whatever would make the model's forward
compute something else declines the lean step."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from tests.speed.test_decode import _lean_agrees, _small  # noqa: E402


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
