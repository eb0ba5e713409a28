"""rlft.speed.decode: the sampling loop the merged sampling copy runs instead of `generate`."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def model(tiny_dir):
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    return AutoModelForCausalLM.from_pretrained(tiny_dir).eval()


def _config(**kw):
    from transformers import GenerationConfig

    return GenerationConfig(**{"max_new_tokens": 16, "pad_token_id": 0, "eos_token_id": [3], **kw})


def _prompts():
    # left-padded, two of them repeated (as GRPO batches them), one row much shorter than the rest
    ids = torch.tensor([[0, 0, 10, 20, 30], [5, 6, 7, 8, 9], [0, 0, 10, 20, 30], [0, 0, 0, 0, 44],
                        [5, 6, 7, 8, 9]])
    return ids, ids.ne(0).long()


@pytest.mark.parametrize("stops", [[3], [3, 17, 25]])
def test_greedy_decoding_gives_generates_tokens(model, stops):
    from rlft.speed.decode import decode

    ids, mask = _prompts()
    cfg = _config(do_sample=False, eos_token_id=stops, max_new_tokens=24)
    with torch.no_grad():
        want = model.generate(input_ids=ids, attention_mask=mask, generation_config=cfg)
        got = decode(model, input_ids=ids, attention_mask=mask, generation_config=cfg)
    assert got is not None and torch.equal(got, want)


@pytest.mark.parametrize("pack", [False, True])
def test_distinct_prompts_keep_their_rows(model, pack, one_thread):
    """Every prompt distinct, in an order torch.unique (which finds the repeats) sorts differently: each row
    gets its own prompt's completion, as generate gives it (review: rlft eval and the held-out checks got
    the completions in sorted order when no prompt repeated)."""
    from rlft.speed.decode import decode
    from rlft.speed.packed_linear import unpack

    ids = torch.tensor([[50, 60, 70, 80], [0, 0, 9, 8], [40, 30, 20, 10], [0, 12, 13, 14]])
    mask = ids.ne(0).long()
    cfg = _config(do_sample=False, eos_token_id=[3], max_new_tokens=12)
    with torch.no_grad():
        want = model.generate(input_ids=ids, attention_mask=mask, generation_config=cfg)
        got = decode(model, input_ids=ids, attention_mask=mask, generation_config=cfg, pack=pack)
        unpack(model)
    assert not torch.equal(torch.unique(ids, dim=0), ids)  # the case: unique reorders these rows
    assert got is not None and torch.equal(got, want)


def test_rows_stop_at_their_own_stop_token_and_are_padded_after_it(model):
    from rlft.speed.decode import decode

    ids, mask = _prompts()
    torch.manual_seed(1)
    with torch.no_grad():
        out = decode(model, input_ids=ids, attention_mask=mask,
                     generation_config=_config(do_sample=True, temperature=3.0, eos_token_id=[3, 17, 25],
                                               max_new_tokens=40))
    new = out[:, ids.size(1):]
    assert new.size(1) <= 40
    for row in new.tolist():
        stop = next((i for i, t in enumerate(row) if t in (3, 17, 25)), None)
        if stop is not None:
            assert all(t == 0 for t in row[stop + 1:])


def _hf_filtered(logits, cfg):
    """The tokens transformers' own warpers leave possible."""
    from transformers.generation.logits_process import (
        MinPLogitsWarper,
        TemperatureLogitsWarper,
        TopKLogitsWarper,
        TopPLogitsWarper,
    )
    from transformers.generation.utils import GenerationMixin  # noqa: F401

    scores = TemperatureLogitsWarper(cfg.temperature)(None, logits.clone())
    if cfg.top_k:
        scores = TopKLogitsWarper(cfg.top_k)(None, scores)
    if cfg.top_p is not None and cfg.top_p < 1:
        scores = TopPLogitsWarper(cfg.top_p)(None, scores)
    if cfg.min_p:
        scores = MinPLogitsWarper(cfg.min_p)(None, scores)
    return torch.softmax(scores, -1)


@pytest.mark.parametrize("kw", [dict(), dict(top_k=5), dict(top_p=0.8), dict(min_p=0.2),
                                dict(top_k=20, top_p=0.9, temperature=0.5)])
