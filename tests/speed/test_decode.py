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


def test_first_token_suppression_gives_generates_tokens(model):
    """begin_suppress_tokens (the tokens generate's own first step would pick, banned): the same tokens as
    generate with the same setting, and no row opens with a banned token (rlft.dspy's str fields use it)."""
    from rlft.speed.decode import decode

    ids, mask = _prompts()
    with torch.no_grad():
        free = decode(model, input_ids=ids, attention_mask=mask, generation_config=_config(do_sample=False))
        banned = sorted({int(t) for t in free[:, ids.size(1)]})
        # ids outside the vocabulary (negative, too large) name no token, as transformers' processor reads them
        cfg = _config(do_sample=False, begin_suppress_tokens=[-1, *banned, 10 ** 6])
        want = model.generate(input_ids=ids, attention_mask=mask, generation_config=cfg)
        got = decode(model, input_ids=ids, attention_mask=mask, generation_config=cfg)
    assert got is not None and torch.equal(got, want)
    assert not set(got[:, ids.size(1)].tolist()) & set(banned)


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
