"""rlft.speed.served: a LoRA run over a CPU bf16 base is checked on the fp32 weights `rlft eval` serves."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

PROMPTS = ["2+3=", "7*6=", "the cat", "hello", "9-4=", "10/2=", "red green", "one two three", "5+5=", "abc"]


def _model(tiny_dir, dtype: str):
    from rlft.config import resolve
    from rlft.models import load_model

    cfg = resolve("sft", None, {}, [f"model.name_or_path={tiny_dir}", f"model.dtype={dtype}",
                                    "model.lora.enabled=true", "model.lora.dropout=0.0"], check_trl=False)
    model = load_model(cfg.model)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():  # an adapter that changes the replies, the same in both models
        for name, p in sorted(model.named_parameters()):
            if "lora_" in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.3)
    return model


def test_a_check_on_a_bf16_base_reads_what_the_fp32_model_replies(tiny_dir, monkeypatch, tmp_path):
    """The held-out check of a bf16-base LoRA model scores the greedy replies of its adapter as `rlft eval` loads
    it (merged into the fp32 base) 1.0: every reply the same, also with rlft.speed.sampling's bf16 copy answering
    the policy's `generate` (GRPO's case); with the fp32 copy refused it runs on the bf16 base and some replies
    differ (so the test can fail). The run's tensors are back in place after the check, also when it raises."""
    from rlft import speed
    from rlft.models import load_for_inference, load_tokenizer
    from rlft.speed import served
    from rlft.watch.heldout import measure

    tok = load_tokenizer(str(tiny_dir))
    bf16 = _model(tiny_dir, "bfloat16")
    bf16.save_pretrained(tmp_path / "run")  # the adapter as a run folder holds it; rlft eval merges it into fp32
    gold = measure("verifiable", load_for_inference(str(tmp_path / "run")), tok,
                   [{"prompt": p, "answer": ""} for p in PROMPTS], max_new_tokens=12)
    rows = [{"prompt": s["prompt"], "answer": s["completion"]} for s in gold.samples]
    before = {n: (p.dtype, p.data_ptr()) for n, p in bf16.named_parameters()}
    assert torch.bfloat16 in {d for d, _ in before.values()}

    check = measure("verifiable", bf16, tok, rows, max_new_tokens=12)
    assert check.value == 1.0, [(s["completion"], r["answer"]) for s, r in zip(check.samples, rows)]
    assert {n: (p.dtype, p.data_ptr()) for n, p in bf16.named_parameters()} == before
    sampler = speed.attach(bf16)
    assert sampler is not None and not sampler.live  # a merged bf16 copy answers bf16.generate
    assert measure("verifiable", bf16, tok, rows, max_new_tokens=12).value == 1.0
    assert bf16.__dict__["generate"] == sampler.generate  # the sampler's again after the check
    sampler.detach()

    monkeypatch.setattr(served, "MAX_MEMORY_SHARE", 0.0)  # a fresh model: the copy is refused
    bf16_only = _model(tiny_dir, "bfloat16")
    with speed.served_weights(bf16_only) as why:
        assert "would take more than" in why
    assert measure("verifiable", bf16_only, tok, rows, max_new_tokens=12).value < 1.0

    with pytest.raises(RuntimeError), speed.served_weights(bf16) as why:
        assert why is None
        assert all(p.dtype == torch.float32 for p in bf16.parameters())
        raise RuntimeError("a check that fails")
    assert {n: (p.dtype, p.data_ptr()) for n, p in bf16.named_parameters()} == before


def test_a_failed_reload_leaves_the_check_on_the_bf16_base_and_says_so(tiny_dir, capsys):
    from rlft import speed
    from rlft.speed import served

    model = _model(tiny_dir, "bfloat16")
    before = {n: p.data_ptr() for n, p in model.named_parameters()}

    def gone():
        raise OSError("runs/sft-store: no such folder")

    served.remember(model, gone)
    for _ in range(2):  # said once, remembered for the run's later checks
        with speed.served_weights(model) as why:
            assert why.startswith("the fp32 reload failed (OSError: runs/sft-store: no such folder")
    assert capsys.readouterr().err.count("note: held-out checks run on the bf16 base") == 1
    assert {n: p.data_ptr() for n, p in model.named_parameters()} == before


def test_an_fp32_run_and_speedups_off_stand_aside(tiny_dir):
    from rlft import speed

    fp32 = _model(tiny_dir, "float32")
    with speed.served_weights(fp32) as why:
        assert why == "no fp32 source"
    speed.set_enabled(False)
    try:
        with speed.served_weights(_model(tiny_dir, "bfloat16")) as why:
            assert why == "speedups off"
    finally:
        speed.set_enabled(True)


def test_the_copy_counts_the_run_s_processes_and_skips_tuner_weights(monkeypatch):
    """Each process of a multi-process run keeps its own copy, so each gets its share of the memory left; the
    weights to copy are the base's, not an adapter's (the run's, TRL's `ref` one) or modules_to_save."""
    from rlft.speed import served

    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")
    one = served._available_bytes()
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    four = served._available_bytes()
    assert one and four and abs(four * 4 - one) < 0.05 * one
    assert served._is_base_weight("model.layers.0.self_attn.q_proj.base_layer.weight")
    assert served._is_base_weight("model.embed_tokens.weight")
    for name in ("model.layers.0.self_attn.q_proj.lora_A.default.weight",
                 "model.layers.0.mlp.up_proj.lora_B.ref.weight", "score.modules_to_save.default.weight"):
        assert not served._is_base_weight(name), name