def test_sampled_tokens_follow_the_filtered_distribution(kw):
    """Draws from the inverse-CDF sampler match the probabilities transformers' warpers give (chi-square)."""
    from rlft.speed.decode import _next_tokens

    torch.manual_seed(0)
    logits = torch.randn(1, 30) * 2
    cfg = _config(do_sample=True, **{"temperature": 1.0, "top_k": 0, **kw})
    want = _hf_filtered(logits, cfg)[0]
    draws = _next_tokens(logits.expand(20000, -1), cfg)
    counts = torch.bincount(draws, minlength=30).float()
    assert counts[want == 0].sum() == 0  # nothing the warpers filter out is ever drawn
    keep = want > 0
    expected = want[keep] * counts.sum()
    chi2 = float(((counts[keep] - expected) ** 2 / expected).sum())
    assert chi2 < 3 * int(keep.sum()) + 30, (chi2, int(keep.sum()))


@pytest.mark.parametrize("kw", [dict(num_beams=2), dict(repetition_penalty=1.3), dict(min_new_tokens=4),
                                dict(no_repeat_ngram_size=2), dict(suppress_tokens=[5])])
def test_settings_it_does_not_handle_fall_back_to_generate(model, kw):
    from rlft.speed.decode import decode

    ids, mask = _prompts()
    assert decode(model, input_ids=ids, attention_mask=mask, generation_config=_config(**kw)) is None


def test_generation_stops_at_the_models_last_position(model):
    from rlft.speed.decode import decode

    ids = torch.full((2, model.config.max_position_embeddings - 3), 10)
    with torch.no_grad():
        out = decode(model, input_ids=ids, attention_mask=torch.ones_like(ids),
                     generation_config=_config(do_sample=True, eos_token_id=[999], max_new_tokens=50))
    assert out.size(1) <= model.config.max_position_embeddings


