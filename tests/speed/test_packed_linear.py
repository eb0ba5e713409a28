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


def test_packed_linear_matches_and_follows_weight_changes(one_thread):
    from rlft.speed.packed_linear import MAX_THREADS, available, pack, unpack

    if not available():
        pytest.skip("this torch has no MKL packed gemm")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(24, 40), torch.nn.Linear(40, 8, bias=False))
    x = torch.randn(5, 24)
    with torch.no_grad():
        want = model(x)
        assert pack(model, 5)
        assert torch.allclose(model(x), want, atol=1e-5)
        assert torch.equal(model(x[:3]), torch.nn.functional.linear(torch.nn.functional.linear(
            x[:3], model[0].weight, model[0].bias), model[1].weight))  # another row count: the plain product
        model[0].weight.mul_(2.0)  # an in-place update (a sampler refresh): re-packed at the next pack()
        changed = torch.nn.functional.linear(torch.nn.functional.linear(x, model[0].weight, model[0].bias),
                                             model[1].weight)
        assert pack(model, 5) and torch.allclose(model(x), changed, atol=1e-5)
        assert not torch.allclose(changed, want, atol=1e-3)
        unpack(model)
        assert "forward" not in model[0].__dict__
        assert not pack(model.to(torch.bfloat16), 5)  # fp32 only
        assert not pack(torch.nn.Sequential(torch.nn.Linear(4, 4)), 0)
        assert pack(model.float(), 5)
        torch.set_num_threads(2)  # the pack was laid out for one thread: plain until re-packed for two
        plain = torch.nn.functional.linear(torch.nn.functional.linear(x, model[0].weight, model[0].bias),
                                           model[1].weight)
        assert torch.equal(model(x), plain)
        assert pack(model, 5) and model[0].rlft_packed_state[:2] == (5, 2)
        assert torch.allclose(model(x), plain, atol=1e-5)
        torch.set_num_threads(MAX_THREADS + 1)  # more threads than measured: MKL's plain product
        assert not pack(model, 5) and "forward" not in model[0].__dict__


def test_packs_are_made_in_the_calling_thread_and_only_stale_layers_are_redone(monkeypatch, one_thread):
    """Packs are made in the thread that computes (MKL lays them out for its thread count; a second thread's
    OpenMP team slowed every later op); a re-pack redoes only the layers whose weight changed, into the same
    buffer; a pack that fails leaves a plain layer, not a stale or half-written pack."""
    import threading

    import rlft.speed.packed_linear as pl

    if not pl.available():
        pytest.skip("this torch has no MKL packed gemm")
    seen = []
    real = pl._pack
    monkeypatch.setattr(pl, "_pack", lambda mkl, weight, rows, buffer=None: seen.append(
        (threading.current_thread(), tuple(weight.shape), buffer is not None)) or real(mkl, weight, rows, buffer))
    model = torch.nn.Sequential(torch.nn.Linear(24, 40), torch.nn.Linear(40, 8))
    x = torch.randn(4, 24)
    with torch.no_grad():
        assert pl.pack(model, 4)
        buffer = model[1].rlft_packed
        model[1].weight.add_(1.0)
        assert pl.pack(model, 4) and pl.pack(model, 4)  # the third call finds nothing stale
        assert all(t is threading.current_thread() for t, _, _ in seen)
        assert [s[1:] for s in seen] == [((40, 24), False), ((8, 40), False), ((8, 40), True)]
        assert model[1].rlft_packed is buffer  # re-packed in place
        assert torch.allclose(model(x), torch.nn.functional.linear(torch.nn.functional.linear(
            x, model[0].weight, model[0].bias), model[1].weight, model[1].bias), atol=1e-5)
        model[0].weight.add_(1.0)
        monkeypatch.setattr(pl, "_pack", lambda *a: (_ for _ in ()).throw(MemoryError("no room")))
        with pytest.raises(MemoryError):
            pl.pack(model, 4)
        assert "forward" not in model[0].__dict__ and "rlft_packed" not in model[0].__dict__
        want = torch.nn.functional.linear(torch.nn.functional.linear(x, model[0].weight, model[0].bias),
                                          model[1].weight, model[1].bias)
        assert torch.allclose(model(x), want, atol=1e-5)  # layer 0 plain, layer 1 still its fresh pack


