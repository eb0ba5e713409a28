"""train.speedups: one switch turns the whole CPU speed layer off (rlft.speed.set_enabled), for A/B checks."""

from __future__ import annotations

import json

import pytest
from helpers import DATA

import rlft.speed as speed


@pytest.fixture
def off():
    speed.set_enabled(False)
    yield
    speed.set_enabled(True)


def test_off_every_entry_point_stands_aside(off, tiny_dir):
    import torch
    from transformers import AutoModelForCausalLM, GenerationConfig
    from trl import GRPOTrainer

    from rlft.speed.decode import decode

    model = AutoModelForCausalLM.from_pretrained(tiny_dir).eval()
    assert speed.trainer_class(GRPOTrainer) is GRPOTrainer  # TRL's own class, no prompt sharing
    assert speed.load_options(torch.bfloat16) == {}
    assert speed.attach(model, trl_patches=True) is None and "generate" not in model.__dict__
    with speed.served_weights(model) as why:  # a held-out check reads the model as it is
        assert why == "speedups off"
    ids = torch.tensor([[10, 20, 30]])
    assert decode(model, input_ids=ids, attention_mask=torch.ones_like(ids),
                  generation_config=GenerationConfig(max_new_tokens=2, pad_token_id=0)) is None  # generate's
    speed.set_enabled(True)
    assert speed.trainer_class(GRPOTrainer) is not GRPOTrainer


def _grpo(cli, out, *extra):
    r = cli("grpo", "--prompts", DATA / "arith/grpo_prompts.jsonl", "--verifier", "math", "--model", "tiny",
            "--lora", "-o", out, "--max-steps", "1", "--batch-size", "8", "--set", "grpo.num_generations=4",
            "--set", "grpo.max_completion_length=4", "--set", "grpo.preflight=false", "--set", "data.max_rows=16",
            "--set", "train.logging_steps=1", *extra)
    assert r.code == 0, r.text
    return json.loads((out / "metrics.jsonl").read_text().splitlines()[0])


@pytest.mark.slow
def test_a_grpo_run_with_speedups_off_is_plain_trl_and_scores_alike(cli, tmp_path, monkeypatch):
    """Off: no rlft.speed patch is applied and the trainer is TRL's (no prompt-sharing subclass); the first
    step's loss agrees with the run with the layer on. The samples differ (rlft.speed.decode draws from the same
    distribution with another random stream), so the losses agree to a tolerance, not exactly."""
    import rlft.speed.prompt_sharing as sharing
    import rlft.speed.sampling as sampling
    import rlft.speed.trl_patches as patches

    calls = []
    for module, name in [(sharing, "with_prompt_sharing"), (sampling, "attach"), (patches, "narrow_cpu_tiles"),
                         (patches, "lean_cpu_tiles"), (patches, "keep_freed_memory"),
                         (patches, "score_labelled_positions_only")]:
        real = getattr(module, name)
        monkeypatch.setattr(module, name, lambda *a, _r=real, _n=name, **k: calls.append(_n) or _r(*a, **k))
    first_off = _grpo(cli, tmp_path / "off", "--set", "train.speedups=false")
    assert calls == [] and speed.enabled() is False
    first_on = _grpo(cli, tmp_path / "on")
    assert {"with_prompt_sharing", "attach", "score_labelled_positions_only"} <= set(calls)
    assert abs(first_on["loss"] - first_off["loss"]) < 0.05, (first_on, first_off)