def test_lora_over_a_bf16_base_computes_in_bf16_with_fp32_weights(tiny_dir):
    """The adapter's matmuls run in the base's dtype (no fp32 activations), its weights and gradients stay fp32,
    and the gradients agree with peft's fp32 path to bf16 precision."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from rlft.models import _fp32_trainable

    def build(ours):
        torch.manual_seed(0)
        m = AutoModelForCausalLM.from_pretrained(tiny_dir, dtype=torch.bfloat16)
        pm = get_peft_model(m, LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", lora_dropout=0.0,
                                          init_lora_weights=False))
        if ours:
            _fp32_trainable(pm)
        else:
            for p in pm.parameters():
                if p.requires_grad:
                    p.data = p.data.float()
        return pm

    ids = torch.randint(4, 60, (4, 24), generator=torch.Generator().manual_seed(0))
    grads, dtypes = [], []
    for ours in (False, True):
        pm = build(ours)
        seen = []
        lora = next(m for n, m in pm.named_modules() if n.endswith("lora_B.default"))
        lora.register_forward_hook(lambda mod, args, out, seen=seen: seen.append(out.dtype))
        pm(input_ids=ids, labels=ids).loss.backward()
        dtypes.append(seen[0])
        grads.append(torch.cat([p.grad.flatten() for p in pm.parameters() if p.requires_grad]))
        assert all(p.dtype == torch.float32 for p in pm.parameters() if p.requires_grad)
    assert dtypes == [torch.float32, torch.bfloat16]
    rel = float((grads[1] - grads[0]).norm() / grads[0].norm())
    assert 0 < rel < 0.05, rel


def test_a_bf16_base_keeps_fp32_activations_between_bf16_matmuls(tiny_dir):
    """rlft.speed.activations.fp32_activations: over a bf16 base the residual stream is fp32, the base weights stay
    bf16, and the adapter's gradients stay within bf16 rounding of fp32's (the tiny model is too shallow to show
    the gain over bf16 activations: test_real_model.py measures it on SmolLM2)."""
    from tests.helpers import precision_gap

    gap = precision_gap(tiny_dir, torch.randint(4, 60, (8, 24), generator=torch.Generator().manual_seed(0)))
    assert gap["hidden"] == {"fp32": torch.float32, "bf16 activations": torch.bfloat16,
                             "fp32 activations": torch.float32}
    assert gap["weights"] == {"fp32": torch.float32, "bf16 activations": torch.bfloat16,
                              "fp32 activations": torch.bfloat16}
    assert gap["grad"]["fp32 activations"] < 0.02 and gap["loss"]["fp32 activations"] < 1e-3, gap


def test_trls_fused_head_scores_the_same_when_it_projects_labelled_positions_only(tiny_dir, monkeypatch):
    """rlft.speed.trl_patches: on the CPU TRL's compact path (labelled positions only) gives the full path's log-probs
    and gradients, and rlft switches it on."""
    import trl.trainer.distillation_trainer as trl_distill
    import trl.trainer.utils as trl_utils
    from transformers import AutoModelForCausalLM
    from trl.trainer.utils import add_fused_lm_head

    from rlft.speed.trl_patches import score_labelled_positions_only

    for module in (trl_utils, trl_distill):  # TRL's own choice (an earlier run in this process may have set rlft's)
        monkeypatch.setattr(module, "_use_triton", getattr(module._use_triton, "original", module._use_triton))
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(tiny_dir)
    add_fused_lm_head(model, temperature=0.7, outputs=("log_probs", "entropy"))
    ids = torch.randint(4, 60, (4, 20), generator=torch.Generator().manual_seed(1))
    labels = ids.clone()
    labels[:, :14] = -100  # prompts: only the last 6 tokens are scored

    def run():
        model.zero_grad()
        out = model(input_ids=ids, labels=labels, fused_lm_head=True)
        (out.log_probs.sum() + out.entropy.sum()).backward()
        return out.log_probs.detach(), out.entropy.detach(), model.lm_head.weight.grad is None, \
            torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])

    assert not trl_utils._use_triton(torch.device("cpu"))  # TRL projects every position on the CPU
    full = run()
    assert score_labelled_positions_only() >= 1
    assert trl_utils._use_triton(torch.device("cpu"))
    compact = run()
    for a, b in zip(full, compact):
        assert a == b if isinstance(a, bool) else torch.allclose(a, b, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("pick", [(0, 2), (3, 5)])
def test_packed_decoding_gives_the_plain_tokens_with_rows_stopping_apart(tiny_dir, pick, one_thread):
    """rlft.speed.packed_linear: decoding from MKL-packed weights (finished rows riding along) gives the tokens the
    plain loop gives, and the model's own generate's."""
    from transformers import AutoModelForCausalLM

    from rlft.speed.decode import decode
    from rlft.speed.packed_linear import available, unpack

    if not available():
        pytest.skip("this torch has no MKL packed gemm")
    model = AutoModelForCausalLM.from_pretrained(tiny_dir).eval()
    ids, mask = _prompts()
    with torch.no_grad():  # a stop token the greedy rows reach at different steps: one row's token at a step
        free = decode(model, input_ids=ids, attention_mask=mask,
                      generation_config=_config(do_sample=False, eos_token_id=[1], max_new_tokens=24))
    stops = [int(free[pick[0], ids.size(1) + pick[1]])]
    cfg = _config(do_sample=False, eos_token_id=stops, max_new_tokens=24)
    with torch.no_grad():
        plain = decode(model, input_ids=ids, attention_mask=mask, generation_config=cfg)
        packed = decode(model, input_ids=ids, attention_mask=mask, generation_config=cfg, pack=True)
        assert all(getattr(m, "rlft_packed_state", (0,))[0] == ids.size(0) for m in model.modules()
                   if isinstance(m, torch.nn.Linear))
        unpack(model)
        want = model.generate(input_ids=ids, attention_mask=mask, generation_config=cfg)
    assert torch.equal(packed, plain) and torch.equal(packed, want)
    new = packed[:, ids.size(1):]
    lengths = [next((i for i, t in enumerate(r) if t in stops), len(r)) for r in new.tolist()]
    assert len(set(lengths)) > 1  # rows did stop apart: the riding-along path was exercised


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


def test_reserved_cache_matches_dynamic_cache(model):
    """The in-place cache gives DynamicCache's keys and values through prefill, decode steps, row selection
    and a crop."""
    from transformers import DynamicCache

    from rlft.speed.decode import reserved_cache

    ids, mask = _prompts()
    caches = [DynamicCache(config=model.config), reserved_cache(model.config, 4)]
    with torch.no_grad():
        for cache in caches:
            model(input_ids=ids, attention_mask=mask, cache=cache, use_cache=True)
            for step in range(6):  # past the reserved room: the buffers grow
                m = torch.cat([mask, mask.new_ones(mask.size(0), step + 1)], dim=1)
                model(input_ids=torch.full((ids.size(0), 1), 7 + step), attention_mask=m, cache=cache,
                      use_cache=True)
            cache.batch_select_indices(torch.tensor([4, 0, 2]))
            cache.crop(-2)
    for a, b in zip(caches[0].layers, caches[1].layers):
        assert a.keys.shape == b.keys.shape == (3, *a.keys.shape[1:])
        assert torch.allclose(a.keys, b.keys, atol=1e-6) and torch.allclose(a.values, b.values, atol=1e-6)
    assert type(caches[1].layers[0]).__name__ == "ReservedLayer"


def test_narrow_cpu_tiles_give_the_same_log_probs_and_gradients(monkeypatch):
    """rlft.speed.trl_patches.narrow_cpu_tiles: TRL's fused LM head with 8,192-wide vocabulary tiles gives what its
    32,768-wide tiles give, on a vocabulary wide enough to take several tiles."""
    import trl.trainer.utils as trl_utils
    from trl.kernels import ChunkedLogProbFunction

    from rlft.speed.trl_patches import CPU_TILE, narrow_cpu_tiles

    monkeypatch.setattr(trl_utils, "_CHUNKED_LOGPROB_CHUNK_SIZE", 32768)
    assert narrow_cpu_tiles() and trl_utils._CHUNKED_LOGPROB_CHUNK_SIZE == CPU_TILE
    g = torch.Generator().manual_seed(0)
    weight = torch.randn(20000, 32, generator=g) * 0.3
    targets = torch.randint(0, 20000, (40,), generator=g)

    def run(width):
        hidden = (torch.randn(40, 32, generator=torch.Generator().manual_seed(1))).requires_grad_()
        logps, entropy, *_ = ChunkedLogProbFunction.apply(hidden, weight, None, targets, 0.7, width, None, 1.0,
                                                         ("log_probs", "entropy"))
        (logps.sum() + 0.3 * entropy.sum()).backward()
        return logps.detach(), entropy.detach(), hidden.grad

    for wide, narrow in zip(run(32768), run(CPU_TILE)):
        assert torch.allclose(wide, narrow, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_lean_cpu_tiles_give_trls_log_probs_and_gradients(monkeypatch, temperature):
    """rlft.speed.trl_patches.lean_cpu_tiles: TRL's fused LM head folded by rlft's in-place tiles gives TRL's own
    log-probabilities and hidden-state gradients bit for bit and its entropy to float rounding, over several
    tiles (the last one a narrower slice); an entropy gradient and soft-capping go to TRL's folds."""
    import trl.kernels.chunked_logprob as kernels
    from trl.kernels import ChunkedLogProbFunction

    from rlft.speed.trl_patches import lean_cpu_tiles

    # TRL's own folds, also where an earlier run in this process installed rlft's (it is process-wide)
    originals = tuple(getattr(f, "original", f) for f in (kernels._forward_tile, kernels._backward_tile))
    monkeypatch.setattr(kernels, "_forward_tile", originals[0])
    monkeypatch.setattr(kernels, "_backward_tile", originals[1])
    g = torch.Generator().manual_seed(0)
    weight = torch.randn(20000, 32, generator=g) * 0.3
    targets = torch.randint(0, 20000, (40,), generator=g)
    targets[:3] = torch.tensor([0, 8191, 19999])  # a tile's first and last entries, the vocabulary's last
    weights = torch.randn(40, generator=g)

    def run(outputs=("entropy",), entropy_weight=0.0, softcap=None):
        hidden = (torch.randn(40, 32, generator=torch.Generator().manual_seed(1))).requires_grad_()
        logps, entropy, *_ = ChunkedLogProbFunction.apply(hidden, weight, None, targets, temperature, 8192,
                                                         softcap, 1.0, outputs)
        loss = (logps * weights).sum() + (entropy_weight * entropy.sum() if entropy_weight else 0)
        loss.backward()
        return logps.detach(), entropy.detach() if entropy is not None else None, hidden.grad

    cases = [{}, {"outputs": ()}, {"entropy_weight": 0.3}, {"softcap": 5.0}]
    trl = [run(**case) for case in cases]
    assert lean_cpu_tiles() and lean_cpu_tiles()  # twice: wrapped once
    assert kernels._forward_tile.original is originals[0] and kernels._backward_tile.original is originals[1]
    lean = [run(**case) for case in cases]
    for case, (a_logps, a_entropy, a_grad), (b_logps, b_entropy, b_grad) in zip(cases, trl, lean):
        assert torch.equal(a_logps, b_logps), case
        assert torch.equal(a_grad, b_grad) if "entropy_weight" not in case else torch.allclose(
            a_grad, b_grad, atol=1e-5, rtol=1e-4), case
        if a_entropy is not None:
            assert torch.allclose(a_entropy, b_entropy, atol=1e-5, rtol=1e-5), case
    assert lean[0][1] is not None and lean[1][1] is None


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


