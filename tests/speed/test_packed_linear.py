"""rlft.speed.packed_linear and the live sampler at their edges (a hostile review's cases): fused optimizers,
wrong widths, trainable biases, copies."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")


def _need_mkl():
    from rlft.speed import packed_linear

    if not packed_linear.available():
        pytest.skip("this torch has no MKL packed gemm")


@pytest.fixture
def policy(tiny_dir):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(tiny_dir)
    peft = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", lora_dropout=0.0))
    with torch.no_grad():
        for name, p in peft.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5)
    return peft


@pytest.mark.parametrize("optim", ["fused", "foreach"])
def test_fused_adamw_step_is_seen_by_the_live_sampler(policy, one_thread, optim):
    """transformers' default optimizer (TRL's GRPOConfig/RLOOConfig: optim=adamw_torch_fused) updates the
    adapter without bumping the version counters the pack state keys on: the copy keeps sampling from the
    adapter it packed first."""
    _need_mkl()
    from rlft.speed.sampling import attach

    ids = torch.tensor([[10, 20, 30, 40], [11, 21, 31, 41]])
    sampler = attach(policy)
    try:
        assert sampler.live
        policy.generate(input_ids=ids, attention_mask=ids.ne(-1), max_new_tokens=6, do_sample=False,
                        pad_token_id=0, eos_token_id=3)  # packs, adapter merged
        opt = torch.optim.AdamW([p for p in policy.parameters() if p.requires_grad], lr=0.5, **{optim: True})
        policy(input_ids=ids, labels=ids).loss.backward()
        opt.step()
        policy.generate(input_ids=ids, attention_mask=ids.ne(-1), max_new_tokens=6, do_sample=False,
                        pad_token_id=0, eos_token_id=3)  # the decode that should re-pack
        layer = sampler.copy.model.layers[0].self_attn.q_proj  # packed for the decode's 2 rows
        lora = policy.get_base_model().model.layers[0].self_attn.q_proj
        x = torch.randn(2, 1, layer.in_features)
        with torch.no_grad():
            torch.testing.assert_close(layer(x), lora(x), atol=1e-4, rtol=1e-4)
        want = type(policy).generate(policy, input_ids=ids, attention_mask=ids.ne(-1), max_new_tokens=12,
                                     do_sample=False, pad_token_id=0, eos_token_id=3)
        got = policy.generate(input_ids=ids, attention_mask=ids.ne(-1), max_new_tokens=12, do_sample=False,
                              pad_token_id=0, eos_token_id=3)
        assert torch.equal(got, want)
    finally:
        sampler.detach()


def test_a_packed_layer_rejects_an_input_of_the_wrong_width(one_thread):
    """F.linear raises on x.size(-1) != in_features; the packed path hands MKL k = x.size(-1) against a pack
    made for in_features (out-of-bounds read of the pack)."""
    _need_mkl()
    from rlft.speed.packed_linear import pack

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 48))
    with torch.no_grad():
        assert pack(model, 4)
        with pytest.raises(RuntimeError):
            model[0](torch.randn(4, 80))


def test_a_trainable_bias_keeps_its_gradient_through_a_packed_layer(one_thread):
    """Frozen weight, trainable bias (BitFit, peft bias='all'): a grad-enabled call on a packed layer takes the
    packed path (the bias is not among the checks) and the bias gets no gradient."""
    _need_mkl()
    from rlft.speed.packed_linear import pack

    torch.manual_seed(0)
    layer = torch.nn.Linear(16, 8)
    layer.weight.requires_grad_(False)
    model = torch.nn.Sequential(layer)
    with torch.no_grad():
        assert pack(model, 4)
    layer(torch.randn(4, 16)).sum().backward()
    assert layer.bias.grad is not None


@pytest.mark.parametrize("how", ["deepcopy", "pickle"])
def test_a_packed_layer_copies(one_thread, how):
    """A packed model deep-copies and pickles (its forward is a partial of a module-level function) and the copy
    computes what the original does."""
    import copy
    import pickle

    _need_mkl()
    from rlft.speed.packed_linear import pack

    model = torch.nn.Sequential(torch.nn.Linear(16, 8))
    with torch.no_grad():
        assert pack(model, 4)
        x = torch.randn(4, 16)
        other = copy.deepcopy(model) if how == "deepcopy" else pickle.loads(pickle.dumps(model))
        torch.testing.assert_close(other(x), model(x))


def test_a_direct_product_is_the_layers_and_declines_what_it_would_skip(one_thread):
    """packed_linear.direct (rlft.speed.decode_step's per-token products): the layer's own output, and None wherever
    a call of the layer would do something else (a hook, another row count, a changed weight, a forward of its
    own; with grad enabled, a weight that trains goes through the module)."""
    _need_mkl()
    from rlft.speed.packed_linear import direct, pack

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 48))
    layer, x = model[0], torch.randn(4, 64)
    with torch.no_grad():
        assert direct(layer, 4) is None  # not packed
        assert pack(model, 4)
        product = direct(layer, 4)
        assert product is not None and torch.allclose(product(x), layer(x), atol=1e-5)
        assert torch.allclose(product(x[:, None]), layer(x)[:, None], atol=1e-5)  # [rows, 1, in] as decode has
        with pytest.raises(RuntimeError):
            product(torch.randn(4, 80))  # the wrong width: refused before MKL reads
        assert direct(layer, 5) is None  # packed for 4 rows
        handle = layer.register_forward_hook(lambda *a: None)
        assert direct(layer, 4) is None
        handle.remove()
        layer.weight.add_(1.0)  # an in-place change: the pack is stale
        assert direct(layer, 4) is None
        assert pack(model, 4) and direct(layer, 4) is not None
        product = direct(layer, 4)
    out = product(x)  # grad enabled and a weight that trains: the module's call, which autograd sees
    assert out.requires_grad and torch.allclose(out, layer(x), atol=1e-5)
    layer.weight.requires_grad_(False)
    with torch.no_grad():
        product = direct(layer, 4)
    assert product(x.requires_grad_()).requires_grad  # a frozen layer, an input that needs grad: the same
    layer.forward = lambda x: x  # a forward of its own
    assert direct(layer, 4) is None