def test_packed_products_are_torchs_mkl_products(one_thread):
    """rlft's ctypes binding of MKL's packed gemm gives bit for bit what torch's own MKL ops give."""
    import rlft.speed.packed_linear as pl

    if not pl.available() or not hasattr(torch.ops.mkl, "_mkl_reorder_linear_weight"):
        pytest.skip("this torch has no MKL packed gemm")
    g = torch.Generator().manual_seed(0)
    for out, inp, rows in [(40, 24, 3), (192, 576, 8), (576, 1536, 8)]:
        weight, x = torch.randn(out, inp, generator=g), torch.randn(rows, inp, generator=g)
        want = torch.ops.mkl._mkl_linear(x, torch.ops.mkl._mkl_reorder_linear_weight(weight, rows), weight, None,
                                         rows)
        assert torch.equal(pl._product(pl._mkl(), x, pl._pack(pl._mkl(), weight, rows), out), want)


def test_low_rank_terms_are_merged_into_the_pack_and_follow_updates(one_thread):
    """A layer with low-rank terms (the live adapter) computes W x + scale (x A^T) B^T from its pack with the
    terms merged in; an in-place change of A or B is never served from the old pack (plain product plus terms
    until the next pack), and the next pack rewrites the same buffer."""
    import rlft.speed.packed_linear as pl

    if not pl.available():
        pytest.skip("this torch has no MKL packed gemm")
    g = torch.Generator().manual_seed(0)
    layer = torch.nn.Linear(24, 40)
    a, b = torch.randn(4, 24, generator=g), torch.randn(40, 4, generator=g)  # lora_A [r, in], lora_B [out, r]
    x = torch.randn(5, 24, generator=g)

    def want():
        return torch.nn.functional.linear(x, layer.weight, layer.bias) + 0.5 * (x @ a.t()) @ b.t()

    with torch.no_grad():
        pl.add_terms(layer, [(a.t(), b.t(), 0.5)])
        assert torch.allclose(layer(x), want(), atol=1e-5)  # not packed yet: plain + terms
        assert pl.pack(layer, 5)
        buffer = layer.rlft_packed
        assert torch.allclose(layer(x), want(), atol=1e-5)  # from the merged pack
        b.mul_(-3.0)  # an optimizer step on B, in place
        assert torch.allclose(layer(x), want(), atol=1e-5)  # stale pack not used
        assert pl.pack(layer, 5) and layer.rlft_packed is buffer
        assert torch.allclose(layer(x), want(), atol=1e-5)
        calls = []
        real = torch.nn.functional.linear
        try:
            torch.nn.functional.linear = lambda *args: calls.append(1) or real(*args)
            layer(x)
        finally:
            torch.nn.functional.linear = real
        assert not calls  # the product came from the pack


def test_a_stale_pack_is_never_used(tiny_dir, one_thread):
    """Weights refreshed in place after packing for 4 rows, then a decode of 40 rows (more than MAX_ROWS: pack
    declines) whose finished rows leave until 4 are left: the tokens are the unpacked model's (review of the
    packed sampling copy: a stale pack used to serve those 4 rows)."""
    from transformers import AutoModelForCausalLM, GenerationConfig

    from rlft.speed.decode import decode
    from rlft.speed.packed_linear import available

    if not available():
        pytest.skip("this torch has no MKL packed gemm")
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(tiny_dir).eval()
    a, b = [0, 0, 10, 20, 30], [5, 6, 7, 8, 9]
    with torch.no_grad():
        ids = torch.tensor([a, b])
        first = decode(model, input_ids=ids, attention_mask=ids.ne(0).long(),
                       generation_config=GenerationConfig(max_new_tokens=1, do_sample=False, pad_token_id=0,
                                                          eos_token_id=[1]))
        stop = int(first[0, -1])  # prompt a's first greedy token: its rows stop at step 0
        assert int(first[1, -1]) != stop
        cfg = GenerationConfig(max_new_tokens=12, do_sample=False, pad_token_id=0, eos_token_id=[stop])
        small = torch.tensor([b] * 4)
        decode(model, input_ids=small, attention_mask=small.ne(0).long(), generation_config=cfg, pack=True)
        g = torch.Generator().manual_seed(1)
        for p in model.parameters():  # a refresh: weights rewritten in place
            p.add_(torch.randn(p.shape, generator=g) * 0.05)
        plain = AutoModelForCausalLM.from_pretrained(tiny_dir).eval()
        plain.load_state_dict(model.state_dict())
        assert torch.allclose(model(input_ids=small[:, :1]).logits, plain(input_ids=small[:, :1]).logits,
                              atol=1e-5)  # 4 rows, the count packed for: the changed weights, not the pack
        big = torch.tensor([a] * 36 + [b] * 4)
        got = decode(model, input_ids=big, attention_mask=big.ne(0).long(), generation_config=cfg, pack=True)
        want = decode(plain, input_ids=big, attention_mask=big.ne(0).long(), generation_config=cfg)
    assert torch.equal(got, want)
    assert not any("rlft_packed" in m.__dict__ for m in model.modules())  # the declined pack dropped them