def _hybrid_model():
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(0)
    cfg = AutoConfig.for_model("qwen3_5_text", vocab_size=64, hidden_size=32, intermediate_size=64,
                               num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                               layer_types=["linear_attention", "full_attention"], linear_num_key_heads=2,
                               linear_num_value_heads=2, linear_key_head_dim=8, linear_value_head_dim=8,
                               pad_token_id=0)
    return AutoModelForCausalLM.from_config(cfg).eval()


def test_hybrid_models_fall_back_to_trl_and_generate():
    """A model with linear-attention cache layers: prompt sharing and rlft's decode step aside (None) instead
    of failing, and TRL's path / generate run."""
    from trl.trainer.utils import add_fused_lm_head

    from rlft.speed.decode import decode
    from rlft.speed.prompt_sharing import per_token_logps

    try:
        model = _hybrid_model()
    except (ValueError, KeyError, ImportError) as exc:
        pytest.skip(f"this transformers has no qwen3_5_text: {exc}")
    ids = torch.tensor([[0, 11, 12, 13, 31, 32], [0, 11, 12, 13, 33, 34], [21, 22, 23, 24, 35, 36]])
    mask = ids.ne(0).long()
    with torch.no_grad():
        assert decode(model, input_ids=ids, attention_mask=mask, generation_config=_config(max_new_tokens=3)) is None
        add_fused_lm_head(model, outputs=("log_probs",))
        assert per_token_logps(model, ids, mask, 2) is None


