"""A LoRA stage started from a LoRA stage keeps the first stage everywhere it is loaded.

The fault this guards against: the second stage's adapter named the original model as its base while it was
trained on the first stage's merged weights, so eval, merge, export and the next stage loaded it on the wrong
base and the first stage vanished. Now the second adapter names a plain folder holding base + first adapter.
"""

from __future__ import annotations

import json

import pytest
from helpers import DATA, write_jsonl

CHATS = [{"messages": [{"role": "user", "content": f"{a}+{a}="}, {"role": "assistant", "content": str(2 * a)}]}
         for a in range(10, 30)]


def _main(*args):
    from rlft.cli import main

    try:
        main([str(a) for a in args])
    except SystemExit as exc:
        assert exc.code == 0, f"rlft {args[0]} failed with exit code {exc.code}"


@pytest.fixture(scope="module")
def first(tmp_path_factory):
    """A LoRA SFT run that moves the logits well away from the base (high rate, few steps)."""
    tmp = tmp_path_factory.mktemp("chain")
    data = write_jsonl(tmp / "chats.jsonl", CHATS)
    out = tmp / "sft"
    _main("sft", "--data", data, "-o", out, "--max-steps", "4", "--lora", "--lr", "1e-2", "--batch-size", "4",
          "--set", "sft.max_length=64")
    return out


def _logits(path):
    import torch

    from rlft.models import load_for_inference

    model = load_for_inference(str(path))
    ids = torch.tensor([[5, 20, 30, 40, 50, 60, 7]])
    with torch.no_grad():
        return model(input_ids=ids).logits


@pytest.mark.parametrize("method", ["grpo", "dpo"])
def test_a_second_stage_that_changes_nothing_loads_as_the_first(method, first, tmp_path, cli):
    """lr 0: the second adapter is the identity, so every load of the second run equals the first run."""
    import torch

    out = tmp_path / method
    if method == "grpo":
        args = ["grpo", "--prompts", DATA / "arith/grpo_prompts.jsonl", "--verifier", "math", "--no-preflight",
                "--num-generations", "4", "--batch-size", "4", "--set", "grpo.max_completion_length=4"]
    else:
        args = ["dpo", "--pairs", DATA / "arith/pairs_train.jsonl", "--batch-size", "4"]
    r = cli(*args, "--model", first, "--lora", "--lr", "0", "--max-steps", "1", "-o", out,
            "--set", "train.save_strategy=no")
    assert r.code == 0, r.text
    base = json.loads((out / "adapter_config.json").read_text())["base_model_name_or_path"]
    # not the original tiny folder that the first stage names
    assert json.loads((first / "adapter_config.json").read_text())["base_model_name_or_path"] != base
    want = _logits(first)
    assert torch.allclose(_logits(out), want, atol=1e-5)
    # The named base alone is the first stage merged; plain peft loads the second run the same way.
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    plain = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base), str(out))
    with torch.no_grad():
        got = plain(input_ids=torch.tensor([[5, 20, 30, 40, 50, 60, 7]])).logits
    assert torch.allclose(got, want, atol=1e-5)
    # rlft merge of the second run = rlft merge of the first.
    assert cli("merge", out, "-o", tmp_path / "m2").code == 0
    assert cli("merge", first, "-o", tmp_path / "m1").code == 0
    assert torch.allclose(_logits(tmp_path / "m2"), _logits(tmp_path / "m1"), atol=1e-5)


def test_a_second_stage_that_learns_is_loaded_on_the_first(first, tmp_path, cli):
    """lr > 0: the second run's logits differ from the first's, and from the second adapter on the bare base."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from rlft.models import tiny_path

    out = tmp_path / "sft2"
    data = write_jsonl(tmp_path / "c.jsonl", CHATS[::-1])
    r = cli("sft", "--data", data, "--model", first, "--lora", "--lr", "1e-2", "--max-steps", "3",
            "--batch-size", "4", "--set", "sft.max_length=64", "-o", out)
    assert r.code == 0, r.text
    got = _logits(out)
    assert not torch.allclose(got, _logits(first), atol=1e-4)
    wrong = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_path()), str(out))
    with torch.no_grad():
        wrong_logits = wrong(input_ids=torch.tensor([[5, 20, 30, 40, 50, 60, 7]])).logits
    assert not torch.allclose(got, wrong_logits, atol=1e-3)  # the first stage is in there
    # A third stage on the second: its base holds both earlier stages.
    out3 = tmp_path / "sft3"
    r = cli("sft", "--data", data, "--model", out, "--lora", "--lr", "0", "--max-steps", "1",
            "--batch-size", "4", "--set", "sft.max_length=64", "-o", out3)
    assert r.code == 0, r.text
    assert torch.allclose(_logits(out3), got, atol=1e-5)