_MALLINFO = """
import ctypes, sys
sys.path.insert(0, sys.argv[2])
from rlft.speed.trl_patches import keep_freed_memory, release_freed_memory
fields = ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")
class Info(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in fields]
libc = ctypes.CDLL(None)
libc.mallinfo2.restype, libc.malloc.restype, libc.free.argtypes = Info, ctypes.c_void_p, [ctypes.c_void_p]
def rss():
    import os
    return int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE") >> 20
if sys.argv[1] in ("keep", "release"):
    assert keep_freed_memory()
block = libc.malloc(64 << 20)
ctypes.memset(block, 1, 64 << 20)
after = libc.malloc(1 << 20)  # a live block above it: the heap's top cannot shrink past it
alive = libc.mallinfo2()
libc.free(block)
if sys.argv[1] == "release":
    held = rss()
    assert release_freed_memory()
    print(held - rss())
else:
    print(alive.hblkhd >> 20, libc.mallinfo2().arena >> 20)
"""


def test_keep_freed_memory_serves_large_blocks_from_the_heap_and_keeps_them(tmp_path):
    """glibc: without it a 64 MB block is its own mapping, gone when freed; with it the block comes from the
    heap and its pages stay for the next step (rlft.speed.trl_patches)."""
    import ctypes
    import subprocess
    import sys
    from pathlib import Path

    if not hasattr(ctypes.CDLL(None), "mallinfo2"):
        pytest.skip("not glibc >= 2.33")
    root = str(Path(__file__).resolve().parents[2])
    script = tmp_path / "mallinfo.py"
    script.write_text(_MALLINFO)

    def run(mode):
        out = subprocess.run([sys.executable, str(script), mode, root], capture_output=True, text=True, check=True)
        return [int(x) for x in out.stdout.split()]

    mapped, kept = run("plain")
    assert mapped >= 64 and kept < 64
    mapped, kept = run("keep")
    assert mapped == 0 and kept >= 64
    [returned] = run("release")  # release_freed_memory gives the kept pages back, from the heap's middle too
    assert returned >= 60


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


def test_lean_step_calls_projections_as_modules(model):
    """Hooks on the linear layers, which the lean step calls as modules, still fire: one call per projection
    per layer per token (rlft.speed.packed_linear's packs and the live adapter's terms ride on those calls)."""
    from rlft.speed.decode import decode
    from rlft.speed.decode_step import eligible

    calls = []
    handle = model.model.layers[0].self_attn.q_proj.register_forward_hook(lambda m, a, o: calls.append(a[0].shape))
    try:
        assert eligible(model)
        ids, mask = _prompts()
        with torch.no_grad():
            decode(model, input_ids=ids, attention_mask=mask,
                   generation_config=_config(do_sample=False, eos_token_id=[999], max_new_tokens=5))
    finally:
        handle.remove()
    assert [tuple(s) for s in calls[1:]] == [(5, 1, model.config.hidden_size)] * 4  # prefill, then 4 lean steps
